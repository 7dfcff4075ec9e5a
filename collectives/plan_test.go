package collectives

import (
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func addDep(list []int32, d int32) []int32 {
	if slices.Contains(list, d) {
		return list
	}
	return append(list, d)
}

// TestHazardsMatchPerByteModel checks the interval-based dependency
// tracking against a per-byte model on random accesses.
func TestHazardsMatchPerByteModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		const n = 40
		accs := make([]access, 30)
		for i := range accs {
			x := rng.IntN(n)
			accs[i] = access{buf: BufData, x: x, y: x + rng.IntN(n-x+1), write: rng.IntN(2) == 0}
		}
		h := newHazards(accs, len(accs))
		writer := make([]int32, n+1)
		readers := make([][]int32, n+1)
		for i := range writer {
			writer[i] = -1
		}
		for idx, a := range accs {
			got := h.access(a, int32(idx), nil)
			var want []int32
			x, y := a.x, max(a.y, a.x+1)
			for b := x; b < y; b++ {
				if writer[b] >= 0 {
					want = addDep(want, writer[b])
				}
				if a.write {
					for _, r := range readers[b] {
						want = addDep(want, r)
					}
					writer[b], readers[b] = int32(idx), nil
				} else {
					readers[b] = append(readers[b], int32(idx))
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d access %d [%d,%d) write=%v: deps %v, want %v", trial, idx, a.x, a.y, a.write, got, want)
			}
		}
	}
}

