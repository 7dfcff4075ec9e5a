package comm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport/shm"
)

// Point-to-point mailboxes: in a communicator with a board, of at most
// mailMaxRanks ranks that can all read each other's memory, every Send and
// Recv goes through a mailbox in the board, one per ordered pair of ranks:
// a ring of mailSlots entries that the sender fills and the receiver
// empties, in order: an entry's first word is the number of the message in
// it (written last, by the sender: the receiver polls that cache line,
// which also holds the tag, the length and a small payload), and the
// receiver counts the messages it took in the box's first line. A
// message of at most mailEager bytes is copied
// into the entry and the Send completes at once (eager, as before); a
// larger one leaves its buffer's address (and shm segment) in the entry,
// the receiver copies it straight from the sender's buffer (mapped, or
// with process_vm_readv), and the Send completes when the receiver has
// taken it, or once the sender kept a copy (see mailKeep). The receiver
// compares the entry's tag and length with its Recv's: a difference fails
// both calls' communicators with a mismatch.
//
// A mailbox holds mailSlots messages, as many as the default staging slots
// (Options.Slots) through which a Send over the links completes before
// its receiver takes it: a program whose ranks each send a few messages
// before they receive (or queue an asynchronous Send before their Recv)
// runs on either.
const (
	mailMaxRanks = 16
	mailSlots    = 8
	mailEager    = 4096
	mailEntry    = 64 + mailEager // header, then the payload from mData
	mailBox      = 128 + mailSlots*mailEntry

	// Entry header.
	mSeq   = 0  // uint64: the message's number + 1, published last
	mTag   = 8  // uint32
	mLen   = 12 // uint32
	mLarge = 16 // uint32: where the payload is (mailIn ... mailWithdrawn)
	mSegFD = 20 // uint32: the sender's buffer, as setLarge writes it
	mAddr  = 24 // uint64
	mSegID = 32 // uint64
	mSegOf = 40 // uint64
	mData  = 48 // the payload of an eager message
	// mLenHi is a large message's length beyond 32 bits (uint32), where
	// an eager message's payload would begin (mailLen): mLen alone held
	// the low bits of a message of 4 GiB or more, which then failed as a
	// mismatch with a receive of its length, and was taken, cut to its
	// first bytes, by a receive of the low bits' length.
	mLenHi = mData
	// mKept is where the description of a large message's kept copy
	// lies: the ring of copies (the fields above, at the same distances
	// from it), then where in the ring the copy begins (mKeptAt) and how
	// much of it lies there (mKeptLen1; the rest from the ring's start):
	// in the entry's payload, which a large message does not use.
	mKept     = 64
	mKeptAt   = mKept + 48 // uint64
	mKeptLen1 = mKept + 56 // uint64

	// A message of mailHead to mailLined bytes goes in lines, as a board
	// call's (llLines): its first mailHead bytes in the entry's first
	// line, the rest in the two lines after it, llBody bytes each with
	// the message's number + 1 as the line's flag (its last word), and
	// the receiver polls all of them at once: in a ping-pong each line
	// then comes over with the others, not after the first (2 ranks, osu
	// latency in a slow minute, 32-128 B: 0.37-0.40 us one way from
	// 0.50-0.52; 8-16 B 0.41). A smaller or larger message lies in the
	// entry from mData on, a larger one over lines whose trips follow the
	// first's. More lines polled made the ping-pong slower than that, not
	// faster (184-408 B in 4-8 lines: 0.56-1.27 us against 0.45-0.64):
	// the receiver polls while the sender writes, and each line it takes
	// back costs the sender one more trip.
	mailHead  = 64 - mData
	mailLined = mailHead + 2*llBody
)

// The states of an entry's payload (mLarge). The sender of a large
// message publishes it mailOpen; the receiver takes it with a
// compare-and-swap to mailReadOpen, or, if the sender kept a copy
// meanwhile (mailOpen to mailKept, also a compare-and-swap, see mailKeep),
// to mailReadKept. Whichever swap comes first wins: a receiver never reads
// a buffer that its sender has stopped guarding, and a sender never
// withdraws (mailWithdrawn, at Close) a copy that its receiver reads.
const (
	mailIn        = 0 // in the entry (eager)
	mailOpen      = 1 // in the sender's buffer; its Send waits
	mailReadOpen  = 2 // the receiver reads it there
	mailKept      = 3 // in a copy the sender keeps; its Send has completed
	mailReadKept  = 4 // the receiver reads the copy
	mailWithdrawn = 5 // the sender closed before the receiver took the copy
)

