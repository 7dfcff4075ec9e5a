package comm

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// Reductions on float16 and bfloat16 run in float32 and round once: the
// input is widened into a registered float32 buffer, the float32 collective
// runs on it (partial results travel as float32, twice the bytes), and the
// result is narrowed into the caller's buffer with one rounding to nearest
// even. Broadcast, gathers and all-to-all move half types as 2-byte data
// with no conversion.

func halfReduction(r *Request) bool { return widened(r.kind, r.dt) }

// widened says whether a call of k on dt runs on float32 (the reductions
// of the half types).
func widened(k collKind, dt DataType) bool {
	return dt.Half() && (k == collAllreduce || k == collReduce || k == collReduceScatter || k == collScan || k == collExscan)
}

// wideFor returns a registered float32 buffer of at least n bytes, grown
// on demand and reused. Called by the worker only.
func (c *Comm) wideFor(n int) ([]byte, error) {
	if len(c.wide) >= n {
		return c.wide[:n], nil
	}
	if c.wide != nil {
		if err := c.deregister(c.wide, true); err != nil {
			return nil, err
		}
		c.wide = nil
	}
	mem, err := Alloc[byte](c, max(n, 1<<16))
	if err != nil {
		return nil, err
	}
	c.wide = mem
	return mem[:n], nil
}

func (c *Comm) executeHalf(ctx context.Context, r *Request) error {
	in := len(r.send) / 2 // elements of the input
	out := len(r.recv) / 2
	if r.kind == collReduceScatter {
		out = r.count
	}
	wide, err := c.wideFor(4 * (in + out))
	if err != nil {
		return fmt.Errorf("comm: %s(%s): rank %d: %w", r.kind, r.dt, c.rank, err)
	}
	src, dst := wide[:4*in], wide[4*in:]
	collectives.Widen(r.dt, src, r.send)
	inner := Request{c: c, kind: r.kind, dt: TypeFloat32, named: r.dt, op: r.op, root: r.root, count: r.count, algo: r.algo, send: src}
	switch r.kind {
	case collAllreduce, collScan, collExscan:
		inner.recv, dst = src, src
	case collReduce:
		if c.rank == r.root {
			inner.recv, dst = src, src
		}
	case collReduceScatter:
		inner.recv = dst
	}
	err = c.execute(ctx, &inner)
	r.used = inner.used
	if err != nil {
		return err
	}
	if inner.recv != nil {
		collectives.Narrow(r.dt, r.recv, dst[:4*out])
	}
	return nil
}
