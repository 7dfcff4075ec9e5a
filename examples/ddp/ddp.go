// Package ddp is a data-parallel training helper on goccl, in the manner of
// PyTorch's DistributedDataParallel: every rank holds a full copy of the
// model, trains on its own shard of each global batch, and averages the
// gradients across ranks before every optimiser step.
//
// The helper owns the model's memory. New takes the number of float32
// elements of every parameter tensor, in forward (layer) order, and
// allocates two flat buffers with comm.Alloc, so both live in registered
// memory: one for the parameters and one for the gradients, with the same
// layout, so an optimiser can run over Params() and Grads() as flat vectors.
// The model reads and writes its tensors through Param(i) and Grad(i).
//
// Gradients are grouped into buckets in reverse parameter order, since the
// backward pass produces the last layer's gradients first. A bucket is
// closed once it holds at least Options.BucketBytes (default 25 MiB, as
// PyTorch DDP); a parameter is never split. Each bucket is a contiguous
// subslice of the gradient buffer, so its allreduce runs in place on
// registered memory: no gradient is copied, and nothing is allocated per
// step by the helper.
//
// One training step:
//
//	// forward pass ...
//	for i := last; i >= 0; i-- {
//		// compute Grad(i) (overwrite it; the previous step's average is there)
//		d.MarkReady(i) // launches the bucket's allreduce once it is complete
//	}
//	if err := d.Wait(ctx); err != nil { ... } // Grads() now hold the averages
//	// optimiser step on Params() and Grads()
//
// MarkReady starts an asynchronous allreduce (comm.Avg) of a bucket as soon
// as all its parameters are marked, so communication runs on the
// communicator's worker while the backward pass goes on computing the
// earlier layers. Buckets are launched in bucket order on every rank (a
// bucket that completes early waits for its predecessors), because every
// rank must call collectives in the same order.
//
// Stats reports the time spent in allreduces and the part of it the caller
// was blocked in Wait; the difference is communication hidden behind
// compute.
package ddp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/goccl/goccl/comm"
)

// DefaultBucketBytes is the bucket cap when Options.BucketBytes is zero:
// 25 MiB, PyTorch DDP's bucket_cap_mb default.
const DefaultBucketBytes = 25 << 20

// Options configure a DDP.
type Options struct {
	// BucketBytes is the bucket cap in bytes: parameters are added to a
	// bucket, in reverse order, until it holds at least this many bytes.
	// Zero means DefaultBucketBytes.
	BucketBytes int
}

// request is what the helper needs from an asynchronous collective;
// *comm.Request implements it.
type request interface {
	Wait(ctx context.Context) error
}

// bucket is a contiguous run of the gradient buffer holding whole
// parameters, listed in reverse order.
type bucket struct {
	off, n  int // elements of the gradient buffer
	params  []int
	pending int // parameters not yet marked ready this step
}

// DDP is a data-parallel model replica: the registered parameter and
// gradient buffers, their bucketing, and the allreduces of one step.
//
// MarkReady, Wait and Stats may be called from different goroutines, but
// one step (the MarkReady calls and the Wait that ends it) must not overlap
// the next.
type DDP struct {
	c       *comm.Comm
	params  []float32 // registered, flat
	grads   []float32 // registered, flat, same layout as params
	offs    []int     // offset of parameter i in params and grads
	sizes   []int
	buckets []bucket
	bucket  []int // bucket of parameter i

	// start launches an allreduce on a bucket; comm.AllreduceAsync unless a
	// test replaced it.
	start func(buf []float32) request

	mu       sync.Mutex
	ready    []bool // parameter i marked this step
	nReady   int
	launched int // buckets launched this step, in order
	// outstanding counts launched buckets whose end Wait has not collected.
	outstanding int
	reqs        []request
	launchAt    []time.Time
	err         error // first allreduce error of this step
	// closed is set by Close: the buffers are released and the monitor
	// has quit, so nothing may start a collective any more.
	closed bool

	// The monitor goroutine waits for each launched bucket in order and
	// records when it finished.
	toMonitor chan int
	done      chan error
	doneAt    []time.Time // written by the monitor before it sends on done
	quit      chan struct{}
	wg        sync.WaitGroup

	stats Stats
	trace Trace
}

