package comm

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Allreduce reduces send across all ranks with op and leaves the result in
// recv on every rank. send and recv have the same length; they may be the
// same slice (in place), and send may be nil for in place on recv.
// It blocks until done; ctx bounds the call (and if it ends mid-way, the
// communicator breaks, since the ranks can no longer agree on its state).
func Allreduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if send == nil {
		send = recv
	}
	return c.allreduce(newBlocking(ctx), asBytes(send), asBytes(recv), TypeOf[T](), op).wait()
}

// AllreduceAsync starts an Allreduce and returns at once.
func AllreduceAsync[T Number](c *Comm, send, recv []T, op Op) *Request {
	if send == nil {
		send = recv
	}
	return c.AllreduceBytes(asBytes(send), asBytes(recv), TypeOf[T](), op)
}

// AllreduceBytes is Allreduce on raw bytes holding elements of type dt, for
// frameworks that keep tensors as bytes. It returns at once.
func (c *Comm) AllreduceBytes(send, recv []byte, dt DataType, op Op) *Request {
	return c.allreduce(&Request{}, send, recv, dt, op)
}

// allreduce validates and submits r (a pooled blocking request or a fresh
// asynchronous one).
func (c *Comm) allreduce(r *Request, send, recv []byte, dt DataType, op Op) *Request {
	if err := c.prepAllreduce(r, send, recv, dt, op); err != nil {
		return c.reject(r, collAllreduce, err)
	}
	return c.submit(r)
}

// prepAllreduce checks the arguments and fills r.
func (c *Comm) prepAllreduce(r *Request, send, recv []byte, dt DataType, op Op) error {
	if !dt.Valid() {
		return fmt.Errorf("comm: allreduce: rank %d: unsupported data type %s", c.rank, dt)
	}
	if !op.Valid() {
		return fmt.Errorf("comm: allreduce(%s): rank %d: unsupported reduction %s", dt, c.rank, op)
	}
	if len(send) != len(recv) {
		return fmt.Errorf("comm: allreduce(%s): rank %d: send has %d bytes but recv has %d", dt, c.rank, len(send), len(recv))
	}
	if len(recv)%dt.Size() != 0 {
		return fmt.Errorf("comm: allreduce(%s): rank %d: %d bytes is not a whole number of elements", dt, c.rank, len(recv))
	}
	r.c = c
	r.kind, r.send, r.recv, r.dt, r.op, r.root, r.count = collAllreduce, send, recv, dt, op, -1, len(recv)/dt.Size()
	return nil
}

// Broadcast copies root's buf into buf on every other rank. It blocks.
func Broadcast[T Number](ctx context.Context, c *Comm, buf []T, root int) error {
	return c.broadcast(newBlocking(ctx), asBytes(buf), TypeOf[T](), root).wait()
}

// BroadcastAsync starts a Broadcast and returns at once.
func BroadcastAsync[T Number](c *Comm, buf []T, root int) *Request {
	return c.BroadcastBytes(asBytes(buf), TypeOf[T](), root)
}

// BroadcastBytes is Broadcast on raw bytes. It returns at once.
func (c *Comm) BroadcastBytes(buf []byte, dt DataType, root int) *Request {
	return c.broadcast(&Request{}, buf, dt, root)
}

func (c *Comm) broadcast(r *Request, buf []byte, dt DataType, root int) *Request {
	if !dt.Valid() {
		return c.reject(r, collBroadcast, fmt.Errorf("comm: broadcast: rank %d: unsupported data type %s", c.rank, dt))
	}
	if root < 0 || root >= c.size {
		return c.reject(r, collBroadcast, fmt.Errorf("comm: broadcast(%s, root=%d): rank %d: root out of range [0, %d)", dt, root, c.rank, c.size))
	}
	if len(buf)%dt.Size() != 0 {
		return c.reject(r, collBroadcast, fmt.Errorf("comm: broadcast(%s): rank %d: %d bytes is not a whole number of elements", dt, c.rank, len(buf)))
	}
	r.kind, r.send, r.recv, r.dt, r.root, r.count = collBroadcast, buf, buf, dt, root, len(buf)/dt.Size()
	return c.submit(r)
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	r := newBlocking(ctx)
	r.kind, r.root = collBarrier, -1
	return c.submit(r).wait()
}

// BarrierAsync starts a Barrier and returns at once.
func (c *Comm) BarrierAsync() *Request {
	return c.submit(&Request{kind: collBarrier, root: -1})
}

type planKey struct {
	kind      collKind
	algo      string
	count     int
	elemSize  int
	root      int
	chunkSize int
}

func (c *Comm) plan(k planKey) (*collectives.Plan, error) {
	if p, ok := c.plans[k]; ok {
		return p, nil
	}
	var s collectives.Schedule
	switch k.kind {
	case collAllreduce:
		s = collectives.RingAllreduce(c.rank, c.size, k.count, k.elemSize)
	case collBroadcast:
		s = collectives.BinomialBroadcast(c.rank, c.size, k.root, k.count, k.elemSize)
	case collBarrier:
		s = collectives.DisseminationBarrier(c.rank, c.size)
	default:
		return nil, fmt.Errorf("no schedule for %s", k.kind)
	}
	p, err := collectives.Compile(s, k.chunkSize)
	if err != nil {
		return nil, err
	}
	if len(c.plans) >= 256 {
		clear(c.plans)
	}
	c.plans[k] = p
	return p, nil
}

// execute runs one collective on the worker.
func (c *Comm) execute(ctx context.Context, r *Request) error {
	c.seq++
	nbytes := len(r.recv)
	// Where the collective runs: the user's buffer when registered, else
	// the staging buffer.
	var tgt collectives.Target
	staged := false
	if nbytes > 0 {
		var ok bool
		if tgt, ok = c.lookup(r.recv); !ok {
			var err error
			if tgt, err = c.scratchFor(nbytes); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
			staged = true
		}
	}
	data := func() []byte { return tgt.Region.Bytes()[tgt.Off : tgt.Off+nbytes] }
	switch r.kind {
	case collAllreduce:
		if staged || !sameBytes(r.send, r.recv) {
			copy(data(), r.send)
		}
	case collBroadcast:
		if staged && c.rank == r.root {
			copy(data(), r.send)
		}
	}
	if c.size > 1 {
		elem := 1
		if r.dt.Valid() {
			elem = r.dt.Size()
		}
		p, err := c.plan(planKey{kind: r.kind, count: r.count, elemSize: elem, root: r.root, chunkSize: c.opts.ChunkSize})
		if err != nil {
			return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
		}
		call := collectives.Call{Plan: p, Bufs: [collectives.NumBufs]collectives.Target{collectives.BufData: tgt}, Type: r.dt, Op: r.op, Seq: c.seq,
			Coll: r.kind.String(), Count: r.count, Root: r.root}
		if err := c.exec.Run(ctx, &call); err != nil {
			// Drop every connection at once, so that peers waiting on this
			// rank fail now rather than at their timeout.
			c.breakLinks()
			return fmt.Errorf("comm: %w", c.explain(err, call.Desc()))
		}
	}
	if r.kind == collAllreduce && nbytes > 0 {
		if err := collectives.Finish(r.dt, r.op, data(), c.size); err != nil {
			return fmt.Errorf("comm: allreduce: rank %d: %w", c.rank, err)
		}
	}
	if staged && (r.kind == collAllreduce || c.rank != r.root) {
		copy(r.recv, data())
	}
	return nil
}

func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
