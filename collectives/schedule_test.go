package collectives

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"testing"
)

// Sizes every schedule is checked with: empty, one element, fewer elements
// than ranks, primes, and a count not divisible by the rank count.
var simCounts = []int{0, 1, 2, 7, 31, 100}

// chunk sizes in elements: one element, a few, and larger than any buffer.
var simChunks = []int{1, 3, 1 << 20}

func compileAll(t *testing.T, size, chunkBytes int, mk func(rank int) Schedule) []*Plan {
	t.Helper()
	plans := make([]*Plan, size)
	for r := range size {
		p, err := Compile(mk(r), chunkBytes)
		if err != nil {
			t.Fatal(err)
		}
		plans[r] = p
	}
	return plans
}

func TestRingAllreduceSchedule(t *testing.T) {
	racetest.SkipSequential(t)
	const elem = 4
	for size := 1; size <= 33; size++ {
		for _, count := range simCounts {
			for _, ch := range simChunks {
				plans := compileAll(t, size, ch*elem, func(r int) Schedule { return RingAllreduce(r, size, count, elem) })
				s := newSim(plans, elem, count, uint64(size*1000+count))
				for r := range size {
					for i := range count {
						s.data[r][i] = 1 << r
					}
				}
				if err := s.run(); err != nil {
					t.Fatalf("ranks=%d count=%d chunk=%d: %v", size, count, ch, err)
				}
				full := uint64(1)<<size - 1
				for r := range size {
					for i, v := range s.data[r] {
						if v != full {
							t.Fatalf("ranks=%d count=%d chunk=%d: rank %d element %d holds inputs %b, want all %d ranks",
								size, count, ch, r, i, v, size)
						}
					}
				}
			}
		}
	}
}

func TestBinomialBroadcastSchedule(t *testing.T) {
	racetest.SkipSequential(t)
	const elem = 8
	for size := 1; size <= 33; size++ {
		for _, root := range []int{0, 1, size / 2, size - 1} {
			if root >= size {
				continue
			}
			for _, count := range simCounts {
				for _, ch := range simChunks {
					plans := compileAll(t, size, ch*elem, func(r int) Schedule { return BinomialBroadcast(r, size, root, count, elem) })
					s := newSim(plans, elem, count, uint64(size*100+root))
					for i := range count {
						s.data[root][i] = 1 << 40
					}
					if err := s.run(); err != nil {
						t.Fatalf("ranks=%d root=%d count=%d chunk=%d: %v", size, root, count, ch, err)
					}
					for r := range size {
						for i, v := range s.data[r] {
							if v != 1<<40 {
								t.Fatalf("ranks=%d root=%d count=%d: rank %d element %d not the root's", size, root, count, r, i)
							}
						}
					}
				}
			}
		}
	}
}

// TestBarrierSchedules: with every barrier algorithm, no rank leaves
// before it has heard, directly or through others, from every rank.
func TestBarrierSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	for _, algo := range Algos(CollBarrier) {
		for size := 1; size <= 33; size++ {
			plans := compileAll(t, size, 64, func(r int) Schedule { return algo.Build(r, size, &Args{}) })
			s := newSim(plans, 1, 0, uint64(size))
			if err := s.run(); err != nil {
				t.Fatalf("%s, ranks=%d: %v", algo.Name, size, err)
			}
			for r := range size {
				if popcount(s.know[r]) != size {
					t.Fatalf("%s, ranks=%d: rank %d leaves having heard from %d ranks only", algo.Name, size, r, popcount(s.know[r]))
				}
			}
		}
	}
}

// TestSimCatchesBrokenSchedules makes sure the checker itself can fail.
func TestSimCatchesBrokenSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	racetest.SkipSequential(t)
	const elem = 4
	cases := map[string]func(r, size int) Schedule{
		"missing recv": func(r, size int) Schedule {
			s := RingAllreduce(r, size, 8, elem)
			s.Steps = s.Steps[:len(s.Steps)-1]
			return s
		},
		"double reduce": func(r, size int) Schedule {
			s := RingAllreduce(r, size, 8, elem)
			for i := range s.Steps {
				if s.Steps[i].Kind == Recv {
					s.Steps[i].Kind = RecvReduce
				}
			}
			return s
		},
		"copy of bytes never written": func(r, size int) Schedule {
			s := RingAllreduce(r, size, 8, elem)
			s.ScratchBytes = elem
			s.Steps = append(s.Steps, Step{Kind: Copy, Peer: -1, Buf: BufData, Off: 3 * elem, Len: elem, SrcBuf: BufScratch})
			return s
		},
		"length mismatch": func(r, size int) Schedule {
			s := RingAllreduce(r, size, 8, elem)
			if r == 0 {
				s.Steps[0].Len -= elem
			}
			return s
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			size := 3
			plans := compileAll(t, size, 1<<20, func(r int) Schedule { return mk(r, size) })
			s := newSim(plans, elem, 8, 1)
			for r := range size {
				for i := range 8 {
					s.data[r][i] = 1 << r
				}
			}
			err := s.run()
			if err == nil {
				full := uint64(1)<<size - 1
				for r := range size {
					for _, v := range s.data[r] {
						if v != full {
							err = fmt.Errorf("incomplete result")
						}
					}
				}
			}
			if err == nil {
				t.Fatal("a broken schedule passed the checker")
			}
		})
	}
}

