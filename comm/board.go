package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

// The shared-memory board: small collectives of a communicator whose ranks
// all live on one host go through memory every rank maps, with flags in
// place of messages (as Open MPI's and MPICH's shared-memory collectives
// do). Rank 0 allocates the board at New and every rank maps it
// (shm.MapRemote). Each rank owns a header, two sets of lines and two
// payload slots, and a ring for runs of small broadcasts
// (board_stream.go); a call numbered s (counting board calls only) uses
// set and slot s&1:
//
//  1. the rank writes its contribution (its input, its block, all its
//     blocks, the root's buffer) into its lines s&1 if small (see
//     llLines), else into its slot s&1, and the call's description into
//     its first line, then publishes s as that line's flag (a release
//     store);
//  2. it waits until every rank has published s, checking that they
//     describe the same call (a mismatch is an error, as the executor's
//     fingerprints make it one);
//  3. it reads what it needs straight from the others' lines or slots: an
//     allreduce reduces all of them in rank order (every rank computes
//     the same bits), a broadcast copies the root's, an allgather all.
//
// A rank writes lines and slot s&1 again in call s+2, which it starts
// only after every rank published s+1, which each did only after its
// reads of call s: two of each per rank suffice and no rank waits for
// reads to end.
//
// Waiting spins briefly, then yields, then sleeps on a futex in the board
// that publishers ring when someone sleeps (raw system calls, which the Go
// scheduler does not see: shm.FutexNap). A waiting rank watches the
// ranks it waits for: a rank that closed or failed marks its header, a
// process that died is seen gone (kill(pid, 0)); the communicator's
// timeout, stall timeout and Abort end the wait as they end any call.

const (
	boardSlot     = 16 << 10 // payload bytes per rank and parity
	boardMaxRanks = 64
	boardLine     = 256 // header and global area, in bytes (four cache lines)

	// Header fields (offsets in a rank's header).
	//
	// bSeq names the word that says which call a rank published last,
	// as waits take it (board.word): not a header field, the flag of the
	// rank's first line of the call's parity (see the lines below).
	bSeq = 0
	// bRing, bProg and bLog name the stream's words a wait may poll
	// (board_stream.go): a root's ring line, a receiver's progress, a
	// rank's log entry.
	bRing  = -1
	bProg  = -2
	bLog   = -3
	bState = 56 // uint32: boardLive, boardClosed, boardFailed, boardMismatched
	bPid   = 60 // uint32: the rank's process
	// Second line.
	bAddr   = 64  // per parity, uint64: where a direct call's peers read (board_direct.go)
	bBase   = 80  // uint64: the board's address in the rank's process
	bSegID  = 88  // per parity, uint64: the shm segment holding that buffer, 0 if none
	bSegOff = 104 // per parity, uint64: the buffer's offset in the segment
	bSegFD  = 120 // per parity, uint32: the segment's descriptor in the rank's process
	// Third line: the rank at the root of this rank's failure, plus one;
	// the last direct call whose peers' buffers this rank has read (a
	// rooted direct call's completion, board_direct.go).
	bRoot = 128
	bDone = 136 // uint64
	// bWaitOn: uint32, the rank (plus one) a board wait of this rank has
	// waited for since stallMark without progress, 0 when it has not (a
	// rank that waits for it follows the chain at its stall timeout, see
	// stallChain).
	bWaitOn = 144
	// bExec: uint64, 1<<32 | the communicator's number of the last
	// collective this rank ran off the board (through the executor: an
	// algorithm asked for, a type the board does not reduce), 0 if none;
	// bExecCall: that call (boardCall). A rank waiting on the board for a
	// rank that runs the same call off it (the ranks disagree: an
	// algorithm asked for on some ranks only, say) finds it at its next
	// look (boardLook) and fails with a mismatch naming both calls,
	// instead of waiting for its stall timeout.
	bExec     = 152
	bExecCall = 160
	// Fourth line: a second buffer's bAddr...bSegFD (a direct allreduce's
	// recv, read by the peers in its second half).
	bBuf2 = 128

	// The lines: after its header, each rank has, per parity, llLines
	// cache lines that carry a call's description and a contribution of
	// up to llCap bytes, each line with its own flag (as NCCL's LL128
	// protocol does). A line's last word is its flag, the number of the
	// call whose bytes the line holds, stored after them (a release
	// store); the first line also holds the call (llCall) and the first
	// llHead bytes, and is stored last, so that its flag says the whole
	// call is published. A rank that reads a contribution polls the
	// flags of all its lines at once: the lines come over together, and
	// a line whose flag is right holds the right bytes. With the bytes
	// in a slot and the flag in a header, the reader fetched the header,
	// then the slot, one cache-line trip after the other: on this VM a
	// trip takes 90-480 ns by the minute, and a 2-rank broadcast of
	// 32-256 B took 0.59-0.66 us in a slow minute (Open MPI 0.52-0.55),
	// 0.29-0.35 from the lines. Contributions above llCap go in the
	// slots, the first line publishing them; so do those above llHead
	// where every rank waits for every other (see lined).
	llLines = 8
	llLine  = 64
	llArea  = llLines * llLine // per parity
	llCall  = 0                // uint64 in the first line: the call (boardCall)
	llData  = 8                // the first line's bytes
	llHead  = 48               // bytes in the first line
	llFlag  = 56               // uint64 in each line: its call's number
	llBody  = 56               // bytes in each later line
	llCap   = llHead + (llLines-1)*llBody

	boardRank = boardLine + 2*llArea // a rank's header and lines

	// Global area.
	gBell     = 0  // uint32: futex word publishers ring
	gSleepers = 64 // uint32: ranks asleep on the bell
)

// llLinesFor is how many lines a contribution of L bytes fills when it
// goes in the lines (see lined); 1 above llCap, where it cannot.
func llLinesFor(L int) int {
	if L <= llHead || L > llCap {
		return 1
	}
	return 1 + (L-llHead+llBody-1)/llBody
}

// lined says whether a contribution of L bytes to a call of kind goes in
// its rank's lines, not in its slot: up to llHead bytes always (the
// first line), up to llCap in a call where the ranks that wait for a
// contribution are not waited for (broadcast, scatter, reduce, gather),
// and can poll all its lines (see executeBoard). Where every rank waits
// for every other and polls only the first lines, the slot was faster
// than more lines (2 ranks, 128 and 256 B: allreduce and allgather
// 0.81-0.95 us from 3 and 5 lines, 0.65-0.73 from the slots).
func lined(kind collKind, L int) bool {
	switch kind {
	case collBroadcast, collScatter, collReduce, collGather:
		return L <= llCap
	}
	return L <= llHead
}

const (
	boardLive = iota
	boardClosed
	boardFailed
	// boardMismatched: failed, having found that the ranks called
	// different collectives (its error names the calls).
	boardMismatched
)

// Wait phases, by the time since the wait began.
const (
	// Looks before the clock is read at all, then looks between reads:
	// a clock read costs tens of nanoseconds in a VM, as much as the rest
	// of a small call's wait, and a value that arrives during one is seen
	// that much later. Ranks that outnumber the processors (crowded) read
	// it and yield after every look that finds a rank missing: the rank
	// they wait for may need this processor. 4 ranks on 2 cores, 8 B-1 KiB
	// (3 December): allreduce, allgather and all-to-all 3.5-4.1 us instead
	// of 6-10 with 256 looks before the first yield and 64 between.
	boardSpins = 4096
	boardSpin  = 20 * time.Microsecond
	boardYield = time.Millisecond
	boardNap   = time.Millisecond // futex sleep, between looks around
	boardLook  = 10 * time.Millisecond
)

