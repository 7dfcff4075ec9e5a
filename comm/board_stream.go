package comm

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// The broadcast stream. In a run of broadcasts of up to streamMax bytes
// on the board (back to back, no other board call between them: any
// root, any size up to that), the second and later go through their
// root's ring of ringLen lines instead of the lines of the call's set,
// as Open MPI's shared-memory transport passes small messages through a
// ring the sender fills ahead (its fast boxes). The root writes each
// call's lines (as a set's: the call and the first llHead bytes in the
// first, llBody in each later one, each line's flag the call's number,
// the first line written last) at the ring's next lines and returns;
// each receiver waits for them, checks the call, copies the bytes, stores
// the call's number as its progress on that root's ring and, if the root
// was ahead of it, starts fetching the ring's next lines. The root writes
// a line again only once every receiver's progress shows it read the
// line's last call, and reads a receiver's progress only when what it
// saw last is not enough: a root runs up to a ring of calls ahead of its
// slowest receiver and reads each receiver's progress about once per run
// of calls, where the sets let it run one call ahead and cost a
// cache-line trip each way per call (bench/PERFORMANCE.md, 5 December:
// 2 ranks, 8 bytes back to back, 0.08-0.10 us against 0.13-0.15 in the
// host's middle state, 0.19-0.24 against 0.33-0.42 in its slow one; 4
// ranks on 2 cores, 0.21-0.24 us against 5-6). The first broadcast of a run
// goes through the sets, so that a broadcast between other calls (OSU's
// method: a barrier after each) is what it was.
//
// Publishing and checking. A rank publishes each stream call in its log
// (the call and its number, at the number's entry), not in its lines: a
// set's first line is rewritten only under the sets' rule (every rank
// published the call before), which a root running ahead does not keep.
// A receiver compares the root's call with its own at every call, so a
// rank whose progress passed a call made the root's call; a rank that
// made another call never passes it, and the root finds it waiting with
// another call published (a mismatch), or failed or gone, when its ring
// comes round or before its next board call that is not a stream call,
// which first waits until every receiver read its whole ring and every
// rank published the last stream call (streamSettle): then no rank reads
// a set's lines or slot that call rewrites. A rank waiting in another
// call looks at the log of a rank missing from it too, and so sees a
// stream call made instead of its own. A log holds logLen(n) entries: no
// rank is more than a ring of calls of each root ahead of the slowest
// (each root waits for it when its ring comes round; a call that is not
// a stream call waits for every rank), so an entry is rewritten only
// after every rank that may read it is past it.

// ringLen is the lines in each rank's ring in a board of n ranks: 128 up
// to 8 ranks, 32 above, where the logs would grow with n times it. (4
// ranks on 2 cores, back to back, 8-32 bytes: 0.21-0.24 us with 128
// lines, 0.37-0.53 with 32; 64-256 bytes 0.28-0.52 against 0.59-1.73.)
func ringLen(n int) int {
	if n <= 8 {
		return ringMax
	}
	return 32
}

// ringMax is the longest ring.
const ringMax = 128

// streamAhead is how many of the ring's next lines a receiver starts
// fetching after a call its root was ahead of it in (2 ranks, 8 bytes
// back to back, the host's slow state: 0.20-0.24 us with 4, 0.28-0.33
// with none).
const streamAhead = 4

// logLen is the entries of each rank's log: the power of two from
// 2*n*ringLen(n) (see above): 8 KiB a rank for 2 ranks, 32 KiB for 8, 64
// KiB for 64.
func logLen(n int) int { return 1 << bits.Len(uint(2*n*ringLen(n)-1)) }

// streamArea is each rank's ring, progress words (one per root) and log,
// in whole lines.
func streamArea(n int) int {
	return ringLen(n)*llLine + (n*8+llLine-1)/llLine*llLine + logLen(n)*16
}

// streamOff is where the ranks' stream areas begin, after the mailboxes.
func streamOff(n int) int { return boardLine + n*boardRank + n*2*boardSlot + mailSize(n) }

// streamGeometry is where the stream's parts lie in a board of n ranks
// (computed once: the calls use it on every stream call).
type streamGeometry struct {
	base, area int    // the first rank's stream area, and each one's size
	ring       int    // ringLen(n)
	log        int    // the log's offset in an area
	logMask    uint64 // logLen(n)-1
}

