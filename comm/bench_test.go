package comm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	. "github.com/goccl/goccl/comm"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/tcp"
)

// benchRanks starts n ranks as goroutines over the named transport and
// returns their communicators.
func benchRanks(b *testing.B, kind string, n int) []*Comm {
	b.Helper()
	network := mem.NewNetwork(mem.Options{})
	g := NewLocalGroup(n)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dev transport.Device = network.NewDevice()
			if kind == "tcp" {
				d, err := tcp.NewDevice(tcp.Options{ListenAddress: "127.0.0.1:0"})
				if err != nil {
					errs[r] = err
					return
				}
				dev = d
			}
			comms[r], errs[r] = New(context.Background(), g.Member(r), dev, Options{OwnDevice: true})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
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
