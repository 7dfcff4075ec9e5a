package shm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// cq is a completion queue. Completions wait with the endpoint that made
// them, in its done FIFO under the endpoint's lock (which the code making
// a completion holds already), and Poll collects them from the queue's
// endpoints; those of a closed endpoint move to the queue's own FIFO. The
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
	fifo     fifo[transport.Completion] // of endpoints gone from eps
	queued   atomic.Int32               // fifo.len(), for Poll's fast path
	next     atomic.Uint32              // the endpoint Poll starts collecting at
	reserved atomic.Int64               // entries held by posted requests
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

// pushLocked queues a completion of e (under e.mu) and wakes the queue's
// sleepers. After the queue's Close it is dropped. (The bell stays mapped
// while e may push: the device closes its endpoints before it unmaps.)
func (e *endpoint) pushLocked(c transport.Completion) {
	q := e.cq
	if q.closed.Load() {
		return
	}
	e.done.push(c)
	e.ndone.Add(1)
	q.bell.ring()
}

func (q *cq) addEndpoint(e *endpoint) {
	q.mu.Lock()
	old := *q.eps.Load()
	eps := append(old[:len(old):len(old)], e)
	q.eps.Store(&eps)
	q.mu.Unlock()
}

// removeEndpoint drops e from the queue; its completions not yet taken
// move to the queue's FIFO.
func (q *cq) removeEndpoint(e *endpoint) {
	e.mu.Lock()
	q.mu.Lock()
	old := *q.eps.Load()
	eps := make([]*endpoint, 0, len(old))
	for _, x := range old {
		if x != e {
			eps = append(eps, x)
		}
	}
	q.eps.Store(&eps)
	for e.done.len() > 0 {
		if c := e.done.pop(); !q.closed.Load() {
			q.fifo.push(c)
			q.queued.Add(1)
		}
	}
	e.ndone.Store(0)
	q.mu.Unlock()
	e.mu.Unlock()
}

// Poll drives the queue's endpoints forward, then moves up to len(out)
// completions into out. It never blocks (it may copy: a message or staged
// data that has arrived is placed by the caller of Poll).
func (q *cq) Poll(out []transport.Completion) int {
	if q.closed.Load() {
		return 0
	}
	eps := *q.eps.Load()
	for _, e := range eps {
		e.progress()
	}
	return q.take(eps, out)
}

// take moves up to len(out) completions into out: first those of removed
// endpoints, then the endpoints', starting at a rotating one.
func (q *cq) take(eps []*endpoint, out []transport.Completion) int {
	n, held := 0, 0
	if len(out) > 0 && q.queued.Load() != 0 {
		q.mu.Lock()
		for n < len(out) && q.fifo.len() > 0 {
			c := q.fifo.pop()
			if c.Op != transport.OpRemoteError {
				held++
			}
			out[n] = c
			n++
		}
		q.queued.Add(int32(-n))
		q.mu.Unlock()
	}
	start := 0
	if len(eps) > 1 {
		start = int(q.next.Add(1) % uint32(len(eps)))
	}
	for i := range eps {
		if n == len(out) {
			break
		}
		e := eps[(start+i)%len(eps)]
		if e.ndone.Load() == 0 {
			continue
		}
		e.mu.Lock()
		k := 0
		for n < len(out) && e.done.len() > 0 {
			c := e.done.pop()
			if c.Op != transport.OpRemoteError {
				held++
			}
			out[n] = c
			n++
			k++
		}
		e.ndone.Add(int32(-k))
		e.mu.Unlock()
	}
	if held != 0 {
		q.reserved.Add(int64(-held))
	}
	return n
}

// Ready reports whether a completion waits to be taken
// (transport.Readier).
func (q *cq) Ready() bool { return !q.closed.Load() && q.ready() }

// ready reports whether a completion waits.
func (q *cq) ready() bool {
	if q.queued.Load() != 0 {
		return true
	}
	for _, e := range *q.eps.Load() {
		if e.ndone.Load() != 0 {
			return true
		}
	}
	return false
}

// maxSleep bounds one futex sleep of Wait, so that a context canceled
// without a deadline is noticed within it.
const maxSleep = 20 * time.Millisecond

// Wait polls for up to Options.Spin, then polls yielding the CPU between
// polls for up to Options.Yield, then sleeps on the queue's bell until a
// peer or a local goroutine rings it, and polls again. It returns when it
// took at least one completion, when ctx is done (ctx's error) or after
// Close (ErrClosed).
func (q *cq) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("shm: cq wait with empty output slice: %w", transport.ErrInvalid)
	}
	q.waiting.Add(1)
	defer q.waiting.Add(-1)
	spin, yield := q.dev.opts.Spin, q.dev.opts.Yield
	start := time.Now()
	yielding := false
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
		if i&15 != 15 && !yielding {
			continue
		}
		now := time.Now()
		if el := now.Sub(start); el < spin {
			// No runtime.Gosched here: with an idle P it wakes another
			// thread to look for work (a futex wake-up every 16 polls,
			// measured on transport/tcp's spin); the scheduler preempts
			// a spinner that runs too long anyway.
			continue
		} else if el < spin+yield {
			// Poll between yields of the CPU: this process stays runnable,
			// and a peer that waits for the CPU (more ranks than cores)
			// gets it.
			yielding = true
			schedYield()
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
		start, yielding = time.Now(), false
	}
}

// schedYield gives the CPU to another runnable thread, if there is one.
//
// Not a raw system call: entering the system call through the runtime
// lets the scheduler run this process's other goroutines, which the
// staged path needs (a peer in the same process, the socket reader); with
// RawSyscall the conformance suite's staged reads stalled.
func schedYield() { unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// sleep waits on the bell for at most d, unless progress is possible.
func (q *cq) sleep(d time.Duration) {
	q.bell.waiters.Add(1)
	s := q.bell.seq.Load()
	ready := q.closed.Load()
	if !ready {
		for _, e := range *q.eps.Load() {
			e.progress()
		}
		ready = q.ready()
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
	for _, e := range *q.eps.Load() {
		e.mu.Lock()
		e.done.clear()
		e.ndone.Store(0)
		e.mu.Unlock()
	}
	// Once forgotten, the device's Close no longer waits for this queue's
	// waiters before it unmaps the bell they touch on their way out.
	q.drainWaiters()
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
