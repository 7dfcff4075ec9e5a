package comm

import (
	"sync"
	"sync/atomic"
	"time"
)

// callQueue is how calls reach the worker goroutine (Comm.worker) and are
// kept one at a time: the list of submitted requests, the worker's wake-up
// and stop channels, and the count that lets a blocking call run inline on
// its caller's goroutine.
//
// Guards: qhead and qtail (linked through Request.next) are guarded by the
// communicator's mu, which also guards closed and err, so that a request is
// queued only on a usable communicator; the methods named ...Locked expect
// it held. The list is unbounded: submitting never blocks, whatever the
// number of outstanding requests. wake (capacity 1) wakes the worker; stop
// is closed once, by Close.
//
// One run at a time: pending (atomic) counts requests submitted and not
// yet finished, plus inlineRun while a blocking call runs inline. A
// blocking call that finds pending zero sets it to 1|inlineRun in one
// compare-and-swap and runs on its caller's goroutine (Comm.submit): no
// request is queued or running then, and any submitted meanwhile is
// queued. The worker runs a queued request only once inlineRun is clear
// (awaitInline); the inline run, as it ends, wakes it through inlineDone
// if anything was queued meanwhile. So a small blocking call costs two
// atomic operations here, where a mutex for the run and a wait group for
// Close cost four more (each a locked instruction: ~10% of an 8-byte
// allreduce on the shared-memory board).
//
// gate (atomic) mirrors closed and err != nil (gateClosed, gateBroken), so
// that the inline path and the run check them without mu; they are set
// under mu, with the fields.
type callQueue struct {
	qhead, qtail *Request
	// active is the request the worker took from the queue and has not
	// finished (guarded by mu, like the list): with the list, what Free
	// and Deregister look at before they release a buffer (inUseLocked).
	active     *Request
	wake       chan struct{}
	stop       chan struct{}
	inlineDone chan struct{}
	wg         sync.WaitGroup
	pending    atomic.Int64
	gate       atomic.Uint32
	// pushed counts the requests ever queued, for a waiting call's look
	// at what it may run ahead of it (hoist.go); hoisted lists the
	// requests taken out of the queue to run so (guarded by mu, like the
	// list), until each is finished.
	pushed  atomic.Uint64
	hoisted *Request
	// sendsQueued counts the Sends in the list: a waiting call looks for
	// Sends to run ahead of it only if there are any.
	sendsQueued atomic.Int64
	// own is the request of the blocking call that holds the inline claim
	// (newBlocking): no pool round trip on the calls that run inline.
	own Request
}

// inlineRun is pending's flag for a blocking call running inline.
const inlineRun = 1 << 40

// The gate's bits.
const (
	gateClosed = 1 << iota // Close began
	gateBroken             // the communicator's err is set
)

// newCallQueue returns an empty queue's channels; the rest starts at zero.
func newCallQueue() callQueue {
	return callQueue{wake: make(chan struct{}, 1), stop: make(chan struct{}), inlineDone: make(chan struct{}, 1)}
}

// beginInline claims the right to run a blocking call on its caller's
// goroutine: true if nothing was queued or running, and the communicator
// is neither closed nor broken (checked after the claim, which Close's
// awaitInlineEnd pairs with).
func (q *callQueue) beginInline() bool {
	if !q.pending.CompareAndSwap(0, 1|inlineRun) {
		return false
	}
	if q.gate.Load() != 0 {
		q.endInline()
		return false
	}
	return true
}

// endInline ends an inline run; a request queued meanwhile waits in the
// worker for this (awaitInline).
func (q *callQueue) endInline() {
	if q.pending.Add(-(1 | inlineRun)) != 0 {
		select {
		case q.inlineDone <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// awaitInline blocks the worker while an inline run goes on.
func (q *callQueue) awaitInline() {
	for q.pending.Load()&inlineRun != 0 {
		<-q.inlineDone
	}
}

// awaitInlineQueued blocks the worker, before it takes a request, while a
// blocking call runs inline: the queue stays as it is, so that the inline
// call, a Recv waiting for its message, can run the Sends queued behind
// it ahead of it (hoist.go); a request the worker took would stay behind
// the Recv, and every Send to its rank with it. An inline call that ran
// every queued request so leaves nothing pending and sends no inlineDone:
// the next signal (or Close) ends the wait then.
func (q *callQueue) awaitInlineQueued() {
	for q.pending.Load()&inlineRun != 0 {
		select {
		case <-q.inlineDone:
		case <-q.wake:
		case <-q.stop:
			time.Sleep(100 * time.Microsecond) // Close waits for the inline call too
		}
	}
}

// pushLocked appends r to the queue and counts it pending; the caller holds
// the communicator's mu and then calls signal (after unlocking).
func (q *callQueue) pushLocked(r *Request) {
	q.pending.Add(1)
	q.pushed.Add(1)
	if r.kind == collSend {
		q.sendsQueued.Add(1)
	}
	if q.qtail == nil {
		q.qhead = r
	} else {
		q.qtail.next = r
	}
	q.qtail = r
}

// signal wakes the worker, unless a wake-up is already pending. It never
// blocks.
func (q *callQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// awaitWork blocks the worker until signal or Close (stop) wakes it.
func (q *callQueue) awaitWork() {
	select {
	case <-q.wake:
	case <-q.stop:
	}
}

// dequeueLocked takes the oldest queued request, or nil. The
// communicator's mu is held.
func (q *callQueue) dequeueLocked() *Request {
	r := q.qhead
	if r == nil {
		return nil
	}
	q.qhead, r.next = r.next, nil
	if q.qhead == nil {
		q.qtail = nil
	}
	if r.kind == collSend {
		q.sendsQueued.Add(-1)
	}
	return r
}

// queuedLocked reports whether r waits in the queue (not taken by the
// worker yet). The communicator's mu is held. It walks the queue: for a
// call given up while queued (givenUp), not on a call's path.
func (q *callQueue) queuedLocked(r *Request) bool {
	for x := q.qhead; x != nil; x = x.next {
		if x == r {
			return true
		}
	}
	return false
}

// takeAllLocked empties the queue and returns its requests, oldest first,
// still linked through Request.next; they stay counted in pending until
// the caller finishes them. The communicator's mu is held.
func (q *callQueue) takeAllLocked() *Request {
	r := q.qhead
	q.qhead, q.qtail = nil, nil
	q.sendsQueued.Store(0)
	return r
}

// shutdown stops the worker and waits until it and any inline run have
// returned. The worker drains the queue first (it returns once the
// communicator is closed and the queue empty). Called once, by Close,
// after it set gateClosed: no inline run begins after that.
func (q *callQueue) shutdown() {
	close(q.stop)
	q.wg.Wait()
	for q.pending.Load()&inlineRun != 0 {
		time.Sleep(100 * time.Microsecond) // a call running inline ends
	}
}
