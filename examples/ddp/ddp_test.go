package ddp

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport/mem"
)

// runRanks runs f on n ranks, goroutines of this process connected by the
// in-memory transport, and fails the test with every rank's error.
func runRanks(t *testing.T, n int, f func(ctx context.Context, c *comm.Comm) error) {
	t.Helper()
	network := mem.NewNetwork(mem.Options{})
	g := comm.NewLocalGroup(n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := comm.New(ctx, g.Member(r), network.NewDevice(), comm.Options{OwnDevice: true, Timeout: 60 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = f(ctx, c)
			if errs[r] != nil {
				c.Abort(errs[r]) // the others fail now, not at their timeout
			}
			if err := c.Close(); err != nil && errs[r] == nil {
				errs[r] = fmt.Errorf("close: %w", err)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// gradOffset is the index in Grads() where parameter i's gradient starts.
func gradOffset(d *DDP, i int) int {
	return int(uintptr(unsafe.Pointer(&d.Grad(i)[0]))-uintptr(unsafe.Pointer(&d.Grads()[0]))) / 4
}

func TestBuckets(t *testing.T) {
	// Sizes in elements (4 bytes each); a 1000-byte cap is 250 elements.
	cases := []struct {
		sizes []int
		cap   int
		want  string
	}{
		{[]int{100, 100, 100, 100}, 1000, "[[3 2 1] [0]]"},
		{[]int{300, 10, 300, 10}, 1000, "[[3 2] [1 0]]"},
		{[]int{1, 2, 3}, 0, "[[2 1 0]]"}, // default 25 MiB: one bucket
		{[]int{1, 2, 3}, 1, "[[2] [1] [0]]"},
	}
	runRanks(t, 1, func(ctx context.Context, c *comm.Comm) error {
		for _, tc := range cases {
			d, err := New(c, tc.sizes, Options{BucketBytes: tc.cap})
			if err != nil {
				return err
			}
			got := fmt.Sprint(d.Buckets())
			// Gradients of one bucket are contiguous, so that the bucket
			// is one slice of the registered buffer.
			for _, b := range d.Buckets() {
				for k := 1; k < len(b); k++ {
					prev, cur := d.Grad(b[k-1]), d.Grad(b[k])
					if gradOffset(d, b[k-1])+len(prev) != gradOffset(d, b[k]) || len(cur) != tc.sizes[b[k]] {
						t.Errorf("sizes %v: parameters %d and %d are not adjacent", tc.sizes, b[k-1], b[k])
					}
				}
			}
			if err := d.Close(); err != nil {
				return err
			}
			if got != tc.want {
				t.Errorf("sizes %v cap %d: buckets %s, want %s", tc.sizes, tc.cap, got, tc.want)
			}
		}
		return nil
	})
}

// TestAverage checks the broadcast of parameters and the averaged
// gradients, with parameters marked in an order that completes the last
// bucket first: the launches must still follow bucket order.
func TestAverage(t *testing.T) {
	const n = 3
	sizes := []int{1000, 7, 5000, 3, 2000}
	runRanks(t, n, func(ctx context.Context, c *comm.Comm) error {
		d, err := New(c, sizes, Options{BucketBytes: 8000})
		if err != nil {
			return err
		}
		defer d.Close()
		if len(d.Buckets()) < 3 {
			return fmt.Errorf("want at least 3 buckets, got %v", d.Buckets())
		}
		for i, p := range d.Params() {
			p = float32(i + 1000*c.Rank())
			d.Params()[i] = p
		}
		if err := d.BroadcastParams(ctx); err != nil {
			return err
		}
		for i, p := range d.Params() {
			if p != float32(i) {
				return fmt.Errorf("param %d = %v after broadcast, want %d", i, p, i)
			}
		}
		for step := range 3 {
			for i := range sizes {
				g := d.Grad(i)
				for k := range g {
					g[k] = float32((c.Rank()+1)*(k+i+step)) * 3
				}
			}
			for _, i := range []int{0, 1, 2, 3, 4} { // forward order: last bucket completes first
				if err := d.MarkReady(i); err != nil {
					return err
				}
			}
			if err := d.Wait(ctx); err != nil {
				return err
			}
			tr := d.LastTrace()
			for b := 1; b < len(tr.Launch); b++ {
				if tr.Launch[b].Before(tr.Launch[b-1]) {
					return fmt.Errorf("bucket %d launched before bucket %d", b, b-1)
				}
			}
			// mean over ranks of 3*(r+1)*(k+i+step) is 6*(k+i+step) for n=3.
			for i := range sizes {
				for k, v := range d.Grad(i) {
					if want := float32(6 * (k + i + step)); v != want {
						return fmt.Errorf("step %d grad %d[%d] = %v, want %v", step, i, k, v, want)
					}
				}
			}
		}
		if s := d.Stats(); s.Steps != 3 || s.Comm <= 0 {
			return fmt.Errorf("stats %+v: want 3 steps and some comm time", s)
		}
		return nil
	})
}

func TestMisuse(t *testing.T) {
	runRanks(t, 1, func(ctx context.Context, c *comm.Comm) error {
		d, err := New(c, []int{4, 4}, Options{BucketBytes: 1})
		if err != nil {
			return err
		}
		defer d.Close()
		if err := d.MarkReady(1); err != nil {
			return err
		}
		if err := d.MarkReady(1); err == nil || !strings.Contains(err.Error(), "twice") {
			return fmt.Errorf("second MarkReady(1): %v, want an error saying twice", err)
		}
		if err := d.MarkReady(2); err == nil {
			return fmt.Errorf("MarkReady(2) of 2 parameters: no error")
		}
		if err := d.Wait(ctx); err == nil || !strings.Contains(err.Error(), "parameter 0 is not") {
			return fmt.Errorf("Wait with parameter 0 unmarked: %v", err)
		}
		if err := d.MarkReady(0); err != nil {
			return err
		}
		return d.Wait(ctx)
	})
	runRanks(t, 1, func(ctx context.Context, c *comm.Comm) error {
		if _, err := New(c, nil, Options{}); err == nil {
			return fmt.Errorf("New with no parameters: no error")
		}
		if _, err := New(c, []int{3, 0}, Options{}); err == nil {
			return fmt.Errorf("New with an empty parameter: no error")
		}
		return nil
	})
}

// TestLayoutMismatch gives rank 2 a model whose parameter tensors or
// buckets differ from the others': BroadcastParams must refuse it on every
// rank. Before, sizes in another order with the same total (or another
// bucket cap) went through, and the ranks averaged unrelated elements of
// their flat buffers in silence (or failed in the first step on a count
// mismatch the user could not trace to the model).
func TestLayoutMismatch(t *testing.T) {
	cases := []struct {
		what       string
		sizes      []int // rank 2's; the others have 10, 20, 30
		bucketCap  int   // rank 2's; the others have 0 (one bucket)
		wantInText string
	}{
		{"sizes in another order", []int{20, 10, 30}, 0, "parameter sizes"},
		{"one tensor fewer", []int{30, 30}, 0, "2 parameter tensors"},
		{"other buckets", []int{10, 20, 30}, 80, "buckets"},
	}
	for _, tc := range cases {
		t.Run(tc.what, func(t *testing.T) {
			runRanks(t, 3, func(ctx context.Context, c *comm.Comm) error {
				sizes, bucketCap := []int{10, 20, 30}, 0
				if c.Rank() == 2 {
					sizes, bucketCap = tc.sizes, tc.bucketCap
				}
				d, err := New(c, sizes, Options{BucketBytes: bucketCap})
				if err != nil {
					return err
				}
				defer d.Close()
				err = d.BroadcastParams(ctx)
				if err == nil || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), tc.wantInText) {
					return fmt.Errorf("BroadcastParams: %v, want an error naming rank 2 and %q", err, tc.wantInText)
				}
				return nil
			})
		})
	}
}

// TestUseAfterClose checks that a closed helper refuses to work instead of
// running collectives on the buffers Close released, and that a second
// Close (an explicit one before a deferred one) is harmless. Before, the
// second Close panicked (close of closed channel), MarkReady started an
// allreduce on the freed gradient buffer and returned nil, and Wait then
// waited for a monitor that had quit until its context ended.
func TestUseAfterClose(t *testing.T) {
	runRanks(t, 1, func(ctx context.Context, c *comm.Comm) error {
		d, err := New(c, []int{4, 4}, Options{BucketBytes: 1})
		if err != nil {
			return err
		}
		if err := d.Close(); err != nil {
			return err
		}
		if err := d.Close(); err != nil {
			return fmt.Errorf("second Close: %v", err)
		}
		if err := d.MarkReady(1); err == nil || !strings.Contains(err.Error(), "closed") {
			return fmt.Errorf("MarkReady after Close: %v, want an error saying closed", err)
		}
		if err := d.Wait(ctx); err == nil || !strings.Contains(err.Error(), "closed") {
			return fmt.Errorf("Wait after Close: %v, want an error saying closed", err)
		}
		if err := d.BroadcastParams(ctx); err == nil || !strings.Contains(err.Error(), "closed") {
			return fmt.Errorf("BroadcastParams after Close: %v, want an error saying closed", err)
		}
		return nil
	})
}

// TestOverlap runs a simulated backward pass that takes time per layer and
// checks that the first bucket's allreduce started, and finished, while the
// backward pass was still running: communication overlaps compute.
func TestOverlap(t *testing.T) {
	const layers = 4
	sizes := make([]int, layers)
	for i := range sizes {
		sizes[i] = 16 << 10 // 64 KiB per layer
	}
	var mu sync.Mutex
	var comms, blocked time.Duration
	runRanks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		d, err := New(c, sizes, Options{BucketBytes: 64 << 10}) // one layer per bucket
		if err != nil {
			return err
		}
		defer d.Close()
		var warm Stats
		// Step 0 also absorbs the skew between the ranks' start; Wait
		// leaves them in step, so later steps check the overlap. A bucket
		// is launched by this rank alone, so every step must launch the
		// first one before the end of backward; when it finishes also
		// depends on the other rank, which a loaded machine can hold back
		// by more than a layer's 20 ms (CI, under a parallel build: bucket
		// 2 done 4 ms after the end of backward in one step), so the
		// finishing checks must hold in one step at least.
		overlapped := 0
		var missed []string
		for step := range 4 {
			for i := layers - 1; i >= 0; i-- {
				time.Sleep(20 * time.Millisecond) // the layer's backward compute
				for k := range d.Grad(i) {
					d.Grad(i)[k] = float32(c.Rank() + k)
				}
				if err := d.MarkReady(i); err != nil {
					return err
				}
			}
			backwardEnd := time.Now()
			if err := d.Wait(ctx); err != nil {
				return err
			}
			tr := d.LastTrace()
			if step == 0 {
				warm = d.Stats()
				continue
			}
			if !tr.Launch[0].Before(backwardEnd) {
				return fmt.Errorf("step %d: first bucket launched %v after the end of backward, want before", step, tr.Launch[0].Sub(backwardEnd))
			}
			switch {
			case !tr.Done[0].Before(backwardEnd):
				missed = append(missed, fmt.Sprintf("step %d: first bucket done %v after the end of backward", step, tr.Done[0].Sub(backwardEnd)))
			case !tr.Done[layers-2].Before(backwardEnd):
				missed = append(missed, fmt.Sprintf("step %d: bucket %d done %v after the end of backward", step, layers-2, tr.Done[layers-2].Sub(backwardEnd)))
			default:
				overlapped++
			}
		}
		if overlapped == 0 {
			return fmt.Errorf("no step finished its first buckets before the end of backward: %s", strings.Join(missed, "; "))
		}
		for _, m := range missed {
			t.Logf("rank %d: %s", c.Rank(), m)
		}
		s := d.Stats()
		s.Steps -= warm.Steps
		s.Comm -= warm.Comm
		s.Blocked -= warm.Blocked
		t.Logf("rank %d: comm %v, blocked in Wait %v, overlapped %v over %d steps", c.Rank(), s.Comm, s.Blocked, s.Overlapped(), s.Steps)
		mu.Lock()
		comms, blocked = comms+s.Comm, blocked+s.Blocked
		mu.Unlock()
		return nil
	})
	// Over the job, not per rank: the rank whose backward pass ends first
	// waits in Wait for the other's last bucket, and that skew counts as
	// blocked time on it alone (CI saw one rank at 847 us of communication
	// and 1026 us blocked, the other at 823 and 281).
	if comms <= blocked {
		t.Errorf("after step 0: communication %v, blocked in Wait %v over both ranks: no communication overlapped", comms, blocked)
	}
}

type doneRequest struct{}

func (doneRequest) Wait(context.Context) error { return nil }

// TestNoAllocsHelper checks that the helper's own per-step work (MarkReady,
// the monitor, Wait) allocates nothing, with the collective replaced by one
// that is already done.
func TestNoAllocsHelper(t *testing.T) {
	runRanks(t, 1, func(ctx context.Context, c *comm.Comm) error {
		d, err := New(c, []int{1000, 10, 1000, 10}, Options{BucketBytes: 4000})
		if err != nil {
			return err
		}
		defer d.Close()
		var req doneRequest
		d.start = func([]float32) request { return req }
		var stepErr error
		step := func() {
			for i := d.NumParams() - 1; i >= 0; i-- {
				if err := d.MarkReady(i); err != nil && stepErr == nil {
					stepErr = err
				}
			}
			if err := d.Wait(ctx); err != nil && stepErr == nil {
				stepErr = err
			}
		}
		step()
		allocs := testing.AllocsPerRun(200, step)
		if stepErr != nil {
			return stepErr
		}
		if allocs != 0 {
			return fmt.Errorf("%v allocations per step in the helper, want 0", allocs)
		}
		return nil
	})
}

// TestNoGradientCopies runs real steps on 2 ranks and measures what the
// whole communication path (helper, communicator, transport) allocates per
// step: the gradients are 4 MiB, and no allocation may be of that order.
func TestNoGradientCopies(t *testing.T) {
	const n, steps = 2, 50
	sizes := []int{512 << 10, 1 << 10, 512 << 10, 1 << 10} // 4 MiB of gradients
	var before, after runtime.MemStats
	var mu sync.Mutex
	started := 0
	runRanks(t, n, func(ctx context.Context, c *comm.Comm) error {
		d, err := New(c, sizes, Options{BucketBytes: 1 << 20})
		if err != nil {
			return err
		}
		defer d.Close()
		step := func() error {
			for i := len(sizes) - 1; i >= 0; i-- {
				if err := d.MarkReady(i); err != nil {
					return err
				}
			}
			return d.Wait(ctx)
		}
		for range 5 { // warm-up: plans, staging
			if err := step(); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		mu.Lock()
		if started++; started == 1 {
			runtime.ReadMemStats(&before)
		}
		mu.Unlock()
		for range steps {
			if err := step(); err != nil {
				return err
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		mu.Lock()
		if started--; started == 0 {
			runtime.ReadMemStats(&after)
		}
		mu.Unlock()
		return nil
	})
	rankSteps := float64(n * steps)
	allocs := float64(after.Mallocs-before.Mallocs) / rankSteps
	bytes := float64(after.TotalAlloc-before.TotalAlloc) / rankSteps
	gradBytes := 0
	for _, s := range sizes {
		gradBytes += 4 * s
	}
	t.Logf("per rank and step (2 buckets): %.1f allocations, %.0f bytes, for %d bytes of gradients", allocs, bytes, gradBytes)
	if bytes > float64(gradBytes)/100 {
		t.Errorf("%.0f bytes allocated per step for %d bytes of gradients: a gradient is copied or allocated", bytes, gradBytes)
	}
}