// TestXsimCatchesBrokenSchedules makes sure each of xsim's checks can fail.
func TestXsimCatchesBrokenSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	racetest.SkipSequential(t)
	const elem = 4
	firstStep := func(s *Schedule, k Kind) *Step {
		for i := range s.Steps {
			if s.Steps[i].Kind == k {
				return &s.Steps[i]
			}
		}
		panic("no such step")
	}
	cases := map[string]xcase{
		"block in the wrong place": allgatherCase(4, 2, func(r int) Schedule {
			s := RingAllgather(r, 4, 2, elem)
			if r == 1 {
				st := firstStep(&s, Recv)
				st.Off = (st.Off + 2*elem) % (8 * elem)
			}
			return s
		}),
		"own block not copied": allgatherCase(4, 2, func(r int) Schedule {
			s := RingAllgather(r, 4, 2, elem)
			if r == 2 {
				s.Pre = nil
			}
			return s
		}),
		"scratch overrun": func() xcase {
			c := allgatherCase(8, 3, nil)
			c.mk = func(r int) Schedule {
				s := BinomialGather(r, 8, 0, 3, elem)
				if r == 4 {
					s.ScratchBytes -= elem
				}
				return s
			}
			c.dataElems = func(int) int { return 24 }
			return c
		}(),
		"writes the input": alltoallCase(4, 1, func(r int) Schedule {
			s := PairwiseAlltoall(r, 4, 1, elem)
			if r == 0 {
				firstStep(&s, Recv).Buf = BufInput
			}
			return s
		}),
		"reduces misaligned elements": allreduceCase(2, 8, func(r int) Schedule {
			s := RingAllreduce(r, 2, 8, elem)
			if r == 1 {
				st := firstStep(&s, RecvReduce)
				if st.Off > 0 {
					st.Off -= elem
				} else {
					st.Off += elem
				}
			}
			return s
		}),
		"reduces an undefined value": allreduceCase(2, 4, func(r int) Schedule {
			s := RecursiveDoublingAllreduce(r, 2, 4, elem)
			s.ScratchBytes = 4 * elem
			firstStep(&s, RecvReduce).Buf = BufScratch
			return s
		}),
		"empty message": allreduceCase(2, 4, func(r int) Schedule {
			s := RecursiveDoublingAllreduce(r, 2, 4, elem)
			s.Steps = append(s.Steps, Step{Kind: Send, Peer: 1 - r, Buf: BufData}, Step{Kind: Recv, Peer: 1 - r, Buf: BufData})
			return s
		}),
		"a round left out": alltoallCase(5, 2, func(r int) Schedule {
			// The second round's send and receive: its unpacking copies
			// the first round's blocks again.
			s := BruckAlltoall(r, 5, 2, elem)
			var steps []Step
			net := 0
			for _, st := range s.Steps {
				if st.Kind != Copy {
					net++
					if net == 3 || net == 4 {
						continue
					}
				}
				steps = append(steps, st)
			}
			s.Steps = steps
			return s
		}),
		"a copy left out": alltoallCase(5, 2, func(r int) Schedule {
			s := BruckAlltoall(r, 5, 2, elem)
			if r == 1 {
				s.Steps = s.Steps[:len(s.Steps)-1]
			}
			return s
		}),
		"copy to the wrong place": alltoallCase(5, 2, func(r int) Schedule {
			s := BruckAlltoall(r, 5, 2, elem)
			if r == 2 {
				last := &s.Steps[len(s.Steps)-1]
				last.Off = (last.Off + 2*elem) % (10 * elem)
			}
			return s
		}),
		"copy from the wrong place": alltoallCase(5, 2, func(r int) Schedule {
			s := BruckAlltoall(r, 5, 2, elem)
			if r == 3 {
				firstStep(&s, Copy).SrcOff -= elem
			}
			return s
		}),
		"copy source outside its buffer": alltoallCase(5, 2, func(r int) Schedule {
			s := BruckAlltoall(r, 5, 2, elem)
			if r == 4 {
				firstStep(&s, Copy).SrcOff += elem
			}
			return s
		}),
		// Every rank reduces the others' inputs into its own in rank
		// order: ranks 0 and 1 compute (x0+x1)+x2, rank 2 (x0+x2)+x1,
		// which differs in floating point.
		"trees differ between ranks": allreduceCase(3, 2, func(r int) Schedule {
			s := Schedule{Name: "naive", Rank: r, Size: 3, ScratchBytes: 2 * elem}
			s.copyPre(BufData, 0, BufScratch, 0, 2*elem)
			for p := range 3 {
				if p != r {
					s.add(Send, p, BufScratch, 0, 2*elem)
				}
			}
			for p := range 3 {
				if p != r {
					s.add(RecvReduce, p, BufData, 0, 2*elem)
				}
			}
			return s
		}),
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.run()
			if err == nil {
				t.Fatal("a broken schedule passed the checker")
			}
			t.Log(err)
		})
	}
}

