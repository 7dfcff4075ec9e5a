package collectives

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// netModel is a plausible TCP network: 20 us per message, 2 GB/s, a kernel
// reducing at 8 GB/s, 512 KiB chunks.
func netModel() Model {
	var m Model
	m.Links[LinkLocal] = LinkCost{Alpha: 20e-6, Beta: 1 / 2e9}
	m.Gamma, m.ChunkBytes = 1/8e9, 512<<10
	return m
}

func TestSelectTable(t *testing.T) {
	m := netModel()
	for _, tc := range []struct {
		coll   Coll
		bytes  int
		size   int
		want   string
		reason string
	}{
		{CollAllreduce, 8, 2, "recursive-doubling", "one exchange beats the ring's two steps"},
		{CollAllreduce, 8, 64, "recursive-doubling", "log2 steps for a tiny buffer"},
		{CollAllreduce, 64 << 20, 2, "rabenseifner", "ring and Rabenseifner cost the same at 2 ranks: the table's first wins the tie"},
		{CollAllreduce, 64 << 20, 4, "rabenseifner", "bandwidth-optimal, fewer steps than the ring"},
		{CollAllreduce, 64 << 20, 6, "ring", "Rabenseifner's fold moves the whole buffer twice more at 6 ranks"},
		{CollBroadcast, 8, 16, "binomial", "log2 steps"},
		{CollBroadcast, 256 << 20, 16, "pipeline", "a chain moves the buffer once per rank, its fill is small"},
		{CollBroadcast, 1 << 20, 16, "scatter-allgather", "fewer hops than the chain, less than log2(16)x the buffer"},
		{CollAllgather, 64 * 8, 64, "recursive-doubling", "log2 steps for tiny blocks, tied with Bruck at a power of two: the first wins"},
		{CollAllgather, 48 * 8, 48, "bruck", "log2 steps without recursive doubling's fold"},
		{CollAllgather, 64 << 20, 6, "bruck", "the bytes of the ring in fewer steps (the model does not price its final local rotation)"},
		{CollReduce, 8, 8, "linear", "one batch of messages at the root for a tiny buffer, against three steps"},
		{CollReduce, 8, 64, "binomial", "six steps against a batch of 63 messages"},
		{CollReduce, 64 << 10, 8, "binomial", "the root receives the buffer three times, not seven"},
		{CollReduce, 1 << 20, 8, "ring", "the root receives ~2x the buffer instead of log2(8)x, in fewer steps than the chain's fill"},
		{CollReduce, 64 << 20, 8, "pipeline", "every rank receives the buffer once, the chain's fill is small"},
		{CollAlltoall, 8 * 64, 64, "bruck", "log2 rounds for tiny blocks"},
		{CollAlltoall, 64 << 20, 64, "pairwise", "each block moves once"},
		{CollGather, 1 << 20, 8, "linear", "one batch of messages at the root against three steps, the same bytes"},
		{CollGather, 8 * 64, 64, "binomial", "six steps against a batch of 63 messages"},
		{CollScatter, 64 << 20, 4, "linear", "one batch of messages at the root against two steps, the same bytes"},
		{CollScatter, 8 * 32, 32, "binomial", "five steps against a batch of 31 messages"},
		{CollBarrier, 0, 8, "recursive-doubling", "log2 steps at a power of two, tied with dissemination: the first wins"},
		{CollBarrier, 0, 6, "dissemination", "ceil(log2) steps without recursive doubling's fold"},
	} {
		a, prices, err := Select(tc.coll, tc.bytes, Topology{Size: tc.size}, m, nil)
		require.NoError(t, err)
		require.Equal(t, tc.want, a.Name, "%s of %d bytes on %d ranks (%s): prices%s", tc.coll, tc.bytes, tc.size, tc.reason, FormatPrices(prices))
	}
}

