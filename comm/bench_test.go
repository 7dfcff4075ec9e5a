package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// benchRanks starts n ranks as goroutines over the named transport and
// returns their communicators, closed when b ends.
func benchRanks(b *testing.B, kind string, n int) []*Comm {
	b.Helper()
	comms, err := commtest.Connect(context.Background(), kind, n, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

// BenchmarkAllreduce is the in-process allreduce: ranks are goroutines, so
// ns/op is the time of one allreduce on every rank.
func BenchmarkAllreduce(b *testing.B) {
	for _, kind := range []string{"tcp", "mem"} {
		for _, n := range []int{2, 4} {
			for _, size := range []int{8, 1 << 20, 64 << 20} {
				for _, reg := range []bool{true, false} {
					b.Run(fmt.Sprintf("%s/ranks=%d/bytes=%d/registered=%v", kind, n, size, reg), func(b *testing.B) {
						benchAllreduce(b, kind, n, size, reg)
					})
				}
			}
		}
	}
}

func benchAllreduce(b *testing.B, kind string, n, size int, reg bool) {
	comms := benchRanks(b, kind, n)
	bufs := make([][]float32, n)
	for r, c := range comms {
		if reg {
			buf, err := Alloc[float32](c, size/4)
			if err != nil {
				b.Fatal(err)
			}
			bufs[r] = buf
		} else {
			bufs[r] = make([]float32, size/4)
		}
		for i := range bufs[r] {
			bufs[r][i] = 1
		}
	}
	run := func(iters int) {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range iters {
					if err := Allreduce(context.Background(), c, bufs[r], bufs[r], Max); err != nil {
						errs[r] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	run(2) // warm up: staging, plans, connections
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}

// BenchmarkCollectives times every collective with every algorithm (forced)
// on 4 goroutine ranks over TCP, at a latency-bound and a bandwidth-bound
// size, so the selector's thresholds can be checked against measurements:
//
//	go test -run '^$' -bench Collectives ./comm/ | benchstat -
func BenchmarkCollectives(b *testing.B) {
	const n = 4
	for _, coll := range []string{"allreduce", "broadcast", "reduce", "allgather", "reduce-scatter", "alltoall", "gather", "scatter", "barrier"} {
		for _, algo := range Algorithms(coll) {
			for _, bytes := range []int{64, 1 << 20} {
				if coll == "barrier" && bytes > 64 {
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/ranks=%d/bytes=%d", coll, algo, n, bytes), func(b *testing.B) {
					benchCollective(b, coll, algo, n, bytes)
				})
			}
		}
	}
}

func benchCollective(b *testing.B, coll, algo string, n, bytes int) {
	comms := benchRanks(b, "tcp", n)
	count := bytes / 4
	type bufs struct{ send, recv []float32 }
	per := make([]bufs, n)
	for r, c := range comms {
		// Block collectives move count elements per rank and block.
		send, err := Alloc[float32](c, n*count)
		if err != nil {
			b.Fatal(err)
		}
		recv, err := Alloc[float32](c, n*count)
		if err != nil {
			b.Fatal(err)
		}
		per[r] = bufs{send, recv}
	}
	opt := WithAlgorithm(algo)
	call := func(ctx context.Context, c *Comm, r int) error {
		s, v := per[r].send, per[r].recv
		switch coll {
		case "allreduce":
			return Allreduce(ctx, c, s[:count], v[:count], Sum, opt)
		case "broadcast":
			return Broadcast(ctx, c, v[:count], 0, opt)
		case "reduce":
			return Reduce(ctx, c, s[:count], v[:count], Sum, 0, opt)
		case "allgather":
			return Allgather(ctx, c, s[:count/n], v[:count/n*n], opt)
		case "reduce-scatter":
			return ReduceScatter(ctx, c, s[:count/n*n], v[:count/n], Sum, opt)
		case "alltoall":
			return Alltoall(ctx, c, s[:count/n*n], v[:count/n*n], opt)
		case "gather":
			return Gather(ctx, c, s[:count/n], v[:count/n*n], 0, opt)
		case "scatter":
			return Scatter(ctx, c, s[:count/n*n], v[:count/n], 0, opt)
		case "barrier":
			return c.Barrier(ctx)
		}
		return fmt.Errorf("no collective %q", coll)
	}
	run := func(iters int) {
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range iters {
					if err := call(context.Background(), c, r); err != nil {
						errs[r] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	run(2)
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N)
}
