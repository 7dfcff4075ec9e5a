package comm

import (
	"context"
	"errors"
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
	if c.hoisting || c.sendsQueued.Load() == 0 {
		return false
	}
	pushed := c.pushed.Load()
	if pushed == c.hoistPushed && now.Sub(c.hoistAt) < hoistEvery {
		return false
	}
	c.hoistPushed, c.hoistAt = pushed, now
	return true
}

// hoistSends runs the Sends queued after the waiting call that can
// complete at once through the mailboxes (see above), in their order, and
// finishes their requests. It runs on the goroutine of the waiting call
// (waiting), which owns the board's per-call state.
func (c *Comm) hoistSends(waiting *Request) {
	b := c.board
	if b == nil || !b.mail {
		return
	}
	c.hoisting = true
	defer func() { c.hoisting = false }()
	for pass := 0; pass < 2; pass++ {
		var need []int // receivers whose ring of copies is not allocated yet
		// The messages and kept bytes of the Sends taken so far, by rank.
		planned, plannedBytes := map[int]uint64{}, map[int]int{}
		c.mu.Lock()
		run, _ := c.hoistScan(waiting, true, func(x *Request, d int) bool {
			if !c.boardTakes(x) {
				return false
			}
			ok, ring := c.mailSendsNow(x, planned[d], plannedBytes[d])
			if !ok {
				if ring {
					need = append(need, d)
				}
				return false
			}
			planned[d]++
			if len(x.send) > mailEager {
				plannedBytes[d] += len(x.send)
			}
			return true
		})
		c.mu.Unlock()
		c.runHoisted(run, c.mailSendNow)
		if len(need) == 0 {
			return
		}
		for _, d := range need {
			c.keepRingFor(d) // then look again
		}
	}
}

