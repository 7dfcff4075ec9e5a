package tcp

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/transport"
)

// cq is a completion queue: a growable ring of completions under a mutex,
// and a one-token channel that wakes waiters. depth bounds the requests
// posted and not yet taken out (transport.CompletionQueue); the ring itself
// grows, so completions that no post caused (OpRemoteError) are never lost.
type cq struct {
	dev    *Device
	depth  int64
	held   atomic.Int64 // entries held by posted requests (see reserve)
	mu     sync.Mutex
	ring   ring[transport.Completion]
	closed bool
	notify chan struct{} // capacity 1: "something may be queued"
	done   chan struct{} // closed by Close
}

var _ transport.CompletionQueue = (*cq)(nil)

func newCQ(dev *Device, depth int) *cq {
	q := &cq{dev: dev, depth: int64(depth), notify: make(chan struct{}, 1), done: make(chan struct{})}
	q.ring.grow(min(depth, 1024))
	return q
}

// reserve takes the entry a request being posted holds until its
// completion is taken out by Poll, or says the queue is full.
func (q *cq) reserve() error {
	if n := q.held.Add(1); n > q.depth {
		q.held.Add(-1)
		return fmt.Errorf("%d requests posted and not taken out, depth %d: %w", n-1, q.depth, transport.ErrQueueFull)
	}
	return nil
}

// push queues one completion. Completions pushed after Close are dropped.
func (q *cq) push(c transport.Completion) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.ring.push(c)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *cq) Poll(out []transport.Completion) int {
	q.mu.Lock()
	n, freed := 0, int64(0)
	for n < len(out) && q.ring.len() > 0 {
		out[n] = q.ring.pop()
		if out[n].Op != transport.OpRemoteError {
			freed++
		}
		n++
	}
	more := q.ring.len() > 0
	q.mu.Unlock()
	q.held.Add(-freed)
	if more && n > 0 {
		// Pass the wake-up on to another waiter.
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
	return n
}

func (q *cq) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("tcp: cq wait with empty output slice: %w", transport.ErrInvalid)
	}
	for {
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		select {
		case <-q.notify:
		case <-q.done:
			return 0, fmt.Errorf("tcp: cq wait: %w", transport.ErrClosed)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (q *cq) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.ring.clear()
	q.mu.Unlock()
	close(q.done)
	if q.dev != nil {
		q.dev.forgetCQ(q)
	}
	return nil
}

// ring is a growable FIFO that allocates only when it grows.
type ring[T any] struct {
	buf        []T
	head, size int
}

func (r *ring[T]) len() int { return r.size }

func (r *ring[T]) grow(min int) {
	if min <= len(r.buf) {
		return
	}
	n := max(16, 2*len(r.buf))
	for n < min {
		n *= 2
	}
	nb := make([]T, n)
	for i := 0; i < r.size; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}

func (r *ring[T]) push(v T) {
	if r.size == len(r.buf) {
		r.grow(r.size + 1)
	}
	r.buf[(r.head+r.size)%len(r.buf)] = v
	r.size++
}

// peek returns a pointer to the oldest element; the ring must not be empty.
func (r *ring[T]) peek() *T { return &r.buf[r.head] }

// back returns a pointer to the newest element; the ring must not be empty.
func (r *ring[T]) back() *T { return &r.buf[(r.head+r.size-1)%len(r.buf)] }

func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	return v
}

func (r *ring[T]) clear() {
	for r.size > 0 {
		r.pop()
	}
	r.head = 0
}
