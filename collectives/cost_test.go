package collectives

import (
	"github.com/goccl/goccl/internal/racetest"
	"math"
	"testing"
)

// scheduleFor builds rank's schedule of algo for coll with a full buffer of
// n bytes (n divisible by size), root 0, from the registry.
func scheduleFor(coll, algo string, rank, size, n int) (Schedule, bool) {
	c, err := CollByName(coll)
	if err != nil {
		return Schedule{}, false
	}
	a, err := LookupAlgo(c, algo)
	if err != nil {
		return Schedule{}, false
	}
	count := n
	if c.Info().Blocked {
		count = n / size
	}
	return a.Build(rank, size, &Args{Count: count, ElemSize: 1}), true
}

// TestCostMatchesSchedules checks the cost table against the schedules: the
// bytes the busiest rank sends or receives, counted from its steps (local
// copies move no bytes between ranks), must be
// what Cost says, within rounding; and every algorithm the table lists has
// a schedule.
func TestCostMatchesSchedules(t *testing.T) {
	racetest.SkipSequential(t)
	colls := []string{"allreduce", "broadcast", "reduce", "allgather", "reduce-scatter", "alltoall", "gather", "scatter", "barrier"}
	for _, coll := range colls {
		algos := Algorithms(coll)
		if len(algos) == 0 {
			t.Fatalf("no algorithms for %s", coll)
		}
		for _, algo := range algos {
			for _, size := range []int{1, 2, 3, 4, 5, 7, 8, 12, 16, 17, 31, 32, 33} {
				n := size * 840
				c, ok := CostOf(coll, algo, size, n)
				if !ok {
					t.Fatalf("%s/%s: no cost", coll, algo)
				}
				busiest := 0
				for r := range size {
					s, ok := scheduleFor(coll, algo, r, size, n)
					if !ok {
						t.Fatalf("%s/%s: no schedule", coll, algo)
					}
					var sent, recvd int
					for _, st := range s.Steps {
						switch st.Kind {
						case Send:
							sent += st.Len
						case Recv, RecvReduce:
							recvd += st.Len
						}
					}
					busiest = max(busiest, sent, recvd)
				}
				if math.Abs(float64(busiest)-c.Bytes) > 0.02*float64(n)+1 {
					t.Errorf("%s/%s on %d ranks, %d bytes: busiest rank moves %d bytes, cost says %.0f",
						coll, algo, size, n, busiest, c.Bytes)
				}
				if size > 1 && c.Steps <= 0 {
					t.Errorf("%s/%s on %d ranks: %d steps", coll, algo, size, c.Steps)
				}
			}
		}
	}
	if _, ok := CostOf("allreduce", "nonesuch", 4, 4); ok {
		t.Error("CostOf knows an algorithm that does not exist")
	}
}

// TestCostPicksTheTextbookAlgorithm checks the model's verdicts at the
// extremes with a plausible network (5 us per message, 10 GB/s): recursive
// doubling for a tiny allreduce, a bandwidth-optimal algorithm for a large
// one; Bruck for a tiny allgather, the ring for a large one.
func TestCostPicksTheTextbookAlgorithm(t *testing.T) {
	const alpha, beta, chunk = 5e-6, 1e-10, 1 << 20
	best := func(coll string, size, n int) string {
		name, bestT := "", math.Inf(1)
		for _, a := range Algorithms(coll) {
			c, _ := CostOf(coll, a, size, n)
			if tm := c.Time(alpha, beta, chunk); tm < bestT {
				name, bestT = a, tm
			}
		}
		return name
	}
	if got := best("allreduce", 64, 8); got != "recursive-doubling" {
		t.Errorf("8-byte allreduce on 64 ranks: %s", got)
	}
	if got := best("allreduce", 64, 1<<30); got == "recursive-doubling" {
		t.Errorf("1 GiB allreduce on 64 ranks: %s", got)
	}
	if got := best("allgather", 64, 64*8); got != "bruck" && got != "recursive-doubling" {
		t.Errorf("tiny allgather on 64 ranks: %s", got)
	}
	if got := best("broadcast", 64, 1<<30); got == "binomial" {
		t.Errorf("1 GiB broadcast on 64 ranks: %s", got)
	}
}

// A pipelined binomial tree has no fill: with one chunk its time is the
// root's log2(p) messages, less than a chain's p-1 hops, so small
// broadcasts on 4 ranks take the tree (they took the chain on a tie in
// floating point: the fill was counted on top of the root's messages).
func TestBinomialHasNoFill(t *testing.T) {
	const alpha, beta, chunk = 100e-6, 1e-9, 1 << 19
	for _, coll := range []string{"broadcast", "reduce"} {
		c, ok := CostOf(coll, "binomial", 4, 8)
		if !ok {
			t.Fatalf("%s binomial not priced", coll)
		}
		if got, want := c.Time(alpha, beta, 8), 2*alpha+16*beta; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s binomial, 8 B on 4 ranks: %g s, want %g (two messages)", coll, got, want)
		}
	}
	bin, _ := CostOf("broadcast", "binomial", 4, 8)
	chain, _ := CostOf("broadcast", "pipeline", 4, 8)
	if b, c := bin.Time(alpha, beta, 8), chain.Time(alpha, beta, 8); b >= c {
		t.Errorf("8-byte broadcast on 4 ranks: binomial %g s, chain %g s", b, c)
	}
	// Many chunks: the root sends each log2(p) times, the chain's ranks
	// once; the chain wins.
	bin, _ = CostOf("broadcast", "binomial", 64, 1<<30)
	chain, _ = CostOf("broadcast", "pipeline", 64, 1<<30)
	if b, c := bin.Time(alpha, beta, chunk), chain.Time(alpha, beta, chunk); c >= b {
		t.Errorf("1 GiB broadcast on 64 ranks: binomial %g s, chain %g s", b, c)
	}
}

// A pairwise all-to-all posts its exchanges together: one α for the batch
// plus a quarter of it for each other message, a batch per window of
// peers. Its tiny calls on 3 to 8 ranks took Bruck's dependent rounds,
// half again as slow (95 against 145 us on 4 ranks over TCP here), when
// every message was priced as a step of its own.
func TestPairwiseIsConcurrent(t *testing.T) {
	const alpha = 100e-6
	c, ok := CostOf("alltoall", "pairwise", 64, 0)
	if !ok || !c.Concurrent || c.Steps != 63 {
		t.Fatalf("pairwise on 64 ranks: %+v, %v", c, ok)
	}
	for _, tc := range []struct {
		window int
		want   float64
	}{
		{0, alpha + 62*alpha/4},
		{16, 4*alpha + 59*alpha/4}, // ceil(63/16) batches
		{63, alpha + 62*alpha/4},
		{1, 63 * alpha},
	} {
		c.Window = tc.window
		if got := c.Time(alpha, 0, 1<<19); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("window %d: %g s, want %g", tc.window, got, tc.want)
		}
	}
	for _, tc := range []struct {
		size int
		want string
	}{{3, "pairwise"}, {4, "pairwise"}, {8, "pairwise"}, {16, "bruck"}, {64, "bruck"}} {
		var m Model
		m.Links[LinkLocal] = LinkCost{Alpha: alpha, Beta: 1e-9}
		m.Window = 16
		a, prices, err := Select(CollAlltoall, 8*tc.size, Topology{Size: tc.size}, m, nil)
		if err != nil || a.Name != tc.want {
			t.Errorf("8-byte blocks on %d ranks: %v %v, want %s; prices%s", tc.size, a, err, tc.want, FormatPrices(prices))
		}
	}
}
