package comm

import (
	"fmt"
	"unsafe"

	"github.com/goccl/goccl/collectives"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport/shm"
)

// Direct calls: a broadcast, allgather, all-to-all, gather or scatter too
// large for the board's slots copies straight from the buffer of the rank
// that has the data into the buffer of the rank that wants it, once, with
// cross-memory attach (process_vm_readv: one copy in the kernel, any
// memory, no registration), when every rank can read every other's memory
// (probed at New). A call takes two board sequence numbers:
//
//  1. each rank publishes, with its call, the address of the buffer its
//     peers read (its send buffer; a broadcast's or scatter's root only),
//     and waits for every rank's;
//  2. each copies what it needs from the peers' buffers into its own, then
//     publishes the second number and waits for every rank's: no rank
//     returns (and lets its caller touch the buffer) while a peer may
//     still read it.
//
// The reads of all ranks run at once, each on its own processor. Open
// MPI's shared-memory transport copies large messages once likewise.

// direct reports whether a call whose contribution is n bytes goes
// through the board as a direct call.
func (b *board) direct(n int) bool { return b != nil && b.cma && n > boardSlot }

// probeCMA reports whether this rank can read every other rank's memory:
// it reads each one's process id in its own mapping of the board.
func (b *board) probeCMA() bool {
	var pid [4]byte
	for p := range b.n {
		if p == b.me {
			continue
		}
		base := b.u64(b.hdr(p) + bBase).Load()
		want := b.u32(b.hdr(p) + bPid).Load()
		if base == 0 || want == 0 {
			return false
		}
		if err := b.read(p, base+uint64(b.hdr(p)+bPid), pid[:]); err != nil {
			return false
		}
		if got := *(*uint32)(unsafe.Pointer(&pid[0])); got != want {
			return false
		}
	}
	return true
}

// read copies len(dst) bytes at addr in rank p's process into dst.
func (b *board) read(p int, addr uint64, dst []byte) error {
	return b.cross.Read(int(b.u32(b.hdr(p)+bPid).Load()), addr, dst)
}

// setBuf publishes, in this rank's header for call seq, where its peers
// read buffer which (0 or 1): its address, and its shm segment if any.
func (b *board) setBuf(seq uint64, which int, buf []byte) {
	var addr uint64
	var seg shm.SegmentInfo
	if len(buf) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
		seg, _ = shm.LookupSegment(buf)
	}
	h, par := b.hdr(b.me)+which*bBuf2, int(seq&1)
	*(*uint64)(unsafe.Pointer(&b.mem[h+bAddr+par*8])) = addr
	*(*uint64)(unsafe.Pointer(&b.mem[h+bSegID+par*8])) = seg.ID
	*(*uint64)(unsafe.Pointer(&b.mem[h+bSegOff+par*8])) = seg.Off
	*(*uint32)(unsafe.Pointer(&b.mem[h+bSegFD+par*4])) = uint32(seg.FD)
}

// view returns bytes [off, off+n) of rank p's buffer which of call seq in
// this rank's mapping of its segment, or nil if it has none here.
func (b *board) view(p int, seq uint64, which int, off uint64, n int) []byte {
	m := b.segment(p, seq, which)
	if m == nil {
		return nil
	}
	at := *(*uint64)(unsafe.Pointer(&b.mem[b.hdr(p)+which*bBuf2+bSegOff+int(seq&1)*8])) + off
	if at+uint64(n) > uint64(len(m)) {
		return nil
	}
	return m[at : at+uint64(n)]
}

// copyFrom copies bytes [off, off+len(dst)) of rank p's buffer which of
// call seq into dst: from the mapped segment (memmove at memory speed)
// if it is in one, else with process_vm_readv.
func (b *board) copyFrom(p int, seq uint64, which int, off uint64, dst []byte) error {
	if v := b.view(p, seq, which, off, len(dst)); v != nil {
		copy(dst, v)
		return nil
	}
	addr := *(*uint64)(unsafe.Pointer(&b.mem[b.hdr(p)+which*bBuf2+bAddr+int(seq&1)*8]))
	return b.read(p, addr+off, dst)
}

