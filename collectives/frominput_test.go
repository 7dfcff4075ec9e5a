package collectives

import (
	"fmt"
	"strings"
	"testing"
)

// TestFromInput runs every reducing schedule twice in the simulator: in
// place, on a BufData that holds the input, and rewritten by FromInput, on
// an undefined BufData with the input in BufInput. Every element of
// BufData must end as the same expression (the same inputs combined in the
// same tree, input atoms renamed), whatever the chunk size, credit limit or
// order of events.
func TestFromInput(t *testing.T) {
	const elem = 4
	type algo struct {
		name string
		mk   func(r, size, count int) Schedule
		data func(size, count int) int // BufData elements
	}
	flat := func(size, count int) int { return count }
	blocks := func(size, count int) int { return size * count }
	algos := []algo{
		{"allreduce/ring", func(r, n, c int) Schedule { return RingAllreduce(r, n, c, elem) }, flat},
		{"allreduce/recursive-doubling", func(r, n, c int) Schedule { return RecursiveDoublingAllreduce(r, n, c, elem) }, flat},
		{"allreduce/rabenseifner", func(r, n, c int) Schedule { return RabenseifnerAllreduce(r, n, c, elem) }, flat},
		{"allreduce/tree", func(r, n, c int) Schedule { return TreeAllreduce(r, n, c, elem) }, flat},
		{"reducescatter/ring", func(r, n, c int) Schedule { return RingReduceScatter(r, n, c, elem) }, blocks},
		{"reducescatter/recursive-halving", func(r, n, c int) Schedule { return RecursiveHalvingReduceScatter(r, n, c, elem) }, blocks},
		{"reduce/binomial", func(r, n, c int) Schedule { return BinomialReduce(r, n, n/2, c, elem) }, flat},
		{"reduce/ring", func(r, n, c int) Schedule { return RingReduce(r, n, n/2, c, elem) }, flat},
	}
	sizes := []int{1, 2, 3, 4, 5, 7, 8, 9}
	counts := []int{1, 2, 7, 31, 100}
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			for _, size := range sizes {
				for _, count := range counts {
					n := a.data(size, count)
					desc := fmt.Sprintf("ranks=%d count=%d", size, count)
					// In place: record what every element ends as.
					var want [][]string
					inPlace := xcase{size: size, elem: elem,
						mk:        func(r int) Schedule { return a.mk(r, size, count) },
						dataElems: func(int) int { return n },
						init: func(s *xsim) {
							for r := range size {
								s.fill(r, BufData)
							}
						},
						check: func(s *xsim) error {
							if want == nil {
								want = s.render(size, BufData)
							}
							return nil
						}}
					runX(t, desc+" in place", inPlace)
					changed := false
					fromInput := xcase{size: size, elem: elem,
						mk: func(r int) Schedule {
							s, ok := FromInput(a.mk(r, size, count), n*elem)
							if !ok {
								t.Fatalf("%s: FromInput refused the schedule of rank %d", desc, r)
							}
							for _, st := range s.Steps {
								if st.Buf == BufInput || st.SrcBuf == BufInput {
									changed = true
								}
							}
							return s
						},
						dataElems:  func(int) int { return n },
						inputElems: func(int) int { return n },
						init: func(s *xsim) {
							for r := range size {
								s.fill(r, BufInput)
							}
						},
						check: func(s *xsim) error {
							got := s.render(size, BufInput)
							for r := range size {
								for i := range got[r] {
									if got[r][i] != want[r][i] {
										return fmt.Errorf("rank %d element %d: %s from the input, %s in place", r, i, got[r][i], want[r][i])
									}
								}
							}
							return nil
						}}
					runX(t, desc+" from input", fromInput)
					if size > 1 && !changed {
						t.Fatalf("%s: no step reads the input", desc)
					}
				}
			}
		})
	}
}

// render writes every rank's BufData out, naming the atoms of buffer from
// as if they were BufData's (so that the two ways of running a schedule
// compare).
func (s *xsim) render(size int, from Buf) [][]string {
	out := make([][]string, size)
	for r := range size {
		for _, id := range s.bufs[r][BufData] {
			str := s.ex.canon(id)
			if from != BufData {
				str = strings.ReplaceAll(str, fmt.Sprintf(".b%d[", from), fmt.Sprintf(".b%d[", BufData))
			}
			out[r] = append(out[r], str)
		}
	}
	return out
}

// canon writes an expression with the operands of every node in order, so
// that two equal trees read the same whatever ids the table gave them.
func (e *exprs) canon(id uint32) string {
	if id == 0 {
		return "undef"
	}
	n := e.nodes[id]
	if n.atom {
		return e.String(id)
	}
	a, b := e.canon(n.a), e.canon(n.b)
	if a > b {
		a, b = b, a
	}
	return "(" + a + "+" + b + ")"
}

func TestRanges(t *testing.T) {
	var r ranges
	r.add(10, 20)
	r.add(30, 40)
	r.add(20, 25) // adjacent: merges
	r.add(5, 8)
	if fmt.Sprint(r) != "[[5 8] [10 25] [30 40]]" {
		t.Fatalf("ranges %v", r)
	}
	if g := r.gaps(0, 50); fmt.Sprint(g) != "[[0 5] [8 10] [25 30] [40 50]]" {
		t.Fatalf("gaps %v", g)
	}
	if g := r.gaps(12, 22); len(g) != 0 {
		t.Fatalf("gaps inside %v", g)
	}
	if !r.none(25, 30) || r.none(24, 26) {
		t.Fatal("none")
	}
	r.add(0, 100)
	if fmt.Sprint(r) != "[[0 100]]" {
		t.Fatalf("ranges %v", r)
	}
}
