package collectives

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"testing"
)

// simWindow runs windowed plans in xsim as the executor does (window.go):
// a rank admits the peers of one batch of rounds at a time, the next once
// it and each peer of the batch are done with each other (the byes), and
// a pair exchanges only once both ranks admitted it (the set-up of a new
// link waits for both). Independently of that policy it counts, per rank,
// the peers with live traffic (a chunk with the peer done or a message of
// the pair sent, and the pair not done on both sides) and fails when a
// rank has more than the window.
type simWindow struct {
	limit   int
	plans   []*Plan
	batches [][][]int // per rank, per batch: its peers
	cur     []int     // per rank: the batch it is in
	batchOf [][]int   // per rank, per peer: batch, -1 none
	left    [][]int   // per rank, per peer: chunks not done
	touched [][]bool  // per rank, per peer: traffic seen
	live    []int     // per rank: peers touched and not done
	most    int       // the most live peers any rank had
}

// newSimWindow returns nil unless some plan is windowed for a window of
// limit peers.
func newSimWindow(plans []*Plan, limit int) *simWindow {
	if limit <= 0 || len(plans) == 0 || !plans[0].Windowed(limit) {
		return nil
	}
	n := len(plans)
	w := &simWindow{limit: limit, plans: plans, batches: make([][][]int, n), cur: make([]int, n),
		batchOf: make([][]int, n), left: make([][]int, n), touched: make([][]bool, n), live: make([]int, n)}
	per := max(1, limit/2)
	for r, p := range plans {
		w.batchOf[r], w.left[r], w.touched[r] = make([]int, n), make([]int, n), make([]bool, n)
		for q := range n {
			w.batchOf[r][q] = -1
		}
		for _, q := range p.peers {
			w.left[r][q] = len(p.sends[q]) + len(p.recvs[q])
			if p.round[q] < 0 {
				continue
			}
			b := int(p.round[q]) / per
			for len(w.batches[r]) <= b {
				w.batches[r] = append(w.batches[r], nil)
			}
			w.batches[r][b] = append(w.batches[r][b], q)
			w.batchOf[r][q] = b
		}
		w.skip(r)
	}
	return w
}

// skip moves rank r past the batches it is done with.
func (w *simWindow) skip(r int) bool {
	moved := false
	for w.cur[r] < len(w.batches[r]) {
		for _, q := range w.batches[r][w.cur[r]] {
			if w.left[r][q] > 0 || w.left[q][r] > 0 {
				return moved
			}
		}
		w.cur[r]++
		moved = true
	}
	return moved
}

func (w *simWindow) admitted(r, q int) bool {
	if w == nil {
		return true
	}
	in := func(a, b int) bool { return w.batchOf[a][b] < 0 || w.batchOf[a][b] <= w.cur[a] }
	return in(r, q) && in(q, r)
}

func (w *simWindow) touch(r, q int) {
	if !w.touched[r][q] && w.batchOf[r][q] >= 0 {
		w.touched[r][q] = true
		w.live[r]++
		w.most = max(w.most, w.live[r])
	}
}

// chunk records a chunk of rank r with peer q (a send, or a receive), and
// re-evaluates the pairs of batches that become admitted.
func (w *simWindow) chunk(r, q int, send bool, eval func(r, peer int, send bool)) error {
	if w == nil {
		return nil
	}
	w.touch(r, q)
	if send {
		w.touch(q, r)
	}
	w.left[r][q]--
	if w.left[r][q] == 0 && w.left[q][r] == 0 {
		for _, x := range [][2]int{{r, q}, {q, r}} {
			if w.touched[x[0]][x[1]] && w.batchOf[x[0]][x[1]] >= 0 {
				w.live[x[0]]--
			}
		}
		for _, x := range []int{r, q} {
			if w.skip(x) && w.cur[x] < len(w.batches[x]) {
				for _, y := range w.batches[x][w.cur[x]] {
					eval(x, y, true)
					eval(x, y, false)
					eval(y, x, true)
					eval(y, x, false)
				}
			}
		}
	}
	for x, l := range w.live {
		if l > w.limit {
			return fmt.Errorf("rank %d has live traffic with %d peers, more than its window of %d", x, l, w.limit)
		}
	}
	return nil
}

