package simulate

import (
	"fmt"
	"github.com/goccl/goccl/internal/racetest"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// tcpish is a model with every cost nonzero, so that any asymmetry shows.
func tcpish() Params {
	p := DefaultParams(
		Link{Alpha: 20e-6, Beta: 0.1e-9, Overhead: 5e-6, PerByte: 0.3e-9},
		Link{Alpha: 60e-6, Beta: 8e-9, Overhead: 8e-6, PerByte: 0.5e-9},
		0.25e-9, 0.1e-9)
	p.ChunkBytes, p.Slots = 4096, 2
	return p
}

// TestSymmetriesHold checks every symmetry claim against the schedules:
// rank r's messages are rank 0's with every peer shifted by r (or XORed
// with r), of the same kinds and lengths, in the same order, when the
// buffer cuts evenly.
func TestSymmetriesHold(t *testing.T) {
	racetest.SkipSequential(t)
	for _, c := range []collectives.Coll{collectives.CollAllreduce, collectives.CollAllgather,
		collectives.CollReduceScatter, collectives.CollAlltoall, collectives.CollBarrier,
		collectives.CollBroadcast, collectives.CollReduce} {
		for _, a := range collectives.Algos(c) {
			for _, p := range []int{2, 6, 8, 12, 16} {
				args := &collectives.Args{Count: 4 * 16 * 3 * 5 * 7, ElemSize: 4}
				sym := symmetryOf(c, a.Name, p, args.Count)
				if sym == symNone {
					continue
				}
				zero := a.Schedule(0, p, args)
				for r := 1; r < p; r++ {
					s := a.Schedule(r, p, args)
					var want, got []string
					for _, st := range zero.Steps {
						if st.Kind == collectives.Copy {
							continue
						}
						peer := (st.Peer + r) % p
						if sym == symXor {
							peer = st.Peer ^ r
						}
						want = append(want, fmt.Sprint(st.Kind, peer, st.Len))
					}
					for _, st := range s.Steps {
						if st.Kind != collectives.Copy {
							got = append(got, fmt.Sprint(st.Kind, st.Peer, st.Len))
						}
					}
					require.Equal(t, want, got, "%s %s on %d ranks (%s): rank %d", c, a.Name, p, sym, r)
				}
			}
		}
	}
}

// TestPeriodicMatchesFull checks the periodic window against the full
// simulation where both run, with every cost nonzero, NICs shared by
// several ranks per host and cores shared by each host's ranks.
func TestPeriodicMatchesFull(t *testing.T) {
	racetest.SkipSequential(t)
	par := tcpish()
	cases := []struct {
		coll  collectives.Coll
		algo  string
		ranks int
		rph   int
		bytes int
	}{
		{collectives.CollAllreduce, "ring", 16, 2, 16 * 4 * 1000},
		{collectives.CollAllreduce, "ring", 12, 3, 12 * 4 * 1000},
		{collectives.CollAllreduce, "recursive-doubling", 16, 2, 4 * 3000},
		{collectives.CollAlltoall, "pairwise", 16, 4, 16 * 4 * 1500},
		{collectives.CollAlltoall, "pairwise", 12, 2, 12 * 4 * 1500},
		{collectives.CollAlltoall, "bruck", 12, 2, 12 * 4 * 64},
		{collectives.CollAllgather, "ring", 16, 2, 16 * 4 * 1500},
		{collectives.CollAllreduce, "recursive-doubling", 16, 4, 16 * 4 * 1500},
		{collectives.CollReduceScatter, "ring", 16, 2, 16 * 4 * 1500},
		{collectives.CollBarrier, "dissemination", 12, 2, 0},
	}
	for _, tc := range cases {
		job := Job{Coll: tc.coll, Algo: tc.algo, Bytes: tc.bytes}
		m := Machine{Ranks: tc.ranks, RanksPerHost: tc.rph, Cores: 1}
		full := run(t, job, m, par, Full)
		per := run(t, job, m, par, Periodic)
		name := fmt.Sprintf("%s %s on %d ranks, %d per host", tc.coll, tc.algo, tc.ranks, tc.rph)
		require.Less(t, per.Simulated, tc.ranks, name)
		require.InEpsilon(t, full.Seconds, per.Seconds, 1e-9, name)
		require.InEpsilon(t, full.MeanSeconds, per.MeanSeconds, 1e-9, name)
		if tc.bytes > 0 {
			require.InEpsilon(t, full.BusiestBytes, per.BusiestBytes, 1e-9, name)
			require.InEpsilon(t, full.NetBytes, per.NetBytes, 1e-9, name)
		}
	}
}

// TestExtrapolationMatchesFull checks the line through two smaller sizes
// against the full simulation of a large call, for pipelined trees.
func TestExtrapolationMatchesFull(t *testing.T) {
	racetest.SkipSequential(t)
	par := tcpish()
	for _, tc := range []struct {
		coll  collectives.Coll
		algo  string
		bytes int
	}{
		{collectives.CollAllreduce, "tree", 64 * 4096},
		{collectives.CollBroadcast, "binomial", 64 * 4096},
		{collectives.CollBroadcast, "pipeline", 64 * 4096},
		{collectives.CollAllreduce, "rabenseifner", 1 << 20},
		{collectives.CollAllreduce, "rabenseifner", 256 << 10}, // its last rounds' messages: less than a chunk
		{collectives.CollAllreduce, "recursive-doubling", 256 << 10},
		{collectives.CollAlltoall, "bruck", 24 * 4096 * 16},
	} {
		job := Job{Coll: tc.coll, Algo: tc.algo, Bytes: tc.bytes}
		m := Machine{Ranks: 24, RanksPerHost: 4, Cores: 2}
		full := run(t, job, m, par, Full)
		ext := run(t, job, m, par, Extrapolated)
		require.InEpsilon(t, full.Seconds, ext.Seconds, 0.02, "%s %s", tc.coll, tc.algo)
		require.InEpsilon(t, full.MeanSeconds, ext.MeanSeconds, 0.02, "%s %s", tc.coll, tc.algo)
	}
}

// TestAutoAtScale checks that Auto answers for thousands of ranks within
// its budget: periodic for a ring and for recursive doubling, full for a
// small tree, analytic (labelled) for the scatter-allgather broadcast's
// linear steps on 65,536 ranks, extrapolated for a large tree.
func TestAutoAtScale(t *testing.T) {
	racetest.SkipSequential(t)
	par := tcpish()
	par.ChunkBytes = 512 << 10
	opt := Options{Budget: 2_000_000}
	for _, tc := range []struct {
		coll   collectives.Coll
		algo   string
		ranks  int
		bytes  int
		method Method
	}{
		{collectives.CollAllreduce, "ring", 4096, 4096 * 4, Periodic},
		{collectives.CollAllreduce, "recursive-doubling", 65536, 8, Periodic},
		{collectives.CollAllreduce, "tree", 4096, 8, Full},
		{collectives.CollAllreduce, "tree", 1024, 256 << 20, Extrapolated},
		{collectives.CollBroadcast, "scatter-allgather", 65536, 1 << 20, Analytic},
	} {
		m := Machine{Ranks: tc.ranks, RanksPerHost: 8}
		r, err := Simulate(Job{Coll: tc.coll, Algo: tc.algo, Bytes: tc.bytes}, m, par, opt)
		require.NoError(t, err)
		require.Equal(t, tc.method, r.Method, "%s %s on %d ranks, %d bytes", tc.coll, tc.algo, tc.ranks, tc.bytes)
		require.LessOrEqual(t, r.Events, 2*opt.Budget)
		require.Greater(t, r.Seconds, 0.0)
		require.False(t, math.IsNaN(r.Seconds) || math.IsInf(r.Seconds, 0))
		if tc.method == Periodic {
			require.Equal(t, 8, r.Simulated)
		}
	}
}

// TestPlansChangeNothing: simulations that share a Plans (compiled
// schedules kept between them, as a fit's are) give exactly the results
// of simulations that compile their own, in any order and again after
// other jobs used the same Plans: full and periodic, paced by a barrier
// or not, under parameters that change between the runs (what the plan
// does not depend on).
func TestPlansChangeNothing(t *testing.T) {
	par := tcpish()
	slow := par
	slow.Links[collectives.LinkLocal].Alpha *= 3
	slow.Slots = 2
	jobs := []struct {
		job Job
		m   Machine
		opt Options
	}{
		{Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 8 * 4 * 1000, OutOfPlace: true}, Machine{Ranks: 8, Cores: 2, PoolRanks: 8}, Options{Method: Full, Barrier: "linear"}},
		{Job{Coll: collectives.CollAllreduce, Algo: "tree", Bytes: 256, OutOfPlace: true}, Machine{Ranks: 8, Cores: 2, PoolRanks: 8}, Options{Method: Full, Barrier: "recursive-doubling"}},
		{Job{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 8 * 256}, Machine{Ranks: 8, RanksPerHost: 4}, Options{Method: Full}},
		{Job{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: 4096, Root: 3}, Machine{Ranks: 6}, Options{Method: Full, Barrier: "dissemination"}},
		{Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 16 * 4 * 1000}, Machine{Ranks: 16, RanksPerHost: 2, Cores: 1}, Options{Method: Periodic}},
	}
	var plans Plans
	for pass := range 3 {
		for i, c := range jobs {
			for _, p := range []Params{par, slow} {
				want, err := Simulate(c.job, c.m, p, c.opt)
				require.NoError(t, err)
				opt := c.opt
				opt.Plans = &plans
				got, err := Simulate(c.job, c.m, p, opt)
				require.NoError(t, err)
				require.Equal(t, want, got, "pass %d, job %d (%s %s)", pass, i, c.job.Coll, c.job.Algo)
			}
		}
	}
	require.NotEmpty(t, plans.m, "the plans were kept")
}
