package verbs

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// spinFor bounds how long Wait busy-polls before it blocks on the
// completion channel. Short: with more ranks than cores spinning hurts.
const spinFor = 20 * time.Microsecond

// cq is a completion queue: one ibv completion queue shared by the data
// queue pairs of its endpoints (send and receive), its completion channel,
// and a goroutine that waits on the channel in the Go netpoller and wakes
// waiters. Completions that are not the adapter's (a remote error reported
// by the control plane, requests flushed by a local Close) are queued in Go.
type cq struct {
	dev   *Device
	hw    ibv.CQ
	depth int

	inflight atomic.Int64 // requests posted and not yet polled from hw

	mu      sync.Mutex // guards hw polling, ready, eps, closing, closed
	closing bool       // Close has begun
	closed  bool       // hw is being destroyed
	ready   []transport.Completion
	eps     map[uint32]*endpoint // by data queue pair number
	wc      [32]ibv.WC

	synMu sync.Mutex // guards syn; taken after cq.mu or endpoint.mu, never before
	syn   []transport.Completion

	nmu    sync.Mutex
	notify chan struct{} // closed and replaced on every event

	file   *os.File // a dup of the channel fd, in the netpoller
	evDone chan struct{}
	done   chan struct{} // closed by Close
}

var _ transport.CompletionQueue = (*cq)(nil)

func newCQ(d *Device, depth int) (*cq, error) {
	hw, err := d.ctx.NewCQ(depth)
	if err != nil {
		return nil, err
	}
	f, err := channelFile(hw, "ibv-comp-channel")
	if err != nil {
		hw.Close()
		return nil, err
	}
	q := &cq{
		dev:    d,
		hw:     hw,
		depth:  depth,
		eps:    make(map[uint32]*endpoint),
		notify: make(chan struct{}),
		file:   f,
		evDone: make(chan struct{}),
		done:   make(chan struct{}),
	}
	// Waiters are woken after each event. The queue is re-armed before, so
	// a completion is either seen by the waiters' next poll or raises a
	// new event.
	go serveEvents(d, q.file, q.hw, q.evDone, q.wake)
	return q, nil
}

// channelFile puts a completion channel into the Go netpoller: a dup of its
// (non-blocking) descriptor, so that a goroutine can wait for events without
// holding a thread, and closing the file ends the wait.
func channelFile(hw ibv.CQ, name string) (*os.File, error) {
	fd, err := syscall.Dup(hw.Fd())
	if err != nil {
		return nil, fmt.Errorf("dup completion channel: %w", err)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), name), nil
}

// serveEvents consumes the events of hw's completion channel (each
// acknowledged and the queue re-armed) and calls fn after each, until f is
// closed. It closes done when it returns.
func serveEvents(d *Device, f *os.File, hw ibv.CQ, done chan struct{}, fn func()) {
	defer close(done)
	rc, err := f.SyscallConn()
	if err != nil {
		d.logf("verbs: %s: completion channel: %v", d.name, err)
		return
	}
	for {
		var evErr error
		err := rc.Read(func(uintptr) bool {
			ok, err := hw.ConsumeEvent()
			if err != nil {
				evErr = err
				return true
			}
			return ok
		})
		if evErr != nil {
			d.logf("verbs: %s: completion channel: %v", d.name, evErr)
			return
		}
		if err != nil {
			return // closed
		}
		fn()
	}
}

func (q *cq) wake() {
	q.nmu.Lock()
	close(q.notify)
	q.notify = make(chan struct{})
	q.nmu.Unlock()
}

func (q *cq) waitChan() chan struct{} {
	q.nmu.Lock()
	defer q.nmu.Unlock()
	return q.notify
}

// addSynthetic queues completions that the adapter does not produce.
func (q *cq) addSynthetic(cs ...transport.Completion) {
	q.synMu.Lock()
	q.syn = append(q.syn, cs...)
	q.synMu.Unlock()
	q.wake()
}

