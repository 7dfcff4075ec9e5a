package shm

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// cq is a completion queue. Completions wait in a FIFO under mu; the
// queue's bell (in the device's control segment) is what its waiters sleep
// on and what peers ring after they publish records for, or consume
// records of, the queue's endpoints.
//
// Capacity: the queue holds depth completions. Every posted request holds
// one entry from its post until its completion is taken by Poll or Wait;
// a post that would exceed depth is refused with an error wrapping
// transport.ErrQueueFull. OpRemoteError completions take no entry.
//
// Progress is driven by the callers: Poll (and so Wait) first consumes the
// rings of the queue's endpoints and pushes their queued records, then
// takes completions. Nothing moves a queue's endpoints forward while no one
// polls it, except a peer's nudge (see endpoint.nudgePeer), which a peer
// sends when it is about to sleep waiting for this side.
type cq struct {
	dev   *Device
	index int // of the bell
	bell  bell
	depth int

	eps atomic.Pointer[[]*endpoint] // copy on write, under mu

	mu       sync.Mutex
	fifo     fifo[transport.Completion]
	queued   atomic.Int32 // fifo.len(), for Poll's fast path
	reserved atomic.Int64 // entries held by posted requests
	closed   atomic.Bool

	waiting atomic.Int32 // goroutines inside Wait
}

var _ transport.CompletionQueue = (*cq)(nil)

func newCQ(d *Device, index, depth int) *cq {
	q := &cq{dev: d, index: index, bell: bellAt(d.bells, index), depth: depth}
	q.fifo.grow(min(depth, 1<<16))
	q.eps.Store(&[]*endpoint{})
	return q
}

// reserve takes an entry for a request about to be posted.
func (q *cq) reserve() error {
	if q.closed.Load() {
		return fmt.Errorf("completion queue: %w", transport.ErrClosed)
	}
	for {
		r := q.reserved.Load()
		if r >= int64(q.depth) {
			return fmt.Errorf("completion queue of depth %d holds %d posted requests: %w", q.depth, r, transport.ErrQueueFull)
		}
		if q.reserved.CompareAndSwap(r, r+1) {
			return nil
		}
	}
}

// unreserve returns the entry of a request whose post failed.
func (q *cq) unreserve() { q.reserved.Add(-1) }

// push queues a completion and wakes the queue's sleepers. After Close it
// is dropped.
func (q *cq) push(c transport.Completion) {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return
	}
	q.fifo.push(c)
	q.queued.Store(int32(q.fifo.len()))
	q.bell.ring() // under mu: Close unmaps nothing while we hold it
	q.mu.Unlock()
}

func (q *cq) addEndpoint(e *endpoint) {
	q.mu.Lock()
	old := *q.eps.Load()
	eps := append(old[:len(old):len(old)], e)
	q.eps.Store(&eps)
	q.mu.Unlock()
}

func (q *cq) removeEndpoint(e *endpoint) {
	q.mu.Lock()
	old := *q.eps.Load()
	eps := make([]*endpoint, 0, len(old))
	for _, x := range old {
		if x != e {
			eps = append(eps, x)
		}
	}
	q.eps.Store(&eps)
	q.mu.Unlock()
}

// Poll drives the queue's endpoints forward, then moves up to len(out)
// completions into out. It never blocks (it may copy: a message or staged
// data that has arrived is placed by the caller of Poll).
func (q *cq) Poll(out []transport.Completion) int {
	if q.closed.Load() {
		return 0
	}
	for _, e := range *q.eps.Load() {
		e.progress()
	}
	return q.take(out)
}

func (q *cq) take(out []transport.Completion) int {
	if len(out) == 0 || q.queued.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	n, held := 0, 0
	for n < len(out) && q.fifo.len() > 0 {
		c := q.fifo.pop()
		if c.Op != transport.OpRemoteError {
			held++
		}
		out[n] = c
		n++
	}
	q.reserved.Add(int64(-held))
	q.queued.Store(int32(q.fifo.len()))
	q.mu.Unlock()
	return n
}

// maxSleep bounds one futex sleep of Wait, so that a context canceled
// without a deadline is noticed within it.
const maxSleep = 20 * time.Millisecond