func TestSelectPricesEveryCandidate(t *testing.T) {
	buf := make([]Price, 0, 8)
	a, prices, err := Select(CollAllreduce, 1<<20, Topology{Size: 4}, netModel(), buf[:0])
	require.NoError(t, err)
	require.Len(t, prices, 4)
	best := prices[0]
	for _, p := range prices {
		if p.Seconds < best.Seconds {
			best = p
		}
	}
	require.Equal(t, best.Algo, a)
	require.Equal(t, &buf[:1][0], &prices[0], "prices go into the caller's slice")
	// A collective with one algorithm is not priced.
	a, prices, err = Select(CollAllgatherv, 1<<20, Topology{Size: 4}, netModel(), nil)
	require.NoError(t, err)
	require.Equal(t, "ring", a.Name)
	require.Empty(t, prices)
}

func TestSelectTieGoesToTheTablesFirst(t *testing.T) {
	// With α = β = γ = 0 every allreduce algorithm costs nothing.
	a, prices, err := Select(CollAllreduce, 1<<20, Topology{Size: 4}, Model{}, nil)
	require.NoError(t, err)
	require.Equal(t, Algos(CollAllreduce)[0], a)
	for _, p := range prices {
		require.Zero(t, p.Seconds)
	}
}

func TestSelectUsesTheLinkClassOfTheTopology(t *testing.T) {
	var m Model
	m.Links[LinkLocal] = LinkCost{Alpha: 1e-6, Beta: 1e-11}   // shared memory: latency cheap
	m.Links[LinkNet] = LinkCost{Alpha: 100e-6, Beta: 1 / 1e9} // a slow network
	m.ChunkBytes = 512 << 10
	one := Topology{Size: 8, Hosts: 1}
	many := Topology{Size: 8, Hosts: 4}
	ring, err := LookupAlgo(CollAllreduce, "ring")
	require.NoError(t, err)
	tLocal, _ := ring.Time(1<<20, one, m)
	tNet, _ := ring.Time(1<<20, many, m)
	require.Less(t, tLocal*10, tNet, "across hosts the network's α and β apply")
	// Only one class measured: it stands for both.
	var only Model
	only.Links[LinkNet] = m.Links[LinkNet]
	t1, _ := ring.Time(1<<20, one, only)
	require.Equal(t, tNet, t1)
}

// A chain's fill crosses only Hosts-1 network links: its other hops are
// priced at the local links' cost. On 2 hosts of 3 ranks joined by 1
// Gbit/s links (scripts/hier-compare.sh --op reduce --max, the root's
// time) the chain reduce took 21.3 ms at 1 MiB and 31.2 at 2 MiB against
// the ring's 38.1 and 37.7, which the network's cost for every hop of the
// fill had priced first.
func TestSelectChainFillCrossesFewNetworkLinks(t *testing.T) {
	var m Model
	m.Links[LinkLocal] = LinkCost{Alpha: 5e-6, Beta: 1 / 5e9}
	m.Links[LinkNet] = LinkCost{Alpha: 100e-6, Beta: 1 / 0.12e9}
	m.ChunkBytes = 512 << 10
	top := Topology{Size: 6, Hosts: 2}
	chain, err := LookupAlgo(CollReduce, "pipeline")
	require.NoError(t, err)
	a, _, err := Select(CollReduce, 1<<20, top, m, nil)
	require.NoError(t, err)
	require.Equal(t, "pipeline", a.Name)
	// Priced with every hop over the network it loses to the ring.
	flat := m
	flat.Links[LinkLocal] = LinkCost{}
	a, _, err = Select(CollReduce, 1<<20, top, flat, nil)
	require.NoError(t, err)
	require.Equal(t, "ring", a.Name)
	// One host per rank: every hop crosses the network, nothing to take off.
	spread := Topology{Size: 6, Hosts: 6}
	tm, _ := chain.Time(1<<20, spread, m)
	tf, _ := chain.Time(1<<20, spread, flat)
	require.Equal(t, tf, tm)
}

func TestSelectUnknownCollective(t *testing.T) {
	_, _, err := Select(Coll(200), 8, Topology{Size: 2}, netModel(), nil)
	require.Error(t, err)
}

func BenchmarkSelect(b *testing.B) {
	m := netModel()
	buf := make([]Price, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		Select(CollAllreduce, 1<<20, Topology{Size: 16}, m, buf[:0])
	}
}

