package shm

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// Benchmarks between two processes: this one and a child (child_test.go)
// that answers writes with immediate. Run them with -benchmem; steady state
// allocates nothing.
//
//	go test ./transport/shm/ -run '^$' -bench 'Proc|Memcpy' -benchmem -count 5

// procPaths are the ways a write can reach the child's memory.
var procPaths = []struct {
	name string
	env  []string
	cma  bool
}{
	{"Shared", []string{"GOCCL_SHM_CHILD_MEM=alloc"}, true},
	{"CMA", []string{"GOCCL_SHM_CHILD_MEM=heap"}, true},
	{"Staged", []string{"GOCCL_SHM_CHILD_MEM=heap", "GOCCL_SHM_CHILD_CMA=0"}, false},
}

// benchChild starts a child with a region of size bytes and connects to
// it; the returned side has a region of size bytes too.
func benchChild(b *testing.B, size int, env []string, cma bool) (*procSide, peerLine, *child) {
	b.Helper()
	env = append(env, "GOCCL_SHM_CHILD_SIZE="+strconv.Itoa(size))
	c := startChild(b, env...)
	p := c.newEndpoint("p")
	o := testOptions(b)
	o.DisableCMA = !cma
	s := newProcSide(b, o, size)
	for i := range s.mem {
		s.mem[i] = byte(i)
	}
	connectChild(b, c, "p", p, s.ep, s.reg.Remote())
	c.send("ECHO p")
	return s, p, c
}

// BenchmarkProcLatency is the one-way latency of an 8-byte write with
// immediate between two processes: a ping-pong (this side writes, the
// child's echo writes back), half a round trip per ns/oneway.
func BenchmarkProcLatency(b *testing.B) {
	for _, path := range procPaths {
		b.Run(path.name, func(b *testing.B) {
			s, p, _ := benchChild(b, 1<<20, path.env, path.cma)
			cs := make([]transport.Completion, 8)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			imm := uint32(1)
			round := func() {
				if err := s.ep.PostRecv(0, s.reg, 0, 0); err != nil {
					b.Fatal(err)
				}
				if err := s.ep.PostWrite(1, s.reg, 4096, 8, p.rr, 0, &imm); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < 2; {
					n, err := s.cq.Wait(ctx, cs)
					if err != nil {
						b.Fatal(err)
					}
					for _, c := range cs[:n] {
						if c.Err != nil {
							b.Fatal(c.Err)
						}
					}
					got += n
				}
			}
			for range 1000 {
				round()
			}
			b.ReportAllocs()
			st := ReadStats()
			b.ResetTimer()
			for range b.N {
				round()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/oneway")
			reportStats(b, st)
		})
	}
}

var bandwidthSizes = []int{64 << 10, 1 << 20, 64 << 20}

// BenchmarkProcWrite writes size bytes into the child's region, keeping a
// few writes in flight; MB/s is the bandwidth.
func BenchmarkProcWrite(b *testing.B) {
	for _, path := range procPaths {
		for _, size := range bandwidthSizes {
			b.Run(fmt.Sprintf("%s/%s", path.name, sizeName(size)), func(b *testing.B) {
				s, p, _ := benchChild(b, size, path.env, path.cma)
				win := 4
				cs := make([]transport.Completion, 64)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				run := func(n int) {
					posted, done := 0, 0
					for done < n {
						for posted < n && posted-done < win {
							if err := s.ep.PostWrite(uint64(posted), s.reg, 0, size, p.rr, 0, nil); err != nil {
								b.Fatal(err)
							}
							posted++
						}
						k, err := s.cq.Wait(ctx, cs)
						if err != nil {
							b.Fatal(err)
						}
						for _, c := range cs[:k] {
							if c.Err != nil {
								b.Fatal(c.Err)
							}
						}
						done += k
					}
				}
				run(8) // touch the pages on both sides
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				run(b.N)
			})
		}
	}
}

// BenchmarkMemcpy is the reference for the bandwidth: copy between two
// Alloc'd buffers in one process.
func BenchmarkMemcpy(b *testing.B) {
	for _, size := range bandwidthSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			src, err := Alloc(size)
			if err != nil {
				b.Fatal(err)
			}
			defer Free(src)
			dst, err := Alloc(size)
			if err != nil {
				b.Fatal(err)
			}
			defer Free(dst)
			copy(dst, src)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				copy(dst, src)
			}
		})
	}
}

