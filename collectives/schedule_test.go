package collectives

import (
	"fmt"
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

func TestDisseminationBarrierSchedule(t *testing.T) {
	for size := 1; size <= 33; size++ {
		plans := compileAll(t, size, 64, func(r int) Schedule { return DisseminationBarrier(r, size) })
		s := newSim(plans, 1, 0, uint64(size))
		if err := s.run(); err != nil {
			t.Fatalf("ranks=%d: %v", size, err)
		}
		for r := range size {
			if popcount(s.know[r]) != size {
				t.Fatalf("ranks=%d: rank %d leaves having heard from %d ranks only", size, r, popcount(s.know[r]))
			}
		}
	}
}

// TestSimCatchesBrokenSchedules makes sure the checker itself can fail.
func TestSimCatchesBrokenSchedules(t *testing.T) {
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
