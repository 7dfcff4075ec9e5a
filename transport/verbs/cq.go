package verbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// defaultSpin bounds how long Wait busy-polls before it blocks on the
// completion channel (Config.Spin). Short: with more ranks than cores
// spinning hurts, and comm turns it off then.
const defaultSpin = 20 * time.Microsecond

// cq is a completion queue: one ibv completion queue shared by the data
// queue pairs of its endpoints (send and receive) and its completion
// channel. Completions that are not the adapter's (a remote error reported
// by the control plane, requests flushed by a local Close or a broken
// queue) are queued in Go.
//
// Depth (transport.CompletionQueue): held counts the requests posted and
// not yet handed over by Poll; a post that would make it exceed depth is
// refused with ErrQueueFull. The adapter's queue has depth entries, and
// every adapter completion is one of those requests, so it never overruns.
//
// Progress is driven by the caller (Wait): the waiting goroutine polls,
// then sleeps on the completion channel itself, in the Go netpoller; there
// is no goroutine in between.
type cq struct {
	dev   *Device
	hw    ibv.CQ
	depth int64

	held atomic.Int64 // entries held by posted requests (see reserve)

	mu      sync.Mutex // guards hw polling, ready, eps, closing, closed, broken
	closing bool       // Close has begun
	closed  bool       // hw is being destroyed
	broken  error      // the adapter's queue failed; every endpoint failed with it
	ready   []transport.Completion
	eps     map[uint32]*endpoint // by data queue pair number
	wc      [32]ibv.WC

	synMu sync.Mutex // guards syn; taken after cq.mu or endpoint.mu, never before
	syn   []transport.Completion

	// Blocking (Wait): one goroutine at a time, the leader, sleeps on file;
	// the others wait for notify, closed and replaced when the leader
	// leaves or a synthetic completion is queued.
	file      *os.File // a dup of the channel fd, in the netpoller
	rc        syscall.RawConn
	lead      chan struct{}      // capacity 1: held by the leader
	readable  func(uintptr) bool // the leader's callback in rc.Read (allocated once)
	evErr     error              // set by readable; the leader's only
	nmu       sync.Mutex         // guards followers and notify
	followers int
	notify    chan struct{}
	done      chan struct{} // closed by Close

	// The context whose end pokes the leader (watch): registered once and
	// kept while callers pass the same one, so that steady-state waits
	// allocate nothing.
	watchMu sync.Mutex
	watched context.Context
	unwatch func() bool
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
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		hw.Close()
		return nil, fmt.Errorf("completion channel: %w", err)
	}
	q := &cq{
		dev:    d,
		hw:     hw,
		depth:  int64(depth),
		eps:    make(map[uint32]*endpoint),
		file:   f,
		rc:     rc,
		lead:   make(chan struct{}, 1),
		notify: make(chan struct{}),
		done:   make(chan struct{}),
	}
	// An event pending means completions may be queued that raised no
	// event of their own: take it, re-arm, and let the leader poll again.
	// Without one the queue is armed, and the next completion raises one.
	q.readable = func(uintptr) bool {
		ok, err := q.consumeEvent()
		if err != nil {
			q.evErr = err
			return true
		}
		return ok
	}
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

// reserve takes the entry a request being posted holds until Poll hands its
// completion over, or says the queue is full.
func (q *cq) reserve() error {
	if n := q.held.Add(1); n > q.depth {
		q.held.Add(-1)
		return fmt.Errorf("%d requests posted and not taken out, depth %d: %w", n-1, q.depth, transport.ErrQueueFull)
	}
	return nil
}

// unreserve gives back the entry of a request the adapter refused.
func (q *cq) unreserve() { q.held.Add(-1) }

// wakeFollowers wakes the goroutines that wait for the leader, if any.
func (q *cq) wakeFollowers() {
	q.nmu.Lock()
	if q.followers > 0 {
		close(q.notify)
		q.notify = make(chan struct{})
	}
	q.nmu.Unlock()
}

// follow registers a goroutine that may wait for the leader and returns
// what to wait on; unfollow ends it.
func (q *cq) follow() chan struct{} {
	q.nmu.Lock()
	defer q.nmu.Unlock()
	q.followers++
	return q.notify
}

func (q *cq) unfollow() {
	q.nmu.Lock()
	q.followers--
	q.nmu.Unlock()
}

// leave ends the leader's turn and wakes the followers, one of which leads
// next. Under nmu: a goroutine that registered as a follower either sees
// the lead free or is woken.
func (q *cq) leave() {
	q.nmu.Lock()
	<-q.lead
	if q.followers > 0 {
		close(q.notify)
		q.notify = make(chan struct{})
	}
	q.nmu.Unlock()
}

// poke interrupts the leader's sleep on the completion channel, so that it
// polls again (a synthetic completion, its context done, Close).
func (q *cq) poke() { q.file.SetReadDeadline(time.Unix(1, 0)) }

// addSynthetic queues completions that the adapter does not produce and
// wakes every waiter.
func (q *cq) addSynthetic(cs ...transport.Completion) {
	q.synMu.Lock()
	q.syn = append(q.syn, cs...)
	q.synMu.Unlock()
	q.poke()
	q.wakeFollowers()
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
	freed := int64(0)
	for i := range out[:n] {
		if out[i].Op != transport.OpRemoteError {
			freed++
		}
	}
	q.held.Add(-freed)
	return n
}

