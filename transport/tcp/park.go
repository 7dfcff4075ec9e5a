package tcp

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// parker puts a Wait that has spun in vain to sleep in the kernel, in
// poll(2) on the queue's sockets and on an eventfd that push rings, so
// that the data's arrival wakes the waiting thread itself: one wake-up,
// where a background goroutine would be woken first and then wake the
// waiter. With more ranks than cores, where waits end in sleep most of the
// time, this halves the wake-ups.
//
// One Wait at a time sleeps this way (the others of the same queue sleep
// on notify, with the background loop serving them). While it sleeps, the
// background loop stands aside: the sleeper is polling.
type parker struct {
	mu    sync.Mutex // held by the Wait asleep in poll(2)
	efd   eventfd
	fds   []unix.PollFd
	lanes []*lane
	in    atomic.Bool // a Wait is in sleep (polling, or asleep in poll(2))
	// asleep is set just before the Wait enters poll(2) and cleared when
	// it leaves: only then does a push write the eventfd. A push made by
	// the sleeper's own drive (it reads the socket between two polls)
	// does not: it would cost a system call and wake the next poll(2) at
	// once for nothing.
	asleep atomic.Bool
}

// parkPollTimeout bounds one poll(2), so that a sleeping Wait sees its
// context end.
const parkPollTimeout = 10 // ms

// parkFds is the room a sleeper's poll list starts with (its lanes and
// the eventfd), so that the first sleep of a small job does not allocate
// in the middle of a caller's steady state.
const parkFds = 8

func (p *parker) init() {
	p.efd.open()
	p.fds = make([]unix.PollFd, 0, parkFds)
	p.lanes = make([]*lane, 0, parkFds)
}

// ring wakes the Wait asleep in poll(2), if any.
func (p *parker) ring() {
	if p.asleep.Load() {
		p.efd.ring()
	}
}

// close releases the eventfd once no Wait sleeps on it.
func (p *parker) close() {
	p.efd.ring()
	p.mu.Lock()
	p.efd.close()
	p.mu.Unlock()
}

// eventfd is an eventfd that may be rung from any goroutine, also while
// (and after) it is closed: a ring never writes to a descriptor that was
// closed and perhaps reused.
type eventfd struct {
	fd     int // -1 if the system has none
	users  atomic.Int32
	closed atomic.Bool
}

func (e *eventfd) open() {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		fd = -1
	}
	e.fd = fd
}

func (e *eventfd) ok() bool { return e.fd >= 0 && !e.closed.Load() }

func (e *eventfd) ring() {
	e.users.Add(1)
	if e.fd >= 0 && !e.closed.Load() {
		one := [8]byte{1}
		unix.Write(e.fd, one[:])
	}
	e.users.Add(-1)
}

// drain resets the counter after a wake-up; only the owner calls it.
func (e *eventfd) drain() {
	var b [8]byte
	unix.Read(e.fd, b[:])
}

// close releases the descriptor once no ring is using it.
func (e *eventfd) close() {
	if e.fd < 0 || e.closed.Swap(true) {
		return
	}
	for e.users.Load() > 0 {
		runtime.Gosched()
	}
	unix.Close(e.fd)
}

// sleep is Wait's sleep in the kernel. ok false: another Wait sleeps there
// already, or there is no eventfd; the caller sleeps on notify.
func (q *cq) sleep(ctx context.Context, out []transport.Completion) (n int, err error, ok bool) {
	p := &q.park
	if !p.mu.TryLock() {
		return 0, nil, false
	}
	defer p.mu.Unlock()
	if !p.efd.ok() {
		return 0, nil, false
	}
	p.in.Store(true)
	defer p.in.Store(false)
	for {
		// Announced (p.in) before this last look, so that a completion
		// pushed from now on rings the eventfd.
		moved := q.drive()
		if n := q.take(out); n > 0 {
			return n, nil, true
		}
		select {
		case <-q.done:
			return 0, fmt.Errorf("tcp: cq wait: %w", transport.ErrClosed), true
		case <-ctx.Done():
			return 0, ctx.Err(), true
		default:
		}
		if moved {
			continue
		}
		p.fds = p.fds[:0]
		p.lanes = p.lanes[:0]
		for _, l := range *q.lanes.Load() {
			if l.e.failed.Load() {
				continue
			}
			ev := int16(unix.POLLIN)
			if l.txWant.Load() {
				ev |= unix.POLLOUT
			}
			p.fds = append(p.fds, unix.PollFd{Fd: int32(l.fd), Events: ev})
			p.lanes = append(p.lanes, l)
		}
		p.fds = append(p.fds, unix.PollFd{Fd: int32(p.efd.fd), Events: unix.POLLIN})
		// Announced before this last look at the ring, so that a
		// completion pushed by another goroutine from now on rings the
		// eventfd, and one pushed before is seen here.
		p.asleep.Store(true)
		if q.queued() {
			p.asleep.Store(false)
			clear(p.lanes)
			continue
		}
		_, err := unix.Poll(p.fds, parkPollTimeout)
		p.asleep.Store(false)
		if err != nil && err != unix.EINTR {
			return 0, nil, false // fall back to notify
		}
		if p.fds[len(p.fds)-1].Revents != 0 {
			p.efd.drain()
		}
		clear(p.lanes)
	}
}
