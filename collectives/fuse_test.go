package collectives

import (
	"fmt"
	"testing"
)

// fused turns a reduction case whose BufData starts with every rank's
// input into one compiled with CompileFused: the input is in BufInput
// (atoms named as BufData's, so the checks are unchanged) and BufData
// starts undefined, so a step that read it before writing it would fail.
func fused(c xcase) xcase {
	c.fuse = true
	c.inputElems = c.dataElems
	c.init = func(s *xsim) {
		for r := range c.size {
			for i := range s.bufs[r][BufInput] {
				s.bufs[r][BufInput][i] = s.ex.atom(r, BufData, i)
			}
		}
	}
	return c
}

// fusedSizes are the rank counts of the fused schedule tests: CompileFused
// does not depend on the schedule's arithmetic, only on the order of its
// steps, which these counts (all small ones, a power of two and its
// neighbour) exercise at a fraction of simSizes' time.
var fusedSizes = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17}

// TestFusedReductions runs the out-of-place reductions compiled with
// CompileFused through the simulator, at every chunk size and credit limit
// the other schedule tests use.
func TestFusedReductions(t *testing.T) {
	allreduce := map[string]func(rank, size, count, elemSize int) Schedule{
		"ring":               RingAllreduce,
		"recursive-doubling": RecursiveDoublingAllreduce,
		"rabenseifner":       RabenseifnerAllreduce,
		"tree":               TreeAllreduce,
	}
	for name, mk := range allreduce {
		t.Run("allreduce/"+name, func(t *testing.T) {
			t.Parallel()
			for _, size := range fusedSizes {
				for _, count := range reduceCounts {
					runX(t, fmt.Sprintf("ranks=%d count=%d", size, count),
						fused(allreduceCase(size, count, func(r int) Schedule { return mk(r, size, count, 4) })))
				}
			}
		})
	}
	reduceScatter := map[string]func(rank, size, count, elemSize int) Schedule{
		"ring":              RingReduceScatter,
		"recursive-halving": RecursiveHalvingReduceScatter,
	}
	for name, mk := range reduceScatter {
		t.Run("reducescatter/"+name, func(t *testing.T) {
			t.Parallel()
			for _, size := range fusedSizes {
				for _, count := range blockCounts {
					c := xcase{size: size, elem: 4, twice: true,
						mk:        func(r int) Schedule { return mk(r, size, count, 4) },
						dataElems: func(int) int { return size * count },
						check: func(s *xsim) error {
							for r := range size {
								for i := range count {
									if _, err := s.wantReduced(r, r*count+i); err != nil {
										return err
									}
								}
							}
							return nil
						}}
					c = fused(c)
					c.keep = func(r int) (int, int) { return r * count, (r + 1) * count } // its block, as comm
					runX(t, fmt.Sprintf("ranks=%d count=%d", size, count), c)
				}
			}
		})
	}
}

// TestFusedReduce runs the reduces compiled with CompileFused, the ranks
// but the root keeping nothing of BufData (their scratch, as comm has it):
// BufData starts undefined on every rank, and the root's result must be
// the reduction of every rank's input all the same.
func TestFusedReduce(t *testing.T) {
	for name, mk := range reduceSchedules {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, size := range fusedSizes {
				for _, root := range roots(size) {
					for _, count := range reduceCounts {
						c := fused(reduceCase(size, root, count, mk))
						c.keep = func(r int) (int, int) {
							if r == root {
								return 0, count
							}
							return 0, 0
						}
						runX(t, fmt.Sprintf("ranks=%d root=%d count=%d", size, root, count), c)
					}
				}
			}
		})
	}
}