// mailKeepAfter is how long a large Send waits for its receiver to take
// its message before it keeps a copy and completes (mailKeep): a receiver
// that waits in its Recv takes it within a microsecond or two, and the
// copy would be a memmove of the message the receiver makes anyway.
const mailKeepAfter = 20 * time.Microsecond

// mailLinesFor is how many lines of an entry a message of size bytes
// fills and its receiver polls.
func mailLinesFor(size int) int {
	if size <= mailHead || size > mailLined {
		return 1
	}
	return 1 + (size-mailHead+llBody-1)/llBody
}

func mailSize(n int) int {
	if n > mailMaxRanks {
		return 0
	}
	return n * n * mailBox
}

// box is the offset of the mailbox from rank s to rank d; the count of
// messages taken is its first word.
func (b *board) box(s, d int) int {
	return b.slots() + b.n*2*boardSlot + (s*b.n+d)*mailBox
}

func (b *board) entry(s, d int, i uint64) []byte {
	off := b.box(s, d) + 128 + int(i%mailSlots)*mailEntry
	return b.mem[off : off+mailEntry : off+mailEntry]
}

func u32at(e []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&e[off])) }
func u64at(e []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&e[off])) }

// executeMail runs a Send, Recv or SendRecv through the mailboxes.
func (c *Comm) executeMail(r *Request) error {
	b := c.board
	r.used = "shm-mailbox"
	b.beginCall()
	b.tag = r.args.tag
	k := mkCall(r.kind, r.dt, 0, -1, r.count)
	if c.life.Err() != nil {
		return c.boardFail(k, c.life.Err())
	}
	var large bool
	var n uint64
	if r.kind != collRecv {
		var err error
		if large, n, err = c.mailPost(r, k); err != nil {
			return err
		}
	}
	if r.kind != collSend {
		if err := c.mailTake(r, k); err != nil {
			return err
		}
	}
	if large {
		// The receiver copies from this rank's buffer: wait until it has,
		// or keep a copy for it.
		d := r.args.peer
		taken := b.u64(b.box(b.me, d))
		if c.mailKeep(r, d, n, taken) {
			return nil
		}
		return c.mailWait(r, k, d, taken, n+1, "for rank %d to take this rank's message")
	}
	return nil
}

// keptMail is a copy of a large message that a Send kept for its receiver
// (mailKeep) in the ring of copies for that receiver: num is the message's
// number + 1 (0: none), size its length.
type keptMail struct {
	num  uint64
	size int
}

// keepRing is the memory where this rank keeps copies of large messages
// for one receiver (mailKeep): Options.Slots chunks, allocated by the
// first large Send to it (so that a steady state allocates nothing), the
// copies laid one after the other from head, round (a copy that reaches
// the end goes on at the start), so that the copies not taken yet, which
// the receiver takes in order, are one run and the rest is free: as the
// links' slots, it holds any messages that fit in it together. kept lists
// the copies by mailbox entry.
type keepRing struct {
	mem  ownedMem
	head int
	none bool // the allocation failed: no copies for this receiver
	kept [mailSlots]keptMail
}

// keepRingFor returns the ring of copies for receiver d, allocating it at
// the first call (nil if it cannot be had).
func (c *Comm) keepRingFor(d int) *keepRing {
	b := c.board
	if b.keep == nil {
		b.keep = make([]keepRing, b.n)
	}
	k := &b.keep[d]
	if k.mem.mem == nil && !k.none {
		m, err := allocFrom(c.dev, c.opts.Slots*c.opts.ChunkSize)
		if err != nil {
			k.none = true
			return nil
		}
		k.mem = m
	}
	if k.none {
		return nil
	}
	return k
}

