package tcp

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

var benchSizes = []int{8, 64 << 10, 1 << 20, 64 << 20}

// benchWindow is how many requests a benchmark keeps in flight.
func benchWindow(size int) int {
	switch {
	case size <= 64<<10:
		return 64
	case size <= 1<<20:
		return 8
	}
	return 2
}

// benchPair is a connected pair with a source region on A and a target
// region on B, both of size bytes from transport.Alloc, touched once.
type benchPair struct {
	*transporttest.Pair
	src, dst transport.Region
}

func newBenchPair(b *testing.B, size int) *benchPair {
	b.Helper()
	f := func(t testing.TB) transport.Device {
		o := testOptions(t)
		o.Logger = slog.New(slog.DiscardHandler)
		d, err := NewDevice(o)
		if err != nil {
			t.Fatalf("new device: %v", err)
		}
		return d
	}
	p := transporttest.NewPair(b, f)
	mk := func(dev transport.Device, access transport.Access) transport.Region {
		buf, err := transport.Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { transport.Free(buf) })
		for i := range buf {
			buf[i] = byte(i)
		}
		return transporttest.Register(b, dev, buf, access)
	}
	return &benchPair{Pair: p, src: mk(p.DevA, 0), dst: mk(p.DevB, transport.AccessAll)}
}

func BenchmarkWrite(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			p := newBenchPair(b, size)
			remote := p.dst.Remote()
			win := benchWindow(size)
			run := windowed(b, p, win, func(id uint64) error {
				return p.A.PostWrite(id, p.src, 0, size, remote, 0, nil)
			}, nil)
			run(2 * win) // warm up: buffers, rings, pools
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			run(b.N)
		})
	}
}

func BenchmarkSend(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			p := newBenchPair(b, size)
			win := benchWindow(size)
			rcs := make([]transport.Completion, 64)
			ctx := benchContext(b)
			for i := range win {
				if err := p.B.PostRecv(uint64(i), p.dst, 0, size); err != nil {
					b.Fatal(err)
				}
			}
			run := windowed(b, p, win, func(id uint64) error {
				return p.A.PostSend(id, p.src, 0, size)
			}, func(k int) {
				// Each completed send consumed a receive: post them again.
				for got := 0; got < k; {
					m, err := p.CQB.Wait(ctx, rcs[:min(len(rcs), k-got)])
					if err != nil {
						b.Fatal(err)
					}
					for _, c := range rcs[:m] {
						if c.Err != nil {
							b.Fatal(c.Err)
						}
						if err := p.B.PostRecv(c.ID, p.dst, 0, size); err != nil {
							b.Fatal(err)
						}
					}
					got += m
				}
			})
			run(4 * win) // warm up: buffers, rings, pools
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			run(b.N)
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkPingPong is osu_latency's loop: A sends, B receives and sends
// back, A receives; one op is one round trip. Each side runs in its own
// goroutine and waits on its own queue, as two ranks do (driving both from
// one goroutine left a post waiting for a poll of its own queue that came
// only after the wait on the other: ~3 ms per round trip, the lazy timer).
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{8, 64 << 10} {
		b.Run(sizeName(size), func(b *testing.B) {
			p := newBenchPair(b, size)
			back := transporttest.Register(b, p.DevA, make([]byte, size), transport.AccessLocalWrite)
			ctx := benchContext(b)
			wait := func(q transport.CompletionQueue, cs []transport.Completion, n int) error {
				for n > 0 {
					k, err := q.Wait(ctx, cs[:n])
					if err != nil {
						return err
					}
					for _, c := range cs[:k] {
						if c.Err != nil {
							return c.Err
						}
					}
					n -= k
				}
				return nil
			}
			// B: receive, send back; rounds of them until told to stop.
			rounds := make(chan int)
			errc := make(chan error, 1)
			go func() {
				cs := make([]transport.Completion, 4)
				for n := range rounds {
					for range n {
						if err := p.B.PostRecv(0, p.dst, 0, size); err != nil {
							errc <- err
							return
						}
						if err := wait(p.CQB, cs, 1); err != nil {
							errc <- err
							return
						}
						if err := p.B.PostSend(3, p.dst, 0, size); err != nil {
							errc <- err
							return
						}
						if err := wait(p.CQB, cs, 1); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}
			}()
			defer close(rounds)
			cs := make([]transport.Completion, 4)
			run := func(n int) {
				rounds <- n
				for range n {
					if err := p.A.PostRecv(1, back, 0, size); err != nil {
						b.Fatal(err)
					}
					if err := p.A.PostSend(2, p.src, 0, size); err != nil {
						b.Fatal(err)
					}
					if err := wait(p.CQA, cs, 2); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
			}
			run(100)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			run(b.N)
		})
	}
}

// BenchmarkRead reads size bytes of B's region into A's.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{8, 1 << 20, 64 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			p := newBenchPair(b, size)
			into := transporttest.Register(b, p.DevA, make([]byte, size), transport.AccessLocalWrite)
			remote := p.dst.Remote()
			win := benchWindow(size)
			run := windowed(b, p, win, func(id uint64) error {
				return p.A.PostRead(id, into, 0, size, remote, 0)
			}, nil)
			run(4 * win) // warm up: buffers, rings, pools
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			run(b.N)
		})
	}
}

// benchContext bounds every wait of a benchmark: a broken transport fails
// it instead of hanging it.
// windowed returns a loop that keeps up to win requests posted with post
// (ids counting up) and returns after n of them completed on p.CQA;
// after, if set, runs on every batch of k completions.
func windowed(b *testing.B, p *benchPair, win int, post func(id uint64) error, after func(k int)) func(n int) {
	cs := make([]transport.Completion, 64)
	ctx := benchContext(b)
	return func(n int) {
		posted, done := 0, 0
		for done < n {
			for posted < n && posted-done < win {
				if err := post(uint64(posted)); err != nil {
					b.Fatal(err)
				}
				posted++
			}
			k, err := p.CQA.Wait(ctx, cs)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range cs[:k] {
				if c.Err != nil {
					b.Fatal(c.Err)
				}
			}
			done += k
			if after != nil {
				after(k)
			}
		}
	}
}

func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	return ctx
}