// reserve takes room for one completion, or reports the queue full.
func (q *cq) reserve() error {
	if n := q.inflight.Add(1); n > int64(q.depth) {
		q.inflight.Add(-1)
		return fmt.Errorf("completion queue full (%d requests in flight, depth %d): poll it: %w", n-1, q.depth, transport.ErrInvalid)
	}
	return nil
}

// Poll moves up to len(out) completions into out. It never blocks.
func (q *cq) Poll(out []transport.Completion) int {
	if len(out) == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing {
		return 0
	}
	q.fillLocked(len(out))
	n := copy(out, q.ready)
	rest := copy(q.ready, q.ready[n:])
	clear(q.ready[rest:])
	q.ready = q.ready[:rest]
	return n
}

// fillLocked moves adapter and synthetic completions into ready until it
// holds want or the adapter has none.
func (q *cq) fillLocked(want int) {
	q.moveSynthetic()
	for len(q.ready) < want {
		n, err := q.hw.Poll(q.wc[:])
		if err != nil {
			q.dev.logf("verbs: %s: %v", q.dev.name, err)
			return
		}
		for i := range n {
			q.inflight.Add(-1)
			w := &q.wc[i]
			ep := q.eps[w.QPNum]
			if ep == nil {
				continue // an endpoint already closed and drained
			}
			q.ready = ep.complete(q.ready, w)
		}
		q.moveSynthetic()
		if n < len(q.wc) {
			return
		}
	}
}

// moveSynthetic moves synthetic completions into ready. An OpRemoteError
// without Err is a marker: the endpoint's report, unless the endpoint has
// already put it before a completion it caused. The caller holds q.mu.
func (q *cq) moveSynthetic() {
	q.synMu.Lock()
	syn := q.syn
	q.syn = nil
	q.synMu.Unlock()
	for _, c := range syn {
		if c.Op == transport.OpRemoteError && c.Err == nil {
			q.ready = c.Endpoint.(*endpoint).takeRemoteError(q.ready)
			continue
		}
		q.ready = append(q.ready, c)
	}
}

// drain moves every completion the adapter has into ready, for an endpoint
// being closed.
func (q *cq) drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.fillLocked(1 << 30)
	}
}

// Wait busy-polls for a short bounded time, then blocks until the
// completion channel signals, ctx is done or the queue is closed.
func (q *cq) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("verbs: wait: empty output slice: %w", transport.ErrInvalid)
	}
	deadline := time.Now().Add(spinFor)
	for i := 0; ; i++ {
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		if q.isClosed() {
			return 0, fmt.Errorf("verbs: wait: %w", transport.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if i&15 == 15 && time.Now().After(deadline) {
			break
		}
	}
	for {
		ch := q.waitChan()
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-q.done:
			return 0, fmt.Errorf("verbs: wait: %w", transport.ErrClosed)
		}
	}
}

func (q *cq) isClosed() bool {
	select {
	case <-q.done:
		return true
	default:
		return false
	}
}

// Close wakes every waiter and releases the queue. Completions still queued
// are dropped. Endpoints still using it are closed first.
func (q *cq) Close() error {
	q.mu.Lock()
	if q.closing {
		q.mu.Unlock()
		return nil
	}
	q.closing = true
	close(q.done) // wakes waiters now; Poll returns nothing from here on
	eps := make([]*endpoint, 0, len(q.eps))
	for _, ep := range q.eps {
		eps = append(eps, ep)
	}
	q.mu.Unlock()
	// The adapter refuses to destroy a queue that queue pairs still use.
	closeEndpoints(eps)

	q.mu.Lock()
	q.closed = true
	q.ready = nil
	q.mu.Unlock()
	q.file.Close()
	<-q.evDone
	q.dev.forgetCQ(q)
	if err := q.hw.Close(); err != nil {
		return fmt.Errorf("verbs: close completion queue: %w", err)
	}
	return nil
}
