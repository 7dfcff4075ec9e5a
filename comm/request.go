package comm

import (
	"context"
	"fmt"
)

type collKind uint8

const (
	collAllreduce collKind = iota + 1
	collBroadcast
	collBarrier
)

func (k collKind) String() string {
	switch k {
	case collAllreduce:
		return "allreduce"
	case collBroadcast:
		return "broadcast"
	case collBarrier:
		return "barrier"
	}
	return "collective"
}

// Request is an asynchronous collective. Until Wait (or Test) reports it
// done, its buffers belong to the communicator: do not read or write them.
type Request struct {
	c     *Comm
	kind  collKind
	send  []byte
	recv  []byte
	dt    DataType
	op    Op
	root  int
	count int
	ctx   context.Context // nil: the communicator's timeout applies
	done  chan struct{}
	err   error
}

// Wait blocks until the collective has finished and returns its error. If
// ctx ends first Wait returns ctx's error, and the collective goes on: call
// Wait again before touching its buffers, or Abort the communicator.
func (r *Request) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("comm: rank %d: waiting for %s: %w", r.c.rank, r.kind, ctx.Err())
	}
}

// Test reports whether the collective has finished, and its error if so.
// It never blocks.
func (r *Request) Test() (bool, error) {
	select {
	case <-r.done:
		return true, r.err
	default:
		return false, nil
	}
}

// WaitAll waits for every request and returns the first error.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var first error
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := r.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// usable returns the communicator's sticky error, or ErrClosed.
func (c *Comm) usable(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usableLocked(op)
}

func (c *Comm) usableLocked(op string) error {
	if c.err != nil {
		return c.err
	}
	if c.closed {
		return fmt.Errorf("comm: rank %d: %s: %w", c.rank, op, ErrClosed)
	}
	return nil
}

// submit queues r for the worker, or completes it at once with the
// communicator's error.
func (c *Comm) submit(r *Request) *Request {
	r.c = c
	r.done = make(chan struct{})
	c.mu.Lock()
	if err := c.usableLocked(r.kind.String()); err != nil {
		c.mu.Unlock()
		r.err = err
		close(r.done)
		return r
	}
	c.queue <- r
	c.mu.Unlock()
	return r
}

// failed returns an already finished request carrying err (bad arguments:
// nothing was queued or sent).
func (c *Comm) failed(kind collKind, err error) *Request {
	r := &Request{c: c, kind: kind, err: err, done: make(chan struct{})}
	close(r.done)
	return r
}

// worker runs queued collectives one at a time, in order.
func (c *Comm) worker() {
	defer c.wg.Done()
	for {
		select {
		case r := <-c.queue:
			c.run(r)
		case <-c.stop:
			for {
				select {
				case r := <-c.queue:
					c.run(r)
				default:
					return
				}
			}
		}
	}
}

func (c *Comm) run(r *Request) {
	defer close(r.done)
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err == nil {
		err = c.exec.Err()
	}
	if err != nil {
		r.err = err
		return
	}
	ctx := r.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	r.err = c.execute(ctx, r)
	if r.err != nil {
		c.mu.Lock()
		if c.err == nil && c.exec.Err() != nil {
			c.err = c.exec.Err()
		}
		c.mu.Unlock()
	}
}