// A β measured for one algorithm (comm fits Rabenseifner's at New) prices
// that algorithm's bytes, and FitBeta inverts Time: with 4 ranks sharing
// 2 cores over TCP Rabenseifner took 1.15-1.75 times the ring's time,
// which the link's β (the ring's) priced below the ring.
func TestSelectUsesAlgoBeta(t *testing.T) {
	m := netModel()
	top := Topology{Size: 4}
	a, _, err := Select(CollAllreduce, 4<<20, top, m, nil)
	require.NoError(t, err)
	require.Equal(t, "rabenseifner", a.Name)
	rab, err := LookupAlgo(CollAllreduce, "rabenseifner")
	require.NoError(t, err)
	ring, err := LookupAlgo(CollAllreduce, "ring")
	require.NoError(t, err)
	ringT, _ := ring.Time(4<<20, top, m)
	b, ok := rab.FitBeta(4<<20, top, m, 1.5*ringT)
	require.True(t, ok)
	m.AlgoBeta = map[Coll]map[string]float64{CollAllreduce: {"rabenseifner": b}}
	got, _ := rab.Time(4<<20, top, m)
	require.InDelta(t, 1.5*ringT, got, 1e-9, "FitBeta's β reproduces the measured time")
	a, prices, err := Select(CollAllreduce, 4<<20, top, m, nil)
	require.NoError(t, err)
	require.Equal(t, "ring", a.Name, "prices%s", FormatPrices(prices))
	_, ok = ring.FitBeta(0, Topology{Size: 1}, m, 1)
	require.False(t, ok, "no bytes, no β")
}

// On a crowded host (Model.Crowded) the barrier is the linear one up to 6
// ranks (Algo.CrowdedUpTo), still priced with the others; above, and on
// hosts with a processor per rank, the priced choice.
func TestSelectCrowdedBarrier(t *testing.T) {
	for _, tc := range []struct {
		size    int
		crowded bool
		want    string // "": the priced choice, not linear
	}{{2, true, "linear"}, {3, true, "linear"}, {4, true, "linear"}, {5, true, "linear"},
		{6, true, "linear"}, {7, true, ""}, {8, true, ""}, {3, false, ""}, {6, false, ""}} {
		m := netModel()
		priced, _, err := Select(CollBarrier, 0, Topology{Size: tc.size}, m, nil)
		require.NoError(t, err)
		require.NotEqual(t, "linear", priced.Name, "%d ranks: the priced choice", tc.size)
		m.Crowded = tc.crowded
		a, prices, err := Select(CollBarrier, 0, Topology{Size: tc.size}, m, nil)
		require.NoError(t, err)
		if tc.want == "" {
			tc.want = priced.Name
		}
		require.Equal(t, tc.want, a.Name, "%d ranks, crowded %v", tc.size, tc.crowded)
		require.Len(t, prices, len(Algos(CollBarrier)), "every candidate priced")
	}
}