// cpuTime is the CPU time the process used (user and system), in ns: on a
// loaded machine, a steadier measure of a single goroutine's work than
// the wall clock.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// reportStats reports this process's sleeps, wake-ups and nudges per op
// since st.
func reportStats(b *testing.B, st Stats) {
	now := ReadStats()
	n := float64(b.N)
	b.ReportMetric(float64(now.Sleeps-st.Sleeps)/n, "sleeps/op")
	b.ReportMetric(float64(now.Wakes-st.Wakes)/n, "wakes/op")
	b.ReportMetric(float64(now.Nudges-st.Nudges)/n, "nudges/op")
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

// BenchmarkPingPong is the in-process ping-pong of an 8-byte write with
// immediate between two devices (goroutines), the CPU cost of the
// latency path without a second process: one op is a round trip.
func BenchmarkPingPong(b *testing.B) {
	o := Options{Logger: logtest.Func(b.Logf)}
	n := 0
	p := transporttest.NewPair(b, func(t testing.TB) transport.Device {
		n++
		return newTestDevice(t, o)
	})
	mk := func(dev transport.Device) transport.Region {
		mem, err := Alloc(4096)
		if err != nil {
			b.Fatal(err)
		}
		r, err := dev.Register(mem, transport.AccessAll)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dev.Deregister(r); Free(mem) })
		return r
	}
	ra, rb := mk(p.DevA), mk(p.DevB)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	echo := func(n int) {
		cs := make([]transport.Completion, 8)
		imm := uint32(2)
		for i := 0; i < n; {
			k, err := p.CQB.Wait(ctx, cs)
			if err != nil {
				done <- err
				return
			}
			for _, c := range cs[:k] {
				if c.Op != transport.OpRecv {
					continue
				}
				i++
				if err := p.B.PostRecv(0, rb, 0, 0); err != nil {
					done <- err
					return
				}
				if err := p.B.PostWrite(1, rb, 8, 8, ra.Remote(), 0, &imm); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}
	cs := make([]transport.Completion, 8)
	imm := uint32(1)
	round := func() {
		if err := p.A.PostRecv(0, ra, 0, 0); err != nil {
			b.Fatal(err)
		}
		if err := p.A.PostWrite(1, ra, 8, 8, rb.Remote(), 0, &imm); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			k, err := p.CQA.Wait(ctx, cs)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range cs[:k] {
				got = got || c.Op == transport.OpRecv
			}
		}
	}
	if err := p.B.PostRecv(0, rb, 0, 0); err != nil {
		b.Fatal(err)
	}
	go echo(1000 + b.N)
	for range 1000 {
		round()
	}
	b.ReportAllocs()
	st := ReadStats()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/oneway")
	reportStats(b, st)
}

// BenchmarkHop is the CPU cost of one hop of the latency path, without
// waiting: one goroutine posts an 8-byte write with immediate on A, polls
// B (which places it and completes B's receive), reposts B's receive, and
// polls A (which completes the write). Scheduling and the other core play
// no part, so it is stable on a loaded machine.
func BenchmarkHop(b *testing.B) {
	for _, mode := range []struct {
		name string
		o    Options
	}{
		{"InProcess", Options{}},
		{"Mapped", Options{noSelf: true, DisableCMA: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			o := mode.o
			o.Logger = logtest.Func(b.Logf)
			p := transporttest.NewPair(b, func(t testing.TB) transport.Device { return newTestDevice(t, o) })
			mk := func(dev transport.Device) transport.Region {
				mem, err := Alloc(4096)
				if err != nil {
					b.Fatal(err)
				}
				r, err := dev.Register(mem, transport.AccessAll)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { dev.Deregister(r); Free(mem) })
				return r
			}
			ra, rb := mk(p.DevA), mk(p.DevB)
			time.Sleep(10 * time.Millisecond) // the segments reach the readers
			cs := make([]transport.Completion, 4)
			imm := uint32(1)
			if err := p.B.PostRecv(0, rb, 0, 0); err != nil {
				b.Fatal(err)
			}
			hop := func() {
				if err := p.A.PostWrite(1, ra, 0, 8, rb.Remote(), 0, &imm); err != nil {
					b.Fatal(err)
				}
				for p.CQB.Poll(cs) == 0 {
				}
				if err := p.B.PostRecv(0, rb, 0, 0); err != nil {
					b.Fatal(err)
				}
				for p.CQA.Poll(cs) == 0 {
				}
			}
			for range 1000 {
				hop()
			}
			b.ReportAllocs()
			cpu := cpuTime()
			b.ResetTimer()
			for range b.N {
				hop()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkProcRing passes an 8-byte write with immediate around a ring of
// four processes (this one and three children: more ranks than this
// machine's two cores), ns/hop per pass from one to the next. It shows
// whether waiting collapses when processes outnumber cores (spinning
// waiters starving the one that has the token).
func BenchmarkProcRing(b *testing.B) {
	const n = 4
	kids := make([]*child, n-1)
	for i := range kids {
		kids[i] = startChild(b, "GOCCL_SHM_CHILD_SIZE=65536")
	}
	s := newProcSide(b, testOptions(b), 1<<16)
	// Endpoints: this process's "out" to child 0, child i's "out" to
	// child i+1, the last child's "out" back to this process's "in".
	in := transporttest.NewEndpoint(b, s.dev, s.cq)
	connect := func(a *child, aName string, bk *child, bName string) {
		pa := a.newEndpointShared(aName)
		pb := bk.newEndpointShared(bName)
		a.send("CONNECT %s %s", aName, pb)
		bk.send("CONNECT %s %s", bName, pa)
		a.expect("CONNECTED", 20*time.Second)
		bk.expect("CONNECTED", 20*time.Second)
	}
	p0 := kids[0].newEndpointShared("in")
	connectChild(b, kids[0], "in", p0, s.ep, s.reg.Remote())
	for i := 0; i+1 < len(kids); i++ {
		connect(kids[i], "out", kids[i+1], "in")
	}
	last := kids[len(kids)-1]
	pl := last.newEndpointShared("out")
	connectChild(b, last, "out", pl, in, s.reg.Remote())
	for _, k := range kids {
		k.send("FORWARD in out")
	}
	ri := transporttest.Register(b, s.dev, make([]byte, 64), transport.AccessAll)
	cs := make([]transport.Completion, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	imm := uint32(3)
	round := func() {
		if err := in.PostRecv(0, ri, 0, 0); err != nil {
			b.Fatal(err)
		}
		if err := s.ep.PostWrite(1, s.reg, 0, 8, p0.rr, 0, &imm); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			k, err := s.cq.Wait(ctx, cs)
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range cs[:k] {
				if c.Err != nil {
					b.Fatal(c.Err)
				}
				got = got || (c.Op == transport.OpRecv && c.Endpoint == in)
			}
		}
	}
	for range 200 {
		round()
	}
	b.ReportAllocs()
	st := ReadStats()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*b.N), "ns/hop")
	reportStats(b, st)
}