// The pairwise all-to-all numbers its peers so that a window can move
// over them: every peer has a round, the two ranks of a pair have the
// same, and no rank has more than two peers in one round.
func TestPairwiseAlltoallRounds(t *testing.T) {
	for _, size := range simSizes() {
		scheds := make([]Schedule, size)
		for r := range size {
			scheds[r] = PairwiseAlltoall(r, size, 1, 4)
		}
		for r, s := range scheds {
			per := map[int32]int{}
			for q := range size {
				got := s.Rounds[q]
				switch {
				case q == r && got != -1:
					t.Errorf("size %d: rank %d has itself in round %d", size, r, got)
				case q != r && got < 0:
					t.Errorf("size %d: rank %d has rank %d in no round", size, r, q)
				case q != r && got != scheds[q].Rounds[r]:
					t.Errorf("size %d: rank %d has rank %d in round %d, rank %d has rank %d in round %d", size, r, q, got, q, r, scheds[q].Rounds[r])
				}
				if q != r {
					per[got]++
				}
			}
			for round, k := range per {
				if k > 2 {
					t.Errorf("size %d: rank %d has %d peers in round %d", size, r, k, round)
				}
			}
		}
	}
}

// Through a window of w peers, the pairwise all-to-all and all-to-all-v
// still deliver every block exactly, and no rank ever has live traffic
// with more than w peers.
func TestAlltoallWindowSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	for _, w := range []int{2, 4, 7} {
		t.Run(fmt.Sprintf("window=%d", w), func(t *testing.T) {
			t.Parallel()
			for _, size := range simSizes() {
				for _, count := range []int{1, 3} {
					c := alltoallCase(size, count, func(r int) Schedule { return PairwiseAlltoall(r, size, count, 4) })
					c.window = w
					runX(t, fmt.Sprintf("pairwise ranks=%d count=%d", size, count), c)
				}
				for variant := range 2 {
					c := alltoallvCase(size, variant)
					c.window = w
					runX(t, fmt.Sprintf("pairwise-v ranks=%d variant=%d", size, variant), c)
				}
			}
		})
	}
}

// The window really binds: at 33 ranks, a window of 4 peers runs the
// all-to-all with at most 4 live peers per rank, and at least 3.
func TestAlltoallWindowBinds(t *testing.T) {
	const size, w = 33, 4
	plans := make([]*Plan, size)
	scheds := make([]Schedule, size)
	for r := range size {
		scheds[r] = PairwiseAlltoall(r, size, 2, 4)
		p, err := Compile(scheds[r], 4)
		if err != nil {
			t.Fatal(err)
		}
		plans[r] = p
	}
	c := alltoallCase(size, 2, nil)
	s, err := newXsim(scheds, plans, 4, c.dataElems, c.inputElems, 1, 5, newExprs())
	if err != nil {
		t.Fatal(err)
	}
	s.window = w
	c.init(s)
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	if err := c.check(s); err != nil {
		t.Fatal(err)
	}
	if s.win == nil {
		t.Fatal("a 33-rank pairwise all-to-all is not windowed for a window of 4")
	}
	if s.win.most < 3 || s.win.most > w {
		t.Errorf("at most %d live peers per rank, want 3 to %d", s.win.most, w)
	}
}

// Compile refuses rounds that break the promise of Schedule.Rounds.
func TestCompileChecksRounds(t *testing.T) {
	base := func() Schedule { return PairwiseAlltoall(0, 5, 1, 4) }
	s := base()
	s.Rounds = s.Rounds[:3]
	if _, err := Compile(s, 4); err == nil {
		t.Error("rounds for 3 of 5 ranks: no error")
	}
	s = base()
	for q := 1; q < 5; q++ {
		s.Rounds[q] = 0
	}
	if _, err := Compile(s, 4); err == nil {
		t.Error("4 peers in one round: no error")
	}
	// A step with a round-0 peer that waits for a round-1 peer's bytes.
	s = Schedule{Rank: 0, Size: 3, Rounds: []int32{-1, 0, 1}}
	s.add(Recv, 2, BufData, 0, 4)
	s.add(Send, 1, BufData, 0, 4)
	if _, err := Compile(s, 4); err == nil {
		t.Error("a round-0 step after a round-1 step on the same bytes: no error")
	}
}