// Wait polls for up to Options.Spin, then sleeps on the queue's bell until
// a peer or a local goroutine rings it, and polls again. It returns when it
// took at least one completion, when ctx is done (ctx's error) or after
// Close (ErrClosed).
func (q *cq) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("shm: cq wait with empty output slice: %w", transport.ErrInvalid)
	}
	q.waiting.Add(1)
	defer q.waiting.Add(-1)
	spin := q.dev.opts.Spin
	start := time.Now()
	for i := 0; ; i++ {
		if q.closed.Load() {
			return 0, fmt.Errorf("shm: cq wait: %w", transport.ErrClosed)
		}
		if n := q.Poll(out); n > 0 {
			return n, nil
		}
		if i&63 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		if i&15 != 15 {
			continue
		}
		now := time.Now()
		if now.Sub(start) < spin {
			runtime.Gosched()
			continue
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		d := maxSleep
		if dl, ok := ctx.Deadline(); ok {
			d = min(d, dl.Sub(now))
		}
		q.sleep(d)
		start = time.Now()
	}
}

// sleep waits on the bell for at most d, unless progress is possible.
func (q *cq) sleep(d time.Duration) {
	q.bell.waiters.Add(1)
	s := q.bell.seq.Load()
	ready := q.closed.Load()
	if !ready {
		for _, e := range *q.eps.Load() {
			e.progress()
		}
		ready = q.queued.Load() != 0
	}
	if !ready {
		for _, e := range *q.eps.Load() {
			e.nudgePeer()
		}
		stats.sleeps.Add(1)
		futexSleep(q.bell.seq, s, d)
	}
	q.bell.waiters.Add(^uint32(0))
}

// Close wakes every waiter; completions still queued are dropped and later
// ones are too.
func (q *cq) Close() error {
	q.mu.Lock()
	if q.closed.Load() {
		q.mu.Unlock()
		return nil
	}
	q.closed.Store(true)
	q.fifo.clear()
	q.queued.Store(0)
	q.bell.seq.Add(1)
	futexWakeAll(q.bell.seq)
	q.mu.Unlock()
	q.dev.forgetCQ(q)
	return nil
}

// drainWaiters waits until no goroutine is inside Wait (they were woken by
// Close), so that the device may unmap the bell.
func (q *cq) drainWaiters() {
	for q.waiting.Load() != 0 {
		q.bell.seq.Add(1)
		futexWakeAll(q.bell.seq)
		time.Sleep(100 * time.Microsecond)
	}
}

// fifo is a growable FIFO that allocates only when it grows. base numbers
// its elements: the element at the head has number base.
type fifo[T any] struct {
	buf        []T
	head, size int
	base       uint64
}

func (f *fifo[T]) len() int { return f.size }

func (f *fifo[T]) grow(min int) {
	if min <= len(f.buf) {
		return
	}
	n := max(16, 2*len(f.buf))
	for n < min {
		n *= 2
	}
	nb := make([]T, n)
	for i := 0; i < f.size; i++ {
		nb[i] = f.buf[(f.head+i)&(len(f.buf)-1)]
	}
	f.buf, f.head = nb, 0
}

func (f *fifo[T]) push(v T) {
	if f.size == len(f.buf) {
		f.grow(f.size + 1)
	}
	f.buf[(f.head+f.size)&(len(f.buf)-1)] = v
	f.size++
}

// at returns element i counted from the head; i < len.
func (f *fifo[T]) at(i int) *T { return &f.buf[(f.head+i)&(len(f.buf)-1)] }

// seq returns the element numbered s, or nil if it is not in the FIFO.
func (f *fifo[T]) seq(s uint64) *T {
	if s < f.base || s-f.base >= uint64(f.size) {
		return nil
	}
	return f.at(int(s - f.base))
}

// next is the number the next pushed element gets.
func (f *fifo[T]) next() uint64 { return f.base + uint64(f.size) }

func (f *fifo[T]) pop() T {
	var zero T
	v := f.buf[f.head]
	f.buf[f.head] = zero
	f.head = (f.head + 1) & (len(f.buf) - 1)
	f.size--
	f.base++
	return v
}

func (f *fifo[T]) clear() {
	for f.size > 0 {
		f.pop()
	}
}