// Stats are cumulative over the steps ended by Wait.
type Stats struct {
	Steps int
	// Comm is the time the communicator spent on this helper's allreduces:
	// per step, the union of the intervals from each bucket's launch (or
	// its predecessor's end, since collectives run one at a time) to its
	// end.
	Comm time.Duration
	// Blocked is the time spent inside Wait: communication the caller
	// waited for.
	Blocked time.Duration
}

// Overlapped is the communication time hidden behind compute: Comm minus
// Blocked, and never negative.
func (s Stats) Overlapped() time.Duration { return max(0, s.Comm-s.Blocked) }

// Trace holds the timestamps of the last step, for tests and profiling.
type Trace struct {
	Launch    []time.Time // when each bucket's allreduce was started
	Done      []time.Time // when it was seen finished
	WaitStart time.Time
	WaitEnd   time.Time
}

// New allocates the parameter and gradient buffers of a model whose
// parameter tensors hold sizes[i] float32 elements, in forward order, and
// assigns the gradients to buckets. It does not communicate; call
// BroadcastParams once the parameters are initialised. Close releases the
// buffers.
func New(c *comm.Comm, sizes []int, opts Options) (*DDP, error) {
	if len(sizes) == 0 {
		return nil, errors.New("ddp: no parameters")
	}
	capBytes := opts.BucketBytes
	if capBytes <= 0 {
		capBytes = DefaultBucketBytes
	}
	d := &DDP{c: c, sizes: append([]int(nil), sizes...), offs: make([]int, len(sizes)), bucket: make([]int, len(sizes)),
		ready: make([]bool, len(sizes))}
	// Lay the buffers out in reverse parameter order so that every bucket
	// is contiguous.
	total := 0
	var cur *bucket
	for i := len(sizes) - 1; i >= 0; i-- {
		if sizes[i] <= 0 {
			return nil, fmt.Errorf("ddp: parameter %d has %d elements", i, sizes[i])
		}
		if cur == nil {
			d.buckets = append(d.buckets, bucket{off: total})
			cur = &d.buckets[len(d.buckets)-1]
		}
		d.offs[i] = total
		d.bucket[i] = len(d.buckets) - 1
		cur.params = append(cur.params, i)
		cur.n += sizes[i]
		total += sizes[i]
		if cur.n*4 >= capBytes {
			cur = nil
		}
	}
	var err error
	if d.params, err = comm.Alloc[float32](c, total); err != nil {
		return nil, fmt.Errorf("ddp: %w", err)
	}
	if d.grads, err = comm.Alloc[float32](c, total); err != nil {
		comm.Free(c, d.params)
		return nil, fmt.Errorf("ddp: %w", err)
	}
	nb := len(d.buckets)
	d.reqs = make([]request, nb)
	d.launchAt = make([]time.Time, nb)
	d.doneAt = make([]time.Time, nb)
	d.trace = Trace{Launch: make([]time.Time, nb), Done: make([]time.Time, nb)}
	d.start = func(buf []float32) request { return comm.AllreduceAsync(c, buf, buf, comm.Avg) }
	d.toMonitor = make(chan int, nb)
	d.done = make(chan error, nb)
	d.quit = make(chan struct{})
	d.resetLocked()
	d.wg.Add(1)
	go d.monitor()
	return d, nil
}

// monitor waits for the launched buckets in order. Requests are bounded by
// the communicator's timeout, so it never waits forever.
func (d *DDP) monitor() {
	defer d.wg.Done()
	for {
		select {
		case b := <-d.toMonitor:
			err := d.reqs[b].Wait(context.Background())
			d.doneAt[b] = time.Now()
			d.done <- err
		case <-d.quit:
			return
		}
	}
}

// Close releases the registered buffers. Param, Grad, Params and Grads
// must not be used afterwards; MarkReady, Wait and BroadcastParams return
// an error. It waits for a step in flight to end. A second Close does
// nothing.
func (d *DDP) Close() error {
	// Let launched allreduces finish before their memory is released.
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	n := d.outstanding
	d.outstanding = 0
	d.mu.Unlock()
	for range n {
		<-d.done
	}
	close(d.quit)
	d.wg.Wait()
	return errors.Join(comm.Free(d.c, d.params), comm.Free(d.c, d.grads))
}