type board struct {
	mem []byte // the mapping (rank 0: the memory it allocated)
	own []byte // rank 0: the Alloc'd memory, freed at Close
	// markMu: markRoot (which Abort calls from any goroutine) against
	// release (Close's teardown, on another): a mark between release's
	// unmap and its nil store wrote to unmapped memory (the race detector
	// found it, Abort beside Close). Calls and waits do not take it: Close
	// tears down only once no call runs.
	markMu sync.RWMutex
	n, me  int
	seq    uint64
	pid    uint32
	// crowded: the host's ranks outnumber its processors, so a waiting
	// rank yields at once instead of spinning on the processor that a
	// rank it waits for needs.
	crowded bool
	// mates: crowded, and this rank bound to one processor: the other
	// ranks bound to it alone (see hold).
	mates []int
	// cma: every rank can read every other's memory with
	// process_vm_readv (board_direct.go).
	cma bool
	// early: cma, and no rank crowded: a broadcast of 4-16 KiB may go
	// direct (broadcastEither).
	early   bool
	cross   shm.CrossReader
	scratch []byte // a direct all-to-all's send buffer, when in place
	// segs maps the peers' segments this rank read from (by rank and
	// segment id; board_direct.go), with the call that last used each
	// (segCall, which beginCall advances); noSegs the peers whose
	// segments cannot be mapped here.
	segs    map[[2]uint64]segMapping
	segCall uint64
	noSegs  map[int]bool
	tmp     [3][]byte // a direct reduction's scratch
	// part is a direct reduce's scratch for this rank's part where it is
	// not the root: in an shm segment where the device allocates them, so
	// that the root reads it through a mapping (see partBuf).
	part  ownedMem
	llTmp []byte // llCap bytes: a rank's contribution, out of its lines
	// mail: point-to-point calls go through the mailboxes
	// (board_p2p.go); sent[d] and got[s] count the messages this rank
	// sent to d and received from s.
	mail            bool
	sent, got, seen []uint64 // seen[d]: the last count of taken read from d's box
	// keep[d]: the copies of large messages to d that Sends kept for it
	// (mailKeep), nil until the first large Send.
	keep []keepRing
	// owed: this rank's last call (owedSeq, the communicator's call
	// owedNum) completed without waiting for every rank (a rooted call,
	// see markedWaitOn): before it writes its header or a slot again,
	// and at Close, it waits until every rank has published owedSeq and
	// checks their calls against owed. 0: nothing owed.
	owed    boardCall
	owedSeq uint64
	owedNum uint32
	// settling is owedNum while boardSettle checks that call: a failure
	// found then is that call's, and its error names it so (not the
	// later call's number with the earlier call's kind).
	settling uint32
	// tag is the running point-to-point call's tag, for its errors.
	tag int
	// zombieAt[p]: when peerGone last looked whether rank p's process
	// is a zombie (zombieDue).
	zombieAt []time.Time
	// The broadcast stream (board_stream.go): sPos[r], the line of root
	// r's ring where this rank's next call on it begins (waitPos: the
	// one a wait polls); rSeq, rCall and rNum, the calls this rank's
	// ring's lines hold (board number, description, the communicator's
	// number), rLast the line of the last; progSeen[p], receiver p's
	// progress on this rank's ring as last read; streamed: this rank
	// wrote its ring since it last waited for the receivers to read all
	// of it; lastStream (lastStreamCall, lastStreamNum): the last stream
	// call, 0 once every rank is known to have published it; lastSmall:
	// the last board call was a broadcast the stream takes.
	sg             streamGeometry
	sPos           []int
	waitPos        int
	rSeq           [ringMax]uint64
	rCall          [ringMax]boardCall
	rNum           [ringMax]uint32
	rLast          int
	progSeen       []uint64
	streamed       bool
	lastSmall      bool
	lastStream     uint64
	lastStreamCall boardCall
	lastStreamNum  uint32
	// waitMarked: this rank's bWaitOn names the rank its wait waits for.
	waitMarked bool
}

func boardSize(n int) int { return streamOff(n) + n*streamArea(n) }

// slots is where the ranks' slots begin.
func (b *board) slots() int { return boardLine + b.n*boardRank }

func (b *board) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b.mem[off])) }
func (b *board) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&b.mem[off])) }
func (b *board) hdr(r int) int              { return boardLine + r*boardRank }

// lines is the offset of rank r's first line of call seq's parity.
func (b *board) lines(r int, seq uint64) int { return b.hdr(r) + boardLine + int(seq&1)*llArea }

// word is rank r's word that a wait for call seq polls: its first line's
// flag of seq's parity (bSeq), or a header word (bDone).
func (b *board) word(r, off int, seq uint64) *atomic.Uint64 {
	switch off {
	case bSeq:
		return b.u64(b.lines(r, seq) + llFlag)
	case bRing: // root r's ring line of this rank's next call on it
		return b.u64(b.ringLine(r, b.waitPos) + llFlag)
	case bProg: // rank r's progress on this rank's ring
		return b.u64(b.progOff(r, b.me))
	case bLog: // rank r's log entry for call seq
		return b.u64(b.logOff(r, seq) + 8)
	}
	return b.u64(b.hdr(r) + off)
}

// published is the last call rank r published.
func (b *board) published(r int) uint64 {
	return max(b.u64(b.lines(r, 0)+llFlag).Load(), b.u64(b.lines(r, 1)+llFlag).Load())
}

func (b *board) stateOf(r int) *atomic.Uint32 {
	return b.u32(b.hdr(r) + bState)
}

// slot is rank r's slot of call seq's parity, where a contribution of
// more than llCap bytes lies.
func (b *board) slot(r int, seq uint64) []byte {
	off := b.slots() + (r*2+int(seq&1))*boardSlot
	return b.mem[off : off+boardSlot : off+boardSlot]
}

// take copies bytes [off, off+len(dst)) of rank r's contribution to call
// seq into dst, from its lines (lined) or its slot.
func (b *board) take(r int, seq uint64, lined bool, off int, dst []byte) {
	if !lined {
		copy(dst, b.slot(r, seq)[off:])
		return
	}
	b.takeAt(b.lines(r, seq), off, dst)
}

// takeAt copies bytes [off, off+len(dst)) of a contribution laid out in
// lines from base (llHead bytes after the call in the first line, llBody
// in each later one) into dst.
func (b *board) takeAt(base, off int, dst []byte) {
	for len(dst) > 0 {
		lo, hi := base+llData+off, base+llData+llHead
		if off >= llHead {
			j := (off - llHead) / llBody
			lo = base + (1+j)*llLine + (off - llHead - j*llBody)
			hi = base + (1+j)*llLine + llBody
		}
		n := copy(dst, b.mem[lo:hi])
		dst, off = dst[n:], off+n
	}
}

// ready reports whether rank r published call seq and, if lines > 1,
// its lines' flags say the whole contribution is there. Every flag is
// read whatever the others say, so that the lines' trips overlap.
func (b *board) ready(r int, seq uint64, lines int) bool {
	base := b.lines(r, seq)
	ok := b.u64(base+llFlag).Load() >= seq
	for j := 1; j < lines; j++ {
		if b.u64(base+j*llLine+llFlag).Load() < seq {
			ok = false
		}
	}
	return ok
}

// boardCall is what a rank says about its call, to be compared: its kind,
// type, operation and root (a byte each) and the low 32 bits of its
// count, in one word as its header holds it. One word, not a struct: the
// call is compared on every board call, and a struct built field by field
// and then read whole stalls the processor (the wide load cannot take the
// narrow stores' values from the store buffer): with the struct, a small
// allreduce's own work took 124 ns instead of 90 (BenchmarkBoardOverhead).
type boardCall uint64

func mkCall(kind collKind, dt DataType, op Op, root, count int) boardCall {
	return boardCall(uint64(uint8(kind)) | uint64(uint8(dt))<<8 | uint64(uint8(op))<<16 |
		uint64(uint8(int8(root)))<<24 | uint64(uint32(count))<<32)
}

func (k boardCall) kind() collKind { return collKind(uint8(k)) }
func (k boardCall) dt() DataType   { return DataType(uint8(k >> 8)) }
func (k boardCall) op() Op         { return Op(uint8(k >> 16)) }
func (k boardCall) root() int      { return int(int8(uint8(k >> 24))) }
func (k boardCall) count() uint64  { return uint64(k) >> 32 }

func (b *board) readCall(r int, seq uint64) boardCall {
	off := b.lines(r, seq) + llCall
	return boardCall(binary.LittleEndian.Uint64(b.mem[off : off+8]))
}