func newStreamGeometry(n int) streamGeometry {
	return streamGeometry{base: streamOff(n), area: streamArea(n), ring: ringLen(n),
		log: ringLen(n)*llLine + (n*8+llLine-1)/llLine*llLine, logMask: uint64(logLen(n) - 1)}
}

// ringLine is the offset of line i of root's ring.
func (b *board) ringLine(root, i int) int {
	return b.sg.base + root*b.sg.area + i*llLine
}

// progOff is the offset of rank p's progress on root's ring: the number
// of the last call of that root p has read.
func (b *board) progOff(p, root int) int {
	return b.sg.base + p*b.sg.area + b.sg.ring*llLine + root*8
}

// logOff is the offset of rank p's log entry for call seq: the call
// (boardCall), then its number.
func (b *board) logOff(p int, seq uint64) int {
	return b.sg.base + p*b.sg.area + b.sg.log + int(seq&b.sg.logMask)*16
}

// logged returns rank p's stream call seq from its log, if p made one.
func (b *board) logged(p int, seq uint64) (boardCall, bool) {
	at := b.logOff(p, seq)
	if b.u64(at+8).Load() != seq {
		return 0, false
	}
	return boardCall(*(*uint64)(unsafe.Pointer(&b.mem[at]))), true
}

// logCall publishes rank r's stream call seq, described by k.
func (b *board) logCall(r int, seq uint64, k boardCall) {
	at := b.logOff(r, seq)
	*(*uint64)(unsafe.Pointer(&b.mem[at])) = uint64(k)
	storeRelease(b.u64(at+8), seq)
}

// streams reports whether r is a broadcast the stream takes (in a run of
// them, from the second on): up to streamMax bytes, without StrictChecks
// (where every call waits for all).
func (c *Comm) streams(r *Request, L int) bool {
	return r.kind == collBroadcast && L <= streamMax && !c.opts.StrictChecks
}

// streamMax is the largest broadcast the stream takes (440 bytes, as
// the sets' lines hold): its 8 lines (see llLinesFor) are a quarter of
// the shortest ring.
const streamMax = llHead + (32/4-1)*llBody

// streamAt returns where the next call on root's ring of lines lines
// starts, and moves the ring's position past it: each call takes
// consecutive lines, from the ring's start again if the lines left at
// its end are too few. Every rank moves alike, the calls being alike.
func (b *board) streamAt(root, lines int) int {
	at := b.sPos[root]
	if at+lines > b.sg.ring {
		at = 0
	}
	b.sPos[root] = at + lines
	return at
}

// executeStream runs broadcast r, the board's call seq described by k,
// through the stream (see above).
func (c *Comm) executeStream(r *Request, seq uint64, k boardCall) error {
	b := c.board
	root, L := r.root, len(r.recv)
	lines := llLinesFor(L)
	at := b.streamAt(root, lines)
	b.lastStream, b.lastStreamCall, b.lastStreamNum = seq, k, c.seq
	if root == b.me {
		// Room: every receiver read the calls these lines held.
		need := at
		for j := at + 1; j < at+lines; j++ {
			if b.rSeq[j] > b.rSeq[need] {
				need = j
			}
		}
		if b.rSeq[need] != 0 {
			if err := c.streamRoom(r, need); err != nil {
				return err
			}
		}
		b.writeAt(b.ringLine(b.me, at), seq, k, r.send) // as a set's lines
		b.logCall(b.me, seq, k)
		b.ring()
		for j := at; j < at+lines; j++ {
			b.rSeq[j], b.rCall[j], b.rNum[j] = seq, k, c.seq
		}
		b.rLast = at
		b.streamed = true
		return nil
	}
	b.logCall(b.me, seq, k)
	b.ring() // a rank settling the last stream call may sleep on this log
	first := b.ringLine(root, at)
	b.waitPos = at
	// Poll all the call's lines (the root waits for nobody): they come
	// over together.
	ahead := b.ringReady(root, seq, lines) // the root is ahead of this rank
	if !ahead {
		if err := c.boardWaitWord(r, seq, k, root, c.seq, bRing, lines); err != nil {
			return err
		}
	}
	if got := b.u64(first + llFlag).Load(); got != seq {
		return c.streamAstray(k, root, got, seq)
	}
	if pk := boardCall(*(*uint64)(unsafe.Pointer(&b.mem[first+llCall]))); pk != k {
		return c.boardMismatch(k, root, pk, c.seq)
	}
	for j := 1; j < lines; j++ {
		if got := b.u64(first + j*llLine + llFlag).Load(); got != seq {
			return c.streamAstray(k, root, got, seq)
		}
	}
	b.takeAt(first, 0, r.recv[:L])
	storeRelease(b.u64(b.progOff(b.me, root)), seq)
	b.ring()
	if ahead {
		// Its next lines may be written already: fetch them now.
		ring := b.ringLine(root, 0)
		for d := range streamAhead {
			prefetch(unsafe.Pointer(&b.mem[ring+(at+lines+d)%b.sg.ring*llLine]))
		}
	}
	return nil
}

