package tcp

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// cq is a completion queue: a ring of completions under a mutex, the
// sockets of its endpoints, which its callers drive, and a one-token
// channel that wakes a parked waiter.
//
// Progress is driven by the caller (see doc.go): Poll and Wait read and
// write the sockets of the queue's endpoints themselves, without waking any
// other goroutine. While a Wait spins or sleeps in poll(2) on the sockets
// (park.go), the device's background loop stands aside for them (it drops
// a socket at its first wake-up for it). A second Wait of the same queue
// that finds nothing sleeps on notify, and before it does it hands the
// sockets back to the background loop, which wakes it. When callers stop
// coming (no Poll or Wait for a lazy period), a timer hands the sockets
// back too, so that acknowledgements and the peer's data keep flowing
// while nobody polls.
type cq struct {
	dev    *Device
	mu     sync.Mutex
	ring   ring[transport.Completion]
	closed bool
	notify chan struct{} // capacity 1: "something may be queued"
	done   chan struct{} // closed by Close

	depth int
	used  atomic.Int64 // entries held by posted requests (see reserve)

	lanes    atomic.Pointer[[]*lane] // sockets of the queue's endpoints (copy on write under mu)
	spinners atomic.Int32            // Waits polling the sockets now
	parked   atomic.Int32            // Waits asleep on notify
	activity atomic.Uint64           // Poll and Wait calls so far

	busyUntil atomic.Int64 // monoNow(): callers count as active until then (see active)

	park parker // the Wait asleep in poll(2)

	scanMu  sync.Mutex    // guards scanFds (drive takes it with TryLock)
	empty   atomic.Int32  // drives in a row that moved nothing
	scanFds []unix.PollFd // drive's poll(2) set

	timerOn  atomic.Bool  // the lazy hand-off timer is scheduled
	lazyNext atomic.Int64 // its next period (see lazyPeriod)
	timer    *time.Timer
	lastSeen atomic.Uint64 // activity at the timer's previous run
}

var _ transport.CompletionQueue = (*cq)(nil)

// The lazy timer looks lazyPeriod after a caller left Poll or Wait; if
// callers came meanwhile it looks again after twice as long, up to
// lazyMaxPeriod, and once it finds the queue quiet it hands the sockets to
// the background loop and starts again from lazyPeriod. So a queue
// in constant use wakes the timer's goroutine a few dozen times a second,
// not a thousand (each wake-up takes a core from the ranks on a small
// host), and a caller that went away is covered within lazyMaxPeriod.
const (
	lazyPeriod    = time.Millisecond
	lazyMaxPeriod = 20 * time.Millisecond
)

func newCQ(dev *Device, depth int) *cq {
	q := &cq{dev: dev, notify: make(chan struct{}, 1), done: make(chan struct{}), depth: depth}
	q.ring.grow(min(depth, 1<<16))
	q.lanes.Store(new([]*lane))
	q.park.init()
	q.lazyNext.Store(int64(lazyPeriod))
	q.timer = time.AfterFunc(time.Hour, q.lazy)
	q.timer.Stop()
	return q
}

// reserve takes one entry for a request about to be posted. It fails with
// ErrQueueFull when the queue's depth is taken by requests whose
// completions were not taken yet.
func (q *cq) reserve(op string) error {
	if q.used.Add(1) > int64(q.depth) {
		q.used.Add(-1)
		return fmt.Errorf("tcp: post %s: %d requests already hold the completion queue's %d entries: %w", op, q.depth, q.depth, transport.ErrQueueFull)
	}
	return nil
}

// unreserve returns an entry taken by reserve for a post that was refused.
func (q *cq) unreserve() { q.used.Add(-1) }

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
	q.park.ring()
}

// queued reports whether completions are waiting to be taken.
func (q *cq) queued() bool {
	q.mu.Lock()
	n := q.ring.len()
	q.mu.Unlock()
	return n > 0
}

// take moves queued completions into out.
func (q *cq) take(out []transport.Completion) int {
	q.mu.Lock()
	n, freed := 0, 0
	for n < len(out) && q.ring.len() > 0 {
		c := q.ring.pop()
		if c.Op != transport.OpRemoteError {
			freed++
		}
		out[n] = c
		n++
	}
	more := q.ring.len() > 0
	q.mu.Unlock()
	if freed > 0 {
		q.used.Add(-int64(freed))
	}
	if more && n > 0 {
		// Pass the wake-up on to another waiter.
		select {
		case q.notify <- struct{}{}:
		default:
		}
	}
	return n
}

// Ready reports whether a completion waits to be taken
// (transport.Readier).
func (q *cq) Ready() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ring.len() > 0
}

