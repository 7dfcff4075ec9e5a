package tcp

import (
	"context"
	"fmt"
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
	efd   int        // eventfd; -1 if the system has none
	fds   []unix.PollFd
	lanes []*lane
	in    atomic.Bool // a Wait is (about to be) asleep in poll(2)
}

// parkPollTimeout bounds one poll(2), so that a sleeping Wait sees its
// context end.
const parkPollTimeout = 10 // ms

func (p *parker) init() {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		fd = -1
	}
	p.efd = fd
}

// ring wakes the Wait asleep in poll(2), if any.
func (p *parker) ring() {
	if p.in.Load() && p.efd >= 0 {
		var one = [8]byte{1}
		unix.Write(p.efd, one[:])
	}
}

// close releases the eventfd once no Wait sleeps on it.
func (p *parker) close() {
	p.ring()
	p.mu.Lock()
	if p.efd >= 0 {
		unix.Close(p.efd)
		p.efd = -1
	}
	p.mu.Unlock()
}

// sleep is Wait's sleep in the kernel. ok false: another Wait sleeps there
// already, or there is no eventfd; the caller sleeps on notify.
func (q *cq) sleep(ctx context.Context, out []transport.Completion) (n int, err error, ok bool) {
	p := &q.park
	if !p.mu.TryLock() {
		return 0, nil, false
	}
	defer p.mu.Unlock()
	if p.efd < 0 {
		return 0, nil, false
	}
	p.in.Store(true)
	defer p.in.Store(false)
	var drain [8]byte
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
		p.fds = append(p.fds, unix.PollFd{Fd: int32(p.efd), Events: unix.POLLIN})
		if _, err := unix.Poll(p.fds, parkPollTimeout); err != nil && err != unix.EINTR {
			return 0, nil, false // fall back to notify
		}
		if p.fds[len(p.fds)-1].Revents != 0 {
			unix.Read(p.efd, drain[:])
		}
		clear(p.lanes)
	}
}
