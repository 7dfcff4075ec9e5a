package ibvfake

import (
	"fmt"
	"syscall"

	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// cq is a completion queue of fixed capacity with a completion channel: a
// non-blocking pipe that gets one byte when a completion arrives on an
// armed queue.
type cq struct {
	ctx     *context
	cap     int
	entries []ibv.WC
	overrun bool
	armed   bool
	qps     int // queue pairs using it
	closed  bool
	rfd     int // the channel's read end (Fd)
	wfd     int
}

func (c *context) NewCQ(depth int) (ibv.CQ, error) {
	f := c.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := c.checkLocked("ibv_create_cq"); err != nil {
		return nil, err
	}
	if err := f.injected("NewCQ"); err != nil {
		return nil, err
	}
	if depth < 1 || depth > c.dev.cfg.MaxCQE {
		return nil, fmt.Errorf("ibv_create_cq(%d entries, device max %d): %w", depth, c.dev.cfg.MaxCQE, syscall.EINVAL)
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("ibv_create_comp_channel: %w", err)
	}
	// Created armed: the real ibv.CQ requests notification at creation.
	return &cq{ctx: c, cap: max(depth-c.dev.cfg.CQShortfall, 1), armed: true, rfd: p[0], wfd: p[1]}, nil
}

// pushLocked adds a completion, signalling the channel if armed. One more
// than the capacity is an overrun: the queue is broken from then on.
func (q *cq) pushLocked(w ibv.WC) {
	f := q.ctx.f()
	if q.closed {
		return
	}
	if len(q.entries) >= q.cap {
		if !q.overrun {
			q.overrun = true
		}
		f.overruns++
	} else {
		q.entries = append(q.entries, w)
	}
	if q.armed {
		q.armed = false
		syscall.Write(q.wfd, []byte{1})
	}
}

// Poll moves up to len(out) completions into out.
func (q *cq) Poll(out []ibv.WC) (int, error) {
	f := q.ctx.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.closed {
		return 0, fmt.Errorf("ibv_poll_cq: queue destroyed: %w", syscall.EINVAL)
	}
	if q.overrun {
		return 0, fmt.Errorf("ibv_poll_cq: completion queue overrun (capacity %d): %w", q.cap, syscall.EOVERFLOW)
	}
	n := copy(out, q.entries)
	q.entries = q.entries[:copy(q.entries, q.entries[n:])]
	return n, nil
}

// Fd is the completion channel's read end, non-blocking.
func (q *cq) Fd() int { return q.rfd }

// ConsumeEvent takes one pending event and re-arms the queue.
func (q *cq) ConsumeEvent() (bool, error) {
	var b [1]byte
	n, err := syscall.Read(q.rfd, b[:])
	if err == syscall.EAGAIN {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ibv_get_cq_event: %w", err)
	}
	if n == 0 {
		return false, nil
	}
	f := q.ctx.f()
	f.mu.Lock()
	q.armed = true
	f.mu.Unlock()
	return true, nil
}

// Close destroys the queue; it fails with EBUSY while queue pairs use it.
func (q *cq) Close() error {
	f := q.ctx.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.closed {
		return fmt.Errorf("ibv_destroy_cq: %w", syscall.EINVAL)
	}
	if q.qps > 0 {
		return fmt.Errorf("ibv_destroy_cq: %d queue pairs still use it: %w", q.qps, syscall.EBUSY)
	}
	q.closed = true
	syscall.Close(q.rfd)
	syscall.Close(q.wfd)
	return nil
}