// mailKeep lets r, a large Send whose message n to rank d is published in
// its entry, complete before d takes it, as a Send over the links
// completes once its message is in the peer's staging: if d has not begun
// to take it within mailKeepAfter (at once on a crowded host, where
// waiting holds the processor d needs), r copies the message into the
// ring the board keeps for d and hands the copy to d in the entry.
// Without this a rank that queued an asynchronous Send before its Recv, as
// its peer did, waited for a receive queued behind its own send until the
// stall timeout (calls run one at a time), over shared memory only.
// Messages of more than Options.Slots chunks, and copies for which the
// ring has no room beside those d has not taken, are not kept: those Sends
// complete when d takes them, as over the links. It reports whether the
// Send is complete.
func (c *Comm) mailKeep(r *Request, d int, n uint64, taken *atomic.Uint64) bool {
	b := c.board
	k := c.keepRingFor(d)
	if k == nil || len(r.send) > len(k.mem.mem) {
		return false
	}
	st := (*atomic.Uint32)(unsafe.Pointer(&b.entry(b.me, d, n)[mLarge]))
	if !b.crowded {
		start := time.Now()
		for i := 1; ; i++ {
			if taken.Load() > n || st.Load() != mailOpen {
				return false // taken, or being taken: the wait is short
			}
			if i&63 == 0 && time.Since(start) >= mailKeepAfter {
				break
			}
		}
	}
	return c.mailKeepCopy(r, d, n, taken)
}

// mailKeepCopy is mailKeep's copy, once the wait for the receiver is over
// (or skipped: mailKeepNow).
func (c *Comm) mailKeepCopy(r *Request, d int, n uint64, taken *atomic.Uint64) bool {
	b := c.board
	k := c.keepRingFor(d)
	if k == nil || len(r.send) > len(k.mem.mem) {
		return false
	}
	st := (*atomic.Uint32)(unsafe.Pointer(&b.entry(b.me, d, n)[mLarge]))
	t := taken.Load()
	if t > n || st.Load() != mailOpen {
		return false // taken, or being taken, after all
	}
	ring, used := k.mem.mem, b.keptBytes(d, t)
	if used+len(r.send) > len(ring) {
		return false // no room beside the copies d has not taken
	}
	off := k.head
	if used == 0 {
		off = 0 // all taken: in one piece
	}
	len1 := min(len(r.send), len(ring)-off)
	copy(ring[off:off+len1], r.send)
	copy(ring, r.send[len1:])
	e := b.entry(b.me, d, n)
	setLarge(e, mKept, ring)
	*u64at(e, mKeptAt), *u64at(e, mKeptLen1) = uint64(off), uint64(len1)
	if !st.CompareAndSwap(mailOpen, mailKept) {
		return false // d began to read r's buffer meanwhile: wait for it
	}
	k.kept[n%mailSlots] = keptMail{num: n + 1, size: len(r.send)}
	k.head = (off + len(r.send)) % len(ring)
	return true
}

// keptBytes is how many bytes of the copies kept for rank d it has not
// taken yet (taken: the count of d's box).
func (b *board) keptBytes(d int, taken uint64) int {
	sum := 0
	for _, km := range b.keep[d].kept {
		if km.num > taken {
			sum += km.size
		}
	}
	return sum
}

// setLarge describes buf, where a large message lies, in entry e at
// base (0: the sender's buffer; mKept: its kept copy): its address, and
// its shm segment if it is in one.
func setLarge(e []byte, base int, buf []byte) {
	seg, _ := shm.LookupSegment(buf)
	*u32at(e, base+mSegFD) = uint32(seg.FD)
	*u64at(e, base+mAddr) = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	*u64at(e, base+mSegID), *u64at(e, base+mSegOf) = seg.ID, seg.Off
}