// ringReady reports whether the lines of root's ring from waitPos hold
// call seq (or, flags past it, a call this rank's does not match: the
// caller finds out). Every flag is read whatever the others say, so that
// the lines' trips overlap.
func (b *board) ringReady(root int, seq uint64, lines int) bool {
	first := b.ringLine(root, b.waitPos)
	ok := true
	for j := range lines {
		if b.u64(first+j*llLine+llFlag).Load() < seq {
			ok = false
		}
	}
	return ok
}

// streamAstray fails call seq (k) of a receiver whose line of root's ring
// holds call got: the ranks' calls on that ring went different ways
// before (a mismatch the root finds too).
func (c *Comm) streamAstray(k boardCall, root int, got, seq uint64) error {
	return c.boardBlameAs(boardMismatched, k, c.rank, fmt.Errorf("collective mismatch: rank %d's broadcast ring holds its call %d where this rank's call %d is due: the ranks made different calls before", root, got, seq))
}

// streamRoom waits until every receiver read the call that line i of
// this rank's ring holds.
func (c *Comm) streamRoom(r *Request, i int) error {
	b := c.board
	want := b.rSeq[i]
	ok := true
	for p := range b.n {
		if p != b.me && b.progSeen[p] < want {
			b.progSeen[p] = b.u64(b.progOff(p, b.me)).Load()
			ok = ok && b.progSeen[p] >= want
		}
	}
	if ok {
		return nil
	}
	err := c.boardWaitWord(r, want, b.rCall[i], waitAll, b.rNum[i], bProg, 1)
	for p := range b.n {
		if p != b.me {
			b.progSeen[p] = b.u64(b.progOff(p, b.me)).Load()
		}
	}
	return err
}

// streamSettle waits, before a board call that is not a stream call (r;
// nil at Close), until every receiver of this rank's ring read all of it
// and every rank published the last stream call, and checks their calls
// (see above). With 2 ranks a receiver has nothing to wait for: its root
// published the call.
func (c *Comm) streamSettle(r *Request) error {
	b := c.board
	if b == nil || b.lastStream == 0 {
		return nil
	}
	seq, k, num := b.lastStream, b.lastStreamCall, b.lastStreamNum
	b.lastStream = 0
	if r == nil {
		r = &Request{kind: collBroadcast}
	}
	if b.streamed {
		b.streamed = false
		if err := c.streamRoom(r, b.rLast); err != nil {
			return err
		}
	}
	// The last stream call's root published it, and its receivers did if
	// their progress on its ring passed it (this rank's ring: above).
	// Others publish it in their logs.
	root := k.root()
	if root == b.me {
		return nil
	}
	for p := range b.n {
		if p == b.me || p == root {
			continue
		}
		if b.u64(b.logOff(p, seq)+8).Load() < seq {
			if err := c.boardWaitWord(r, seq, k, p, num, bLog, 1); err != nil {
				return err
			}
		}
		if pk, ok := b.logged(p, seq); !ok || pk != k {
			return c.boardMismatch(k, p, pk, num)
		}
	}
	return nil
}

// streamLook is a board wait's look at rank p, missing from call seq (k)
// on the word it polls (see boardWaitWord): has p published a stream call
// there that differs, or (the wait of a receiver on root p's ring) the
// same call, on a line other than the one this rank waits on?
func (c *Comm) streamLook(p int, seq uint64, k boardCall, num uint32, word int) error {
	b := c.board
	pk, ok := b.logged(p, seq)
	if !ok {
		return nil
	}
	if pk != k || word == bSeq || word == bDone {
		// (The same call, through the lines here: the ranks parted
		// ways before.)
		return c.boardMismatch(k, p, pk, num)
	}
	if word == bRing {
		if got := b.u64(b.ringLine(p, b.waitPos) + llFlag).Load(); got != seq {
			return c.streamAstray(k, p, got, seq)
		}
	}
	return nil
}
