package comm

import (
	"sync"
	"sync/atomic"
)

// callQueue is how calls reach the worker goroutine (Comm.worker) and are
// kept one at a time: the list of submitted requests, the worker's wake-up
// and stop channels, and the counts that let a blocking call run inline on
// its caller's goroutine.
//
// Guards: qhead and qtail (linked through Request.next) are guarded by the
// communicator's mu, which also guards closed and err, so that a request is
// queued only on a usable communicator; the methods named ...Locked expect
// it held. The list is unbounded: submitting never blocks, whatever the
// number of outstanding requests. wake (capacity 1) wakes the worker; stop
// is closed once, by Close. pending (atomic) counts requests submitted and
// not yet finished: a blocking call that finds it zero runs inline (see
// Comm.submit). runMu is held by whichever goroutine runs a request, the
// worker or an inline caller, so runs never overlap; inline counts inline
// runs so Close can wait for them, as wg does for the worker.
type callQueue struct {
	qhead, qtail *Request
	wake         chan struct{}
	stop         chan struct{}
	wg           sync.WaitGroup
	pending      atomic.Int64
	runMu        sync.Mutex
	inline       sync.WaitGroup
}

// newCallQueue returns an empty queue's channels; the rest starts at zero.
func newCallQueue() callQueue {
	return callQueue{wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// pushLocked appends r to the queue and counts it pending; the caller holds
// the communicator's mu and then calls signal (after unlocking).
func (q *callQueue) pushLocked(r *Request) {
	q.pending.Add(1)
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
	return r
}

// takeAllLocked empties the queue and returns its requests, oldest first,
// still linked through Request.next; they stay counted in pending until
// the caller finishes them. The communicator's mu is held.
func (q *callQueue) takeAllLocked() *Request {
	r := q.qhead
	q.qhead, q.qtail = nil, nil
	return r
}

// shutdown stops the worker and waits until it and any inline run have
// returned. The worker drains the queue first (it returns once the
// communicator is closed and the queue empty). Called once, by Close.
func (q *callQueue) shutdown() {
	close(q.stop)
	q.wg.Wait()
	q.inline.Wait()
}