// boardBcastDirect: a broadcast of more bytes than this, within the
// slots, may go direct (broadcastEither).
const boardBcastDirect = 4 << 10

// broadcastEither runs a broadcast of boardBcastDirect to boardSlot bytes
// (board.early, not StrictChecks) either way, as its root chooses: direct
// (executeDirect: the receivers read the root's buffer, a single copy,
// and the root waits until they have) when its buffer is in an shm
// segment (comm.Alloc); else through its slot, as a smaller one. Both
// take the call's number alone, and a receiver does the same until the
// root has published: then the address the root publishes (none through
// the slot) tells it which. The choice is the root's because it pays
// off only where the receivers read through a mapping: measured with 2
// ranks (bin/osu bcast -T float32, 5,000 calls, 4-6 alternations),
// registered buffers, 8 and 16 KiB: 2.0-2.4 and 3.5-4.4 us through the
// slot, 0.77-1.0 and 0.85-0.95 direct; a plain slice, which a receiver
// would read with process_vm_readv (a system call per read): 1.3 us
// through the slot against 3.8-4.0 direct at 8 KiB. Where a rank is
// crowded (not board.early) the root's wait for its receivers would cost
// a round of scheduling, and the choice itself a cache line per call.
func (c *Comm) broadcastEither(r *Request, seq uint64, L int, k boardCall) error {
	b := c.board
	if c.rank == r.root {
		if _, ok := shm.LookupSegment(r.send[:L]); ok {
			return c.executeDirect(r, seq, L, k)
		}
		b.setBuf(seq, 0, nil) // no address: read the slot
		copy(b.slot(b.me, seq), r.send[:L])
		b.publish(seq, k)
		b.owe(seq, k, c.seq)
		return nil
	}
	b.setBuf(seq, 0, nil)
	b.publish(seq, k)
	if err := c.boardWaitOn(r, seq, k, r.root, c.seq, 1); err != nil {
		return err
	}
	b.owe(seq, k, c.seq)
	if *(*uint64)(unsafe.Pointer(&b.mem[b.hdr(r.root)+bAddr+int(seq&1)*8])) == 0 {
		copy(r.recv[:L], b.slot(r.root, seq))
		return nil
	}
	if err := b.copyFrom(r.root, seq, 0, 0, r.recv[:L]); err != nil {
		return c.readFail(k, r.root, err)
	}
	if err := c.readStood(k, r.root); err != nil {
		return err
	}
	b.raise(bDone, seq)
	return nil
}

// readStood checks, after this rank read rank p's buffer in a rooted
// direct call (or a large message from p's), that p did not leave the
// call meanwhile. p returns only once its readers raised bDone, or once it
// has marked its header failed (its context ended, a peer failed): a
// reader that finds it still live after the read read a buffer that did
// not change. One that finds it marked may have read bytes p's caller
// wrote after the call returned: the read fails. Before, it returned nil
// with them (a 16 MiB broadcast whose root gave up 0-5 ms in and then
// rewrote its buffer: every receiver returned nil with part of each).
func (c *Comm) readStood(k boardCall, p int) error {
	if c.board.stateOf(p).Load() == boardLive {
		return nil
	}
	if err := c.peerGone(p, k); err != nil {
		return err
	}
	return c.boardBlame(k, p, fmt.Errorf("rank %d left the call while this rank read its buffer", p))
}

