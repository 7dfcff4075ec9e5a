package comm

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

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
// taken it. The receiver compares the entry's tag and length with its
// Recv's: a difference fails both calls' communicators with a mismatch.
const (
	mailMaxRanks = 16
	mailSlots    = 4
	mailEager    = 4096
	mailEntry    = 64 + mailEager // header, then the payload from mData
	mailBox      = 128 + mailSlots*mailEntry

	// Entry header.
	mSeq   = 0  // uint64: the message's number + 1, published last
	mTag   = 8  // uint32
	mLen   = 12 // uint32
	mLarge = 16 // uint32: 1 if the payload is in the sender's buffer
	mSegFD = 20 // uint32
	mAddr  = 24 // uint64
	mSegID = 32 // uint64
	mSegOf = 40 // uint64
	mData  = 48 // the payload of an eager message

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
		// The receiver copies from this rank's buffer: wait until it has.
		d := r.args.peer
		return c.mailWait(r, k, d, b.u64(b.box(b.me, d)), n+1, "for rank %d to take this rank's message")
	}
	return nil
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
	if large {
		seg, _ := shm.LookupSegment(r.send)
		*u32at(e, mLarge), *u32at(e, mSegFD) = 1, uint32(seg.FD)
		*u64at(e, mAddr) = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(r.send))))
		*u64at(e, mSegID), *u64at(e, mSegOf) = seg.ID, seg.Off
	} else {
		*u32at(e, mLarge) = 0
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

// mailTake takes the next message from r's source into r.recv.
func (c *Comm) mailTake(r *Request, k boardCall) error {
	b, s := c.board, r.args.src
	n := b.got[s]
	e := b.entry(s, b.me, n)
	lines := mailLinesFor(len(r.recv))
	if err := c.mailWaitLines(r, k, s, e, lines, n+1, "for rank %d's message"); err != nil {
		return err
	}
	tag, size := *u32at(e, mTag), int(*u32at(e, mLen))
	if int(tag) != r.args.tag || size != len(r.recv) {
		return c.boardFail(k, fmt.Errorf("point-to-point mismatch: rank %d sent %d bytes with tag %d where rank %d receives %d bytes with tag %d",
			s, size, tag, b.me, len(r.recv), r.args.tag))
	}
	if *u32at(e, mLarge) == 0 && lines > 1 {
		copy(r.recv, e[mData:mData+mailHead])
		for i, at := mailHead, llLine; i < size; i, at = i+llBody, at+llLine {
			copy(r.recv[i:], e[at:at+llBody])
		}
	} else if *u32at(e, mLarge) == 0 {
		copy(r.recv, e[mData:mData+size])
	} else if err := b.copyLarge(s, e, r.recv); err != nil {
		return c.readFail(k, s, err)
	} else if err := c.readStood(k, s); err != nil {
		return err // the sender left its send while this rank read it
	}
	b.got[s] = n + 1
	storeRelease(b.u64(b.box(s, b.me)), n+1)
	b.ring()
	return nil
}

// copyLarge copies a large message from the sender's buffer described by
// entry e into dst.
func (b *board) copyLarge(s int, e []byte, dst []byte) error {
	if id := *u64at(e, mSegID); id != 0 {
		if m := b.segmentBy(s, id, int(*u32at(e, mSegFD))); m != nil {
			at := *u64at(e, mSegOf)
			if at+uint64(len(dst)) <= uint64(len(m)) {
				copy(dst, m[at:at+uint64(len(dst))])
				return nil
			}
		}
	}
	return b.read(s, *u64at(e, mAddr), dst)
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
		ok := w.Load() >= v
		if lines > 1 {
			// Every flag, whatever the others say: the trips overlap.
			in := true
			for at := llLine; at < lines*llLine; at += llLine {
				if (*atomic.Uint64)(unsafe.Pointer(&e[at+llFlag])).Load() < v {
					in = false
				}
			}
			if ok && !in && int(*u32at(e, mLen)) != len(r.recv) {
				return nil // another size: a mismatch
			}
			ok = ok && in
		}
		if ok {
			return nil
		}
		if !b.clockDue(i) {
			continue // no spinPause: the ping-pong was 5% slower with it
		}
		now := time.Now()
		if start.IsZero() {
			start, lastLook = now, now
			boardWaiters.Add(1)
		}
		if now.Sub(lastLook) >= boardLook {
			lastLook = now
			waited := now.Sub(start)
			if err := c.timesUp(r, k, p, waited, waited, func() string { return fmt.Sprintf("waiting "+what, p) }); err != nil {
				return err
			}
			if err := c.peerGone(p, k); err != nil {
				return err
			}
		}
		b.rest(now.Sub(start), w, v, p)
	}
}
