package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// BenchmarkAllreduceOutOfPlace times an allreduce from a registered send
// buffer into a registered receive buffer beside the same allreduce in
// place, on goroutine ranks over the in-memory transport: out of place
// reads the send buffer in the first reduction of each chunk
// (collectives.CompileFused) instead of copying it first, so the two should
// be close.
//
//	go test -run '^$' -bench AllreduceOutOfPlace ./comm/
func BenchmarkAllreduceOutOfPlace(b *testing.B) {
	const n, size = 2, 64 << 20
	for _, place := range []string{"in", "out"} {
		b.Run(fmt.Sprintf("mem/ranks=%d/bytes=%d/place=%s", n, size, place), func(b *testing.B) {
			comms := benchRanks(b, "mem", n)
			send, recv := make([][]float32, n), make([][]float32, n)
			for r, c := range comms {
				var err error
				if send[r], err = Alloc[float32](c, size/4); err != nil {
					b.Fatal(err)
				}
				recv[r] = send[r]
				if place == "out" {
					if recv[r], err = Alloc[float32](c, size/4); err != nil {
						b.Fatal(err)
					}
				}
				for i := range send[r] {
					send[r][i], recv[r][i] = 1, 1
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
							if errs[r] = Allreduce(context.Background(), c, send[r], recv[r], Max); errs[r] != nil {
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
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			run(b.N)
		})
	}
}