// executeDirect runs r, whose contribution is L bytes, as a direct call
// numbered seq and seq+1: every rank publishes its buffer in seq, reads
// and publishes seq+1 when done, and returns once every rank is done. A
// rooted call (broadcast, scatter, gather; not with StrictChecks) takes
// seq alone: the readers wait only for the buffers they read and raise
// bDone when they have read them, and only the ranks whose buffers are
// read wait for that (boardWaitsFor).
func (c *Comm) executeDirect(r *Request, seq uint64, L int, k boardCall) error {
	b := c.board
	switch r.kind {
	case collAllreduce:
		return c.directReduction(r, seq, L, k, -1)
	case collReduceScatter:
		return c.directReduceScatter(r, seq, k)
	case collReduce:
		if c.opts.StrictChecks || int64(b.n-1)*int64(L) > int64(rootReduceMax) {
			return c.directReduction(r, seq, L, k, r.root)
		}
	}
	src := r.send
	switch {
	case (r.kind == collBroadcast || r.kind == collScatter) && c.rank != r.root:
		src = nil
	case r.kind == collAlltoall && overlap(r.send, r.recv):
		// In place: a peer still reads block j of send while this rank
		// writes block j of recv.
		if cap(b.scratch) < L {
			b.scratch = make([]byte, L)
		}
		src = b.scratch[:L]
		copy(src, r.send)
	}
	b.setBuf(seq, 0, src)
	b.publish(seq, k)
	// A gather's or reduce's root reads every rank's buffer; a broadcast's
	// or scatter's other ranks read the root's.
	gathers := r.kind == collGather || r.kind == collReduce
	rooted := !c.opts.StrictChecks && (r.kind == collBroadcast || r.kind == collScatter || gathers)
	if rooted {
		// Rooted (see boardWaitsFor): the ranks that read wait for the
		// buffers they read, then raise bDone; the ranks whose buffer
		// is read wait for that, and only those.
		done, only := bDone, r.root // a gather's leaf waits for the root's reads
		switch {
		case gathers && c.rank == r.root:
			done, only = bSeq, waitAll
		case !gathers && c.rank == r.root:
			only = waitAll
		case !gathers:
			done = bSeq
		}
		if err := c.boardWaitWord(r, seq, k, only, c.seq, done, 1); err != nil {
			return err
		}
		if done == bDone { // nothing to read here
			if r.kind == collScatter {
				blk := len(r.recv)
				if !sameBytes(r.recv, r.send[c.rank*blk:(c.rank+1)*blk]) {
					copy(r.recv, r.send[c.rank*blk:(c.rank+1)*blk])
				}
			}
			if only != waitAll {
				b.owe(seq, k, c.seq)
			}
			return nil
		}
	} else if err := c.boardWait(r, seq, k); err != nil {
		return err
	}
	read := func(p int, off uint64, dst []byte) error {
		if err := b.copyFrom(p, seq, 0, off, dst); err != nil {
			return c.readFail(k, p, err)
		}
		return nil
	}
	me := b.me
	switch r.kind {
	case collBroadcast:
		if c.rank != r.root {
			if err := read(r.root, 0, r.recv[:L]); err != nil {
				return err
			}
		}
	case collScatter:
		blk := len(r.recv)
		if c.rank != r.root {
			if err := read(r.root, uint64(me*blk), r.recv); err != nil {
				return err
			}
		} else if !sameBytes(r.recv, r.send[me*blk:(me+1)*blk]) {
			copy(r.recv, r.send[me*blk:(me+1)*blk])
		}
	case collAlltoall:
		blk := L / b.n
		for i := 1; i <= b.n; i++ {
			p := (me + i) % b.n // each rank starts with a different peer
			if p == me {
				copy(r.recv[me*blk:(me+1)*blk], src[me*blk:(me+1)*blk])
			} else if err := read(p, uint64(me*blk), r.recv[p*blk:(p+1)*blk]); err != nil {
				return err
			}
		}
	case collReduce:
		if c.rank == r.root {
			if err := c.reduceRange(r, r.send, r.recv[:L], seq, 0, k); err != nil {
				return err
			}
		}
	case collAllgather, collGather:
		if r.kind == collGather && c.rank != r.root {
			break
		}
		for i := 1; i <= b.n; i++ {
			p := (me + i) % b.n
			dst := r.recv[p*L : (p+1)*L]
			if p == me {
				if !sameBytes(dst, r.send) {
					copy(dst, r.send)
				}
			} else if err := read(p, 0, dst); err != nil {
				return err
			}
		}
	}
	if rooted {
		// The buffers read must have stood still (see readStood): the
		// root's, or a gather's or reduce's root every leaf's.
		for p := range b.n {
			if p != me && (p == r.root || c.rank == r.root) {
				if err := c.readStood(k, p); err != nil {
					return err
				}
			}
		}
		b.raise(bDone, seq)
		if !gathers {
			b.owe(seq, k, c.seq)
		}
		return nil
	}
	// Every rank done reading before any returns.
	return c.boardRound(r, k)
}

