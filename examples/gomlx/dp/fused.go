package dp

import (
	"context"
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/goccl/goccl/comm"
)

// DefaultBucketBytes is the bucket cap when Options.BucketBytes is zero.
const DefaultBucketBytes = 1 << 20

// fused is the averaging of the gradients: one buffer of every gradient
// (registered memory from comm.Alloc, variables in context order), cut into
// buckets of whole variables, each with its persistent in-place allreduce.
type fused interface {
	// reduce copies the gradients in, averages them across ranks and
	// copies the averages into out (tensors of the same shapes). It
	// returns the time spent copying.
	reduce(ctx context.Context, grads, out []*tensors.Tensor) (copying float64, err error)
	// free releases the buffer.
	free() error
}

// bucket is the variables [first, last) of the fused buffer, elements
// [off, end), and the allreduce that averages them.
type bucket struct {
	first, last int
	off, end    int
	ar          *comm.Persistent
}

type fusedBuf[T float32 | float64] struct {
	c       *comm.Comm
	buf     []T
	offs    []int // offset of variable i in buf; offs[len] = len(buf)
	buckets []bucket
	clock   func() float64
}

// newFused lays out variables of sizes in one registered buffer and cuts
// it into buckets from the last variable backwards (the order a backward
// pass produces them), each closed once it holds at least capBytes.
func newFused(c *comm.Comm, dtype dtypes.DType, sizes []int, capBytes int, clock func() float64) (fused, error) {
	switch dtype {
	case dtypes.Float32:
		return makeFused[float32](c, sizes, capBytes, 4, clock)
	case dtypes.Float64:
		return makeFused[float64](c, sizes, capBytes, 8, clock)
	}
	return nil, fmt.Errorf("trainable variables of dtype %s: only float32 and float64 are supported", dtype)
}

func makeFused[T float32 | float64](c *comm.Comm, sizes []int, capBytes, elemBytes int, clock func() float64) (*fusedBuf[T], error) {
	f := &fusedBuf[T]{c: c, offs: make([]int, len(sizes)+1), clock: clock}
	for i, n := range sizes {
		f.offs[i+1] = f.offs[i] + n
	}
	buf, err := comm.Alloc[T](c, f.offs[len(sizes)])
	if err != nil {
		return nil, fmt.Errorf("allocating the fused gradient buffer of %d elements: %w", f.offs[len(sizes)], err)
	}
	f.buf = buf
	for last := len(sizes); last > 0; {
		first := last - 1
		for first > 0 && (f.offs[last]-f.offs[first])*elemBytes < capBytes {
			first--
		}
		b := bucket{first: first, last: last, off: f.offs[first], end: f.offs[last]}
		part := f.buf[b.off:b.end]
		if b.ar, err = comm.AllreduceInit(c, part, part, comm.Avg); err != nil {
			f.free()
			return nil, fmt.Errorf("preparing the allreduce of gradient bucket %d: %w", len(f.buckets), err)
		}
		f.buckets = append(f.buckets, b)
		last = first
	}
	return f, nil
}

func (f *fusedBuf[T]) reduce(ctx context.Context, grads, out []*tensors.Tensor) (float64, error) {
	var copying float64
	started := 0
	var err error
	for k := range f.buckets {
		b := &f.buckets[k]
		t0 := f.clock()
		for i := b.first; i < b.last; i++ {
			if e := tensors.ConstFlatData(grads[i], func(flat []T) { copy(f.buf[f.offs[i]:f.offs[i+1]], flat) }); e != nil {
				err = fmt.Errorf("reading gradient %d: %w", i, e)
				break
			}
		}
		copying += f.clock() - t0
		if err != nil {
			break
		}
		if err = b.ar.Start(); err != nil {
			err = fmt.Errorf("allreduce of gradient bucket %d: %w", k, err)
			break
		}
		started++
	}
	// Every started allreduce is waited for, even after an error: the
	// buffer is not touched again while a collective may write it.
	for k := range started {
		b := &f.buckets[k]
		if e := b.ar.Wait(ctx); e != nil {
			err = errors.Join(err, e)
			continue
		}
		if err != nil {
			continue
		}
		t0 := f.clock()
		for i := b.first; i < b.last; i++ {
			if e := tensors.MutableFlatData(out[i], func(flat []T) { copy(flat, f.buf[f.offs[i]:f.offs[i+1]]) }); e != nil {
				err = fmt.Errorf("writing averaged gradient %d: %w", i, e)
				break
			}
		}
		copying += f.clock() - t0
	}
	return copying, err
}

func (f *fusedBuf[T]) nBuckets() int { return len(f.buckets) }

func (f *fusedBuf[T]) free() error {
	return comm.Free(f.c, f.buf)
}
