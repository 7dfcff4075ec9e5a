package multi

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// CompletionQueue holds one completion queue per member. Poll polls them
// all. Wait first polls them itself (a bounded spin, as the members' own
// waits do); only when nothing comes does it park: one goroutine per member
// then waits in that member's Wait, and the first completion wakes the
// caller. A member's completions keep their order: while members are
// waited on by those goroutines, nobody polls them directly, and what they
// took is returned before anything polled later.
//
// Entries (see transport.CompletionQueue) are held exactly, with one
// exception: when several members complete during one park, the waiters
// of the members that did not wake the caller may have taken completions
// (at most as many as the caller asked for, each) that the caller gets on
// its next Poll or Wait; their entries are free already.
type CompletionQueue struct {
	dev  *Device
	subs []transport.CompletionQueue

	// eps maps member endpoints to the Device's, for Completion.Endpoint:
	// copied on write, read without a lock.
	epsMu sync.Mutex
	eps   atomic.Pointer[map[transport.Endpoint]transport.Endpoint]

	// park serialises parking against Poll (see Wait).
	park sync.Mutex
	// held are completions the parked waiters took, in member order.
	heldMu sync.Mutex
	held   []transport.Completion
	next   int // the member Poll starts with (fairness)

	// Spin is how long Wait polls before it parks (default 50 µs).
	Spin time.Duration
}

var _ transport.CompletionQueue = (*CompletionQueue)(nil)

// NewCompletionQueue creates a queue of depth entries on every member.
func (d *Device) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	if depth < 1 {
		return nil, fmt.Errorf("multi: completion queue of depth %d: %w", depth, transport.ErrInvalid)
	}
	q := &CompletionQueue{dev: d, subs: make([]transport.CompletionQueue, len(d.members)), Spin: 50 * time.Microsecond}
	for i, m := range d.members {
		s, err := m.NewCompletionQueue(depth)
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("multi: completion queue on %s: %w", m.Name(), err)
		}
		q.subs[i] = s
	}
	empty := map[transport.Endpoint]transport.Endpoint{}
	q.eps.Store(&empty)
	return q, nil
}

func (q *CompletionQueue) addEndpoint(sub transport.Endpoint, e *endpoint) {
	q.epsMu.Lock()
	defer q.epsMu.Unlock()
	old := *q.eps.Load()
	m := make(map[transport.Endpoint]transport.Endpoint, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[sub] = e
	q.eps.Store(&m)
}

// translate makes completions name the Device's endpoints.
func (q *CompletionQueue) translate(out []transport.Completion) {
	m := *q.eps.Load()
	for i := range out {
		if e, ok := m[out[i].Endpoint]; ok {
			out[i].Endpoint = e
		}
	}
}

// takeHeld moves what parked waiters took into out.
func (q *CompletionQueue) takeHeld(out []transport.Completion) int {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	n := copy(out, q.held)
	q.held = append(q.held[:0], q.held[n:]...)
	return n
}

// Poll moves up to len(out) completions into out. It never blocks; while
// another goroutine is parked in Wait it returns only what the parked
// waiters already took.
func (q *CompletionQueue) Poll(out []transport.Completion) int {
	n := q.takeHeld(out)
	if n == len(out) || !q.park.TryLock() {
		return n
	}
	defer q.park.Unlock()
	return n + q.pollMembers(out[n:])
}

// pollMembers polls every member once, starting with a different one each
// time so that a busy member does not starve the others. q.park is held.
func (q *CompletionQueue) pollMembers(out []transport.Completion) int {
	n := 0
	k := len(q.subs)
	start := q.next
	q.next = (q.next + 1) % k
	for j := range k {
		if n == len(out) {
			break
		}
		got := q.subs[(start+j)%k].Poll(out[n:])
		q.translate(out[n : n+got])
		n += got
	}
	return n
}

// Wait blocks until at least one completion is available, then behaves as
// Poll. It returns early with ctx's error, or with ErrClosed once a member
// queue is closed.
func (q *CompletionQueue) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("multi: wait with an empty output slice: %w", transport.ErrInvalid)
	}
	if len(q.subs) == 1 {
		if n := q.takeHeld(out); n > 0 {
			return n, nil
		}
		n, err := q.subs[0].Wait(ctx, out)
		q.translate(out[:n])
		return n, err
	}
	deadline := time.Now().Add(q.Spin)
	for {
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	q.park.Lock()
	defer q.park.Unlock()
	if n := q.takeHeld(out); n > 0 {
		return n, nil
	}
	if n := q.pollMembers(out); n > 0 {
		return n, nil
	}
	// Park: one waiter per member; the first completion ends the round,
	// the others are cancelled, and everything they took is kept in
	// order.
	round, cancel := context.WithCancel(ctx)
	woke := make(chan struct{}, 1)
	errs := make([]error, len(q.subs))
	var wg sync.WaitGroup
	for i, s := range q.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Take no more than the caller asked for: what a waiter
			// takes leaves its member's queue (and frees its entry)
			// before the caller has it.
			var buf [16]transport.Completion
			n, err := s.Wait(round, buf[:min(len(out), len(buf))])
			if n > 0 {
				q.translate(buf[:n])
				q.heldMu.Lock()
				q.held = append(q.held, buf[:n]...)
				q.heldMu.Unlock()
			}
			if n > 0 || (err != nil && round.Err() == nil) {
				errs[i] = err
				select {
				case woke <- struct{}{}:
				default:
				}
			}
		}()
	}
	select {
	case <-woke:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	if n := q.takeHeld(out); n > 0 {
		return n, nil
	}
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return 0, ctx.Err()
}

// Close closes every member queue.
func (q *CompletionQueue) Close() error {
	var first error
	for _, s := range q.subs {
		if s != nil {
			if err := s.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