// mailSettle, at Close, waits until the peers have taken the copies this
// rank kept for them (mailKeep), as Close over the links waits for its
// peers to take what it sent: at most wait, and not for a peer that
// closed or failed. It names a peer that has not taken them by then.
func (c *Comm) mailSettle(wait time.Duration) error {
	b := c.board
	if b == nil || b.keep == nil {
		return nil
	}
	deadline := time.Now().Add(wait)
	for d := range b.keep {
		var last uint64
		for _, km := range b.keep[d].kept {
			last = max(last, km.num)
		}
		taken := b.u64(b.box(b.me, d))
		for i := 0; taken.Load() < last; i++ {
			if b.stateOf(d).Load() != boardLive || i%64 == 0 && b.processGone(d) {
				break // it will take nothing more (a killed rank's state stays live)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("rank %d has not taken %d messages this rank sent it (%v)", d, last-taken.Load(), wait)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return nil
}

// mailUntaken, at Close, names a message that a peer sent this rank
// through its mailbox and that this rank never received: no later Recv
// can take it. A small message completes its Send at once and nothing
// else reads the mailboxes, so such a Send went unnoticed by every call
// after it on both ranks and by their Close, and its data was dropped
// without a word (over the links the next call that receives from the
// sender finds it). Not for a peer that failed: its failure says why.
func (c *Comm) mailUntaken() error {
	b := c.board
	if b == nil || !b.mail {
		return nil
	}
	for s := range b.n {
		if s == b.me || b.stateOf(s).Load() == boardFailed || b.stateOf(s).Load() == boardMismatched {
			continue
		}
		n := b.got[s]
		e := b.entry(s, b.me, n)
		if (*atomic.Uint64)(unsafe.Pointer(&e[mSeq])).Load() < n+1 {
			continue
		}
		in := (*atomic.Uint32)(unsafe.Pointer(&e[mLarge])).Load() == mailIn
		return fmt.Errorf("rank %d sent this rank a message of %d bytes with tag %d that it never received (a Send without its Recv)",
			s, mailLen(e, in), *u32at(e, mTag))
	}
	return nil
}

// mailDropped, at Close, names messages this rank sent through the
// mailboxes to a peer that closed without taking them: the peer looked
// at its mailboxes before this rank's message was there (it marks itself
// closed first, so one of the two always sees the message; see Close).
// Not for a peer that failed or is still live (it may yet take them, or
// its own Close names them).
func (c *Comm) mailDropped() error {
	b := c.board
	if b == nil || !b.mail {
		return nil
	}
	for d := range b.n {
		if d == b.me || b.sent[d] == 0 || b.stateOf(d).Load() != boardClosed {
			continue
		}
		if taken := b.u64(b.box(b.me, d)).Load(); taken < b.sent[d] {
			e := b.entry(b.me, d, taken)
			in := (*atomic.Uint32)(unsafe.Pointer(&e[mLarge])).Load() == mailIn
			return fmt.Errorf("rank %d closed the communicator without receiving %s this rank sent it (the first: %d bytes with tag %d; a Send without its Recv)",
				d, messages(b.sent[d]-taken), mailLen(e, in), *u32at(e, mTag))
		}
	}
	return nil
}

// selfUntaken, at Close, names the messages this rank sent itself and
// never received: no later Recv can take them.
func (c *Comm) selfUntaken() error {
	m, ok := c.oldestSelf()
	if !ok {
		return nil
	}
	return fmt.Errorf("this rank sent itself %s that it never received (the first: %d bytes with tag %d; a Send to itself without its Recv)",
		messages(uint64(len(c.selfq))), len(m.data), m.tag)
}

// messages is "a message" or "n messages".
func messages(n uint64) string {
	if n == 1 {
		return "a message"
	}
	return strconv.FormatUint(n, 10) + " messages"
}

// withdrawKept, as the communicator ends, withdraws the kept copies their
// receivers have not taken (they fail, naming this rank) and frees the
// rings: not one with a copy that a receiver is reading still after a
// second (it stays allocated; its reader took it from a live process).
func (b *board) withdrawKept() {
	if b == nil || b.keep == nil || b.mem == nil {
		return
	}
	for d := range b.keep {
		k := &b.keep[d]
		taken := b.u64(b.box(b.me, d))
		free := true
		for _, km := range k.kept {
			if km.num <= taken.Load() {
				continue
			}
			st := (*atomic.Uint32)(unsafe.Pointer(&b.entry(b.me, d, km.num-1)[mLarge]))
			if st.CompareAndSwap(mailKept, mailWithdrawn) {
				continue
			}
			for end := time.Now().Add(time.Second); taken.Load() < km.num && time.Now().Before(end); {
				time.Sleep(50 * time.Microsecond)
			}
			if taken.Load() < km.num {
				free = false // still read: leave it
			}
		}
		if free {
			k.mem.free()
		}
	}
	b.keep = nil
}

// mailPost puts r's message into the mailbox to its peer, once there is
// room; it reports whether the message stays in r.send (large) and its
// number.
func (c *Comm) mailPost(r *Request, k boardCall) (large bool, n uint64, err error) {
	b, d := c.board, r.args.peer
	n = b.sent[d]
	if n >= mailSlots && b.seen[d] < n+1-mailSlots {
		// The box looks full: look at what the receiver took (only then:
		// each look is a cache miss).
		taken := b.u64(b.box(b.me, d))
		if b.seen[d] = taken.Load(); b.seen[d] < n+1-mailSlots {
			if err := c.mailWait(r, k, d, taken, n+1-mailSlots, "for room in the mailbox to rank %d"); err != nil {
				return false, 0, err
			}
			b.seen[d] = taken.Load()
		}
	}
	e := b.entry(b.me, d, n)
	large = len(r.send) > mailEager
	lines := mailLinesFor(len(r.send))
	// The later lines first, the last first, then the first line whole:
	// the receiver polls them all, and a line it takes back while the
	// stores to the lines before it wait for theirs costs one more trip.
	for j := lines - 1; j >= 1; j-- {
		at, i := j*llLine, mailHead+(j-1)*llBody
		copy(e[at:at+llBody], r.send[i:])
		storeRelease((*atomic.Uint64)(unsafe.Pointer(&e[at+llFlag])), n+1)
	}
	*u32at(e, mTag), *u32at(e, mLen) = uint32(r.args.tag), uint32(len(r.send))
	st := (*atomic.Uint32)(unsafe.Pointer(&e[mLarge]))
	if large {
		*u32at(e, mLenHi) = uint32(uint64(len(r.send)) >> 32)
		setLarge(e, 0, r.send)
		st.Store(mailOpen)
	} else {
		st.Store(mailIn)
		if lines > 1 {
			copy(e[mData:mData+mailHead], r.send)
		} else {
			copy(e[mData:], r.send)
		}
	}
	b.sent[d] = n + 1
	storeRelease((*atomic.Uint64)(unsafe.Pointer(&e[mSeq])), n+1)
	b.ring()
	return large, n, nil
}

// mailTake takes the oldest message with r's tag from r's source into
// r.recv: one set aside before (mailStrays), or the next in the mailbox,
// setting aside those of other tags before it (see collectives/stray.go:
// messages match by tag, as MPI's do).
func (c *Comm) mailTake(r *Request, k boardCall) error {
	s := r.args.src
	if i := c.mailStrayOf(s, r.args.tag); i >= 0 {
		return c.takeMailStray(r, k, s, i)
	}
	for {
		if again, err := c.mailTakeNext(r, k); !again {
			return err
		}
	}
}

// mailTakeNext waits for the next message from r's source and takes it
// into r.recv, or sets it aside if its tag is another (again: look at
// the next one).
func (c *Comm) mailTakeNext(r *Request, k boardCall) (bool, error) {
	b, s := c.board, r.args.src
	n := b.got[s]
	e := b.entry(s, b.me, n)
	lines := mailLinesFor(len(r.recv))
	if err := c.mailWaitLines(r, k, s, e, lines, n+1, "for rank %d's message"); err != nil {
		if ms := c.mailStrays[s]; len(ms) > 0 {
			return false, fmt.Errorf("%w (%s)", err, strayNote(s, ms[len(ms)-1].tag))
		}
		return false, err
	}
	st := (*atomic.Uint32)(unsafe.Pointer(&e[mLarge]))
	in := st.Load() == mailIn
	tag, size := *u32at(e, mTag), mailLen(e, in)
	if int(tag) != r.args.tag {
		// Published whole (its number last): set aside, then the next.
		if err := c.mailSetAside(r, k, s, e, st, in, tag, size); err != nil {
			return false, err
		}
		return true, nil
	}
	if size != len(r.recv) {
		return false, c.boardFail(k, fmt.Errorf("point-to-point mismatch: rank %d sent %d bytes with tag %d where rank %d receives %d bytes with tag %d",
			s, size, tag, b.me, len(r.recv), r.args.tag))
	}
	if in {
		mailCopyIn(e, r.recv)
	} else if err := c.mailTakeLarge(k, s, e, st, r.recv); err != nil {
		return false, err
	}
	b.got[s] = n + 1
	storeRelease(b.u64(b.box(s, b.me)), n+1)
	b.ring()
	return false, nil
}

// mailCopyIn copies the eager message in entry e, of len(dst) bytes, into
// dst: from the entry's payload, or from its lines (mailLinesFor).
func mailCopyIn(e, dst []byte) {
	if mailLinesFor(len(dst)) == 1 {
		copy(dst, e[mData:mData+len(dst)])
		return
	}
	copy(dst, e[mData:mData+mailHead])
	for i, at := mailHead, llLine; i < len(dst); i, at = i+llBody, at+llLine {
		copy(dst[i:], e[at:at+llBody])
	}
}

// mailLen is the length of the message in entry e, eager (in) or large.
func mailLen(e []byte, in bool) int {
	n := int(*u32at(e, mLen))
	if !in {
		n |= int(*u32at(e, mLenHi)) << 32
	}
	return n
}

// mailTakeLarge copies the large message in entry e from rank s into
// dst: from s's buffer, or from the copy s kept (see the states above).
func (c *Comm) mailTakeLarge(k boardCall, s int, e []byte, st *atomic.Uint32, dst []byte) error {
	b := c.board
	for {
		switch v := st.Load(); v {
		case mailOpen:
			if !st.CompareAndSwap(mailOpen, mailReadOpen) {
				continue // s kept a copy meanwhile
			}
			if err := b.copyLarge(s, e, 0, 0, dst); err != nil {
				return c.readFail(k, s, err)
			}
			return c.readStood(k, s) // s left its send while this rank read it?
		case mailKept:
			if !st.CompareAndSwap(mailKept, mailReadKept) {
				continue
			}
			at, len1 := *u64at(e, mKeptAt), min(*u64at(e, mKeptLen1), uint64(len(dst)))
			if err := b.copyLarge(s, e, mKept, at, dst[:len1]); err != nil {
				return c.readFail(k, s, err)
			}
			if err := b.copyLarge(s, e, mKept, 0, dst[len1:]); err != nil {
				return c.readFail(k, s, err)
			}
			return nil
		case mailWithdrawn:
			if b.stateOf(s).Load() != boardClosed {
				// Withdrawn as s failed or aborted: its cause.
				if err := c.peerGone(s, k); err != nil {
					return err
				}
			}
			return c.boardBlame(k, s, fmt.Errorf("rank %d closed the communicator before this rank took its message of %d bytes", s, len(dst)))
		default:
			return c.boardFail(k, fmt.Errorf("rank %d's message of %d bytes is in an unknown state %d", s, len(dst), v))
		}
	}
}

// copyLarge copies len(dst) bytes at off in the buffer described in entry
// e at base (0: the sender's buffer; mKept: its ring of copies) into dst.
func (b *board) copyLarge(s int, e []byte, base int, off uint64, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if id := *u64at(e, base+mSegID); id != 0 {
		if m := b.segmentBy(s, id, int(*u32at(e, base+mSegFD))); m != nil {
			at := *u64at(e, base+mSegOf) + off
			if at+uint64(len(dst)) <= uint64(len(m)) {
				copy(dst, m[at:at+uint64(len(dst))])
				return nil
			}
		}
	}
	return b.read(s, *u64at(e, base+mAddr)+off, dst)
}

// mailWait waits until *w >= v, written by rank p, with boardWait's
// phases and checks; what says what for (with p).
func (c *Comm) mailWait(r *Request, k boardCall, p int, w *atomic.Uint64, v uint64, what string) error {
	return c.mailWaitOn(r, k, p, w, nil, 1, v, what)
}

// mailWaitLines waits until entry e, rank p's, holds message v-1 in its
// first lines lines (mailLinesFor), or holds it in fewer (the sender sent
// fewer bytes than r expects: mailTake finds the mismatch).
func (c *Comm) mailWaitLines(r *Request, k boardCall, p int, e []byte, lines int, v uint64, what string) error {
	return c.mailWaitOn(r, k, p, (*atomic.Uint64)(unsafe.Pointer(&e[mSeq])), e, lines, v, what)
}

// mailWaitOn is mailWait, and with lines > 1 mailWaitLines on entry e.
func (c *Comm) mailWaitOn(r *Request, k boardCall, p int, w *atomic.Uint64, e []byte, lines int, v uint64, what string) error {
	b := c.board
	var start, lastLook time.Time
	defer c.boardLeave(&start)
	for i := 0; ; i++ {
		if lines <= 1 && w.Load() >= v || lines > 1 && mailReady(r, w, e, lines, v) {
			return nil // the first test inline: the ping-pong's path
		}
		if !b.clockDue(i) {
			continue // no spinPause: the ping-pong was 5% slower with it
		}
		now := time.Now()
		if start.IsZero() {
			start, lastLook = now, now
			boardWaiters.Add(1)
		}
		if c.hoistDue(now) {
			c.hoistSends(r) // Sends queued after this call that need not wait
		}
		if now.Sub(lastLook) >= boardLook {
			lastLook = now
			waited := now.Sub(start)
			if err := c.timesUp(r, k, p, waited, waited, func() string { return fmt.Sprintf("waiting "+what, p) }); err != nil {
				return err
			}
			if mailLookHook != nil {
				mailLookHook()
			}
			// p's state first, then the mailbox again: p may have
			// written it and closed (or died) since the test above, and
			// what it wrote before is there to take.
			st := b.stateOf(p).Load()
			if mailReady(r, w, e, lines, v) {
				return nil
			}
			if err := c.peerGoneAt(p, k, st); err != nil {
				return err
			}
			if err := c.mailCannotMeet(p, k, waited, what); err != nil {
				return err
			}
		}
		b.rest(now.Sub(start), w, v, p)
	}
}

// mailLookHook, if set (by a test), is called at each look of a mailbox
// wait at its peer's state.
var mailLookHook func()

// mailReady reports whether what mailWaitOn waits for is there: *w >= v
// and, with lines > 1, every line of entry e holds message v-1, or the
// entry says the message has another size than r receives (mailTake
// finds the mismatch).
func mailReady(r *Request, w *atomic.Uint64, e []byte, lines int, v uint64) bool {
	ok := w.Load() >= v
	if lines > 1 {
		// Every flag, whatever the others say: the trips overlap.
		in := true
		for at := llLine; at < lines*llLine; at += llLine {
			if (*atomic.Uint64)(unsafe.Pointer(&e[at+llFlag])).Load() < v {
				in = false
			}
		}
		if ok && !in && mailLen(e, (*atomic.Uint32)(unsafe.Pointer(&e[mLarge])).Load() == mailIn) != len(r.recv) {
			return true // another size: a mismatch
		}
		ok = ok && in
	}
	return ok
}

// mailCannotMeet fails a mailbox wait for rank p, waited long, in which p
// waits for this rank too, directly or through others (their bWaitOn,
// which a board wait sets once it has waited stallMark): whatever p is in
// (a receive from this rank while this rank receives from p, a send while
// this rank sends, a collective), none of them reaches the call the next
// waits for, as calls run one at a time, in order. Before, they waited
// until the stall timeout (a helper's hunt: 60 s, where the README
// promises about a second for ranks that wait on each other in different
// calls). Not before passedAfter: a crowded host may not have run a rank
// since it marked a wait that a later call has answered.
func (c *Comm) mailCannotMeet(p int, k boardCall, waited time.Duration, what string) error {
	b := c.board
	if waited < c.passedAfter {
		return nil
	}
	root, via, round := b.stallChain(p)
	if root >= 0 || !slices.Contains(round, b.me) {
		return nil
	}
	return c.boardFail(k, fmt.Errorf("waiting "+what+"%s: %s are alive and wait for one another in calls that cannot meet (receives that each wait for the other's send, sends that each wait for the other to receive, or a point-to-point call facing a collective; calls run one at a time, in order: SendRecv exchanges)",
		p, via, collectives.RankList(round)))
}

// processGone reports whether rank p's process is gone (killed, or exited
// without Close: its board state says nothing then), a zombie its parent
// has not reaped yet included.
func (b *board) processGone(p int) bool {
	pid := int(b.u32(b.hdr(p) + bPid).Load())
	if pid == 0 || pid == int(b.pid) {
		return false
	}
	if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// mailStray is a message from a mailbox set aside for a receive of its
// tag (mailTake).
type mailStray struct {
	tag  uint32
	data []byte
}

// mailStrayOf returns the index of the oldest message with tag from rank
// s set aside, or -1.
func (c *Comm) mailStrayOf(s, tag int) int {
	if len(c.mailStrays) == 0 {
		return -1 // no lookup on the ping-pong's path
	}
	for i, m := range c.mailStrays[s] {
		if int(m.tag) == tag {
			return i
		}
	}
	return -1
}

// mailSetAside takes the message in entry e, the next from rank s, with
// tag and size, out of the mailbox and keeps it for a later receive of
// its tag, while r, a receive of another tag, waits.
func (c *Comm) mailSetAside(r *Request, k boardCall, s int, e []byte, st *atomic.Uint32, in bool, tag uint32, size int) error {
	b := c.board
	if c.mailStrayBytes+size+collectives.StrayOverhead > collectives.DefaultStrayLimit {
		return c.boardFail(k, fmt.Errorf("recv (tag %d): rank %d <- %d: rank %d sent a message with tag %d before this receive's, and the messages this rank holds for receives not called yet would pass %d bytes (a receive of each, in the order the peer sends them, avoids holding them)",
			r.args.tag, b.me, s, s, tag, collectives.DefaultStrayLimit))
	}
	data := make([]byte, size)
	if in {
		mailCopyIn(e, data)
	} else if err := c.mailTakeLarge(k, s, e, st, data); err != nil {
		return err
	}
	if c.mailStrays == nil {
		c.mailStrays = make(map[int][]mailStray)
	}
	c.mailStrays[s] = append(c.mailStrays[s], mailStray{tag: tag, data: data})
	c.mailStrayBytes += size + collectives.StrayOverhead
	n := b.got[s]
	b.got[s] = n + 1
	storeRelease(b.u64(b.box(s, b.me)), n+1)
	b.ring()
	return nil
}

// takeMailStray completes r with the i-th message set aside from rank s.
func (c *Comm) takeMailStray(r *Request, k boardCall, s, i int) error {
	m := c.mailStrays[s][i]
	if len(m.data) != len(r.recv) {
		return c.boardFail(k, fmt.Errorf("point-to-point mismatch: rank %d sent %d bytes with tag %d where rank %d receives %d bytes with tag %d",
			s, len(m.data), m.tag, c.board.me, len(r.recv), r.args.tag))
	}
	copy(r.recv, m.data)
	c.mailStrayBytes -= len(m.data) + collectives.StrayOverhead
	if c.mailStrays[s] = slices.Delete(c.mailStrays[s], i, i+1); len(c.mailStrays[s]) == 0 {
		delete(c.mailStrays, s)
	}
	return nil
}

// mailStrayUntaken, at Close, names a message set aside that no receive
// took (the oldest from the lowest rank).
func (c *Comm) mailStrayUntaken() error {
	for s := range c.size {
		if ms := c.mailStrays[s]; len(ms) > 0 {
			return fmt.Errorf("rank %d sent this rank a message with tag %d that it never received (%d bytes, set aside while a receive of another tag waited; a Send without its Recv)",
				s, ms[0].tag, len(ms[0].data))
		}
	}
	return nil
}

// strayNote says, in the error of a receive from rank s that failed, that
// s sent a message with tag (the latest) that waits for a receive of its
// tag: the ranks' tags may not agree.
func strayNote(s int, tag uint32) string {
	return fmt.Sprintf("rank %d sent this rank a message with tag %d before it, which waits, set aside, for a receive of that tag", s, tag)
}
