// Command soak runs many collectives of random kinds, sizes and types and
// checks every result, then reports whether memory, goroutines and open
// file descriptors stayed flat. Every rank draws the same sequence from
// the seed, so all ranks call the same collectives in the same order.
//
//	gorun -n 4 ./soak -n 10000 -max-bytes 1048576 -seed 1
//
// Rank 0 prints progress every -report collectives and a final table:
//
//	soak: 10000 collectives in 41.2s, all verified
//	            start      end
//	heap-inuse  ...
//	goroutines  ...
//	open-fds    ...
//
// It exits non-zero on a wrong result, an error, or growth beyond the
// slack allowed by -max-growth (heap bytes) once the warm-up (the first
// tenth of the run) has set the baseline.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/goccl/goccl/comm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type sample struct {
	heap       uint64
	goroutines int
	fds        int
}

func measure() sample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return sample{heap: ms.HeapInuse, goroutines: runtime.NumGoroutine(), fds: fds}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 10000, "number of collectives")
	maxBytes := fs.Int("max-bytes", 1<<20, "largest buffer in bytes")
	seed := fs.Uint64("seed", 1, "seed of the call sequence (same on every rank)")
	report := fs.Int("report", 1000, "print progress every this many collectives (rank 0)")
	maxGrowth := fs.Uint64("max-growth", 16<<20, "allowed heap growth in bytes after warm-up")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *n <= 0 || *maxBytes < 8 || *report <= 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "soak: -n, -report must be positive, -max-bytes >= 8, no arguments")
		return 2
	}
	c, err := comm.Init(ctx, comm.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	defer c.Close()
	s := &soaker{c: c, rng: rand.New(rand.NewPCG(*seed, 99)), maxBytes: *maxBytes}
	if err := s.setup(); err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 1
	}
	var base sample
	warm := max(1, *n/10)
	start := time.Now()
	for i := range *n {
		if i == warm {
			base = measure()
		}
		if err := s.one(ctx, i); err != nil {
			fmt.Fprintf(stderr, "soak: rank %d: collective %d: %v\n", c.Rank(), i, err)
			return 1
		}
		if c.Rank() == 0 && (i+1)%*report == 0 {
			fmt.Fprintf(stdout, "soak: %d/%d collectives verified (%.1fs)\n", i+1, *n, time.Since(start).Seconds())
		}
	}
	end := measure()
	if warm >= *n {
		base = end
	}
	if c.Rank() == 0 {
		fmt.Fprintf(stdout, "soak: %d collectives over %d ranks via %s in %.1fs, all verified\n", *n, c.Size(), c.Transport(), time.Since(start).Seconds())
		fmt.Fprintf(stdout, "%-12s %12s %12s\n", "", "after-warmup", "end")
		fmt.Fprintf(stdout, "%-12s %12d %12d\n", "heap-inuse", base.heap, end.heap)
		fmt.Fprintf(stdout, "%-12s %12d %12d\n", "goroutines", base.goroutines, end.goroutines)
		fmt.Fprintf(stdout, "%-12s %12d %12d\n", "open-fds", base.fds, end.fds)
	}
	if end.goroutines > base.goroutines || end.fds > base.fds || end.heap > base.heap+*maxGrowth {
		fmt.Fprintf(stderr, "soak: rank %d: resources grew: heap %d -> %d, goroutines %d -> %d, fds %d -> %d\n",
			c.Rank(), base.heap, end.heap, base.goroutines, end.goroutines, base.fds, end.fds)
		return 1
	}
	return 0
}

type soaker struct {
	c        *comm.Comm
	rng      *rand.Rand
	maxBytes int
	f32      []float32
	f64      []float64
	i32      []int32
	i64      []int64
	reg32    []float32 // registered
}

func (s *soaker) setup() error {
	s.f32 = make([]float32, s.maxBytes/4)
	s.f64 = make([]float64, s.maxBytes/8)
	s.i32 = make([]int32, s.maxBytes/4)
	s.i64 = make([]int64, s.maxBytes/8)
	var err error
	s.reg32, err = comm.Alloc[float32](s.c, s.maxBytes/4)
	return err
}

// one runs collective i: its kind, type, size and root come from the
// shared generator.
func (s *soaker) one(ctx context.Context, i int) error {
	kind := s.rng.IntN(10)
	// log-uniform sizes from 0 to maxBytes
	bytes := int(float64(s.maxBytes) * math.Exp2(-20*s.rng.Float64()))
	if s.rng.IntN(20) == 0 {
		bytes = 0
	}
	root := s.rng.IntN(s.c.Size())
	typ := s.rng.IntN(5)
	switch {
	case kind == 0:
		return s.c.Barrier(ctx)
	case kind <= 2:
		switch typ {
		case 0:
			return bcast(ctx, s.c, s.f32[:bytes/4], root)
		case 1:
			return bcast(ctx, s.c, s.f64[:bytes/8], root)
		case 2:
			return bcast(ctx, s.c, s.i32[:bytes/4], root)
		case 3:
			return bcast(ctx, s.c, s.i64[:bytes/8], root)
		default:
			return bcast(ctx, s.c, s.reg32[:bytes/4], root)
		}
	default:
		switch typ {
		case 0:
			return allreduce(ctx, s.c, s.f32[:bytes/4])
		case 1:
			return allreduce(ctx, s.c, s.f64[:bytes/8])
		case 2:
			return allreduce(ctx, s.c, s.i32[:bytes/4])
		case 3:
			return allreduce(ctx, s.c, s.i64[:bytes/8])
		default:
			return allreduce(ctx, s.c, s.reg32[:bytes/4])
		}
	}
}

// allreduce sums element i = (rank+1)*(i%5+1) and checks the exact result.
func allreduce[T comm.Number](ctx context.Context, c *comm.Comm, buf []T) error {
	r, n := c.Rank(), c.Size()
	for i := range buf {
		buf[i] = T((r + 1) * (i%5 + 1))
	}
	if err := comm.Allreduce(ctx, c, buf, buf, comm.Sum); err != nil {
		return err
	}
	tri := n * (n + 1) / 2
	for i, v := range buf {
		if want := T((i%5 + 1) * tri); v != want {
			return fmt.Errorf("allreduce(%d elements): element %d = %v, want %v", len(buf), i, v, want)
		}
	}
	return nil
}

// bcast sends element i = root*1000 + i%100 from root and checks it.
func bcast[T comm.Number](ctx context.Context, c *comm.Comm, buf []T, root int) error {
	for i := range buf {
		buf[i] = T(c.Rank()*1000 + i%100)
	}
	if err := comm.Broadcast(ctx, c, buf, root); err != nil {
		return err
	}
	for i, v := range buf {
		if want := T(root*1000 + i%100); v != want {
			return fmt.Errorf("broadcast(%d elements, root %d): element %d = %v, want %v", len(buf), root, i, v, want)
		}
	}
	return nil
}
