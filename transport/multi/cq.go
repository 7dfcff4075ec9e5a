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
// all. Wait first polls them itself (a bounded spin, then polls between
// yields of the processor, as the members' own waits do); only when
// nothing comes does it park: a goroutine per member then waits in that
// member's Wait, and the first completion wakes the caller. Such a waiter
// owns its member until it has taken a completion (or the queue closes):
// meanwhile nobody polls that member directly and what it took is
// returned before anything polled later, so a member's completions keep
// their order. The caller does not wait for the other
// waiters to end: a member whose wait sleeps on its own terms (a futex)
// never delays a completion of another.
//
// Entries (see transport.CompletionQueue) are held exactly, with one
// exception: completions a waiter took and the caller has not yet had
// (at most as many as the caller's last Wait asked for, per member) have
// left their member's queue, whose entries are free already.
type CompletionQueue struct {
	dev  *Device
	subs []memberQueue

	// eps maps member endpoints to the Device's, for Completion.Endpoint:
	// copied on write, read without a lock.
	epsMu sync.Mutex
	eps   atomic.Pointer[map[transport.Endpoint]transport.Endpoint]

	// pollMu orders direct polls of members against waiters taking
	// ownership of them.
	pollMu sync.Mutex
	// held are completions waiters took, in each member's order; werr is
	// the first error a member's wait returned (its queue closed).
	heldMu sync.Mutex
	held   []transport.Completion
	werr   error
	notify chan struct{} // capacity 1: a waiter took something
	life   context.Context
	end    context.CancelFunc
	next   int // the member Poll starts with (fairness)

	parks atomic.Int64 // Waits that parked (tests)

	// Spin is how long Wait polls before it yields the processor between
	// polls, Yield how long it then does so before it parks (defaults:
	// the Device's Spin and Yield).
	Spin, Yield time.Duration
}

type memberQueue struct {
	cq    transport.CompletionQueue
	owned atomic.Bool // a waiter is in cq.Wait
}

var _ transport.CompletionQueue = (*CompletionQueue)(nil)

// NewCompletionQueue creates a queue of depth entries on every member.
func (d *Device) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	if depth < 1 {
		return nil, fmt.Errorf("multi: completion queue of depth %d: %w", depth, transport.ErrInvalid)
	}
	q := &CompletionQueue{dev: d, subs: make([]memberQueue, len(d.members)), Spin: d.Spin, Yield: d.Yield,
		notify: make(chan struct{}, 1)}
	q.life, q.end = context.WithCancel(context.Background())
	for i, m := range d.members {
		s, err := m.NewCompletionQueue(depth)
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("multi: completion queue on %s: %w", m.Name(), err)
		}
		q.subs[i].cq = s
	}
	empty := map[transport.Endpoint]transport.Endpoint{}
	q.eps.Store(&empty)
	return q, nil
}

