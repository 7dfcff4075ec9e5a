package comm

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Sends that go ahead of a waiting point-to-point call.
//
// Calls of a communicator run one at a time, in call order, so a Recv
// whose message has not come holds the calls queued after it: MPI's ring
// of an Irecv from the left, then an Isend to the right, on every rank
// (or a halo exchange that posts its Irecvs before its Isends, then waits
// for all) waited on itself until the stall diagnosis failed it. While a
// point-to-point call waits on the shared-memory board, the Sends queued
// after it that complete at once without their receivers run now, ahead
// of it (hoistSends): the mailbox to the receiver has room, and a message
// of more than mailEager bytes fits in the copies the board keeps for the
// receiver (mailKeep). Such a Send waits for nothing, so running it early
// cannot make a rank wait that would not have (it only puts a message
// where its receiver finds it sooner), as MPI's sends progress while a
// receive waits. A Send goes ahead of queued receives, not of an earlier
// Send to the same rank or a SendRecv that sends to it (messages between
// two ranks stay in order), a Send to this rank itself, or any collective
// (nor of what follows one).

// hoistEvery is how often a waiting call looks again for Sends to run
// ahead of it when nothing was queued since its last look (the room in
// the mailboxes may have grown).
const hoistEvery = 10 * time.Millisecond

// hoistDue reports whether the board wait of a point-to-point call should
// look for Sends to run ahead of it now: calls were queued after it
// since its last look, or hoistEvery has passed.
func (c *Comm) hoistDue(now time.Time) bool {
	if c.hoisting || (c.pending.Load()&^inlineRun) < 2 {
		return false // (one: the waiting call itself)
	}
	pushed := c.pushed.Load()
	if pushed == c.hoistPushed && now.Sub(c.hoistAt) < hoistEvery {
		return false
	}
	c.hoistPushed, c.hoistAt = pushed, now
	return true
}

// hoistSends runs the Sends queued after the waiting call that can
// complete at once (see above), in their order, and finishes their
// requests. It runs on the goroutine of the waiting call (waiting), which
// owns the board's per-call state.
func (c *Comm) hoistSends(waiting *Request) {
	b := c.board
	if b == nil || !b.mail || b.n > 64 {
		return
	}
	c.hoisting = true
	defer func() { c.hoisting = false }()
	for pass := 0; pass < 2; pass++ {
		var need []int // receivers whose ring of copies is not allocated yet
		c.mu.Lock()
		if c.closed || c.err != nil {
			c.mu.Unlock()
			return
		}
		var run, tail, prev *Request
		var held uint64 // ranks with an earlier message from this rank not sent yet
		// The messages and kept bytes of the Sends taken so far, by rank.
		var planned [64]uint64
		var plannedBytes [64]int
		if a := c.active; a != nil && a != waiting {
			// The worker took it from the queue and waits for this call,
			// which runs inline, to end: it comes first.
			if !a.kind.IsP2P() {
				c.mu.Unlock()
				return
			}
			if d := a.args.peer; a.kind != collRecv && d >= 0 && d < b.n {
				held |= 1 << d
			}
		}
		for x := c.qhead; x != nil; {
			next := x.next
			if !x.kind.IsP2P() || x.refused != nil || x.persistent || !c.boardTakes(x) || (x.ctx != nil && x.ctx.Err() != nil) {
				break // a collective, or a call that runs its own way
			}
			d := x.args.peer
			if x.kind == collRecv || d == ProcNull {
				prev, x = x, next
				continue
			}
			if d < 0 || d >= b.n {
				break
			}
			if x.kind != collSend || d == c.rank || held&(1<<d) != 0 {
				held |= 1 << d
				prev, x = x, next
				continue
			}
			ok, ring := c.mailSendsNow(x, planned[d], plannedBytes[d])
			if !ok {
				if ring {
					need = append(need, d)
				}
				held |= 1 << d
				prev, x = x, next
				continue
			}
			planned[d]++
			if len(x.send) > mailEager {
				plannedBytes[d] += len(x.send)
			}
			// Out of the queue, still counted in pending until finished.
			if prev == nil {
				c.qhead = next
			} else {
				prev.next = next
			}
			if c.qtail == x {
				c.qtail = prev
			}
			x.next = nil
			if run == nil {
				run = x
			} else {
				tail.next = x
			}
			tail, x = x, next
		}
		c.hoisted = run // in use until finished (inUseLocked)
		c.mu.Unlock()
		for x := run; x != nil; {
			if x.err = c.mailSendNow(x); x.err != nil {
				c.breakOn(x.err)
			}
			c.mu.Lock()
			next := x.next
			c.hoisted, x.next = next, nil
			c.mu.Unlock()
			x.finish()
			c.pending.Add(-1)
			x = next
		}
		if len(need) == 0 {
			return
		}
		for _, d := range need {
			c.keepRingFor(d) // then look again
		}
	}
}

// mailSendsNow reports whether Send r can complete at once through the
// mailbox to its receiver, after the planned messages to it (of which
// plannedBytes are kept copies) that go first: the box has room and, for
// a message of more than mailEager bytes, the ring of copies kept for the
// receiver has room for it beside the copies not taken yet. ring: it
// would fit in a ring that is not allocated yet (the caller allocates it
// and looks again).
func (c *Comm) mailSendsNow(r *Request, planned uint64, plannedBytes int) (ok, ring bool) {
	b, d := c.board, r.args.peer
	n := b.sent[d] + planned
	taken := b.u64(b.box(b.me, d)).Load()
	if n+1-taken > mailSlots {
		return false, false
	}
	if len(r.send) <= mailEager {
		return true, false
	}
	if b.keep == nil || b.keep[d].mem.mem == nil {
		return false, !(b.keep != nil && b.keep[d].none) && len(r.send) <= c.opts.Slots*c.opts.ChunkSize
	}
	k := &b.keep[d]
	return plannedBytes+len(r.send) <= len(k.mem.mem)-b.keptBytes(d, taken), false
}

// mailSendNow runs Send r, which mailSendsNow found can complete at once,
// while another call waits: as executeMail, keeping a copy of a large
// message for the receiver at once, with the waiting call's tag kept for
// its diagnosis.
func (c *Comm) mailSendNow(r *Request) error {
	b := c.board
	r.used = "shm-mailbox"
	k := mkCall(r.kind, r.dt, 0, -1, r.count)
	if c.life.Err() != nil {
		return c.boardFail(k, c.life.Err())
	}
	tag := b.tag
	b.tag = r.args.tag
	defer func() { b.tag = tag }()
	large, n, err := c.mailPost(r, k)
	if err != nil || !large {
		return err
	}
	d := r.args.peer
	taken := b.u64(b.box(b.me, d))
	if c.mailKeepNow(r, d, n, taken) {
		return nil
	}
	// Taken, or being taken by the receiver now: a short wait.
	return c.mailWait(r, k, d, taken, n+1, "for rank %d to take this rank's message")
}

// mailKeepNow is mailKeep without its wait for the receiver to begin
// taking the message first.
func (c *Comm) mailKeepNow(r *Request, d int, n uint64, taken *atomic.Uint64) bool {
	b := c.board
	st := (*atomic.Uint32)(unsafe.Pointer(&b.entry(b.me, d, n)[mLarge]))
	if taken.Load() > n || st.Load() != mailOpen {
		return false
	}
	return c.mailKeepCopy(r, d, n, taken)
}
