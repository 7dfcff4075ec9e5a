package verbs

// Benchmarks of the verbs data path. Inside the Soft-RoCE guest they measure
// rxe under emulation (slow: correctness, not speed); on an adapter they
// measure the adapter. Run them there with
//
//	scripts/softroce-test.sh -run '^$' -bench .

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// waitOp takes completions from q until one of op arrives; an error
// completion is an error. Completions of other ops are dropped. It may be
// called from any goroutine.
func waitOp(q transport.CompletionQueue, op transport.Op, buf []transport.Completion) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		n, err := q.Wait(ctx, buf)
		if err != nil {
			return fmt.Errorf("wait for %v: %w", op, err)
		}
		found := false
		for _, c := range buf[:n] {
			if c.Err != nil {
				return fmt.Errorf("completion %v %d: %w", c.Op, c.ID, c.Err)
			}
			found = found || c.Op == op
		}
		if found {
			return nil
		}
	}
}

// BenchmarkWriteLatency is a ping-pong of RDMA writes with immediate: A
// writes to B, B answers with a write to A. One op is one round trip;
// one-way-us is half of it.
func BenchmarkWriteLatency(b *testing.B) {
	for _, size := range []int{8, 4096} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			p := newPair(b)
			ba, bb := alloc(b, size), alloc(b, size)
			ra := register(b, p.da, ba, transport.AccessAll)
			rb := register(b, p.db, bb, transport.AccessAll)
			if err := p.a.PostRecv(0, ra, 0, 0); err != nil {
				b.Fatal(err)
			}
			if err := p.b.PostRecv(0, rb, 0, 0); err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			go func() { // B: answer every write
				defer close(done)
				buf := make([]transport.Completion, 8)
				for i := 0; i < b.N; i++ {
					if err := waitOp(p.qb, transport.OpRecv, buf); err != nil {
						b.Error(err)
						return
					}
					if err := p.b.PostRecv(uint64(i), rb, 0, 0); err != nil {
						b.Error(err)
						return
					}
					imm := uint32(i)
					if err := p.b.PostWrite(uint64(i), rb, 0, size, ra.Remote(), 0, &imm); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			buf := make([]transport.Completion, 8)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				imm := uint32(i)
				if err := p.a.PostWrite(uint64(i), ra, 0, size, rb.Remote(), 0, &imm); err != nil {
					b.Fatal(err)
				}
				if err := waitOp(p.qa, transport.OpRecv, buf); err != nil {
					b.Fatal(err)
				}
				if err := p.a.PostRecv(uint64(i), ra, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			<-done
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2e3, "one-way-us")
		})
	}
}

// BenchmarkWriteBandwidth streams RDMA writes of size bytes from A to B
// with up to window of them in flight.
func BenchmarkWriteBandwidth(b *testing.B) {
	const window = 16
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			p := newPair(b)
			src, dst := alloc(b, size), alloc(b, size)
			rs := register(b, p.da, src, 0)
			rd := register(b, p.db, dst, transport.AccessRemoteWrite)
			buf := make([]transport.Completion, window)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			b.SetBytes(int64(size))
			b.ResetTimer()
			inflight := 0
			for i := 0; i < b.N || inflight > 0; {
				for inflight < window && i < b.N {
					if err := p.a.PostWrite(uint64(i), rs, 0, size, rd.Remote(), 0, nil); err != nil {
						b.Fatal(err)
					}
					inflight++
					i++
				}
				n, err := p.qa.Wait(ctx, buf)
				if err != nil {
					b.Fatal(err)
				}
				for _, c := range buf[:n] {
					if c.Err != nil {
						b.Fatalf("write %d: %v", c.ID, c.Err)
					}
				}
				inflight -= n
			}
		})
	}
}