// NumParams is the number of parameter tensors.
func (d *DDP) NumParams() int { return len(d.sizes) }

// Param is parameter tensor i, a view into Params.
func (d *DDP) Param(i int) []float32 {
	return d.params[d.offs[i] : d.offs[i]+d.sizes[i] : d.offs[i]+d.sizes[i]]
}

// Grad is the gradient of parameter i, a view into Grads. Between
// MarkReady(i) and the end of Wait it belongs to the communicator.
func (d *DDP) Grad(i int) []float32 {
	return d.grads[d.offs[i] : d.offs[i]+d.sizes[i] : d.offs[i]+d.sizes[i]]
}

// Params is every parameter, flat, in the layout of Grads.
func (d *DDP) Params() []float32 { return d.params }

// Grads is every gradient, flat, in the layout of Params.
func (d *DDP) Grads() []float32 { return d.grads }

// Buckets returns the parameters of each bucket, in launch order.
func (d *DDP) Buckets() [][]int {
	out := make([][]int, len(d.buckets))
	for i, b := range d.buckets {
		out[i] = append([]int(nil), b.params...)
	}
	return out
}

// BroadcastParams copies rank 0's parameters to every rank. Call it once,
// after initialising the parameters and before the first step, so that
// every replica starts from the same model. It first checks that every
// rank has the same parameter sizes, in the same order, and the same
// buckets (as PyTorch DDP's constructor checks the parameter shapes), and
// otherwise returns an error on every rank naming the first rank that
// differs from rank 0.
func (d *DDP) BroadcastParams(ctx context.Context) error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return errors.New("ddp: broadcast parameters: closed")
	}
	if err := d.checkLayout(ctx); err != nil {
		return err
	}
	if err := comm.Broadcast(ctx, d.c, d.params, 0); err != nil {
		return fmt.Errorf("ddp: broadcast parameters: %w", err)
	}
	return nil
}

// checkLayout compares the layout of the flat buffers across the ranks.
// Only the element counts would otherwise meet: models with the same total
// but sizes in another order would be broadcast and averaged without an
// error, each rank reading other tensors' elements as its own, and another
// bucket cap would fail the first step with a bare count mismatch. Every
// rank gathers every rank's summary, so all of them see the difference
// and fail alike; none is left waiting in the broadcast.
func (d *DDP) checkLayout(ctx context.Context) error {
	const (
		nParams = iota
		nElems
		sizesHash
		nBuckets
		bucketsHash
		fields
	)
	hash := func(xs []int) int64 {
		f := fnv.New64a()
		var b [8]byte
		for _, x := range xs {
			binary.LittleEndian.PutUint64(b[:], uint64(x))
			f.Write(b[:])
		}
		return int64(f.Sum64())
	}
	bucketSizes := make([]int, len(d.buckets))
	for b := range d.buckets {
		bucketSizes[b] = d.buckets[b].n
	}
	mine := make([]int64, fields)
	mine[nParams], mine[nElems], mine[sizesHash] = int64(len(d.sizes)), int64(len(d.params)), hash(d.sizes)
	mine[nBuckets], mine[bucketsHash] = int64(len(d.buckets)), hash(bucketSizes)
	all := make([]int64, fields*d.c.Size())
	if err := comm.Allgather(ctx, d.c, mine, all); err != nil {
		return fmt.Errorf("ddp: broadcast parameters: compare the ranks' parameter sizes: %w", err)
	}
	root := all[:fields]
	for r := 1; r < d.c.Size(); r++ {
		got := all[r*fields : (r+1)*fields]
		switch {
		case got[nParams] != root[nParams] || got[nElems] != root[nElems] || got[sizesHash] != root[sizesHash]:
			return fmt.Errorf("ddp: broadcast parameters: rank %d has %d parameter tensors of %d elements, rank 0 %d of %d, "+
				"and their parameter sizes differ: every rank must pass New the same sizes in the same order",
				r, got[nParams], got[nElems], root[nParams], root[nElems])
		case got[nBuckets] != root[nBuckets] || got[bucketsHash] != root[bucketsHash]:
			return fmt.Errorf("ddp: broadcast parameters: rank %d cuts the gradients into other buckets than rank 0 "+
				"(%d buckets against %d): every rank must pass New the same Options.BucketBytes", r, got[nBuckets], root[nBuckets])
		}
	}
	return nil
}