// TestCompileCopy checks how Compile cuts a Copy step and orders it: chunk
// i covers the same relative range of source and destination, reads the
// source and writes the destination, and sits in neither sends nor
// receives.
func TestCompileCopy(t *testing.T) {
	s := Schedule{Name: "copy", Rank: 0, Size: 2, ScratchBytes: 16}
	s.add(Recv, 1, BufScratch, 0, 8)                                                                    // chunks 0, 1: scratch [0,4) [4,8)
	s.copyStep(BufScratch, 2, BufData, 10, 6)                                                           // chunks 2, 3: data [10,14) <- scratch [2,6), [14,16) <- [6,8)
	s.add(Send, 1, BufData, 14, 2)                                                                      // chunk 4: reads what chunk 3 wrote
	s.add(Recv, 1, BufScratch, 0, 4)                                                                    // chunk 5: overwrites what chunks 0 wrote and 2 read
	s.copyStep(BufInput, 0, BufScratch, 8, 8)                                                           // chunks 6, 7: independent of all
	s.Steps = append(s.Steps, Step{Kind: Copy, Peer: 1, Buf: BufData, Off: 0, Len: 0, SrcBuf: BufData}) // chunk 8: empty, Peer ignored
	p, err := Compile(s, 4)
	if err != nil {
		t.Fatal(err)
	}
	type cut struct {
		buf, srcBuf      Buf
		off, srcOff, len int
	}
	for i, want := range map[int]cut{
		2: {BufData, BufScratch, 10, 2, 4},
		3: {BufData, BufScratch, 14, 6, 2},
		6: {BufScratch, BufInput, 8, 0, 4},
		7: {BufScratch, BufInput, 12, 4, 4},
	} {
		c := p.chunks[i]
		if got := (cut{c.buf, c.srcBuf, c.off, c.srcOff, c.len}); got != want || c.kind != Copy || c.peer != -1 {
			t.Errorf("chunk %d: %+v (kind %v, peer %d), want %+v", i, got, c.kind, c.peer, want)
		}
	}
	if !slices.Equal(p.copies, []int32{2, 3, 6, 7, 8}) {
		t.Errorf("copies %v", p.copies)
	}
	if !slices.Equal(p.sends[1], []int32{4}) || !slices.Equal(p.recvs[1], []int32{0, 1, 5}) {
		t.Errorf("sends %v, receives %v", p.sends[1], p.recvs[1])
	}
	deps := func(i int32) []int32 {
		var d []int32
		for j := range int32(len(p.chunks)) {
			if slices.Contains(p.dependents(j), i) {
				d = append(d, j)
			}
		}
		return d
	}
	for i, want := range map[int32][]int32{2: {0, 1}, 3: {1}, 4: {3}, 5: {0, 2}, 6: nil, 7: nil, 8: nil} {
		if got := deps(i); !slices.Equal(got, want) || p.chunks[i].nDeps != int32(len(want)) {
			t.Errorf("chunk %d depends on %v (%d), want %v", i, got, p.chunks[i].nDeps, want)
		}
	}

	bad := map[string]Step{
		"overlapping":          {Kind: Copy, Peer: -1, Buf: BufScratch, Off: 4, Len: 8, SrcBuf: BufScratch, SrcOff: 0},
		"to the input":         {Kind: Copy, Peer: -1, Buf: BufInput, Off: 0, Len: 4, SrcBuf: BufData},
		"from a token":         {Kind: Copy, Peer: -1, Buf: BufData, Off: 0, Len: 0, SrcBuf: BufToken},
		"negative source":      {Kind: Copy, Peer: -1, Buf: BufData, Off: 0, Len: 4, SrcBuf: BufScratch, SrcOff: -4},
		"a send with a source": {Kind: Send, Peer: 1, Buf: BufData, Len: 4, SrcOff: 4},
		"unknown kind":         {Kind: Kind(99), Peer: 1, Buf: BufData, Len: 4},
	}
	for name, st := range bad {
		s := Schedule{Name: "bad", Rank: 0, Size: 2, ScratchBytes: 16, Steps: []Step{st}}
		if _, err := Compile(s, 4); err == nil {
			t.Errorf("%s: compiled %v", name, st)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// Adjacent ranges of one buffer do not overlap.
	ok := Schedule{Name: "ok", Rank: 0, Size: 1, ScratchBytes: 16}
	ok.copyStep(BufScratch, 0, BufScratch, 8, 8)
	if _, err := Compile(ok, 4); err != nil {
		t.Error(err)
	}
}

// BenchmarkCompile compiles a 4-rank ring allreduce of 4 MiB (what a
// communicator measures at start-up) at chunk sizes from 64 KiB down to
// 64 bytes: ns/chunk stays flat as the chunk count grows 1024-fold
// (compiling is linear in the chunk count; it was quadratic).
//
//	go test -run '^$' -bench Compile ./collectives/
func BenchmarkCompile(b *testing.B) {
	const size, bytes = 4, 4 << 20
	for _, chunk := range []int{64 << 10, 8 << 10, 1 << 10, 512, 64} {
		s := RingAllreduce(1, size, bytes/4, 4)
		p, err := Compile(s, chunk)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("chunks=%d", p.NumChunks()), func(b *testing.B) {
			for b.Loop() {
				if _, err := Compile(s, chunk); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(p.NumChunks()), "ns/chunk")
		})
	}
}

// TestCompileManyChunks compiles a plan of 196,608 chunks (4 MiB ring
// allreduce on 4 ranks: 6 steps, each sending and receiving 1 MiB, in
// 64-byte chunks): milliseconds now, many minutes when compiling was
// quadratic in the chunk count (issue 11 item 6). A cancelled context
// stops compiling.
func TestCompileManyChunks(t *testing.T) {
	racetest.SkipSequential(t)
	s := RingAllreduce(1, 4, 1<<20, 4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := CompileContext(ctx, s, 64)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * 6 * (1 << 20) / 64; p.NumChunks() != want {
		t.Errorf("%d chunks, want %d", p.NumChunks(), want)
	}
	// Ring: each chunk of a reduce-scatter step waits for the chunk of the
	// previous step that wrote its bytes; a send of the first step waits
	// for nothing.
	if p.chunks[0].nDeps != 0 {
		t.Errorf("first chunk has %d dependencies", p.chunks[0].nDeps)
	}
	cancel()
	if _, err := CompileContext(ctx, s, 64); !errors.Is(err, context.Canceled) {
		t.Errorf("compile under a cancelled context: %v, want context.Canceled", err)
	}
}