// fillLocked moves adapter and synthetic completions into ready until it
// holds want or the adapter has none.
func (q *cq) fillLocked(want int) {
	q.moveSynthetic()
	for len(q.ready) < want && q.broken == nil {
		n, err := q.hw.Poll(q.wc[:])
		if err != nil {
			q.breakLocked(err)
			return
		}
		for i := range n {
			w := &q.wc[i]
			ep := q.eps[w.QPNum]
			if ep == nil {
				continue // an endpoint closed: Close completed the request
			}
			q.ready = ep.complete(q.ready, w)
		}
		q.moveSynthetic()
		if n < len(q.wc) {
			return
		}
	}
}

// breakLocked handles an adapter queue that failed (an overrun, which the
// depth accounting rules out unless the device lies about its depth, or a
// device error): the adapter may have lost completions, so every endpoint
// of the queue enters the error state and every pending request completes
// here, with an error naming the failure.
func (q *cq) breakLocked(err error) {
	q.broken = fmt.Errorf("verbs: %s: completion queue failed: %w: %w", q.dev.name, err, transport.ErrLink)
	q.dev.logf("%v", q.broken)
	for _, ep := range q.eps {
		q.ready = ep.failAll(q.ready, q.broken)
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

// Wait polls until a completion is there, the queue is closed or ctx is
// done: first busy-polling for Config.Spin (yielding the processor between
// polls), then sleeping. The first goroutine to sleep does so on the
// completion channel itself, in the Go netpoller (the leader); others wait
// for it to leave. No other goroutine is involved in handing a completion
// to the caller.
func (q *cq) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("verbs: wait: empty output slice: %w", transport.ErrInvalid)
	}
	if spin := q.dev.spin; spin > 0 {
		deadline := time.Now().Add(spin)
		for i := 0; ; i++ {
			if n := q.Poll(out); n > 0 {
				return n, nil
			}
			if i&15 == 15 {
				if q.isClosed() || ctx.Err() != nil || time.Now().After(deadline) {
					break
				}
				runtime.Gosched()
			}
		}
	}
	for {
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		if q.isClosed() {
			return 0, fmt.Errorf("verbs: wait: %w", transport.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		select {
		case q.lead <- struct{}{}:
			n, err := q.leadWait(ctx, out)
			q.leave()
			return n, err
		default:
		}
		if n, done, err := q.followWait(ctx, out); done {
			return n, err
		}
	}
}

// followWait waits while another goroutine leads: until the leader leaves
// (then the caller tries to lead), a synthetic completion, ctx or Close.
func (q *cq) followWait(ctx context.Context, out []transport.Completion) (n int, done bool, err error) {
	ch := q.follow()
	defer q.unfollow()
	select {
	case q.lead <- struct{}{}: // the leader left meanwhile
		n, err := q.leadWait(ctx, out)
		q.leave()
		return n, true, err
	default:
	}
	select {
	case <-ch:
		return 0, false, nil
	case <-ctx.Done():
		return 0, true, ctx.Err()
	case <-q.done:
		return 0, true, fmt.Errorf("verbs: wait: %w", transport.ErrClosed)
	}
}

// leadWait sleeps on the completion channel until a completion is there.
// Every cause of a wake-up other than the adapter's event (a synthetic
// completion, ctx, Close) pokes the sleep with a past read deadline, which
// the loop clears before it looks for that cause, so none is missed.
func (q *cq) leadWait(ctx context.Context, out []transport.Completion) (int, error) {
	q.watch(ctx)
	for {
		q.file.SetReadDeadline(time.Time{})
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		if q.isClosed() {
			return 0, fmt.Errorf("verbs: wait: %w", transport.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		q.evErr = nil
		err := q.rc.Read(q.readable)
		switch {
		case q.evErr != nil:
			return 0, fmt.Errorf("verbs: wait on %s: %w: %w", q.dev.name, q.evErr, transport.ErrLink)
		case errors.Is(err, os.ErrDeadlineExceeded):
		case err != nil:
			return 0, fmt.Errorf("verbs: wait: %w: %w", err, transport.ErrClosed)
		}
	}
}

// watch makes the end of ctx poke the leader. A communicator waits with
// the same context call after call: the registration is kept for it.
func (q *cq) watch(ctx context.Context) {
	if ctx.Done() == nil {
		return // never ends
	}
	q.watchMu.Lock()
	defer q.watchMu.Unlock()
	if sameContext(q.watched, ctx) {
		return
	}
	if q.unwatch != nil {
		q.unwatch()
	}
	q.watched, q.unwatch = ctx, context.AfterFunc(ctx, q.poke)
}

// sameContext compares two contexts; a context type that cannot be
// compared is never the same.
func sameContext(a, b context.Context) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// consumeEvent takes one event of the completion channel (acknowledged,
// queue re-armed), under q.mu so that it never runs beside hw polling or
// destruction.
func (q *cq) consumeEvent() (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return true, nil // end the wait: Close is under way
	}
	return q.hw.ConsumeEvent()
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
	close(q.done) // wakes followers now; Poll returns nothing from here on
	eps := make([]*endpoint, 0, len(q.eps))
	for _, ep := range q.eps {
		eps = append(eps, ep)
	}
	q.mu.Unlock()
	q.poke() // and the leader
	// The adapter refuses to destroy a queue that queue pairs still use.
	closeEndpoints(eps)

	q.mu.Lock()
	q.closed = true
	q.ready = nil
	q.mu.Unlock()
	q.file.Close() // waits for a leader inside Read to leave it
	q.watchMu.Lock()
	if q.unwatch != nil {
		q.unwatch()
		q.watched, q.unwatch = nil, nil
	}
	q.watchMu.Unlock()
	q.dev.forgetCQ(q)
	if err := q.hw.Close(); err != nil {
		return fmt.Errorf("verbs: close completion queue: %w", err)
	}
	return nil
}
