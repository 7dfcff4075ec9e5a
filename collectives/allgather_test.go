package collectives

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"testing"
)

// blockCounts are the per-rank block sizes the block collectives are
// checked with: empty, one element, a few, a prime.
var blockCounts = []int{0, 1, 2, 7, 13}

func allgatherCase(size, count int, mk func(r int) Schedule) xcase {
	const elem = 4
	return xcase{size: size, elem: elem, mk: mk,
		dataElems:  func(int) int { return size * count },
		inputElems: func(int) int { return count },
		init: func(s *xsim) {
			for r := range size {
				s.fill(r, BufInput)
			}
		},
		check: func(s *xsim) error {
			for r := range size {
				for j := range size {
					for i := range count {
						if err := s.wantAtom(r, BufData, j*count+i, j, BufInput, i); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}}
}

func TestAllgatherSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	algos := map[string]func(rank, size, count, elemSize int) Schedule{
		"ring":               RingAllgather,
		"recursive-doubling": RecursiveDoublingAllgather,
		"bruck":              BruckAllgather,
	}
	for name, mk := range algos {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, size := range simSizes() {
				for _, count := range blockCounts {
					runX(t, fmt.Sprintf("ranks=%d count=%d", size, count),
						allgatherCase(size, count, func(r int) Schedule { return mk(r, size, count, 4) }))
				}
			}
		})
	}
}

func TestRingAllgathervSchedule(t *testing.T) {
	racetest.SkipSequential(t)
	const elem = 8
	for _, size := range simSizes() {
		for variant := range 3 {
			counts := make([]int, size)
			for j := range counts {
				switch variant {
				case 0: // some empty blocks
					counts[j] = j % 3
				case 1: // primes and ones
					counts[j] = []int{1, 7, 2, 13}[j%4]
				case 2: // only the last rank has data
					if j == size-1 {
						counts[j] = 5
					}
				}
			}
			// Blocks in reverse rank order with gaps between them.
			displs := make([]int, size)
			total := 0
			for j := size - 1; j >= 0; j-- {
				displs[j] = total + 1
				total += counts[j] + 1
			}
			c := xcase{size: size, elem: elem,
				mk:         func(r int) Schedule { return RingAllgatherv(r, size, counts, displs, elem) },
				dataElems:  func(int) int { return total },
				inputElems: func(r int) int { return counts[r] },
				init: func(s *xsim) {
					for r := range size {
						s.fill(r, BufInput)
					}
				},
				check: func(s *xsim) error {
					for r := range size {
						for j := range size {
							for i := range counts[j] {
								if err := s.wantAtom(r, BufData, displs[j]+i, j, BufInput, i); err != nil {
									return err
								}
							}
						}
					}
					return nil
				}}
			runX(t, fmt.Sprintf("ranks=%d counts=%v", size, counts), c)
		}
	}
}
