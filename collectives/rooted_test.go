package collectives

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"testing"
)

// roots are the roots the rooted collectives are checked with.
func roots(size int) []int {
	var rs []int
	for _, r := range []int{0, 1, size / 2, size - 1} {
		if r < size && (len(rs) == 0 || rs[len(rs)-1] != r) {
			rs = append(rs, r)
		}
	}
	return rs
}

func TestBroadcastSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	const elem = 8
	algos := map[string]func(rank, size, root, count, elemSize int) Schedule{
		"binomial":          BinomialBroadcast,
		"linear":            LinearBroadcast,
		"pipeline":          PipelineBroadcast,
		"scatter-allgather": ScatterAllgatherBroadcast,
	}
	for name, mk := range algos {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, size := range simSizes() {
				for _, root := range roots(size) {
					for _, count := range reduceCounts {
						c := xcase{size: size, elem: elem,
							mk:        func(r int) Schedule { return mk(r, size, root, count, elem) },
							dataElems: func(int) int { return count },
							init:      func(s *xsim) { s.fill(root, BufData) },
							check: func(s *xsim) error {
								for r := range size {
									for i := range count {
										if err := s.wantAtom(r, BufData, i, root, BufData, i); err != nil {
											return err
										}
									}
								}
								return nil
							}}
						runX(t, fmt.Sprintf("ranks=%d root=%d count=%d", size, root, count), c)
					}
				}
			}
		})
	}
}

// TestHierBroadcastSchedules runs the hierarchical broadcast through the
// expression simulator on every host layout and root.
func TestHierBroadcastSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	const elem = 8
	a, err := LookupAlgo(CollBroadcast, "hier")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range hostLayouts() {
		size := len(l.hosts)
		for _, root := range roots(size) {
			for _, count := range reduceCounts {
				args := Args{Count: count, ElemSize: elem, Root: root, Hosts: l.hosts}
				c := xcase{size: size, elem: elem,
					mk:        func(r int) Schedule { return a.Build(r, size, &args) },
					dataElems: func(int) int { return count },
					init:      func(s *xsim) { s.fill(root, BufData) },
					check: func(s *xsim) error {
						for r := range size {
							for i := range count {
								if err := s.wantAtom(r, BufData, i, root, BufData, i); err != nil {
									return err
								}
							}
						}
						return nil
					}}
				runX(t, fmt.Sprintf("%s root=%d count=%d", l.name, root, count), c)
			}
		}
	}
}

// reduceSchedules are the reduce's schedules, by the registry's names: the
// plain and the fused simulations run each.
var reduceSchedules = map[string]func(rank, size, root, count, elemSize int) Schedule{
	"binomial": BinomialReduce,
	"linear":   LinearReduce,
	"pipeline": PipelineReduce,
	"ring":     RingReduce,
}

func TestReduceSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	for name, mk := range reduceSchedules {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testReduce(t, mk)
		})
	}
}

func testReduce(t *testing.T, mk func(rank, size, root, count, elemSize int) Schedule) {
	for _, size := range simSizes() {
		for _, root := range roots(size) {
			for _, count := range reduceCounts {
				runX(t, fmt.Sprintf("ranks=%d root=%d count=%d", size, root, count), reduceCase(size, root, count, mk))
			}
		}
	}
}

// reduceCase is the reduce to root of count float32 elements on size
// ranks by mk: every rank's BufData starts with its contribution, and the
// root's must end holding the reduction of all of them.
func reduceCase(size, root, count int, mk func(rank, size, root, count, elemSize int) Schedule) xcase {
	const elem = 4
	return xcase{size: size, elem: elem, twice: true,
		mk:        func(r int) Schedule { return mk(r, size, root, count, elem) },
		dataElems: func(int) int { return count },
		init: func(s *xsim) {
			for r := range size {
				s.fill(r, BufData)
			}
		},
		check: func(s *xsim) error {
			for i := range count {
				if _, err := s.wantReduced(root, i); err != nil {
					return err
				}
			}
			return nil
		}}
}

func TestBinomialGatherSchedule(t *testing.T) { testGather(t, BinomialGather) }

func TestLinearGatherSchedule(t *testing.T) { testGather(t, LinearGather) }

func testGather(t *testing.T, mk func(rank, size, root, count, elemSize int) Schedule) {
	racetest.SkipSequential(t)
	const elem = 4
	for _, size := range simSizes() {
		for _, root := range roots(size) {
			for _, count := range blockCounts {
				c := xcase{size: size, elem: elem,
					mk: func(r int) Schedule { return mk(r, size, root, count, elem) },
					dataElems: func(r int) int {
						if r == root {
							return size * count
						}
						return 0
					},
					inputElems: func(int) int { return count },
					init: func(s *xsim) {
						for r := range size {
							s.fill(r, BufInput)
						}
					},
					check: func(s *xsim) error {
						for j := range size {
							for i := range count {
								if err := s.wantAtom(root, BufData, j*count+i, j, BufInput, i); err != nil {
									return err
								}
							}
						}
						return nil
					}}
				runX(t, fmt.Sprintf("ranks=%d root=%d count=%d", size, root, count), c)
			}
		}
	}
}

func TestBinomialScatterSchedule(t *testing.T) { testScatter(t, BinomialScatter) }

func TestLinearScatterSchedule(t *testing.T) { testScatter(t, LinearScatter) }

func testScatter(t *testing.T, mk func(rank, size, root, count, elemSize int) Schedule) {
	racetest.SkipSequential(t)
	const elem = 4
	for _, size := range simSizes() {
		for _, root := range roots(size) {
			for _, count := range blockCounts {
				c := xcase{size: size, elem: elem,
					mk:        func(r int) Schedule { return mk(r, size, root, count, elem) },
					dataElems: func(int) int { return count },
					inputElems: func(r int) int {
						if r == root {
							return size * count
						}
						return 0
					},
					init: func(s *xsim) { s.fill(root, BufInput) },
					check: func(s *xsim) error {
						for r := range size {
							for i := range count {
								if err := s.wantAtom(r, BufData, i, root, BufInput, r*count+i); err != nil {
									return err
								}
							}
						}
						return nil
					}}
				runX(t, fmt.Sprintf("ranks=%d root=%d count=%d", size, root, count), c)
			}
		}
	}
}