func (k boardCall) String() string {
	s := fmt.Sprintf("%s", k.kind())
	if k.kind() == collBarrier {
		return s
	}
	s += fmt.Sprintf("(%s, %d", k.dt(), k.count())
	info := k.kind().Info()
	if info.Reducing {
		s += ", " + k.op().String()
	}
	if info.Rooted {
		s += fmt.Sprintf(", root=%d", k.root())
	}
	return s + ")"
}

// setupBoard makes the board at New, for a communicator of more than one
// and at most boardMaxRanks ranks on one host with a shared-memory
// device. Every rank takes part in the same exchanges whatever it finds;
// the board is used only if every rank mapped it. An error is a failure
// of the exchanges themselves (the store).
func (c *Comm) setupBoard(ctx context.Context) error {
	if c.size < 2 || c.size > boardMaxRanks || c.nHosts != 1 || !c.opts.shmBoard() {
		return nil
	}
	sd, _ := c.devs.shm.(*shm.Device)
	var cq transport.CompletionQueue
	var eps []transport.Endpoint
	defer func() {
		for _, ep := range eps {
			if ep != nil {
				ep.Close()
			}
		}
		if cq != nil {
			cq.Close()
		}
	}()
	// 1. Endpoints between rank 0 and every other rank, only to pass the
	// board's mapping (they close once it is mapped).
	var blob []byte
	var why error
	if sd == nil {
		why = errors.New("no shared-memory device")
	} else {
		var err error
		if cq, err = sd.NewCompletionQueue(4 * c.size); err != nil {
			why = err
		}
		for range max(1, (c.size-1)*boolInt(c.rank == 0)) {
			if why != nil {
				break
			}
			ep, err := sd.NewEndpoint(cq)
			if err != nil {
				why = err
				break
			}
			eps = append(eps, ep)
			blob = appendBlob(blob, ep.LocalAddress(), transport.RemoteRegion{})
		}
	}
	if why != nil {
		blob = nil
	}
	all, err := c.rdv.Allgather(ctx, blob)
	if err != nil {
		return fmt.Errorf("shared-memory board: exchange addresses: %w", err)
	}
	for _, a := range all {
		if len(a) == 0 {
			if why == nil {
				why = errors.New("a rank has no shared-memory device")
			}
		}
	}
	// 2. Connect, then rank 0 allocates and registers the board.
	if why == nil {
		why = c.connectBoard(ctx, eps, all)
	}
	var region transport.Region
	b := &board{n: c.size, me: c.rank, pid: uint32(os.Getpid()), crowded: c.opts.crowded(c.size)}
	blob = nil
	if why == nil && c.rank == 0 {
		if b.own, why = shm.Alloc(boardSize(c.size)); why == nil {
			clear(b.own) // touch every page now, not in the first calls
			if region, why = sd.Register(b.own, transport.AccessAll); why == nil {
				b.mem = b.own
				blob = appendBlob(nil, nil, region.Remote())
			}
		}
	}
	if all, err = c.rdv.Allgather(ctx, blob); err != nil {
		return fmt.Errorf("shared-memory board: exchange the board: %w", err)
	}
	// 3. The others map it.
	if why == nil && c.rank != 0 {
		_, regions, err := parseBlobs(all[0], 1)
		if err != nil {
			why = fmt.Errorf("rank 0 published no board")
		} else {
			deadline := time.Now().Add(5 * time.Second)
			for {
				b.mem, why = shm.MapRemote(eps[0], regions[0])
				if !errors.Is(why, shm.ErrNotMapped) || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
			if why == nil && len(b.mem) != boardSize(c.size) {
				shm.Unmap(b.mem)
				b.mem, why = nil, fmt.Errorf("board of %d bytes, want %d", len(b.mem), boardSize(c.size))
			}
		}
	}
	if why == nil {
		b.u32(b.hdr(c.rank) + bPid).Store(b.pid)
		b.u64(b.hdr(c.rank) + bBase).Store(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b.mem)))))
	}
	// 4. Agree.
	ok := []byte{1}
	if why != nil {
		ok = []byte{0}
	}
	if all, err = c.rdv.Allgather(ctx, ok); err != nil {
		return fmt.Errorf("shared-memory board: agree: %w", err)
	}
	if region != nil {
		sd.Deregister(region) // mapped by all who could: no more exports
	}
	use := why == nil
	for _, a := range all {
		use = use && len(a) == 1 && a[0] == 1
	}
	if !use {
		b.release()
		if why != nil {
			c.debugf("no shared-memory board: %v", why)
		} else {
			c.debugf("no shared-memory board: a rank could not map it")
		}
		return nil
	}
	// 5. Can every rank read every other's memory (cross-memory attach)?
	// Then large calls copy straight between the ranks' buffers, and
	// some smaller ones may too if no rank is crowded (board.early):
	// every rank must know alike.
	// With it, each rank says which processor it is bound to, if to one.
	cpu := uint16(soleCPU() + 1) // 0: none
	ok = []byte{boolByte(b.probeCMA()), boolByte(b.crowded), byte(cpu), byte(cpu >> 8)}
	if all, err = c.rdv.Allgather(ctx, ok); err != nil {
		b.release()
		return fmt.Errorf("shared-memory board: agree on cross-memory attach: %w", err)
	}
	b.cma, b.early = true, true
	cpus := make([]int, len(all))
	for p, a := range all {
		b.cma = b.cma && len(a) == 4 && a[0] == 1
		b.early = b.early && len(a) == 4 && a[1] == 0
		if len(a) == 4 {
			cpus[p] = int(uint16(a[2])|uint16(a[3])<<8) - 1
		}
	}
	if b.crowded {
		b.mates = matesOf(c.rank, cpus)
	}
	b.early = b.early && b.cma
	b.mail = b.cma && mailSize(c.size) > 0
	b.sent, b.got, b.seen = make([]uint64, c.size), make([]uint64, c.size), make([]uint64, c.size)
	b.sPos, b.progSeen = make([]int, c.size), make([]uint64, c.size)
	b.sg = newStreamGeometry(c.size)
	b.llTmp = make([]byte, llCap)
	c.board = b
	c.quick = c.quickBoard()
	c.debugf("shared-memory board: %d ranks, collectives up to %d bytes through it; larger ones copied straight between the ranks' buffers: %v; ranks sharing this rank's processor: %v", c.size, boardSlot, b.cma, b.mates)
	return nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// connectBoard connects rank 0's endpoint i to rank i+1's endpoint, both
