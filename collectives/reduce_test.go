package collectives

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"testing"
)

// allreduceCase checks an allreduce of count elements: every rank ends with
// the reduction of every rank's element i at element i, the same tree on
// every rank.
func allreduceCase(size, count int, mk func(r int) Schedule) xcase {
	const elem = 4
	return xcase{size: size, elem: elem, mk: mk, twice: true,
		dataElems: func(int) int { return count },
		init: func(s *xsim) {
			for r := range size {
				s.fill(r, BufData)
			}
		},
		check: func(s *xsim) error {
			for i := range count {
				want, err := s.wantReduced(0, i)
				if err != nil {
					return err
				}
				for r := 1; r < size; r++ {
					got, err := s.wantReduced(r, i)
					if err != nil {
						return err
					}
					if got != want {
						return fmt.Errorf("element %d: rank 0 computed %s, rank %d %s: results differ bitwise",
							i, s.ex.String(want), r, s.ex.String(got))
					}
				}
			}
			return nil
		}}
}

// reduceCounts are the element counts the reductions are checked with:
// empty, one, fewer than the ranks, primes, not divisible by most rank
// counts, larger than the ranks.
var reduceCounts = []int{0, 1, 2, 7, 31, 100}

func TestAllreduceSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	algos := map[string]func(rank, size, count, elemSize int) Schedule{
		"ring":               RingAllreduce,
		"recursive-doubling": RecursiveDoublingAllreduce,
		"rabenseifner":       RabenseifnerAllreduce,
		"tree":               TreeAllreduce,
	}
	for name, mk := range algos {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, size := range simSizes() {
				for _, count := range reduceCounts {
					runX(t, fmt.Sprintf("ranks=%d count=%d", size, count),
						allreduceCase(size, count, func(r int) Schedule { return mk(r, size, count, 4) }))
				}
			}
		})
	}
}

func TestReduceScatterSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	const elem = 4
	algos := map[string]func(rank, size, count, elemSize int) Schedule{
		"ring":              RingReduceScatter,
		"recursive-halving": RecursiveHalvingReduceScatter,
	}
	for name, mk := range algos {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, size := range simSizes() {
				for _, count := range blockCounts {
					c := xcase{size: size, elem: elem, twice: true,
						mk:        func(r int) Schedule { return mk(r, size, count, elem) },
						dataElems: func(int) int { return size * count },
						init: func(s *xsim) {
							for r := range size {
								s.fill(r, BufData)
							}
						},
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
					runX(t, fmt.Sprintf("ranks=%d count=%d", size, count), c)
				}
			}
		})
	}
}

// TestDoubleBinaryTree checks the shape of TreeAllreduce's trees: each is a
// tree over all ranks (parents and children agree, no cycle), no rank has
// more than two children, and at most one rank is an inner node of both.
func TestDoubleBinaryTree(t *testing.T) {
	for size := 1; size <= 130; size++ {
		inner := make([]int, size)
		for tr := range 2 {
			roots := 0
			for r := range size {
				parent, children := dtree(size, r, tr)
				if len(children) > 2 {
					t.Fatalf("size=%d tree %d: rank %d has %d children", size, tr, r, len(children))
				}
				if len(children) > 0 {
					inner[r]++
				}
				for _, c := range children {
					if p := dtreeParent(size, c, tr); p != r {
						t.Fatalf("size=%d tree %d: rank %d lists child %d whose parent is %d", size, tr, r, c, p)
					}
				}
				if parent < 0 {
					roots++
					continue
				}
				// Walk up: the root must be reached within size steps.
				x, n := r, 0
				for x >= 0 && n <= size {
					x = dtreeParent(size, x, tr)
					n++
				}
				if x >= 0 {
					t.Fatalf("size=%d tree %d: rank %d is on a cycle", size, tr, r)
				}
			}
			if roots != 1 {
				t.Fatalf("size=%d tree %d: %d roots", size, tr, roots)
			}
		}
		both := 0
		for _, n := range inner {
			if n == 2 {
				both++
			}
		}
		if both > 1 {
			t.Errorf("size=%d: %d ranks are inner nodes of both trees", size, both)
		}
	}
}

// TestDtreeMatchesItsDefinition checks the O(log n) tree helpers against
// their definition by brute force: a rank's children are the ranks that
// name it as parent, and the cost table's depth and edge counts follow.
func TestDtreeMatchesItsDefinition(t *testing.T) {
	for size := 1; size <= 130; size++ {
		depth, edges := 0, make([]int, size)
		for tr := range 2 {
			for r := range size {
				var want []int
				for c := range size {
					if c != r && dtreeParent(size, c, tr) == r {
						want = append(want, c)
					}
				}
				parent, children := dtree(size, r, tr)
				if parent != dtreeParent(size, r, tr) || fmt.Sprint(children) != fmt.Sprint(want) {
					t.Fatalf("size %d tree %d rank %d: dtree = %d %v, want %d %v", size, tr, r, parent, children, dtreeParent(size, r, tr), want)
				}
				d := 0
				for x := dtreeParent(size, r, tr); x >= 0; x = dtreeParent(size, x, tr) {
					d++
				}
				depth = max(depth, d)
				if parent >= 0 {
					edges[r]++
					edges[parent]++
				}
			}
		}
		most := 0
		for _, e := range edges {
			most = max(most, e)
		}
		if dtreeDepth(size) != depth || dtreeMaxEdges(size) != most {
			t.Fatalf("size %d: depth %d edges %d, want %d %d", size, dtreeDepth(size), dtreeMaxEdges(size), depth, most)
		}
	}
}