// Poll drives the queue's sockets once (non-blocking reads and writes),
// then moves up to len(out) completions into out. It never blocks.
func (q *cq) Poll(out []transport.Completion) int {
	q.activity.Add(1)
	if len(out) == 0 {
		// A poll that takes nothing (the executor's flush at the end of
		// a run) writes what was posted and reads nothing: a read that
		// finds an empty socket cost ~3 us of a broadcast root's 10 here.
		q.flush()
	} else {
		q.drive()
	}
	n := q.take(out)
	q.left()
	return n
}

// left is called when a caller leaves Poll or Wait.
func (q *cq) left() {
	q.busyUntil.Store(monoNow() + int64(coalesceWindow))
	q.idle()
}

// Wait returns at least one completion. It polls the sockets of the
// queue's endpoints itself, spinning while data moves, and once nothing
// arrived for Options.SpinTime sleeps in poll(2) on them (see parker). It
// returns early with ctx's error, or ErrClosed after Close.
func (q *cq) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if len(out) == 0 {
		return 0, fmt.Errorf("tcp: cq wait with empty output slice: %w", transport.ErrInvalid)
	}
	q.activity.Add(1)
	defer q.left()
	spin := q.dev.spin
	procs := int32(runtime.GOMAXPROCS(0))
	for {
		// Spin: poll the sockets until something completes or nothing
		// moved for the spin budget.
		q.spinners.Add(1)
		spinning.Add(1)
		quiet := monoNow()
		for i := 0; ; i++ {
			moved := q.drive()
			if n := q.take(out); n > 0 {
				q.spinners.Add(-1)
				spinning.Add(-1)
				return n, nil
			}
			if i&15 == 15 {
				select {
				case <-ctx.Done():
					q.spinners.Add(-1)
					spinning.Add(-1)
					return 0, ctx.Err()
				case <-q.done:
					q.spinners.Add(-1)
					spinning.Add(-1)
					return 0, fmt.Errorf("tcp: cq wait: %w", transport.ErrClosed)
				default:
				}
			}
			now := monoNow()
			crowd := crowded(procs)
			if moved {
				quiet = now
			} else if time.Duration(now-quiet) >= spin.budgetFor(crowd) {
				break
			}
			spin.pause(time.Duration(now-quiet), crowd)
		}
		q.spinners.Add(-1)
		spinning.Add(-1)

		// Sleep in the kernel on the sockets themselves (see parker).
		if n, err, ok := q.sleep(ctx, out); ok {
			return n, err
		}
		// Or, if another Wait sleeps there: the background loop
		// takes the sockets over and wakes us through notify.
		q.parked.Add(1)
		q.handOff()
		if n := q.take(out); n > 0 {
			q.parked.Add(-1)
			return n, nil
		}
		select {
		case <-q.notify:
		case <-q.done:
			q.parked.Add(-1)
			return 0, fmt.Errorf("tcp: cq wait: %w", transport.ErrClosed)
		case <-ctx.Done():
			q.parked.Add(-1)
			return 0, ctx.Err()
		}
		q.parked.Add(-1)
		if n := q.take(out); n > 0 {
			return n, nil
		}
	}
}

// scanLanes is the lane count from which drive, with more ranks than
// cores, asks poll(2) which sockets have input before it reads any.
const scanLanes = 2

// drive makes one non-blocking pass over the queue's sockets; it reports
// whether any bytes moved.
//
// With several sockets one poll(2) with no timeout says which have input
// (or an error or hang-up) and only those are read: a pass that finds
// nothing costs one system call, not one read per socket. That is most
// passes of a Wait, and with more ranks than cores every system call of a
// spinning rank is taken from a rank that has work (measured, 4 ranks on
// 2 cores: about 20 reads per barrier and broadcast, most of them empty).
// A lane with output waiting is driven anyway. Alone on its core a rank
// reads its sockets directly: streaming over several sockets per peer, a
// poll(2) per pass would find most of them ready and cost one more call.
func (q *cq) drive() bool {
	due := q.empty.Load() >= lazyPasses
	moved := q.drive1(due)
	if moved {
		q.empty.Store(0)
	} else {
		q.empty.Add(1)
	}
	return moved
}

// lazyPasses is how many passes in a row that move nothing drive makes
// before it writes lazy output (owed acknowledgements and lazy frames,
// see lane.txNow): until then such output waits to leave with the next
// frame to its peer. Measured with 4 ranks on 2 cores, 8-byte calls (osu,
// barrier after each): a rank wrote about 8 frames per allreduce or
// all-to-all and barrier, 3 of them only credits and acknowledgements;
// holding them back took the allreduce from 77-79 to 66-67 us and the
// all-to-all from 93-95 to 68-70.
const lazyPasses = 8