// On one crowded host (Algo.CrowdedUpTo, CrowdedBelow, CrowdedRootBelow,
// CrowdedOneHost) the broadcast is the linear one up to 16 ranks below 8
// MiB while its root sends under 24 MiB in all, the reduce the flat tree
// up to 16 ranks below 8 MiB and the binomial tree from there, at any
// size up to 4 ranks and below 16 MiB up to 16, the allreduce
// Rabenseifner's at 4 ranks from 1 MiB and the ring at 3 from 3 MiB, and
// recursive doubling up
// to 4 ranks below 1 MiB, the allgather the ring from 5 to 16 ranks from
// 512 KiB a rank, the reduce-scatter the ring from 8 to 16 ranks from 1
// MiB a rank, and the gather and scatter the flat trees up to 16 ranks;
// beyond those bounds, on several hosts
// (ranks told to yield also set Model.Crowded there), with more ranks and
// uncrowded, the priced choice.
func TestSelectCrowdedBySize(t *testing.T) {
	const bc, ar, rd, ag, rs = CollBroadcast, CollAllreduce, CollReduce, CollAllgather, CollReduceScatter
	const ga, sc = CollGather, CollScatter
	for _, tc := range []struct {
		coll                Coll
		size, hosts, nbytes int
		crowded             bool
		want                string // "": the priced choice, which is not the rule's at 1 MiB and above
	}{
		{bc, 4, 1, 64 << 10, true, "linear"}, {bc, 4, 1, 1 << 20, true, "linear"}, {bc, 4, 1, 8<<20 - 4, true, "linear"},
		{bc, 3, 1, 1 << 20, true, "linear"}, {bc, 4, 1, 8 << 20, true, ""}, {bc, 4, 1, 64 << 20, true, ""},
		{bc, 5, 1, 1 << 20, true, "linear"}, {bc, 8, 1, 64 << 10, true, "linear"}, {bc, 8, 1, 2 << 20, true, "linear"},
		{bc, 8, 1, 24<<20/7 + 1, true, ""}, {bc, 16, 1, 1 << 20, true, "linear"}, {bc, 16, 1, 24<<20/15 + 1, true, ""},
		{bc, 17, 1, 64 << 10, true, ""}, {bc, 4, 2, 1 << 20, true, ""}, {bc, 4, 1, 1 << 20, false, ""},
		{ar, 4, 1, 8, true, "recursive-doubling"}, {ar, 4, 1, 256 << 10, true, "recursive-doubling"},
		{ar, 4, 1, 1<<20 - 4, true, "recursive-doubling"}, {ar, 3, 1, 512 << 10, true, "recursive-doubling"},
		{ar, 5, 1, 256 << 10, true, ""},
		{ar, 4, 2, 256 << 10, true, ""}, {ar, 4, 1, 256 << 10, false, ""},
		{ar, 4, 1, 1 << 20, true, "rabenseifner"}, {ar, 4, 1, 64 << 20, true, "rabenseifner"}, {ar, 3, 1, 3 << 20, true, "ring"},
		{ar, 3, 1, 64 << 20, true, "ring"}, {ar, 3, 1, 3<<20 - 3, true, ""}, {ar, 5, 1, 8 << 20, true, ""},
		{ar, 4, 2, 8 << 20, true, ""}, {ar, 4, 1, 8 << 20, false, ""},
		{rd, 4, 1, 8 << 20, true, "binomial"}, {rd, 4, 1, 64 << 20, true, "binomial"}, {rd, 3, 1, 1 << 30, true, "binomial"},
		{rd, 8, 1, 8 << 20, true, "binomial"}, {rd, 16, 1, 16<<20 - 4, true, "binomial"},
		{rd, 16, 1, 8, true, "linear"}, {rd, 8, 1, 512 << 10, true, "linear"}, {rd, 16, 1, 1<<20 - 4, true, "linear"},
		{rd, 4, 1, 1 << 20, true, "linear"}, {rd, 8, 1, 4 << 20, true, "linear"}, {rd, 16, 1, 8<<20 - 4, true, "linear"},
		{rd, 32, 1, 8, true, ""}, {rd, 16, 2, 8, true, ""}, {rd, 5, 1, 16 << 20, true, ""}, {rd, 8, 1, 64 << 20, true, ""},
		{rd, 16, 1, 16 << 20, true, ""}, {rd, 17, 1, 1 << 20, true, ""}, {rd, 8, 2, 1 << 20, true, ""}, {rd, 8, 1, 1 << 20, false, ""},
		{rd, 4, 2, 64 << 20, true, ""}, {rd, 4, 1, 64 << 20, false, ""},
		// The allgather's bytes are all the ranks' blocks.
		{ag, 5, 1, 5 * 512 << 10, true, "ring"}, {ag, 8, 1, 8 * 512 << 10, true, "ring"}, {ag, 8, 1, 8 * 4 << 20, true, "ring"},
		{ag, 16, 1, 16 * 2 << 20, true, "ring"}, {ag, 8, 1, 8*512<<10 - 8, true, ""}, {ag, 16, 1, 16 * 256 << 10, true, ""},
		{ag, 4, 1, 4 * 4 << 20, true, ""}, {ag, 17, 1, 17 * 1 << 20, true, ""}, {ag, 8, 2, 8 * 1 << 20, true, ""},
		{ag, 8, 1, 8 * 1 << 20, false, ""},
		// The reduce-scatter's bytes are all the ranks' blocks too.
		{rs, 8, 1, 8 * 1 << 20, true, "ring"}, {rs, 16, 1, 16 * 2 << 20, true, "ring"}, {rs, 8, 1, 8*1<<20 - 8, true, ""},
		{rs, 4, 1, 4 * 4 << 20, true, ""}, {rs, 32, 1, 32 * 1 << 20, true, ""},
		{rs, 8, 2, 8 * 2 << 20, true, ""}, {rs, 8, 1, 8 * 2 << 20, false, ""},
		// The flat gather and scatter at any size up to 16 ranks (priced:
		// the binomial trees at 16 ranks and from 18).
		{ga, 16, 1, 16 * 8, true, "linear"}, {ga, 16, 1, 16 * 1 << 20, true, "linear"}, {ga, 32, 1, 32 * 8, true, ""},
		{ga, 16, 2, 16 * 8, true, ""}, {ga, 16, 1, 16 * 8, false, ""},
		{sc, 16, 1, 16 * 8, true, "linear"}, {sc, 16, 1, 16 * 4 << 20, true, "linear"}, {sc, 32, 1, 32 * 8, true, ""},
		{sc, 16, 2, 16 * 8, true, ""}, {sc, 16, 1, 16 * 8, false, ""},
	} {
		m := netModel()
		top := Topology{Size: tc.size, Hosts: tc.hosts}
		priced, _, err := Select(tc.coll, tc.nbytes, top, m, nil)
		require.NoError(t, err)
		m.Crowded = tc.crowded
		a, _, err := Select(tc.coll, tc.nbytes, top, m, nil)
		require.NoError(t, err)
		if tc.want == "" {
			tc.want = priced.Name
			if tc.coll == bc && tc.nbytes >= 1<<20 {
				require.NotEqual(t, "linear", priced.Name, "%+v: the priced choice", tc)
			}
			if tc.coll == ag || tc.coll == rs {
				require.NotEqual(t, "ring", priced.Name, "%+v: the priced choice", tc)
			}
			if tc.coll == ga || tc.coll == sc {
				require.NotEqual(t, "linear", priced.Name, "%+v: the priced choice", tc)
			}
		}
		require.Equal(t, tc.want, a.Name, "%+v", tc)
	}
}