// sides at once.
func (c *Comm) connectBoard(ctx context.Context, eps []transport.Endpoint, all [][]byte) error {
	cctx, cancel := context.WithTimeout(ctx, c.opts.InitTimeout)
	defer cancel()
	if c.rank != 0 {
		addrs, _, err := parseBlobs(all[0], c.size-1)
		if err != nil {
			return fmt.Errorf("rank 0's addresses: %w", err)
		}
		return eps[0].Connect(cctx, addrs[c.rank-1])
	}
	errs := make(chan error, len(eps))
	for i, ep := range eps {
		addrs, _, err := parseBlobs(all[i+1], 1)
		if err != nil {
			errs <- fmt.Errorf("rank %d's address: %w", i+1, err)
			continue
		}
		go func() { errs <- ep.Connect(cctx, addrs[0]) }()
	}
	var first error
	for range eps {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// release unmaps and frees the board.
func (b *board) release() {
	if b == nil {
		return
	}
	b.markMu.Lock()
	defer b.markMu.Unlock()
	for k, m := range b.segs {
		unix.Munmap(m.m)
		delete(b.segs, k)
	}
	if b.own != nil {
		shm.Free(b.own)
	} else if b.mem != nil {
		shm.Unmap(b.mem)
	}
	b.mem, b.own = nil, nil
}

// mark sets this rank's state (closed or failed) and wakes the ranks that
// wait, so that they see it.
func (b *board) mark(state uint32) {
	if b != nil {
		b.markRoot(state, b.me)
	}
}

// reportedRoot is the rank that rank p's failure report on the board
// blames, if it blames another rank.
func (b *board) reportedRoot(p int) (int, bool) {
	root := int(b.u32(b.hdr(p)+bRoot).Load()) - 1
	return root, root >= 0 && root < b.n && root != p
}

// markRoot is mark for a failure whose root (the rank that failed first,
// as this rank found) is root: the ranks that see the mark blame root.
func (b *board) markRoot(state uint32, root int) {
	if b == nil {
		return
	}
	b.markMu.RLock()
	defer b.markMu.RUnlock()
	if b.mem == nil {
		return
	}
	if root < 0 || root >= b.n {
		root = b.me
	}
	if b.stateOf(b.me).Load() == boardLive {
		b.u32(b.hdr(b.me) + bRoot).Store(uint32(root) + 1)
	}
	b.stateOf(b.me).CompareAndSwap(boardLive, state)
	b.u32(gBell).Add(1)
	shm.FutexWakeAll(b.u32(gBell))
}

// boardTakes reports whether r goes through the board: a collective it
// implements, small enough, with no algorithm asked for. The choice
// depends only on arguments every rank must pass alike.
func (c *Comm) boardTakes(r *Request) bool {
	if c.board == nil || r.algo != "" || r.label != "" || c.forcedFor(r.kind, "") != "" {
		return false
	}
	switch r.kind {
	case collBarrier:
		return true
	case collAllreduce, collReduce, collReduceScatter:
		return !halfReduction(r) && (len(r.send) <= boardSlot || c.board.direct(len(r.send)))
	case collBroadcast, collAllgather, collAlltoall, collGather:
		return len(r.send) <= boardSlot || c.board.direct(len(r.send))
	case collScatter:
		return c.size*len(r.recv) <= boardSlot || c.board.direct(c.size*len(r.recv))
	case collSend, collRecv, collSendRecv:
		return c.board.mail
	}
	return false
}

// executeBoard runs r through the board (see the top of this file).
func (c *Comm) executeBoard(r *Request) error {
	b := c.board
	r.used = "shm-board"
	b.beginCall()
	k := mkCall(r.kind, r.calledType(), r.op, r.root, r.count)
	if c.life.Err() != nil { // abandoned before it started
		return c.boardFail(k, context.Cause(c.life))
	}
	// The last call did not wait for every rank: some may still read
	// this rank's slot and header of the call before it.
	if b.owedSeq != 0 {
		if err := c.boardSettle(r); err != nil {
			return err
		}
	}
	L := len(r.send) // this call's contribution, the same length on every rank
	if r.kind == collScatter {
		L = c.size * len(r.recv)
	}
	small := c.streams(r, L)
	if small && b.lastSmall {
		b.seq++
		return c.executeStream(r, b.seq, k)
	}
	b.lastSmall = small
	if b.lastStream != 0 {
		if err := c.streamSettle(r); err != nil {
			return err
		}
	}
	b.seq++
	seq := b.seq
	if L > boardSlot {
		return c.executeDirect(r, seq, L, k)
	}
	if r.kind == collBroadcast && L > boardBcastDirect && b.early && !c.opts.StrictChecks {
		return c.broadcastEither(r, seq, L, k)
	}
	var contrib []byte // what this rank puts on the board
	switch r.kind {
	case collAllreduce, collReduce, collAllgather, collAlltoall, collReduceScatter, collGather:
		contrib = r.send
	case collBroadcast, collScatter:
		if c.rank == r.root {
			contrib = r.send
		}
	}
	// A contribution of up to llCap bytes goes in this rank's lines with
	// the call, written together (publishWith): each line changes hands
	// once. Written earlier, with other work between, each store could
	// have to take the line back from a reader that polls it.
	inLines := lined(r.kind, L)
	if !inLines {
		copy(b.slot(b.me, seq), contrib)
		contrib = nil
	}
	only := c.markedWaitOn(r)
	// Whom this rank waits for does not wait for it: poll all their
	// lines, which then come over together. Where every rank waits for
	// every other, each writing its lines while it polls the others',
	// poll the first lines alone (written last, they say the rest are
	// there): polling every line there slowed each rank's writes as much
	// as it sped up its reads, and more (two threads exchanging 3 and 5
	// lines on this VM's slow minutes: 580 and 720-770 ns polling all,
	// 420-440 and 500-540 polling the first; handing 3 and 5 lines one
	// way, 330 and 410 ns polling all, 420-440 and 490-510 the first).
	lines := 1
	if inLines && (only >= 0 || r.kind == collReduce || r.kind == collGather) {
		lines = llLinesFor(L)
	}
	switch only {
	case waitNone:
		b.publishWith(seq, k, contrib)
		b.owe(seq, k, c.seq)
		if r.kind == collScatter { // the root's own block
			blk := len(r.recv)
			if ownFromSend(r.send, r.recv) {
				copy(r.recv, r.send[b.me*blk:(b.me+1)*blk])
			} else {
				b.take(b.me, seq, inLines, b.me*blk, r.recv)
			}
		}
		return nil
	case b.me:
		// The barrier's rank 0 waits for the others first, then
		// publishes: the others wait for it alone (markedWaitOn).
		if err := c.boardWait(r, seq, k); err != nil {
			return err
		}
		b.publishWith(seq, k, contrib)
		return nil
	}
	b.publishWith(seq, k, contrib)
	if err := c.boardWaitOn(r, seq, k, only, c.seq, lines); err != nil {
		return err
	}
	if only != waitAll {
		b.owe(seq, k, c.seq)
	}
	n := len(r.send)
	switch r.kind {
	case collAllreduce:
		return c.boardReduce(r.recv[:n], 0, seq, inLines, r)
	case collReduce:
		if c.rank == r.root {
			return c.boardReduce(r.recv[:n], 0, seq, inLines, r)
		}
	case collReduceScatter:
		blk := len(r.recv)
		return c.boardReduce(r.recv, b.me*blk, seq, inLines, r)
	case collAlltoall:
		blk := n / b.n
		for p := range b.n {
			if p == b.me && ownFromSend(r.send, r.recv) {
				copy(r.recv[p*blk:(p+1)*blk], r.send[p*blk:(p+1)*blk])
				continue
			}
			b.take(p, seq, inLines, b.me*blk, r.recv[p*blk:(p+1)*blk])
		}
	case collGather:
		if c.rank == r.root {
			for p := range b.n {
				if p == b.me && ownFromSend(r.send, r.recv) {
					copy(r.recv[p*n:(p+1)*n], r.send)
					continue
				}
				b.take(p, seq, inLines, 0, r.recv[p*n:(p+1)*n])
			}
		}
	case collScatter:
		blk := len(r.recv)
		b.take(r.root, seq, inLines, b.me*blk, r.recv)
	case collBroadcast:
		if c.rank != r.root {
			b.take(r.root, seq, inLines, 0, r.recv[:n])
		}
	case collAllgather:
		for p := range b.n {
			switch {
			case n == 0 || p == b.me && &r.recv[p*n] == unsafe.SliceData(r.send): // in place
			case p == b.me && ownFromSend(r.send, r.recv):
				copy(r.recv[p*n:(p+1)*n], r.send)
			default:
				b.take(p, seq, inLines, 0, r.recv[p*n:(p+1)*n])
			}
		}
	}
	return nil
}

// ownFromSend says whether a copying call (all-to-all, allgather, gather,
// a scatter's root) may take this rank's own block from its send buffer
// rather than from the lines or slot it has just written there: the
// buffers do not overlap, or are the same bytes (in place, where the own
// block already is where it goes). The lines are the slower source: their
// stores may still wait for the cache lines to come back from the ranks
// that poll them, and a load of part of a store that does not start where
// the store started is not served from the store buffer, so it waits with
// them. 2 ranks over shared memory, osu all-to-all of 32 B (each rank's
// 16 B block at byte 16 of a 32-byte store): a memmove there took 8% of
// the call's samples, and the call 0.56-0.60 us against 0.50-0.52 at 16 B.
func ownFromSend(send, recv []byte) bool {
	return !overlap(send, recv) || sameBytes(send, recv)
}

// Whom a board call waits for (markedWaitOn), besides a rank number.
const (
	waitAll  = -1 // every rank
	waitNone = -2 // nobody
)

// markedWaitOn says whom this rank's call r waits for before it reads,
// then returns. A call in which every rank reads every rank's slot waits
// for all. A rooted call waits only for the ranks this rank reads from,
// as a rooted call of the executor's completes once sent (Call.Eager):
// a broadcast or scatter root, a reduce or gather leaf waits for nobody,
// a broadcast or scatter receiver for the root. The barrier of ranks
// that outnumber the processors (crowded) is rank 0's gather and
// broadcast of nothing: rank 0 waits for every other rank, then
// publishes; the others wait for rank 0. There the ranks that wait yield
// the processors, and the flat barrier (every rank waits for all) lets
// them leave in whatever order the scheduler runs them: a broadcast from
// rank 0 after it found its receivers waiting on a root not yet back
// (4 ranks on 2 cores, 8 B-1 KiB: 3-5 us, against 0.3-0.5 us after the
// gathered barrier, which leaves rank 0 first as Open MPI's linear
// barrier does; the barrier alone costs 15-17 us instead of 10, Open
// MPI's 13-17). With a processor each, the flat barrier is faster (2
// ranks: 0.23 us against 0.4) and a broadcast after it as fast. Every
// rank's description of the call is still checked: by the ranks waited
// for at once, by the others before this rank's next board call or at
// Close (boardSettle). With StrictChecks every call waits for all.
func (c *Comm) markedWaitOn(r *Request) int {
	if c.opts.StrictChecks {
		return waitAll
	}
	switch r.kind {
	case collBroadcast, collScatter:
		if c.rank == r.root {
			return waitNone
		}
		return r.root
	case collReduce, collGather:
		if c.rank != r.root {
			return waitNone
		}
	case collBarrier:
		if c.board.crowded {
			return 0
		}
	}
	return waitAll
}

// owe records that call seq (the communicator's num, described by k)
// completed without waiting for every rank.
func (b *board) owe(seq uint64, k boardCall, num uint32) {
	b.owed, b.owedSeq, b.owedNum = k, seq, num
}

// boardSettle waits, if this rank's last board call did not wait for
// every rank, until every rank has published it, and checks their calls
// (see board.owed). r is the call that waits (nil at Close).
func (c *Comm) boardSettle(r *Request) error {
	b := c.board
	if b == nil || b.owedSeq == 0 {
		return nil
	}
	if r == nil {
		r = &Request{kind: b.owed.kind()}
	}
	seq := b.owedSeq
	b.owedSeq = 0
	b.settling = b.owedNum
	err := c.boardWaitOn(r, seq, b.owed, waitAll, b.owedNum, 1)
	b.settling = 0
	return err
}

// publish writes k as this rank's call seq and publishes seq.
func (b *board) publish(seq uint64, k boardCall) { b.publishWith(seq, k, nil) }

// publishWith publishes call seq, described by k, with src as this rank's
// contribution in its lines (len(src) <= llCap; nil if it has none, or if
// it is in the slot already).
func (b *board) publishWith(seq uint64, k boardCall, src []byte) {
	b.writeLines(b.me, seq, k, src)
	b.ring()
}

// writeLines writes rank r's lines of call seq: src's bytes after the
// first llHead in the later lines, each line's flag after its bytes, then
// the first line, whose flag publishes the call. The call and the flags
// are plain stores and release stores, in the order written: a reader
// that sees a flag sees the line's bytes. (An atomic store of the call
// is a fence, which waits for the earlier stores to reach the other
// cores before the flag's may start: +0.3 us.)
func (b *board) writeLines(r int, seq uint64, k boardCall, src []byte) {
	b.writeAt(b.lines(r, seq), seq, k, src)
}

// writeAt is writeLines at the lines from base (a set's, or a ring's:
// board_stream.go).
func (b *board) writeAt(base int, seq uint64, k boardCall, src []byte) {
	if len(src) > llHead {
		rest := src[llHead:]
		for at := base + llLine; len(rest) > 0; at += llLine {
			n := copy(b.mem[at:at+llBody], rest)
			rest = rest[n:]
			storeRelease(b.u64(at+llFlag), seq)
		}
		src = src[:llHead]
	}
	copy(b.mem[base+llData:base+llData+llHead], src)
	binary.LittleEndian.PutUint64(b.mem[base+llCall:base+llCall+8], uint64(k))
	storeRelease(b.u64(base+llFlag), seq)
}

// raise stores v in this rank's header word at off (bDone), a release
// store, and rings the bell.
func (b *board) raise(off int, v uint64) {
	storeRelease(b.u64(b.hdr(b.me)+off), v)
	b.ring()
}

// ring wakes the ranks asleep on the board's bell, if any.
func (b *board) ring() {
	if b.u32(gSleepers).Load() > 0 {
		b.u32(gBell).Add(1)
		shm.FutexWakeAll(b.u32(gBell))
	}
}

// boardReduce reduces bytes [off, off+len(dst)) of every rank's
// contribution to call seq (in their lines if lined) into dst, in rank
// order.
func (c *Comm) boardReduce(dst []byte, off int, seq uint64, lined bool, r *Request) error {
	b := c.board
	end := off + len(dst)
	if !lined || end <= llHead {
		// In one piece each: the slots, or the first lines.
		at := func(p int) []byte {
			if !lined {
				return b.slot(p, seq)[off:end]
			}
			base := b.lines(p, seq) + llData
			return b.mem[base+off : base+end]
		}
		if err := collectives.ReduceTo(r.dt, r.op, dst, at(0), at(1)); err != nil {
			return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
		}
		for p := 2; p < b.n; p++ {
			if err := collectives.ReduceTo(r.dt, r.op, dst, dst, at(p)); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
		}
		return collectives.Finish(r.dt, r.op, dst, b.n) // Avg's division
	}
	// From the lines: rank 0's bytes into dst, each other's into tmp and
	// reduced from there (the same operations, in the same order).
	tmp := b.llTmp[:len(dst)]
	b.take(0, seq, true, off, dst)
	for p := 1; p < b.n; p++ {
		b.take(p, seq, true, off, tmp)
		if err := collectives.ReduceTo(r.dt, r.op, dst, dst, tmp); err != nil {
			return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
		}
	}
	return collectives.Finish(r.dt, r.op, dst, b.n)
}

// boardWait waits until every rank published seq, and checks that each
// describes the same call as k.
func (c *Comm) boardWait(r *Request, seq uint64, k boardCall) error {
	return c.boardWaitOn(r, seq, k, waitAll, c.seq, 1)
}

// boardWaitOn waits until rank only (every rank: waitAll) published seq
// in that many lines (see boardWaitWord), and checks that it describes
// the same call as k, the communicator's call num. This rank counts as
// published. It keeps the communicator's clocks itself (no timers on this
// path): Options.Timeout from the start of the wait, Options.StallTimeout
// from the last rank that arrived. It looks once before it sets up the
// wait (boardWaitWord): the last rank to arrive finds the others there,
// and the set-up cost a small call 5-15 ns (BenchmarkBoardOverhead).
func (c *Comm) boardWaitOn(r *Request, seq uint64, k boardCall, only int, num uint32, lines int) error {
	lo, hi := 0, c.board.n
	if only >= 0 {
		lo, hi = only, only+1
	}
	if c.board.allReady(lo, hi, seq, lines) {
		return c.boardCheckCalls(seq, k, lo, hi, num)
	}
	return c.boardWaitWord(r, seq, k, only, num, bSeq, lines)
}

// boardWaitWord is boardWaitOn's wait, without its first look, on the
// word at offset word of the ranks' headers: bSeq, or bDone (a rank raises it to seq after it published
// seq, so its call seq can be checked then too). With bSeq and lines > 1,
// it waits until the ranks it waits for have filled that many lines
// (executeBoard asks for lines only of ranks that all contribute: a
// broadcast's or scatter's root alone, every rank of a reduce or gather).
func (c *Comm) boardWaitWord(r *Request, seq uint64, k boardCall, only int, num uint32, word, lines int) error {
	b := c.board
	lo, hi := 0, b.n
	if only >= 0 {
		lo, hi = only, only+1
	}
	var start, lastLook, lastArrival time.Time
	defer c.boardLeave(&start)
	arrived := 0
	for i := 0; ; i++ {
		missing, got := -1, 0
		for p := lo; p < hi; p++ {
			if p == b.me {
				got++
				continue
			}
			if word == bSeq {
				if b.ready(p, seq, lines) {
					got++
					continue
				}
				// Published, but not these lines: a rank that made
				// another call may never fill them.
				if lines > 1 && b.word(p, bSeq, seq).Load() >= seq {
					if pk := b.readCall(p, seq); pk != k {
						return c.boardMismatch(k, p, pk, num)
					}
				}
			} else if word == bRing {
				if b.ringReady(p, seq, lines) {
					got++
					continue
				}
			} else if b.word(p, word, seq).Load() >= seq {
				got++
				continue
			}
			if missing < 0 {
				missing = p
			}
			// A rank that made a stream call instead publishes it in
			// its log alone (board_stream.go).
			if i&63 == 63 {
				if err := c.streamLook(p, seq, k, num, word); err != nil {
					return err
				}
			}
			// A rank that will not raise bDone for a call it does not
			// make: its published call tells at once.
			if word != bSeq && b.word(p, bSeq, seq).Load() >= seq {
				if pk := b.readCall(p, seq); pk != k {
					return c.boardMismatch(k, p, pk, num)
				}
			}
		}
		if missing < 0 {
			if word < 0 {
				return nil // a stream word: the stream checks the calls itself
			}
			return c.boardCheckCalls(seq, k, lo, hi, num)
		}
		if !b.clockDue(i) {
			// A PAUSE between polls where every rank writes a line and
			// polls the others' (an exchange; see spinPause): 2 ranks,
			// osu allreduce 8-64 B, equal or up to 10% faster by the
			// host's state, never slower (6 alternating runs against a
			// NOP, 6 December). Not where one rank waits for another
			// that waits for nobody (a broadcast's receivers, the
			// mailbox's ping-pong): no faster, or 5% slower.
			if only == waitAll {
				spinPause()
			}
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start, lastLook, lastArrival = now, now, now
			boardWaiters.Add(1)
		}
		if got > arrived {
			arrived, lastArrival = got, now
		}
		if now.Sub(lastLook) >= boardLook {
			lastLook = now
			if err := c.boardLook(r, seq, k, lo, hi, word, now.Sub(start), now.Sub(lastArrival)); err != nil {
				return err
			}
		}
		if b.hold(k, word, seq, now.Sub(start)) {
			continue
		}
		b.rest(now.Sub(start), b.word(missing, word, seq), seq, missing)
	}
}

// allReady says whether ranks lo..hi-1 (this rank excepted) have
// published seq in that many lines (board.ready).
func (b *board) allReady(lo, hi int, seq uint64, lines int) bool {
	for p := lo; p < hi; p++ {
		if p != b.me && !b.ready(p, seq, lines) {
			return false
		}
	}
	return true
}

// boardCheckCalls checks that ranks lo..hi-1, which published seq,
// describe the same call as k (the communicator's call num).
func (c *Comm) boardCheckCalls(seq uint64, k boardCall, lo, hi int, num uint32) error {
	b := c.board
	for p := lo; p < hi; p++ {
		if pk := b.readCall(p, seq); p != b.me && pk != k {
			return c.boardMismatch(k, p, pk, num)
		}
	}
	return nil
}

// hold says whether a crowded rank that has waited this long in call k
// for word to reach seq keeps its processor instead of yielding it: in a
// call where every rank waits for every other (allreduce, allgather,
// all-to-all, reduce-scatter), while it has waited less than boardSpin
// and every rank bound to its processor (its mates) has raised word to
// seq already. Then no rank that the wait is for needs this processor,
// and a yield would only hand it to a mate that waits for the same ranks
// on other processors, and back: 4 ranks on 2 cores (two bound to each),
// osu all-to-all 8 B, half the context switches (423,000 against 852,000
// in 100,000 calls and barriers) and 4.3-4.7 us per call against 5.2-6.2
// (3 December). Not in rooted calls and barriers: holding there too made
// the broadcast's receivers arrive sooner after the barrier and wait
// longer for the root (4 ranks, 512 B-8 KiB: 0.6-2.2 us against
// 0.3-0.9). Unbound ranks have no mates and always yield.
func (b *board) hold(k boardCall, word int, seq uint64, waited time.Duration) bool {
	if len(b.mates) == 0 || waited >= boardSpin {
		return false
	}
	switch k.kind() {
	case collAllreduce, collAllgather, collAlltoall, collReduceScatter:
	default:
		return false
	}
	for _, m := range b.mates {
		if b.word(m, word, seq).Load() < seq {
			return false
		}
	}
	return true
}

// matesOf returns the ranks other than me bound to the same processor as
// me (cpus[r]: the processor rank r is bound to alone, or -1).
func matesOf(me int, cpus []int) []int {
	var m []int
	for p, cpu := range cpus {
		if p != me && cpu >= 0 && cpu == cpus[me] {
			m = append(m, p)
		}
	}
	return m
}

// soleCPU returns the processor that this thread may run on, if only one
// (gorun binds each rank to one processor where ranks outnumber them), or
// -1.
func soleCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() != 1 {
		return -1
	}
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			return i
		}
	}
	return -1
}