// TestXsimCredits checks that xsim models the executor's credits: this
// schedule completes with unbounded buffering but deadlocks when one chunk
// may be in flight per peer. Rank 0 sends rank 1 two messages, the second
// from bytes it must then overwrite before it can feed rank 2, and rank 1
// takes the first only after hearing from rank 2.
func TestXsimCredits(t *testing.T) {
	const elem = 4
	mk := func(r int) Schedule {
		s := Schedule{Name: "credit-cycle", Rank: r, Size: 3}
		switch r {
		case 0:
			s.add(Send, 1, BufData, 0, elem)
			s.add(Send, 1, BufData, elem, elem)
			s.add(Recv, 1, BufData, elem, elem) // waits for the second send
			s.add(Send, 2, BufData, elem, elem)
		case 1:
			s.add(Send, 0, BufData, 2*elem, elem)
			s.add(Recv, 2, BufData, 0, elem)
			s.add(Recv, 0, BufData, 0, elem) // waits for rank 2
			s.add(Recv, 0, BufData, elem, elem)
		case 2:
			s.add(Recv, 0, BufData, 0, elem)
			s.add(Send, 1, BufData, 0, elem)
		}
		return s
	}
	scheds := []Schedule{mk(0), mk(1), mk(2)}
	plans := make([]*Plan, 3)
	for r := range 3 {
		p, err := Compile(scheds[r], elem)
		if err != nil {
			t.Fatal(err)
		}
		plans[r] = p
	}
	three := func(int) int { return 3 }
	for _, slots := range []int{0, 1} {
		for seed := range uint64(20) {
			s, err := newXsim(scheds, plans, elem, three, func(int) int { return 0 }, slots, seed, newExprs())
			if err != nil {
				t.Fatal(err)
			}
			for r := range 3 {
				s.fill(r, BufData)
			}
			err = s.run()
			if slots == 0 && err != nil {
				t.Fatalf("unbounded, seed %d: %v", seed, err)
			}
			if slots == 1 && err == nil {
				t.Fatalf("one credit, seed %d: the credit cycle went unnoticed", seed)
			}
		}
	}
}

// TestXsimRunsCopiesByDependencies checks that xsim runs a Copy chunk only
// once the planner says it may: with the dependencies of Bruck's copies
// taken away, some random order copies a block before it arrives.
func TestXsimRunsCopiesByDependencies(t *testing.T) {
	const size, count, elem = 5, 2, 4
	c := alltoallCase(size, count, nil)
	scheds := make([]Schedule, size)
	plans := make([]*Plan, size)
	for r := range size {
		scheds[r] = BruckAlltoall(r, size, count, elem)
		p, err := Compile(scheds[r], elem)
		if err != nil {
			t.Fatal(err)
		}
		for _, idx := range p.copies {
			p.chunks[idx].nDeps = 0
		}
		plans[r] = p
	}
	failed := 0
	for seed := range uint64(10) {
		s, err := newXsim(scheds, plans, elem, c.dataElems, c.inputElems, 0, seed, newExprs())
		if err != nil {
			t.Fatal(err)
		}
		c.init(s)
		if err := s.run(); err != nil || c.check(s) != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("copies run before their dependencies went unnoticed")
	}
}