// boardRound is a direct call's next round: this rank publishes the
// board's next sequence number with call k and waits until every rank
// has (no rank goes on while a peer still reads its buffers).
func (c *Comm) boardRound(r *Request, k boardCall) error {
	b := c.board
	b.seq++
	b.publish(b.seq, k)
	return c.boardWait(r, b.seq, k)
}

// maxSegs bounds the peers' segments a rank keeps mapped from one call
// to the next (a call may map more: those it uses stay mapped until it
// ends).
const maxSegs = 64

// segMapping is a peer's segment mapped here, and the call (board.segCall)
// that last used it.
type segMapping struct {
	m    []byte
	call uint64
}

// beginCall starts a board call: the segments mapped for earlier calls may
// be unmapped from here on (segmentBy), never one this call uses. (All of
// them were unmapped once maxSegs were mapped, also those the running call
// held: a reduce-scatter of fresh registered buffers on 4 ranks read an
// unmapped view in its 21st call and crashed the rank.)
func (b *board) beginCall() { b.segCall++ }

// segment returns this rank's mapping of the shm segment that holds rank
// p's buffer of call seq, mapping it on first use (shm.MapProcessSegment);
// nil if the buffer is not in a segment or it cannot be mapped (then the
// call reads with process_vm_readv).
func (b *board) segment(p int, seq uint64, which int) []byte {
	h, par := b.hdr(p)+which*bBuf2, int(seq&1)
	id := *(*uint64)(unsafe.Pointer(&b.mem[h+bSegID+par*8]))
	fd := int(*(*uint32)(unsafe.Pointer(&b.mem[h+bSegFD+par*4])))
	return b.segmentBy(p, id, fd)
}

// segmentBy is segment for the segment id whose descriptor in rank p's
// process is fd.
func (b *board) segmentBy(p int, id uint64, fd int) []byte {
	if id == 0 || b.noSegs[p] {
		return nil
	}
	key := [2]uint64{uint64(p), id}
	if sm, ok := b.segs[key]; ok {
		if sm.call != b.segCall {
			sm.call = b.segCall
			b.segs[key] = sm
		}
		return sm.m
	}
	m, err := shm.MapProcessSegment(int(b.u32(b.hdr(p)+bPid).Load()), fd)
	if err != nil {
		if b.noSegs == nil {
			b.noSegs = map[int]bool{}
		}
		b.noSegs[p] = true
		return nil
	}
	if b.segs == nil {
		b.segs = map[[2]uint64]segMapping{}
	}
	if len(b.segs) >= maxSegs {
		for k, old := range b.segs {
			if old.call != b.segCall {
				unix.Munmap(old.m)
				delete(b.segs, k)
			}
		}
	}
	b.segs[key] = segMapping{m: m, call: b.segCall}
	return m
}