// clockDue reports whether a wait's look number i reads the clock (see
// boardSpins).
func (b *board) clockDue(i int) bool {
	if b.crowded {
		return true
	}
	return i >= boardSpins && i&255 == 255
}

// rest steps a waiting rank aside, by how long it has waited: not at all
// while it spins, a yield, then a nap on the bell unless the word w has
// reached v meanwhile or rank p, which writes it, has left.
func (b *board) rest(waited time.Duration, w *atomic.Uint64, v uint64, p int) {
	switch {
	case waited < boardSpin && !b.crowded:
	case waited < boardYield:
		// Raw system calls here and below: see shm.FutexNap. The
		// process's other goroutines run first if the board's waits may
		// hold all its processors (Ps): ranks as goroutines of one
		// process, or a rank bound to one core. Otherwise they have a P,
		// and a Gosched would cost a wake-up of another thread, which
		// takes this goroutine over: 4 unbound ranks on 2 cores
		// (GOMAXPROCS 2), an 8-byte all-to-all took 18-24 us with a
		// Gosched before each yield and 4.6-7.7 without (3 December).
		if boardWaiters.Load() >= int32(runtime.GOMAXPROCS(0)) {
			runtime.Gosched()
		}
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	default:
		runtime.Gosched()
		bell := b.u32(gBell)
		b.u32(gSleepers).Add(1)
		bv := bell.Load()
		if w.Load() < v && b.stateOf(p).Load() == boardLive {
			shm.FutexNap(bell, bv, boardNap)
		}
		b.u32(gSleepers).Add(^uint32(0))
	}
}