// MarkReady says that the gradient of parameter i is final for this step.
// When it completes a bucket, the allreduces of that bucket and of every
// complete bucket after it in launch order start, asynchronously. Marking a
// parameter twice in one step is an error.
func (d *DDP) MarkReady(i int) error {
	if i < 0 || i >= len(d.sizes) {
		return fmt.Errorf("ddp: mark ready: parameter %d out of range [0, %d)", i, len(d.sizes))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		// The gradient buffer is released: an allreduce on it would
		// write freed memory, and no monitor would collect it.
		return fmt.Errorf("ddp: mark ready: parameter %d: closed", i)
	}
	if d.ready[i] {
		return fmt.Errorf("ddp: mark ready: parameter %d marked twice in one step", i)
	}
	d.ready[i] = true
	d.nReady++
	d.buckets[d.bucket[i]].pending--
	for d.launched < len(d.buckets) && d.buckets[d.launched].pending == 0 {
		b := &d.buckets[d.launched]
		d.launchAt[d.launched] = time.Now()
		d.reqs[d.launched] = d.start(d.grads[b.off : b.off+b.n])
		d.toMonitor <- d.launched
		d.launched++
		d.outstanding++
	}
	return nil
}

// Wait blocks until the allreduces of every bucket have finished, so that
// Grads holds the average over ranks, and readies the helper for the next
// step. Every parameter must have been marked ready. If ctx ends first,
// Wait returns its error and the allreduces go on: the gradient buffer must
// not be touched until the communicator is aborted.
func (d *DDP) Wait(ctx context.Context) error {
	t0 := time.Now()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errors.New("ddp: wait: closed")
	}
	if d.nReady != len(d.sizes) {
		missing := -1
		for i, r := range d.ready {
			if !r {
				missing = i
				break
			}
		}
		n := d.nReady
		d.mu.Unlock()
		return fmt.Errorf("ddp: wait: %d of %d parameters marked ready (parameter %d is not)", n, len(d.sizes), missing)
	}
	for d.outstanding > 0 {
		d.mu.Unlock()
		select {
		case err := <-d.done:
			if err != nil && d.err == nil {
				d.err = err
			}
		case <-ctx.Done():
			return fmt.Errorf("ddp: wait: %w", ctx.Err())
		}
		d.mu.Lock()
		d.outstanding--
	}
	defer d.mu.Unlock()
	t1 := time.Now()
	// Collectives run one at a time, in order: bucket b occupies the
	// communicator from its launch or its predecessor's end, whichever is
	// later, to its own end.
	var busy time.Duration
	var prev time.Time
	for b := range d.buckets {
		s := d.launchAt[b]
		if prev.After(s) {
			s = prev
		}
		if d.doneAt[b].After(s) {
			busy += d.doneAt[b].Sub(s)
		}
		prev = d.doneAt[b]
	}
	d.stats.Steps++
	d.stats.Comm += busy
	d.stats.Blocked += t1.Sub(t0)
	copy(d.trace.Launch, d.launchAt)
	copy(d.trace.Done, d.doneAt)
	d.trace.WaitStart, d.trace.WaitEnd = t0, t1
	d.resetLocked()
	if err := d.err; err != nil {
		d.err = nil
		return fmt.Errorf("ddp: allreduce of gradients: %w", err)
	}
	return nil
}

func (d *DDP) resetLocked() {
	clear(d.ready)
	d.nReady = 0
	d.launched = 0
	for b := range d.buckets {
		d.buckets[b].pending = len(d.buckets[b].params)
		d.reqs[b] = nil
	}
}

// Stats returns the cumulative timings.
func (d *DDP) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// LastTrace returns the timestamps of the last step ended by Wait.
func (d *DDP) LastTrace() Trace {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Trace{Launch: append([]time.Time(nil), d.trace.Launch...), Done: append([]time.Time(nil), d.trace.Done...),
		WaitStart: d.trace.WaitStart, WaitEnd: d.trace.WaitEnd}
}