// directReduction runs a large allreduce (root -1) or reduce as a
// direct call in three board rounds: each rank publishes its send buffer
// and the buffer it reduces into (its recv; a reduce's other ranks, a
// scratch buffer of their part); each reduces its part (an n-th of the
// elements) of every rank's send, in rank order (so one rank computes
// each part: every rank gets the same bits); a round; each rank that
// wants the result (every rank of an allreduce, a reduce's root) copies
// the other parts from their ranks; a round, so that no buffer changes
// while a peer reads it. With the buffers in shm segments (comm.Alloc)
// every read is from a mapping.
//
// A reduce runs here only past rootReduceMax (its root alone below it); the
// shared work was also its only way for a while, against the executor's
// flat tree over the shm transport before it (2 ranks, osu reduce -T
// float32, the host's slow state, alternating beside Open MPI): 64 KiB
// 7.8-8.2 µs against 12.5-17.5, 1 MiB 94-96 against 115-175, 64 MiB
// 4530-4828 against 5260-5962.
func (c *Comm) directReduction(r *Request, seq uint64, L int, k boardCall, root int) error {
	b, n, me := c.board, c.board.n, c.board.me
	es := r.dt.Size()
	part := func(p int) (int, int) {
		cnt := L / es
		return cnt * p / n * es, cnt * (p + 1) / n * es
	}
	lo, hi := part(me)
	wants := root < 0 || me == root // this rank gets the whole result
	// dst is where this rank's part goes, at out[lo:hi]: its recv, or
	// (a reduce's other ranks) a scratch buffer the root reads at 0.
	out, outLo := r.recv, lo
	if !wants {
		out, outLo = c.partBuf(hi-lo), 0
	}
	b.setBuf(seq, 0, r.send)
	b.setBuf(seq, 1, out)
	b.publish(seq, k)
	if err := c.boardWait(r, seq, k); err != nil {
		return err
	}
	fail := func(p int, err error) error { return c.readFail(k, p, err) }
	// This rank's part of every send, reduced in rank order (in place,
	// reduceRange keeps this rank's own part before it overwrites it).
	if hi > lo {
		if err := c.reduceRange(r, r.send, out[outLo:outLo+hi-lo], seq, lo, k); err != nil {
			return err
		}
	}
	if err := c.boardRound(r, k); err != nil {
		return err
	}
	if wants {
		for i := 1; i < n; i++ {
			p := (me + i) % n
			plo, phi := part(p)
			off := uint64(plo) // where rank p's part is in the buffer it published
			if root >= 0 {
				off = 0
			}
			if phi > plo {
				if err := b.copyFrom(p, seq, 1, off, r.recv[plo:phi]); err != nil {
					return fail(p, err)
				}
			}
		}
	}
	return c.boardRound(r, k)
}

// rootReduceMax: a direct reduce whose root reads at most this many bytes
// of its peers' buffers ((size-1) times the buffer) is the root's alone
// (reduceRange over the whole buffer: one round of waiting, the peers' buffers read where they
// are), a larger one shared (directReduction: three rounds, the work on
// every processor). 2 ranks over shm, comm.Alloc buffers, each rewritten
// before every call (as an application's are), 2 alternating runs of 50
// calls, µs, the root alone against shared: 64 KiB 4.5-4.7 against
// 8.6-9.5, 1 MiB 48-58 against 101-108, 2 MiB 103-137 against 157-184, 4
// MiB 245-416 against 328-341, 8 MiB 781-1089 against 803-830, 16 MiB
// 1592-2465 against 1405-1767. With osu reduce's unchanged buffers (the
// root finds its peers' data in its own cache after the first call), 4
// ranks on 2 cores: 256 KiB 39 against 63-67, 2 MiB 208-222 against
// 293-299, 4 MiB 610-629 against 560-572, 8 MiB 1617-1620 against
// 1036-1300.
var rootReduceMax = 4 << 20

// directReduceScatter runs a reduce-scatter past the board's slots as a
// direct call in two rounds: each rank publishes its send buffer and
// waits for every rank's, reduces its own block of every rank's buffer
// into its recv (reduceRange: in place from the peers' mapped segments,
// or with process_vm_readv), then publishes again and waits, so that no
// rank changes a buffer a peer still reads. A recv that overlaps send
// other than as this rank's own block (which no peer reads) gets the
// result through a scratch buffer once the peers are done.
func (c *Comm) directReduceScatter(r *Request, seq uint64, k boardCall) error {
	b, me := c.board, c.board.me
	blk := len(r.recv)
	b.setBuf(seq, 0, r.send)
	b.publish(seq, k)
	if err := c.boardWait(r, seq, k); err != nil {
		return err
	}
	out := r.recv
	staged := overlap(r.send, r.recv) && !sameBytes(r.recv, r.send[me*blk:(me+1)*blk])
	if staged {
		out = b.temp(2, blk)
	}
	if err := c.reduceRange(r, r.send, out, seq, me*blk, k); err != nil {
		return err
	}
	if err := c.boardRound(r, k); err != nil {
		return err
	}
	if staged {
		copy(r.recv, out)
	}
	return nil
}