func (q *CompletionQueue) addEndpoint(sub transport.Endpoint, e transport.Endpoint) {
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

// takeHeld moves what waiters took into out.
func (q *CompletionQueue) takeHeld(out []transport.Completion) int {
	q.heldMu.Lock()
	defer q.heldMu.Unlock()
	n := copy(out, q.held)
	q.held = append(q.held[:0], q.held[n:]...)
	return n
}

// Ready reports whether a completion waits to be taken: one a waiter
// took, or one in a member queue that can tell (transport.Readier).
func (q *CompletionQueue) Ready() bool {
	q.heldMu.Lock()
	n := len(q.held)
	q.heldMu.Unlock()
	if n > 0 {
		return true
	}
	for i := range q.subs {
		if r, ok := q.subs[i].cq.(transport.Readier); ok && r.Ready() {
			return true
		}
	}
	return false
}

// Poll moves up to len(out) completions into out: first those waiters
// took, then the members' not owned by a waiter. It never blocks.
func (q *CompletionQueue) Poll(out []transport.Completion) int {
	n := q.takeHeld(out)
	if n == len(out) {
		return n
	}
	q.pollMu.Lock()
	defer q.pollMu.Unlock()
	// A waiter that took something and let go of its member since
	// takeHeld: its completions come first.
	n += q.takeHeld(out[n:])
	k := len(q.subs)
	start := q.next
	q.next = (q.next + 1) % k
	for j := range k {
		if n == len(out) {
			break
		}
		m := &q.subs[(start+j)%k]
		if m.owned.Load() {
			continue
		}
		got := m.cq.Poll(out[n:])
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
	if len(q.subs) == 1 && !q.subs[0].owned.Load() {
		if n := q.takeHeld(out); n > 0 {
			return n, nil
		}
		n, err := q.subs[0].cq.Wait(ctx, out)
		q.translate(out[:n])
		return n, err
	}
	// Poll, spin, yield, park. Parking costs each completion that ends
	// it hand-offs between goroutines (and threads): a rank of 2 hosts of
	// 2 ranks, recursive doubling of 8 bytes, took 600-1100 us per call
	// when Wait parked after 50 us of polls (with a Gosched between them,
	// which handed the processor to the waiters of an earlier park), and
	// 55-80 us polling between yields for up to a millisecond, less than
	// over TCP alone (70-80 us). A member still owned by a waiter of an
	// earlier park is not polled: its completions come through that
	// waiter, which may need this goroutine's P to deliver them.
	var start time.Time
	yielding := false
	for i := 0; ; i++ {
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		if i&63 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		if i&15 != 0 && !yielding {
			continue
		}
		now := time.Now()
		if start.IsZero() {
			start = now
		}
		el := now.Sub(start)
		if el < q.Spin {
			continue
		}
		if el >= q.Spin+q.Yield {
			break
		}
		yielding = true
		if q.anyOwned() {
			runtime.Gosched()
		}
		yield()
	}
	// Park: every member not already waited on gets a waiter.
	q.parks.Add(1)
	q.pollMu.Lock()
	take := min(len(out), maxTake)
	for i := range q.subs {
		m := &q.subs[i]
		if m.owned.Load() {
			continue
		}
		m.owned.Store(true)
		go q.waitOn(m, take)
	}
	q.pollMu.Unlock()
	for {
		if n := q.takeHeld(out); n > 0 {
			return n, nil
		}
		q.heldMu.Lock()
		werr := q.werr
		q.heldMu.Unlock()
		if werr != nil {
			return 0, werr
		}
		select {
		case <-q.notify:
		case <-q.life.Done():
			return 0, fmt.Errorf("multi: wait: %w", transport.ErrClosed)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// anyOwned reports whether a waiter of an earlier park still waits in a
// member's Wait.
func (q *CompletionQueue) anyOwned() bool {
	for i := range q.subs {
		if q.subs[i].owned.Load() {
			return true
		}
	}
	return false
}

// maxTake bounds what one waiter takes from its member.
const maxTake = 16

// waitOn waits on m until it has a completion (or its queue closes), keeps
// what it took for the caller and lets go of m.
func (q *CompletionQueue) waitOn(m *memberQueue, take int) {
	var buf [maxTake]transport.Completion
	n, err := m.cq.Wait(q.life, buf[:take])
	q.translate(buf[:n])
	// Under pollMu: a Poll either sees these in held or still sees m
	// owned, never m free with these not yet held (it would return m's
	// later completions first).
	q.pollMu.Lock()
	q.heldMu.Lock()
	q.held = append(q.held, buf[:n]...)
	if err != nil && q.werr == nil && q.life.Err() == nil {
		q.werr = err
	}
	q.heldMu.Unlock()
	m.owned.Store(false)
	q.pollMu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Close closes every member queue, which ends the waiters, and wakes the
// callers of Wait.
func (q *CompletionQueue) Close() error {
	q.end()
	var first error
	for i := range q.subs {
		if s := q.subs[i].cq; s != nil {
			if err := s.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
