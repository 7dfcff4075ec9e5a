package collectives

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"testing"
)

func alltoallCase(size, count int, mk func(r int) Schedule) xcase {
	const elem = 4
	return xcase{size: size, elem: elem, mk: mk,
		dataElems:  func(int) int { return size * count },
		inputElems: func(int) int { return size * count },
		init: func(s *xsim) {
			for r := range size {
				s.fill(r, BufInput)
			}
		},
		check: func(s *xsim) error {
			for r := range size {
				for j := range size {
					for i := range count {
						if err := s.wantAtom(r, BufData, j*count+i, j, BufInput, r*count+i); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}}
}

func TestAlltoallSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	algos := map[string]func(rank, size, count, elemSize int) Schedule{
		"pairwise": PairwiseAlltoall,
		"bruck":    BruckAlltoall,
	}
	for name, mk := range algos {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, size := range simSizes() {
				for _, count := range blockCounts {
					runX(t, fmt.Sprintf("ranks=%d count=%d", size, count),
						alltoallCase(size, count, func(r int) Schedule { return mk(r, size, count, 4) }))
				}
			}
		})
	}
}

// splitAtCopies cuts a schedule at its Copy steps into the form schedules
// had before Copy steps existed: a sequence of schedules run one after the
// other over the same buffers, each a run of copies (as Pre) and the steps
// up to the next copy; trailing copies make a last schedule of their own.
func splitAtCopies(s Schedule) []Schedule {
	var out []Schedule
	cur := Schedule{Name: s.Name, Rank: s.Rank, Size: s.Size, ScratchBytes: s.ScratchBytes, Pre: s.Pre}
	for _, st := range s.Steps {
		if st.Kind == Copy && len(cur.Steps) > 0 {
			out = append(out, cur)
			cur = Schedule{Name: s.Name, Rank: s.Rank, Size: s.Size, ScratchBytes: s.ScratchBytes}
		}
		if st.Kind == Copy {
			cur.copyPre(st.SrcBuf, st.SrcOff, st.Buf, st.Off, st.Len)
		} else {
			cur.Steps = append(cur.Steps, st)
		}
	}
	return append(out, cur)
}

// TestBruckAlltoallRounds checks that Bruck's schedule is the per-round
// form it had when local copies could only precede a schedule (one
// schedule per round, whose Pre unpacks the previous round and packs this
// one, and a last of copies only), joined by Copy steps: split at its
// copies it has rounds+1 parts on every rank, each round one send and one
// receive, and run part after part it still delivers every block.
func TestBruckAlltoallRounds(t *testing.T) {
	for _, size := range []int{2, 3, 5, 8, 13} {
		const count = 2
		for r := range size {
			ps := splitAtCopies(BruckAlltoall(r, size, count, 4))
			if want := log2Ceil(size) + 1; len(ps) != want {
				t.Fatalf("ranks=%d rank %d: %d parts, want %d", size, r, len(ps), want)
			}
			for k, ph := range ps[:len(ps)-1] {
				if len(ph.Steps) != 2 || ph.Steps[0].Kind != Send || ph.Steps[1].Kind != Recv || len(ph.Pre) == 0 {
					t.Fatalf("ranks=%d rank %d part %d: %v with %d copies, want a pack, a send and a receive", size, r, k, ph.Steps, len(ph.Pre))
				}
			}
		}
		c := alltoallCase(size, count, nil)
		c.phases = func(r int) []Schedule { return splitAtCopies(BruckAlltoall(r, size, count, 4)) }
		runX(t, fmt.Sprintf("ranks=%d", size), c)
	}
}

func TestPairwiseAlltoallvSchedule(t *testing.T) {
	racetest.SkipSequential(t)
	for _, size := range simSizes() {
		for variant := range 2 {
			runX(t, fmt.Sprintf("ranks=%d variant=%d", size, variant), alltoallvCase(size, variant))
		}
	}
}

// alltoallvCase is a pairwise all-to-all-v of size ranks with uneven
// blocks, some empty (variant 0) or none (variant 1).
func alltoallvCase(size, variant int) xcase {
	const elem = 2
	// cnt[i][j]: elements rank i sends to rank j.
	cnt := func(i, j int) int {
		if variant == 0 {
			return (i*7 + j*3) % 5 // some empty
		}
		return (i+1)*(j%3) + (i % 2)
	}
	// Rank r's layout: send blocks in reverse order with one
	// element gaps; receive blocks in rank order after a gap.
	sc, sd, rc, rd := make([][]int, size), make([][]int, size), make([][]int, size), make([][]int, size)
	inTotal, outTotal := make([]int, size), make([]int, size)
	for r := range size {
		sc[r], sd[r], rc[r], rd[r] = make([]int, size), make([]int, size), make([]int, size), make([]int, size)
		for j := size - 1; j >= 0; j-- {
			sc[r][j], sd[r][j] = cnt(r, j), inTotal[r]+1
			inTotal[r] += cnt(r, j) + 1
		}
		for j := range size {
			rc[r][j], rd[r][j] = cnt(j, r), outTotal[r]+2
			outTotal[r] += cnt(j, r) + 2
		}
	}
	return xcase{size: size, elem: elem,
		mk:         func(r int) Schedule { return PairwiseAlltoallv(r, size, sc[r], sd[r], rc[r], rd[r], elem) },
		dataElems:  func(r int) int { return outTotal[r] },
		inputElems: func(r int) int { return inTotal[r] },
		init: func(s *xsim) {
			for r := range size {
				s.fill(r, BufInput)
			}
		},
		check: func(s *xsim) error {
			for r := range size {
				for j := range size {
					for i := range rc[r][j] {
						if err := s.wantAtom(r, BufData, rd[r][j]+i, j, BufInput, sd[j][r]+i); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}}
}
