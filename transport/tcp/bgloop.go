package tcp

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// bgLoop serves the device's sockets that no caller polls: one goroutine
// asleep in poll(2) on the sockets whose lanes ask for it (bgRead,
// bgWrite) and on an eventfd that ring uses to make it look again. It
// reads and places what arrives and sends the acknowledgements (so a peer's
// writes complete while this side computes), writes output a full socket
// held back, drains a connection after a refusal and enforces the
// deadlines of failing connections.
//
// A lane whose queue has a Wait polling it is taken off the list at the
// loop's first wake-up for it (the Wait serves it), so a busy connection
// costs the loop nothing; the lane is handed back when the Wait sleeps on
// notify or callers stop coming (cq.handOff).
type bgLoop struct {
	mu    sync.Mutex
	lanes []*lane // the device's lanes (copy on write)
	efd   eventfd // rung to make the loop look again
	quit  atomic.Bool
	done  chan struct{}

	// The loop goroutine's own.
	fds   []unix.PollFd
	order []*lane
}

// bgPollMax bounds one sleep of the loop without an eventfd (a system
// without one polls its lanes' flags this often).
const bgPollMax = 10 * time.Millisecond

func (b *bgLoop) start() {
	b.efd.open()
	b.done = make(chan struct{})
	go b.run()
}

// stop ends the loop and waits for it.
func (b *bgLoop) stop() {
	b.quit.Store(true)
	b.ring()
	<-b.done
	b.efd.close()
}

// ring makes the loop look at its lanes again.
func (b *bgLoop) ring() { b.efd.ring() }

func (b *bgLoop) add(l *lane) {
	b.mu.Lock()
	b.lanes = append(b.lanes[:len(b.lanes):len(b.lanes)], l)
	b.mu.Unlock()
	b.ring()
}

func (b *bgLoop) remove(l *lane) {
	b.mu.Lock()
	ls := make([]*lane, 0, len(b.lanes))
	for _, o := range b.lanes {
		if o != l {
			ls = append(ls, o)
		}
	}
	b.lanes = ls
	b.mu.Unlock()
	b.ring()
}

func (b *bgLoop) run() {
	defer close(b.done)
	for !b.quit.Load() {
		b.mu.Lock()
		lanes := b.lanes
		b.mu.Unlock()
		b.fds, b.order = b.fds[:0], b.order[:0]
		if b.efd.fd >= 0 {
			b.fds = append(b.fds, unix.PollFd{Fd: int32(b.efd.fd), Events: unix.POLLIN})
			b.order = append(b.order, nil)
		}
		timeout := -1
		if b.efd.fd < 0 {
			timeout = int(bgPollMax / time.Millisecond)
		}
		now := time.Now().UnixNano()
		for _, l := range lanes {
			if l.closed.Load() {
				continue
			}
			if d := l.nextDeadline(); d != 0 {
				ms := int((d - now + int64(time.Millisecond) - 1) / int64(time.Millisecond))
				if timeout < 0 || ms < timeout {
					timeout = max(ms, 0)
				}
			}
			var ev int16
			if l.bgRead.Load() && !l.rdEnd.Load() {
				ev |= unix.POLLIN
			}
			if l.bgWrite.Load() {
				ev |= unix.POLLOUT
			}
			if ev != 0 {
				b.fds = append(b.fds, unix.PollFd{Fd: int32(l.fd), Events: ev})
				b.order = append(b.order, l)
			}
		}
		if _, err := unix.Poll(b.fds, timeout); err != nil && err != unix.EINTR {
			time.Sleep(time.Millisecond) // cannot happen with valid arguments; do not spin
		}
		now = time.Now().UnixNano()
		for i, pf := range b.fds {
			l := b.order[i]
			if l == nil {
				if pf.Revents != 0 {
					b.efd.drain()
				}
				continue
			}
			if l.closed.Load() {
				continue
			}
			if pf.Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0 && l.bgRead.Load() {
				l.bgReadable()
			}
			if pf.Revents&(unix.POLLOUT|unix.POLLHUP|unix.POLLERR) != 0 && l.bgWrite.Load() {
				l.bgWritable()
			}
		}
		for _, l := range lanes {
			if !l.closed.Load() && l.nextDeadline() != 0 {
				l.deadlines(now)
			}
		}
		clear(b.order)
	}
}