// runHoisted runs the requests hoistScan took out of the queue (run, in
// order, listed in c.hoisted) with exec, and finishes each; it returns
// how many ran.
func (c *Comm) runHoisted(run *Request, exec func(*Request) error) int {
	n := 0
	for x := run; x != nil; n++ {
		if x.err = exec(x); x.err != nil {
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
	return n
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

// Over the links (TCP, verbs, in-memory) the same: a Recv that waits in
// the executor (recvWaits) is poked when a Send is queued behind it
// (errHoist, from submit) and, at that poke or the stall watchdog's,
// yields (collectives.ErrYield) if a Send queued behind it completes
// without its receiver: the link to the receiver is up (or its half of
// the link is published, so that this rank's set-up waits for nothing)
// and has a free slot for each of the message's chunks. execute then runs
// those Sends (hoistLinkSends) and the Recv again. A Recv that received
// anything does not yield.

// errHoist is the cause with which submit ends the context of a waiting
// Recv's run when a Send is queued behind it.
var errHoist = errors.New("a send queued behind a waiting receive")

// hoistScan walks the queue under mu as hoistSends does, calling take for
// each Send that no earlier call holds back (an earlier Send or SendRecv
// to the same rank, a Send to itself; any collective or call that runs
// another way ends the walk); take reports whether the Send goes ahead.
// With unlink the Sends taken leave the queue and are returned, in order
// (c.hoisted lists them); otherwise the walk ends at the first taken.
func (c *Comm) hoistScan(waiting *Request, unlink bool, take func(x *Request, d int) bool) (run *Request, any bool) {
	if c.closed || c.err != nil {
		return nil, false
	}
	held := make(map[int]bool)
	scanned := 0
	if waiting != nil && waiting.kind != collRecv {
		// A Send that waits for room in its receiver's mailbox has not
		// posted its message: nothing to that rank goes before it.
		held[waiting.args.peer] = true
	}
	if a := c.active; a != nil && a != waiting {
		if !a.kind.IsP2P() {
			return nil, false
		}
		if a.kind != collRecv {
			held[a.args.peer] = true
		}
	}
	var tail, prev *Request
	for x := c.qhead; x != nil && scanned < hoistScanMax; scanned++ {
		next := x.next
		if !x.kind.IsP2P() || x.refused != nil || x.persistent || x.algo != "" || x.label != "" ||
			(x.ctx != nil && x.ctx.Err() != nil) {
			break
		}
		d := x.args.peer
		if x.kind == collRecv || d == ProcNull {
			prev, x = x, next
			continue
		}
		if d < 0 || d >= c.size {
			break // refused in its turn
		}
		if x.kind != collSend || d == c.rank || held[d] || !take(x, d) {
			held[d] = true
			prev, x = x, next
			continue
		}
		if !unlink {
			return nil, true
		}
		c.sendsQueued.Add(-1)
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
	if unlink {
		c.hoisted = run // in use until finished (inUseLocked)
	}
	return run, run != nil
}

// hoistScanMax bounds the queued calls a look at the queue walks (a
// window of 64 Irecvs before the Isends, as osu bw posts, is walked
// whole).
const hoistScanMax = 256

// linkSendsNow reports whether Send x to d, after planned chunks to d
// that go first, completes without d's Recv over the links: d's link has
// a free slot for each chunk, or it is not made yet, both halves are
// published (this rank's early, d's in the store) and the transport's
// Connect does not wait for d's (connectsAlone), so that the set-up
// waits for nothing.
func (c *Comm) linkSendsNow(x *Request, d int, planned int) bool {
	if c.boardTakes(x) || uint(d) >= uint(c.size) {
		return false
	}
	chunks := max(1, (len(x.send)+c.opts.ChunkSize-1)/c.opts.ChunkSize)
	if c.links[d] != nil {
		room, ok := c.exec.SendRoom(d)
		return ok && chunks+planned <= room
	}
	if chunks+planned > c.opts.Slots || c.early[d] == nil || !c.connectsAlone(d) {
		return false
	}
	kv := kvOf(c.rdv)
	if kv == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(c.life, 2*time.Millisecond)
	defer cancel()
	_, err := kv.Get(ctx, c.linkKey(d, c.rank, c.linkGen[d]))
	return err == nil
}

// connectsAlone reports whether the device that reaches peer connects an
// endpoint without waiting for the peer's Connect (TCP, verbs: the
// device says so, see connectsAloner). Over the others (the in-memory
// transport, shared memory) a Send to a peer not linked yet waits in its
// set-up until the peer's own call that needs the pair connects it: run
// ahead of a waiting Recv, it could wait on a rank that waits for that
// Recv (TestHoistWaitsForNoConnect).
func (c *Comm) connectsAlone(peer int) bool {
	dev := c.devs.net
	if c.via[peer] == viaShm {
		dev = c.devs.shm
	}
	a, ok := dev.(connectsAloner)
	return ok && a.ConnectsAlone()
}

// connectsAloner is implemented by the devices whose endpoints' Connect
// returns without waiting for the peer's Connect (tcp.Device,
// verbs.Device).
type connectsAloner interface{ ConnectsAlone() bool }

// linkHoistable reports whether a Send queued behind waiting, a Recv
// that waits over the links, completes without its receiver (see above).
func (c *Comm) linkHoistable(waiting *Request) bool {
	if kv := kvOf(c.rdv); kv != nil {
		// This rank's halves of the links the queued Sends need, so that
		// their receivers can connect and this rank's set-up waits for
		// nothing once theirs are here (a Send queued after this Recv set
		// up its links missed the set-up's publishEarly).
		c.publishEarly(kv, nil)
	}
	later := false // a Send that fits the receiver's slots once it frees them
	c.mu.Lock()
	_, any := c.hoistScan(waiting, false, func(x *Request, d int) bool {
		if c.linkSendsNow(x, d, 0) {
			return true
		}
		later = later || (c.links[d] != nil && max(1, (len(x.send)+c.opts.ChunkSize-1)/c.opts.ChunkSize) <= c.opts.Slots)
		return false
	})
	c.mu.Unlock()
	if !any && later && c.relooks < hoistRelooks {
		c.relooks++
		c.relookLater()
	}
	return any
}

// hoistRelook is how soon a Recv that waits over the links looks again
// at the Sends queued behind it when none could go ahead at its last look
// but one would fit its receiver's slots once the receiver frees them (as
// it takes, or sets aside, what this rank sent it before): nothing pokes
// the run then (without it, two Sends of more than half the slots each to
// one rank behind a Recv waited for the stall watchdog's poke, a second).
// At most hoistRelooks times in a row: each poke restarts the stall
// watchdog's clock, and a wait that does not end must reach the stall
// diagnosis.
const (
	hoistRelook  = 10 * time.Millisecond
	hoistRelooks = 20
)

// relookLater pokes the waiting Recv's run again after hoistRelook, once,
// if Sends are queued behind it.
func (c *Comm) relookLater() {
	if c.sendsQueued.Load() == 0 || !c.relookArmed.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(hoistRelook, func() {
		c.relookArmed.Store(false)
		if c.recvWaits.Load() && c.sendsQueued.Load() > 0 {
			c.poke.Load().cancel(errHoist)
		}
	})
}

// hoistLinkSends runs the Sends queued behind waiting that complete
// without their receivers over the links, in their order, and finishes
// their requests, once waiting's run yielded; it returns how many ran.
func (c *Comm) hoistLinkSends(waiting *Request) int {
	planned := make(map[int]int)
	c.mu.Lock()
	run, _ := c.hoistScan(waiting, true, func(x *Request, d int) bool {
		if !c.linkSendsNow(x, d, planned[d]) {
			return false
		}
		planned[d] += max(1, (len(x.send)+c.opts.ChunkSize-1)/c.opts.ChunkSize)
		return true
	})
	c.mu.Unlock()
	return c.runHoisted(run, func(x *Request) error { return c.execute(c.callCtx(), x) })
}