// boardWaiters counts the board waits of this process past their first
// look, to tell whether they may hold every P (board.rest).
var boardWaiters atomic.Int32

// boardLeave ends a board wait that began at *start, if it got that far
// (the deferred call of boardWaitWord and mailWaitOn): counted in
// boardWaiters, and marked as
// a long wait in bWaitOn if it waited that long. A wait that failed keeps
// its mark: the ranks waiting for this one may follow the chain through it
// a moment later.
func (c *Comm) boardLeave(start *time.Time) {
	if start.IsZero() {
		return
	}
	boardWaiters.Add(-1)
	if b := c.board; b.waitMarked && b.stateOf(b.me).Load() == boardLive {
		b.waitMarked = false
		b.u32(b.hdr(b.me) + bWaitOn).Store(0)
		c.boardStalledOn.Store(0)
	}
}

// stallMark is how long a board wait goes without progress before its
// rank publishes whom it waits for (bWaitOn): well before the stall
// timeout, so that the ranks that wait for this one find it there when
// theirs ends.
func (c *Comm) stallMark() time.Duration { return min(c.opts.StallTimeout/2, time.Second) }

// markWait publishes that this rank's board wait, without progress for
// stallMark, waits for rank p (bWaitOn, cleared by boardLeave).
func (c *Comm) markWait(p int) {
	b := c.board
	b.waitMarked = true
	b.u32(b.hdr(b.me) + bWaitOn).Store(uint32(p) + 1)
	c.boardStalledOn.Store(int32(p) + 1)
}