// drive1 is drive's pass; due: lazy output is written too.
func (q *cq) drive1(due bool) bool {
	lanes := *q.lanes.Load()
	if len(lanes) < scanLanes || !q.dev.opts.Oversubscribed || !q.scanMu.TryLock() {
		return q.driveAll(lanes, due)
	}
	defer q.scanMu.Unlock()
	fds := q.scanFds[:0]
	for _, l := range lanes {
		fds = append(fds, unix.PollFd{Fd: int32(l.fd), Events: unix.POLLIN})
	}
	q.scanFds = fds
	// ppoll with a zero timeout never blocks: a raw system call, without
	// the runtime's bookkeeping around a blocking one.
	if _, _, en := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(&noWait)), 0, 0, 0); en != 0 {
		return q.driveAll(lanes, due) // EINTR or worse: read them all
	}
	moved := false
	for i, l := range lanes {
		switch {
		case fds[i].Revents != 0: // input, an error or a hang-up
			if l.poll(due) {
				moved = true
			}
		case l.txWant.Load() && (due || l.txNow.Load()): // output only: no read to find nothing
			if !l.e.failed.Load() {
				if ok, m, _ := l.txTry(false); ok && m {
					moved = true
				}
			}
		}
	}
	return moved
}

// noWait is the zero timeout of drive's ppoll (read by the kernel only).
var noWait unix.Timespec

// driveAll drives every lane.
func (q *cq) driveAll(lanes []*lane, due bool) bool {
	moved := false
	for _, l := range lanes {
		if l.poll(due) {
			moved = true
		}
	}
	return moved
}

// flush makes a send pass on every lane with frames waiting.
func (q *cq) flush() {
	for _, l := range *q.lanes.Load() {
		if !l.e.failed.Load() && l.txWant.Load() && l.txNow.Load() {
			l.txTry(false)
		}
	}
}

// standAside reports whether the background loop should leave the
// sockets to a Wait that polls them (spinning, or asleep in poll(2)), and
// no Wait relies on them (asleep on notify).
func (q *cq) standAside() bool {
	return (q.spinners.Load() > 0 || q.park.in.Load()) && q.parked.Load() == 0
}

// handOff gives every socket of the queue back to the background loop:
// it watches them again, and owed acknowledgements and queued frames are
// written now (or when the socket has room).
func (q *cq) handOff() {
	for _, l := range *q.lanes.Load() {
		l.handOff()
	}
}

// clockBase and monoNow are a monotonic clock in nanoseconds: one clock
// read, where time.Now reads two (~35 ns against ~60 here, a few times
// per call on the small-message path).
var clockBase = time.Now()

func monoNow() int64 { return int64(time.Since(clockBase)) }

// coalesceWindow is how long after a Poll or Wait returned its caller
// counts as active: posts it makes meanwhile leave with its next poll.
const coalesceWindow = 20 * time.Microsecond

// active reports whether a caller is polling the queue or returned from a
// poll within coalesceWindow.
func (q *cq) active() bool {
	return q.spinners.Load() > 0 || monoNow() < q.busyUntil.Load()
}

// idle is called when a caller leaves Poll or Wait: unless callers keep
// coming, the timer hands the sockets back to the background loop.
func (q *cq) idle() {
	if q.timerOn.CompareAndSwap(false, true) {
		q.timer.Reset(time.Duration(q.lazyNext.Load()))
	}
}

// lazy runs on the timer: after a period without Poll or Wait it hands
// the sockets to the background loop; otherwise it looks again later.
func (q *cq) lazy() {
	q.timerOn.Store(false)
	select {
	case <-q.done:
		return
	default:
	}
	act := q.activity.Load()
	if q.lastSeen.Swap(act) != act || q.spinners.Load() > 0 || q.park.in.Load() {
		q.lazyNext.Store(min(2*q.lazyNext.Load(), int64(lazyMaxPeriod)))
		q.idle()
		return
	}
	q.lazyNext.Store(int64(lazyPeriod))
	q.handOff()
}

func (q *cq) addLane(l *lane) {
	q.mu.Lock()
	old := *q.lanes.Load()
	ls := make([]*lane, len(old), len(old)+1)
	copy(ls, old)
	ls = append(ls, l)
	q.lanes.Store(&ls)
	q.mu.Unlock()
}

func (q *cq) removeLane(l *lane) {
	q.mu.Lock()
	old := *q.lanes.Load()
	ls := make([]*lane, 0, len(old))
	for _, o := range old {
		if o != l {
			ls = append(ls, o)
		}
	}
	q.lanes.Store(&ls)
	q.mu.Unlock()
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
	q.park.close()
	q.timer.Stop()
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