// On one host the ring reduce's root also pays for what it sends (a copy
// on its own core over shared memory or loopback TCP), 3(p-1)/p of the
// buffer in all: with 2 ranks the flat tree, whose root only receives,
// was 20-60% faster at every size from 256 KiB to 16 MiB over both, and
// the model priced on receives alone took the ring from 1 MiB over TCP
// (the prices goccl measured at start on this project's machine: α 8.3
// µs, β 0.348 ns/B, a kernel reducing at 46 GB/s). Across hosts the ring
// is priced on its receives as before.
func TestSelectReduceOnOneHostCountsTheRootsSends(t *testing.T) {
	var m Model
	m.Links[LinkLocal] = LinkCost{Alpha: 8.3e-6, Beta: 0.348e-9}
	m.Gamma, m.ChunkBytes = 1/46e9, 512<<10
	for n := 256 << 10; n <= 64<<20; n *= 2 {
		a, prices, err := Select(CollReduce, n, Topology{Size: 2, Hosts: 1}, m, nil)
		require.NoError(t, err)
		require.NotEqual(t, "ring", a.Name, "reduce of %d bytes on 2 ranks of one host: prices%s", n, FormatPrices(prices))
	}
	ring, err := LookupAlgo(CollReduce, "ring")
	require.NoError(t, err)
	one, _ := ring.Time(16<<20, Topology{Size: 2, Hosts: 1}, m)
	two, _ := ring.Time(16<<20, Topology{Size: 2, Hosts: 2}, m)
	require.Greater(t, one, two, "the root's sends count on one host only")
}