// stallBlame is the error of a board wait for rank p (the first of those
// it waits for, -1 if none) that the stall timeout ended, waiting saying
// what it waited for. It follows the ranks that wait for one another from
// p: the first that waits for nobody is at the root of the stall (a rank
// waiting in a rooted call for its root, which waits for a stopped rank,
// names that rank, not the root; so does a receive whose sender waits for
// one). If the chain comes round, this rank fails without naming one.
func (c *Comm) stallBlame(k boardCall, p int, waiting string) error {
	cause := &stallError{d: c.opts.StallTimeout}
	if p >= 0 {
		root, via, round := c.board.stallChain(p)
		if root >= 0 {
			if where := c.busyElsewhereNow(root); where != "" {
				return c.boardBlame(k, root, fmt.Errorf("%s%s: rank %d is at the root of a stall: %s: %w", waiting, via, root, where, cause))
			}
			return c.boardBlame(k, root, fmt.Errorf("%s%s: rank %d is at the root of a stall (it waits for no rank: stopped, hung, or not in this call): %w",
				waiting, via, root, cause))
		}
		if len(round) > 0 {
			// Alive, each waiting for the next: calls that cannot meet
			// (two sends of rendezvous size, each waiting for its
			// receive) or calls that differ.
			return c.boardFail(k, fmt.Errorf("%s%s: %s are alive and wait for one another (calls that cannot meet, such as sends that each wait for their receive, or calls that differ): %w",
				waiting, via, collectives.RankList(round), cause))
		}
	}
	return c.boardFail(k, fmt.Errorf("%s: %w", waiting, cause))
}

// stallChain follows, from rank p, which this rank waits for, the ranks
// that wait for one another on the board (bWaitOn) to the first that
// waits for nobody: the root of the stall. It returns that rank and the
// chain as text ("; rank 0 waits for rank 2"), or -1 if the chain comes
// round to a rank already in it (ranks that wait for each other: a stalled
// link between them, or calls that differ): then the chain and the ranks
// on it, in order from this rank.
func (b *board) stallChain(p int) (int, string, []int) {
	var via strings.Builder
	on := []int{b.me, p}
	for range b.n {
		w := int(b.u32(b.hdr(p) + bWaitOn).Load())
		if w == 0 {
			return p, via.String(), nil
		}
		q := w - 1
		if q >= b.n {
			return -1, "", nil
		}
		fmt.Fprintf(&via, "; rank %d waits for rank %d", p, q)
		if slices.Contains(on, q) {
			if q != b.me {
				// Round to a rank after this one: this rank waits on
				// the round, not in it.
				on = on[slices.Index(on, q):]
			}
			slices.Sort(on)
			return -1, via.String(), on
		}
		on = append(on, q)
		p = q
	}
	return -1, "", nil
}

// boardLook checks, while a board call waits for ranks lo..hi-1, the
// communicator's life (Abort, the caller's context), its timeout and stall
// timeout, and the ranks not arrived: closed, failed or gone.
func (c *Comm) boardLook(r *Request, seq uint64, k boardCall, lo, hi, word int, waited, idle time.Duration) error {
	b := c.board
	if err := c.offBoardLook(seq, k, lo, hi, word); err != nil {
		return err
	}
	if r.ctx != nil && r.ctx.Err() != nil {
		c.lifeCancel(fmt.Errorf("%s abandoned: %w", r.kind, context.Cause(r.ctx)))
	}
	missing := func() string { return collectives.RankList(c.boardMissing(seq, lo, hi, word)) }
	switch {
	case c.life.Err() != nil:
		return c.boardFail(k, fmt.Errorf("waiting for %s: %w", missing(), context.Cause(c.life)))
	case waited > c.callTimeout():
		return c.boardFail(k, fmt.Errorf("waiting for %s: %w", missing(), &timeoutError{d: c.callTimeout()}))
	case idle > c.opts.StallTimeout:
		ms := c.boardMissing(seq, lo, hi, word)
		first := -1
		if len(ms) > 0 {
			first = ms[0]
		}
		return c.stallBlame(k, first, "waiting for "+collectives.RankList(ms))
	case idle >= c.stallMark() && !b.waitMarked:
		if ms := c.boardMissing(seq, lo, hi, word); len(ms) > 0 {
			c.markWait(ms[0])
		}
	}
	// The ranks not there first: their own failure names the cause (a
	// refused argument, say) that the others' reports only pass on.
	for p := lo; p < hi; p++ {
		if p == b.me {
			continue
		}
		// p's state before its word: one that published, then closed,
		// since this wait's test is there, not gone.
		st := b.stateOf(p).Load()
		if b.word(p, word, seq).Load() >= seq {
			continue
		}
		if err := c.peerGoneAt(p, k, st); err != nil {
			return err
		}
	}
	// Then those that are there: one that failed since (its deadline,
	// Abort) or died fails the call now, as over the network, not once the
	// ranks still missing arrive. One that closed after its part did not
	// fail.
	for p := lo; p < hi; p++ {
		if p == b.me || b.word(p, word, seq).Load() < seq || b.stateOf(p).Load() == boardClosed {
			continue
		}
		if root, ok := b.reportedRoot(p); ok && root != p && root >= lo && root < hi && b.word(root, word, seq).Load() < seq {
			continue // it blames a rank this one waits for, which will say why itself
		}
		if err := c.peerGone(p, k); err != nil {
			return err
		}
	}
	return nil
}

// offBoardLook fails the call with a mismatch if a rank it waits for
// (lo..hi-1, not published at word) runs a call off the board that this
// rank made on it (bExec): the current call, or one this rank completed
// without waiting for it (a broadcast's root or receiver, say). It comes
// first in boardLook: the other rank's failure, which follows from this
// one, would hide the cause.
func (c *Comm) offBoardLook(seq uint64, k boardCall, lo, hi, word int) error {
	b := c.board
	for p := lo; p < hi; p++ {
		if p == b.me || b.word(p, word, seq).Load() >= seq {
			continue
		}
		pn, pk, ok := b.offBoard(p)
		switch {
		case !ok:
		case pn == c.seq:
			return c.boardBlameAs(boardMismatched, k, c.rank, fmt.Errorf(
				"collective mismatch: rank %d runs %s #%d off the shared-memory board (an algorithm asked for, or a call the board does not take) while rank %d called %s on it",
				p, pk, pn, c.rank, k))
		case pn < c.seq && !b.ranOff(pn):
			return c.boardBlameAs(boardMismatched, k, c.rank, fmt.Errorf(
				"collective mismatch: rank %d runs %s #%d off the shared-memory board (an algorithm asked for, or a call the board does not take) while rank %d made its call #%d on it",
				p, pk, pn, c.rank, pn))
		}
	}
	return nil
}

// markExec records in this rank's header that it runs its collective
// number num, k, off the board (bExec).
func (b *board) markExec(num uint32, k boardCall) {
	h := b.hdr(b.me)
	b.u64(h + bExecCall).Store(uint64(k))
	b.u64(h + bExec).Store(1<<32 | uint64(num))
}

// offBoard reports the last collective rank p ran off the board (bExec):
// its number and call; ok false if none.
func (b *board) offBoard(p int) (num uint32, k boardCall, ok bool) {
	h := b.hdr(p)
	x := b.u64(h + bExec).Load()
	if x == 0 {
		return 0, 0, false
	}
	k = boardCall(b.u64(h + bExecCall).Load())
	return uint32(x), k, b.u64(h+bExec).Load() == x // not rewritten meanwhile
}

// ranOff reports whether this rank may have run its collective number num
// off the board: it ran none after it (every collective runs on the board
// or off it, numbered in order).
func (b *board) ranOff(num uint32) bool {
	x := b.u64(b.hdr(b.me) + bExec).Load()
	return x != 0 && uint32(x) >= num
}

// peerGone fails the call if rank p closed, failed or is gone.
func (c *Comm) peerGone(p int, k boardCall) error {
	return c.peerGoneAt(p, k, c.board.stateOf(p).Load())
}

