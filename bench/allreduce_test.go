package bench

import (
	"context"
	"testing"
	"time"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// ranks connects n communicators, goroutines of this process, over the
// named transport ("tcp" on loopback or "mem"), closed when b ends.
func ranks(b *testing.B, kind string, n int) []*comm.Comm {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, err := commtest.Connect(ctx, kind, n, comm.Options{})
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

var allreduceSizes = []struct {
	name  string
	bytes int
}{{"8B", 8}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

// benchAllreduce times rank 0's blocking allreduce while rank 1 makes the
// same calls in a goroutine.
func benchAllreduce(b *testing.B, kind string) {
	comms := ranks(b, kind, 2)
	ctx := context.Background()
	for _, sz := range allreduceSizes {
		b.Run("size="+sz.name, func(b *testing.B) {
			count := sz.bytes / 4
			send := make([][]float32, 2)
			recv := make([][]float32, 2)
			for r, c := range comms {
				var err error
				if send[r], err = comm.Alloc[float32](c, count); err != nil {
					b.Fatal(err)
				}
				if recv[r], err = comm.Alloc[float32](c, count); err != nil {
					b.Fatal(err)
				}
				for i := range send[r] {
					send[r][i] = float32(r + i%7)
				}
			}
			defer func() {
				for r, c := range comms {
					comm.Free(c, send[r])
					comm.Free(c, recv[r])
				}
			}()
			call := func(r int) error { return comm.Allreduce(ctx, comms[r], send[r], recv[r], comm.Sum) }
			// Warm up both ranks (plans, staging, first touch).
			errc := make(chan error, 1)
			go func() { errc <- call(1) }()
			if err := call(0); err != nil {
				b.Fatal(err)
			}
			if err := <-errc; err != nil {
				b.Fatal(err)
			}
			last := count - 1
			if want := float32(1 + 2*(last%7)); recv[0][last] != want {
				b.Fatalf("element %d is %v, want %v", last, recv[0][last], want)
			}
			b.ReportAllocs()
			b.SetBytes(int64(sz.bytes))
			n := b.N
			b.ResetTimer()
			go func() {
				for range n {
					if err := call(1); err != nil {
						errc <- err
						return
					}
				}
				errc <- nil
			}()
			for range n {
				if err := call(0); err != nil {
					b.Fatal(err)
				}
			}
			err := <-errc
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkAllreduceTCP2 is a 2-rank allreduce over transport/tcp on
// loopback at 8 B, 1 MiB and 64 MiB.
func BenchmarkAllreduceTCP2(b *testing.B) { benchAllreduce(b, "tcp") }

// BenchmarkAllreduceMem2 is the same over the in-memory transport.
func BenchmarkAllreduceMem2(b *testing.B) { benchAllreduce(b, "mem") }

// BenchmarkAllreduceShm2 is the same over transport/shm (two ranks of this
// process, each with its own device).
func BenchmarkAllreduceShm2(b *testing.B) { benchAllreduce(b, "shm") }
