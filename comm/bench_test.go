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