// TestFusedReduceLeavesCopyNothing: a reduce's rank that only sends (a
// leaf of the binomial tree, every rank but the root of the flat one)
// sends its input and copies nothing when it keeps nothing of BufData;
// keeping it, it copies the whole buffer.
func TestFusedReduceLeavesCopyNothing(t *testing.T) {
	const n, count = 8, 1 << 16
	for _, tc := range []struct {
		name string
		s    Schedule
	}{{"linear", LinearReduce(3, n, 0, count, 4)}, {"binomial", BinomialReduce(1, n, 0, count, 4)}, {"pipeline", PipelineReduce(n-1, n, 0, count, 4)}} {
		for _, keep := range []int{0, 4 * count} {
			p, err := CompileFused(tc.s, 4096, 0, keep)
			if err != nil {
				t.Fatal(err)
			}
			copied := 0
			for _, c := range p.pre {
				copied += c.Len
			}
			for _, ch := range p.chunks {
				if ch.kind == Send && ch.buf != BufInput {
					t.Errorf("%s, keep %d: a chunk sent from buffer %d, not the input", tc.name, keep, ch.buf)
				}
			}
			if copied != keep {
				t.Errorf("%s, keep %d: copied %d bytes", tc.name, keep, copied)
			}
		}
	}
}

// TestFusedReduceScatterCopiesNothing: a reduce-scatter that keeps only
// its rank's block copies nothing before its steps; keeping all of
// BufData, recursive halving copies the half it sends away first and more.
func TestFusedReduceScatterCopiesNothing(t *testing.T) {
	const n, count = 8, 1 << 12 // elements per block
	for name, mk := range map[string]func(rank, size, count, elemSize int) Schedule{
		"ring": RingReduceScatter, "recursive-halving": RecursiveHalvingReduceScatter} {
		for r := range n {
			copied := func(lo, hi int) int {
				p, err := CompileFused(mk(r, n, count, 4), 4096, lo, hi)
				if err != nil {
					t.Fatal(err)
				}
				c := 0
				for _, pc := range p.pre {
					c += pc.Len
				}
				return c
			}
			if c := copied(4*r*count, 4*(r+1)*count); c != 0 {
				t.Errorf("%s rank %d keeping its block: copied %d bytes", name, r, c)
			}
			if c := copied(0, 4*n*count); name == "recursive-halving" && c < 4*n*count/2 {
				t.Errorf("%s rank %d keeping everything: copied %d bytes, want at least half", name, r, c)
			}
		}
	}
}

// TestFusedRingCopiesNothing checks that fusing pays: a ring allreduce
// over n ranks copies nothing, sends the block it sends before receiving
// anything (1/n of the buffer) from the input, and fuses every other first
// reduction.
func TestFusedRingCopiesNothing(t *testing.T) {
	const n, count = 4, 1 << 16
	for r := range n {
		p, err := CompileFused(RingAllreduce(r, n, count, 4), 4096, 0, 4*count)
		if err != nil {
			t.Fatal(err)
		}
		copied, fusedBytes, fromInput := 0, 0, 0
		for _, c := range p.pre {
			copied += c.Len
		}
		for _, ch := range p.chunks {
			if ch.fused {
				fusedBytes += ch.len
			}
			if ch.kind == Send && ch.buf == BufInput {
				fromInput += ch.len
			}
		}
		if copied != 0 || fusedBytes != 4*count*(n-1)/n || fromInput != 4*count/n {
			t.Errorf("rank %d: copies %d bytes, fuses %d, sends %d from the input; want 0, %d, %d",
				r, copied, fusedBytes, fromInput, 4*count*(n-1)/n, 4*count/n)
		}
	}
}

func TestSpans(t *testing.T) {
	var s spans
	s.add(10, 20)
	s.add(30, 40)
	s.add(18, 31)
	s.add(0, 5)
	if got := s.String(); got != "[[0 5] [10 40]]" {
		t.Fatalf("spans %s", got)
	}
	if s.disjoint(4, 11) || !s.disjoint(5, 10) || !s.disjoint(40, 50) || s.disjoint(39, 41) {
		t.Fatal("disjoint wrong")
	}
	var need spans
	need.addMissing(&s, 3, 45)
	if got := need.String(); got != "[[5 10] [40 45]]" {
		t.Fatalf("missing %s", got)
	}
}