// peerGoneAt is peerGone with p's state as the caller read it: a caller
// that looked at what p wrote after it read p's state (mailWaitOn) must
// not be failed by a change of state since, which came after that.
func (c *Comm) peerGoneAt(p int, k boardCall, state uint32) error {
	b := c.board
	switch state {
	case boardClosed:
		return c.boardBlame(k, p, fmt.Errorf("rank %d closed the communicator after %d collectives on the board, before this call", p, b.published(p)))
	case boardFailed:
		if root, ok := b.reportedRoot(p); ok {
			if _, further := b.reportedRoot(root); b.stateOf(root).Load() != boardLive && !further {
				// The root failed of its own finding (calls that cannot
				// meet, say), or closed: its own state says what, better
				// than p's wait.
				return c.peerGone(root, k)
			}
			if w := int(b.u32(b.hdr(p) + bWaitOn).Load()); w != 0 && root != p {
				// p failed in a stalled wait (see stallChain), blaming root.
				return c.boardBlame(k, root, fmt.Errorf("rank %d is at the root of a stall (reported by rank %d, stalled waiting for rank %d)", root, p, w-1))
			}
			return c.boardBlame(k, root, fmt.Errorf("rank %d failed (reported by rank %d)", root, p))
		}
		return c.boardBlame(k, p, c.reportedCause(p))
	case boardMismatched: // passed on as a mismatch, for the ranks that wait on this one
		return c.boardBlameAs(boardMismatched, k, p, fmt.Errorf("collective mismatch: rank %d found that the ranks called different collectives (its error names the calls)", p))
	}
	// Killed, or exited without Close: its board state says nothing. A
	// zombie its parent has not reaped yet is gone too (processGone),
	// though a kill's signal 0 still finds it: the ranks that waited on a
	// killed rank whose launcher reaps late (or its ranks in order, as a
	// shell's wait does) waited until the stall timeout, which blamed it
	// as stopped or hung.
	if pid := int(b.u32(b.hdr(p) + bPid).Load()); pid != 0 && pid != int(b.pid) {
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) || b.zombieDue(p) && b.processGone(p) {
			return c.boardBlame(k, p, fmt.Errorf("rank %d failed: its process %d is gone", p, pid))
		}
	}
	return nil
}

// zombieLook is how often peerGone looks whether a rank's process is a
// zombie: that reads /proc (10-15 us), and the board's waits look at every
// rank they wait for every boardLook.
const zombieLook = 100 * time.Millisecond

// zombieDue says whether peerGone should look whether rank p's process is
// a zombie now (at most every zombieLook), and notes the look.
func (b *board) zombieDue(p int) bool {
	if b.zombieAt == nil {
		b.zombieAt = make([]time.Time, b.n)
	}
	now := time.Now()
	if now.Sub(b.zombieAt[p]) < zombieLook {
		return false
	}
	b.zombieAt[p] = now
	return true
}

// readFail fails a call whose copy from rank p's memory failed: p is gone
// (it died, and its memory with it), or something else went wrong here.
func (c *Comm) readFail(k boardCall, p int, err error) error {
	if errors.Is(err, unix.ESRCH) {
		root, cause := c.goneBlame(p)
		return c.boardBlame(k, root, cause)
	}
	return c.boardFail(k, fmt.Errorf("reading rank %d's buffer: %w", p, err))
}

// goneBlame is whom to blame, and why, when rank p's process is gone: p,
// unless p had failed first for another rank's failure and said so on the
// board (a survivor that exits on its error: the others may find it gone
// before they find the rank that died; 4 ranks under gorun, rank 3 killed,
// rank 0 blamed rank 1 once in TestKillOneRank).
func (c *Comm) goneBlame(p int) (int, error) {
	if root, ok := c.board.reportedRoot(p); ok && c.board.stateOf(p).Load() == boardFailed {
		return root, fmt.Errorf("rank %d failed (reported by rank %d, whose process is gone since)", root, p)
	}
	return p, fmt.Errorf("rank %d failed: its process is gone (reading its buffer)", p)
}

// timesUp fails a board wait for rank p that the communicator's life,
// timeout or stall timeout (or the caller's context) ended; waiting says
// for what. Past stallMark it publishes that it waits for p.
func (c *Comm) timesUp(r *Request, k boardCall, p int, waited, idle time.Duration, waiting func() string) error {
	if r.ctx != nil && r.ctx.Err() != nil {
		c.lifeCancel(fmt.Errorf("%s abandoned: %w", r.kind, context.Cause(r.ctx)))
	}
	switch {
	case c.life.Err() != nil:
		return c.boardFail(k, fmt.Errorf("%s: %w", waiting(), context.Cause(c.life)))
	case waited > c.callTimeout():
		return c.boardFail(k, fmt.Errorf("%s: %w", waiting(), &timeoutError{d: c.callTimeout()}))
	case idle > c.opts.StallTimeout:
		return c.stallBlame(k, p, waiting())
	case idle >= c.stallMark() && !c.board.waitMarked:
		c.markWait(p)
	}
	return nil
}

// boardMissing lists the ranks among lo..hi-1 that have not published seq
// (this rank excepted).
func (c *Comm) boardMissing(seq uint64, lo, hi, word int) []int {
	var m []int
	for p := lo; p < hi; p++ {
		if p != c.rank && c.board.word(p, word, seq).Load() < seq {
			m = append(m, p)
		}
	}
	return m
}

// boardFail fails the call and the communicator: every rank that waits on
// this one sees its mark at once.
func (c *Comm) boardFail(k boardCall, cause error) error { return c.boardBlame(k, c.rank, cause) }

// boardMismatch fails this rank's call k (the communicator's call num):
// rank p called pk.
func (c *Comm) boardMismatch(k boardCall, p int, pk boardCall, num uint32) error {
	return c.boardBlameAs(boardMismatched, k, c.rank, fmt.Errorf("collective mismatch: rank %d called %s #%d while rank %d called %s #%d", p, pk, num, c.rank, k, num))
}

// boardBlame is boardFail for a failure whose root is rank root.
func (c *Comm) boardBlame(k boardCall, root int, cause error) error {
	return c.boardBlameAs(boardFailed, k, root, cause)
}

// boardBlameAs is boardBlame that marks this rank's header state.
func (c *Comm) boardBlameAs(state uint32, k boardCall, root int, cause error) error {
	c.board.markRoot(state, root)
	c.failRoot.Store(int64(root))
	var err error
	num := c.seq
	if s := c.board.settling; s != 0 {
		num = s // an earlier call's failure, found by this one (boardSettle)
	}
	call := fmt.Sprintf("%s #%d", k, num)
	if k.kind().IsP2P() {
		call = fmt.Sprintf("%s tag %d", k, c.board.tag)
		err = fmt.Errorf("comm: %s (shm-mailbox): rank %d: %w", call, c.rank, cause)
	} else {
		err = fmt.Errorf("comm: %s #%d (shm-board): rank %d: %w", k, num, c.rank, cause)
	}
	c.exec.Fail(err)
	c.breakLinks()
	if kv := kvOf(c.rdv); kv != nil {
		// As fail does for a failure the executor found: the ranks this
		// one fails for read the cause (peerGone, headline).
		reason := collectives.NoticeFailed
		if state == boardMismatched {
			reason = collectives.NoticeMismatch
		}
		c.publish(kv, report{reason: reason, root: root, peer: -1, seq: c.seq, call: call, cause: cause.Error()})
	}
	return err
}

// reportedCause is why rank p, marked failed on the board without
// blaming another rank, failed: the cause its report in the store gives
// (boardBlameAs, fail, refuse and Abort publish one), read for at most
// reportWait. Without it a peer of a rank whose receive found the sizes
// differ, or that refused its arguments, said only "rank 1 failed or
// aborted", where the ranks over TCP named the cause.
func (c *Comm) reportedCause(p int) error {
	if kv := kvOf(c.rdv); kv != nil {
		if r, ok := c.readReports(kv, []int{p}, reportWait)[p]; ok && r.cause != "" {
			switch {
			case r.reason == collectives.NoticeBadArgs && r.call != "":
				return fmt.Errorf("rank %d refused its arguments to %s: %s", p, r.call, r.cause)
			case r.reason == collectives.NoticeAborted:
				return fmt.Errorf("rank %d aborted: %s", p, r.cause)
			case r.call != "":
				return fmt.Errorf("rank %d failed in %s: %s", p, r.call, r.cause)
			}
			return fmt.Errorf("rank %d failed: %s", p, r.cause)
		}
	}
	return fmt.Errorf("rank %d failed or aborted", p)
}
