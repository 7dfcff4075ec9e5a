package mem

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/transport"
)

// CompletionQueue collects the completions of the endpoints created with
// it. Its depth bounds the requests posted and not yet taken out (see
// transport.CompletionQueue); completions that no post caused
// (OpRemoteError) are queued beyond it, so a completion is never lost
// while the queue is open. It is safe for concurrent use.
type CompletionQueue struct {
	dev   *Device
	depth int64
	held  atomic.Int64 // entries held by posted requests (see reserve)

	mu     sync.Mutex
	q      []transport.Completion
	head   int
	closed bool
	// wake, when non-nil, is closed (and reset) by the next push or by
	// Close; waiters create it.
	wake chan struct{}
}

var _ transport.CompletionQueue = (*CompletionQueue)(nil)

func newCompletionQueue(d *Device, depth int) *CompletionQueue {
	return &CompletionQueue{dev: d, depth: int64(depth), q: make([]transport.Completion, 0, min(depth, 1<<16))}
}

// reserve takes the entry a request being posted holds until its
// completion is taken out, or says the queue is full.
func (q *CompletionQueue) reserve() error {
	if n := q.held.Add(1); n > q.depth {
		q.held.Add(-1)
		return fmt.Errorf("%d requests posted and not taken out, depth %d: %w", n-1, q.depth, transport.ErrQueueFull)
	}
	return nil
}

// push appends c; it is dropped if the queue is closed. It never blocks
// for long (the queue's mutex only).
func (q *CompletionQueue) push(c transport.Completion) {
	q.mu.Lock()
	if !q.closed {
		q.q = append(q.q, c)
		if q.wake != nil {
			close(q.wake)
			q.wake = nil
		}
	}
	q.mu.Unlock()
}

// take moves up to len(out) completions into out and frees the entries
// of the requests they complete. q.mu is held.
func (q *CompletionQueue) take(out []transport.Completion) int {
	n := copy(out, q.q[q.head:])
	freed := int64(0)
	for i := range out[:n] {
		if out[i].Op != transport.OpRemoteError {
			freed++
		}
	}
	q.held.Add(-freed)
	clear(q.q[q.head : q.head+n])
	q.head += n
	switch {
	case q.head == len(q.q):
		q.q = q.q[:0]
		q.head = 0
	case q.head >= 1024 && 2*q.head >= len(q.q):
		k := copy(q.q, q.q[q.head:])
		clear(q.q[k:])
		q.q = q.q[:k]
		q.head = 0
	}
	return n
}

// Ready reports whether a completion waits to be taken
// (transport.Readier).
func (q *CompletionQueue) Ready() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q) > q.head
}

// Poll moves up to len(out) completions into out and returns how many. It
// never blocks; after Close it returns 0.
func (q *CompletionQueue) Poll(out []transport.Completion) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.take(out)
}

// Wait blocks until at least one completion is queued, then behaves as
// Poll. It returns early with ctx's error, or with an error wrapping
// transport.ErrClosed once the queue is closed.
func (q *CompletionQueue) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return 0, fmt.Errorf("mem: wait on completion queue of %s: %w", q.dev.name, transport.ErrClosed)
		}
		if q.head < len(q.q) {
			n := q.take(out)
			q.mu.Unlock()
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			q.mu.Unlock()
			return 0, err
		}
		if q.wake == nil {
			q.wake = make(chan struct{})
		}
		wake := q.wake
		q.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// Close wakes every waiter and drops the queued completions. Later
// completions for the queue are dropped. Closing twice does nothing.
func (q *CompletionQueue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	q.q = nil
	q.head = 0
	if q.wake != nil {
		close(q.wake)
		q.wake = nil
	}
	return nil
}