// reduceChunk is how much of the buffer reduceRange reduces over every
// rank before it moves on, so that the partial result stays in cache.
const reduceChunk = 64 << 10

// reduceRange reduces bytes [base, base+len(out)) of every rank's
// published buffer of call seq (this rank's is send) into out, in rank
// order, reduceChunk bytes at a time through every rank, each read in
// place from a mapped segment or with process_vm_readv: a direct reduce's
// root that reduces alone (the whole buffer), a rank's part of a shared
// reduction (directReduction) or its block of a reduce-scatter. out may
// be this rank's own range of send (in place).
func (c *Comm) reduceRange(r *Request, send, out []byte, seq uint64, base int, k boardCall) error {
	b, n, me := c.board, c.board.n, c.board.me
	chunk := reduceChunk / r.dt.Size() * r.dt.Size()
	L := len(out)
	send = send[base : base+L]
	inPlace := overlap(send, out)
	for lo := 0; lo < L; lo += chunk {
		hi := min(lo+chunk, L)
		dst := out[lo:hi]
		mine := send[lo:hi]
		if inPlace && me >= 2 {
			mine = b.temp(2, hi-lo)
			copy(mine, send[lo:hi])
		}
		src := func(p, t int) ([]byte, error) {
			if p == me {
				return mine, nil
			}
			if v := b.view(p, seq, 0, uint64(base+lo), hi-lo); v != nil {
				return v, nil
			}
			buf := b.temp(t, hi-lo)
			if err := b.copyFrom(p, seq, 0, uint64(base+lo), buf); err != nil {
				return nil, c.readFail(k, p, err)
			}
			return buf, nil
		}
		s0, err := src(0, 0)
		if err != nil {
			return err
		}
		s1, err := src(1, 1)
		if err != nil {
			return err
		}
		if err := collectives.ReduceTo(r.dt, r.op, dst, s0, s1); err != nil {
			return c.boardFail(k, err)
		}
		for p := 2; p < n; p++ {
			sp, err := src(p, 0)
			if err != nil {
				return err
			}
			if err := collectives.ReduceTo(r.dt, r.op, dst, dst, sp); err != nil {
				return c.boardFail(k, err)
			}
		}
		if err := collectives.Finish(r.dt, r.op, dst, n); err != nil {
			return c.boardFail(k, err)
		}
	}
	return nil
}

// partBuf returns n bytes of the board's part scratch (board.part),
// grown as needed: memory the device allocates (an shm segment, which the
// root maps, so its copy is a memmove: with a plain buffer, read with
// process_vm_readv, a 2-rank reduce of 32-512 KiB took 1.4-1.6 times as
// long as the allreduce), or plain memory if it cannot.
func (c *Comm) partBuf(n int) []byte {
	b := c.board
	if len(b.part.mem) < n {
		b.part.free()
		m, err := allocFrom(c.dev, n)
		if err != nil {
			m = ownedMem{}
		}
		b.part = m
	}
	if len(b.part.mem) < n {
		return b.temp(2, n) // unused where this rank is not the root
	}
	return b.part.mem[:n]
}

// temp returns scratch buffer i (0 to 2) of at least n bytes.
func (b *board) temp(i, n int) []byte {
	if cap(b.tmp[i]) < n {
		b.tmp[i] = make([]byte, n)
	}
	return b.tmp[i][:n]
}
