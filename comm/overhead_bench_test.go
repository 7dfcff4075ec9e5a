package comm_test

import (
	"context"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// BenchmarkCallOverhead is the software path of a blocking call that has
// no peer to wait for (one rank over TCP): the request, the clocks, the
// plan's lookup and the executor, no system call. Small calls between
// processes pay it on top of the kernel's time (compare with osu).
func BenchmarkCallOverhead(b *testing.B) {
	c := benchRanks(b, "tcp", 1)[0]
	buf, err := Alloc[float32](c, 2)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("allreduce", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The asynchronous way: the request goes through the queue to the
	// worker goroutine, and Wait takes its signal.
	b.Run("allreduce-async", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := AllreduceAsync(c, buf, buf, Sum).Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("broadcast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := Broadcast(ctx, c, buf, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	// OSU's loop: the timed call, then a barrier (per iteration: two
	// calls whose plans and choices alternate).
	b.Run("broadcast+barrier", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := Broadcast(ctx, c, buf, 0); err != nil {
				b.Fatal(err)
			}
			if err := c.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
