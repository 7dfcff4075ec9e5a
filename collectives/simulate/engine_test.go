package simulate

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// Hand-computed cases. Times are in arbitrary units; bytes are small.

// units is a model with every cost zero but the executor's settings.
func units(chunk, slots, inline int) Params {
	return Params{ChunkBytes: chunk, Slots: slots, Inline: inline}
}

func run(t *testing.T, job Job, m Machine, par Params, method Method) Result {
	t.Helper()
	r, err := Simulate(job, m, par, Options{Method: method})
	require.NoError(t, err)
	return r
}

func TestOneMessage(t *testing.T) {
	// Broadcast of 8 bytes on 2 ranks: rank 0 sends one chunk to rank 1.
	par := units(1024, 8, 0)
	par.Links[collectives.LinkLocal] = Link{Alpha: 10, Beta: 1, Overhead: 2, PerByte: 0.5}
	par.Copy = 0.25
	r := run(t, Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 8}, Machine{Ranks: 2}, par, Full)
	// Post (the sending thread): o + 8ω = 6. Both ports at once
	// (cut-through): 8β = 8, then α: arrives at 24. Read (the receiving
	// thread): o + 8ω = 6, at 30. Consume (the executor): 8κ = 2: rank 1
	// done at 32. The acknowledgement reaches rank 0 α after the read: 40.
	require.InDelta(t, 40, r.Seconds, 1e-12)
	require.InDelta(t, 36, r.MeanSeconds, 1e-12)
	require.Equal(t, 8.0, r.BusiestBytes)
	require.False(t, r.Busiest.Net)

	// Inline: the send is done when posted (at 6).
	par.Inline = 8
	r = run(t, Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 8}, Machine{Ranks: 2}, par, Full)
	require.InDelta(t, 32, r.Seconds, 1e-12)
	require.InDelta(t, 19, r.MeanSeconds, 1e-12)
}

// TestPacedByBarrier: OSU's loop (a call, then a barrier) on 2 ranks, a
// one-message broadcast, every cost zero but α = 10, sends inline. Alone,
// the root is done at 0 and the leaf at α. The barrier after it (recursive
// doubling: an exchange) lets the leaf out when it arrives at α (the
// root's message is there), the root at 2α (the leaf's reaches it): the
// next call's root enters α after the leaf, which waits 2α for its
// message. That repeats: each rank's time from its own entry is 0 and 2α.
func TestPacedByBarrier(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Alpha: 10}
	job := Job{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: 8}
	r := run(t, job, Machine{Ranks: 2}, par, Full)
	require.InDelta(t, 10, r.Seconds, 1e-12)
	require.InDelta(t, 5, r.MeanSeconds, 1e-12)
	r, err := Simulate(job, Machine{Ranks: 2}, par, Options{Method: Full, Barrier: "recursive-doubling"})
	require.NoError(t, err)
	require.InDelta(t, 20, r.Seconds, 1e-12)
	require.InDelta(t, 10, r.MeanSeconds, 1e-12)
	// A symmetric call is left as it was: both ranks leave the barrier
	// together.
	ar := Job{Coll: collectives.CollAllreduce, Algo: "recursive-doubling", Bytes: 8}
	alone := run(t, ar, Machine{Ranks: 2}, par, Full)
	r, err = Simulate(ar, Machine{Ranks: 2}, par, Options{Method: Full, Barrier: "recursive-doubling"})
	require.NoError(t, err)
	require.InDelta(t, alone.MeanSeconds, r.MeanSeconds, 1e-12)
	_, err = Simulate(job, Machine{Ranks: 2}, par, Options{Barrier: "nope"})
	require.Error(t, err)
	// The loop's calls and barriers share the budget.
	one := run(t, job, Machine{Ranks: 2}, par, Full)
	_, err = Simulate(job, Machine{Ranks: 2}, par, Options{Method: Full, Barrier: "recursive-doubling", Budget: one.Events + 1})
	require.ErrorIs(t, err, errBudget)
}

// TestOversubByteCost: where ranks outnumber cores, every CPU cost per
// byte grows by the factor; a call that costs nothing else takes twice as
// long at a factor of 2, and the factor is interpolated between levels.
func TestOversubByteCost(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{PerByte: 1}
	par.Gamma, par.Copy = 2, 1
	job := Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 4096, OutOfPlace: true}
	m := Machine{Ranks: 4, Cores: 2, PoolRanks: 4}
	par.Oversubscribed = []Oversub{{RanksPerCore: 2}}
	base := run(t, job, m, par, Full)
	par.Oversubscribed = []Oversub{{RanksPerCore: 2, ByteCost: 2}}
	r := run(t, job, m, par, Full)
	require.InEpsilon(t, 2*base.MeanSeconds, r.MeanSeconds, 1e-9)
	par.Oversubscribed = []Oversub{{RanksPerCore: 1.5}, {RanksPerCore: 2.5, ByteCost: 3}}
	r = run(t, job, m, par, Full)
	require.InEpsilon(t, 2*base.MeanSeconds, r.MeanSeconds, 1e-9)
}

// TestOversubByteCostBetweenHosts: between hosts, ByteCost grows the part
// of a link's CPU per byte that a local link costs too (the transport's
// copies), not the rest (the kernel's way between hosts): at a factor of
// 2, a net PerByte of 3 over a local one of 1 costs what a net PerByte of
// 4 costs without it; a local link takes the factor on all of its own,
// and a net link cheaper than the local one on all of its own.
func TestOversubByteCostBetweenHosts(t *testing.T) {
	par := units(1<<20, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{PerByte: 1}
	par.Links[collectives.LinkNet] = Link{PerByte: 3}
	job := Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 4096, OutOfPlace: true}
	twoHosts := Machine{Ranks: 4, RanksPerHost: 2, Cores: 2, PoolRanks: 4}
	par.Oversubscribed = []Oversub{{RanksPerCore: 2, ByteCost: 2}}
	r := run(t, job, twoHosts, par, Full)
	want := par
	want.Links[collectives.LinkLocal].PerByte = 2
	want.Links[collectives.LinkNet].PerByte = 4
	want.Oversubscribed = []Oversub{{RanksPerCore: 2}}
	require.InEpsilon(t, run(t, job, twoHosts, want, Full).MeanSeconds, r.MeanSeconds, 1e-9)
	// A net link cheaper per byte than the local one: all of it copies.
	par.Links[collectives.LinkNet] = Link{PerByte: 0.5}
	want.Links[collectives.LinkNet].PerByte = 1
	require.InEpsilon(t, run(t, job, twoHosts, want, Full).MeanSeconds, run(t, job, twoHosts, par, Full).MeanSeconds, 1e-9)
}

// TestWake: a chain of 4 ranks on 2 cores (α = 1, everything else free):
// a message that finds its rank with nothing to do waits Wake = 10 for
// every other rank still waiting in the call, per core. Rank 1 has ranks
// 2 and 3 waiting beside it (10·2/2), rank 2 has rank 3 (10·1/2), rank 3
// nobody: it is done at 1+10+1+5+1 = 18 instead of 3.
func TestWake(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Alpha: 1}
	job := Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 8}
	m := Machine{Ranks: 4, Cores: 2, PoolRanks: 4}
	par.Oversubscribed = []Oversub{{RanksPerCore: 2}}
	r := run(t, job, m, par, Full)
	require.InDelta(t, 3, r.Seconds, 1e-12)
	par.Oversubscribed = []Oversub{{RanksPerCore: 2, Wake: 10}}
	r = run(t, job, m, par, Full)
	require.InDelta(t, 18, r.Seconds, 1e-12)
	require.InDelta(t, (0+11+17+18)/4.0, r.MeanSeconds, 1e-12)
	require.InDeltaSlice(t, []float64{0, 11, 17, 18}, r.RankSeconds, 1e-12, "each rank's own time")
	// Every rank with a core of its own: no wake-up.
	r = run(t, job, Machine{Ranks: 4}, par, Full)
	require.InDelta(t, 3, r.Seconds, 1e-12)
}

// TestTokenBucket: a NIC behind a token bucket of 100 bytes (β = 1, α =
// 10) passes a 64-byte message at once and a 256-byte one in 156 (what
// the full bucket lacks, at β) on each port, where without the bucket it
// takes 256. Called back to back, the bucket drains: OSU's loop of
// 64-byte broadcasts, a call every 2α = 20 refilling 20 bytes, settles at
// the rate.
func TestTokenBucket(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkNet] = Link{Alpha: 10, Beta: 1, Burst: 100}
	m := Machine{Ranks: 2, RanksPerHost: 1}
	bc := func(n int) Job { return Job{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: n} }
	require.InDelta(t, 10, run(t, bc(64), m, par, Full).Seconds, 1e-9)
	require.InDelta(t, 166, run(t, bc(256), m, par, Full).Seconds, 1e-9)
	par.Links[collectives.LinkNet].Burst = 0
	require.InDelta(t, 266, run(t, bc(256), m, par, Full).Seconds, 1e-9)
	par.Links[collectives.LinkNet].Burst = 100
	r, err := Simulate(bc(64), m, par, Options{Method: Full, Barrier: "recursive-doubling"})
	require.NoError(t, err)
	require.Greater(t, r.Seconds, 20.0, "a drained bucket: the leaf waits for the bytes")

	// A bucket that serves several calls before it runs dry: calls in a
	// row take the same time until it does, and the paced loop must not
	// stop there (it did: 20, every call served at once). Dry, the port
	// passes a call's 64 bytes at its rate, nβ per call.
	par.Links[collectives.LinkNet].Burst = 256
	r, err = Simulate(bc(64), m, par, Options{Method: Full, Barrier: "recursive-doubling"})
	require.NoError(t, err)
	require.InDelta(t, 64, r.Seconds, 1e-9)
}

func TestChainPipelines(t *testing.T) {
	// A chain of 3 ranks moving 3 chunks of 8 bytes, β = 1, α = 1: the
	// last chunk reaches the end after (p-1)(cβ+α) + (k-1)cβ = 18 + 16.
	par := units(8, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Alpha: 1, Beta: 1}
	r := run(t, Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 24}, Machine{Ranks: 3}, par, Full)
	require.InDelta(t, 34, r.Seconds, 1e-12)
	// Rank 0 is done when its last (inline) post leaves at 0, rank 1 when
	// it forwards the last chunk at 25.
	require.InDelta(t, (0+25+34)/3.0, r.MeanSeconds, 1e-12)
}

func TestRingOfThree(t *testing.T) {
	// Ring allreduce of 12 bytes on 3 ranks: 2(p-1) = 4 dependent steps of
	// a 4-byte segment each, α + 4β each.
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Alpha: 1, Beta: 1}
	r := run(t, Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 12}, Machine{Ranks: 3}, par, Full)
	require.InDelta(t, 20, r.Seconds, 1e-12)
	require.InDelta(t, 20, r.MeanSeconds, 1e-12)
	// Each rank's ports carry its 4 segments of 4 bytes.
	require.Equal(t, 16.0, r.BusiestBytes)
}

func TestCreditStallsWithOneSlot(t *testing.T) {
	// 3 chunks from rank 0 to rank 1, α = 1, nothing else costs. With one
	// slot each chunk waits for the credit of the one before: it arrives
	// at 1, its credit is back at 2, the next leaves then: (2k-1)α = 5.
	par := units(8, 1, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Alpha: 1}
	job := Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 24}
	require.InDelta(t, 5, run(t, job, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
	par.Slots = 8 // all three in flight at once
	require.InDelta(t, 1, run(t, job, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
}

// TestCreditWrites: a credit that cannot ride with data costs a message's
// overhead at both ends (Params.CreditWrites). 2 chunks of 8 bytes from
// rank 0 to rank 1, one slot, α = 10, o = 2, sends inline. Without: chunk
// 0 is posted by 2, arrives at 12, is read by 14 and consumed then; its
// credit is back at 24, chunk 1 is posted by 26, arrives at 36, is read by
// 38. With: the leaf sends nothing to the root, so the credit is written
// alone (14-16), arrives at 26 and is read (26-28): chunk 1 is read by 42.
// Recursive doubling's exchange on 2 ranks (one small chunk each way, the
// credit rides with the data) costs the same either way.
func TestCreditWrites(t *testing.T) {
	par := units(8, 1, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Alpha: 10, Overhead: 2}
	job := Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 16}
	require.InDelta(t, 38, run(t, job, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
	par.CreditWrites = true
	require.InDelta(t, 42, run(t, job, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)

	// Which credits ride: recursive doubling's on 2 ranks (one small
	// chunk each way); not the broadcast leaf's, nor a large chunk's.
	rides := func(coll collectives.Coll, algo string, rank, count int) bool {
		a, err := collectives.LookupAlgo(coll, algo)
		require.NoError(t, err)
		rp, err := compileRank(a.Schedule(rank, 2, &collectives.Args{Count: count, ElemSize: 4}), 1<<20)
		require.NoError(t, err)
		en := rp.entries[0]
		require.NotEmpty(t, en.recvs)
		last := en.recvs[len(en.recvs)-1]
		return creditRides(rp, 0, last, rp.chunks[last].len, 32<<10)
	}
	require.True(t, rides(collectives.CollAllreduce, "recursive-doubling", 0, 2))
	require.False(t, rides(collectives.CollAllreduce, "recursive-doubling", 0, 64<<10), "a chunk above the inline size")
	require.False(t, rides(collectives.CollBroadcast, "binomial", 1, 2), "a leaf sends nothing back")
}

func TestCoalesce(t *testing.T) {
	// Scatter-allgather broadcast of 16 bytes on 2 ranks: the root sends
	// the leaf its two 8-byte segments at once (the scatter's and the
	// allgather's). Alone, each costs its overhead at both ends: posted at
	// 0-2 and 2-4, read at 12-14 and 14-16. In one write (Coalesce) they
	// cost one: posted at 0-2, both read at 12-14.
	par := units(1024, 8, 1024)
	par.Links[collectives.LinkLocal] = Link{Alpha: 10, Overhead: 2}
	job := Job{Coll: collectives.CollBroadcast, Algo: "scatter-allgather", Bytes: 16}
	r := run(t, job, Machine{Ranks: 2}, par, Full)
	require.InDelta(t, 16, r.Seconds, 1e-12)
	require.Equal(t, 2, r.Ends, "the root's two writes")
	par.Coalesce = true
	r = run(t, job, Machine{Ranks: 2}, par, Full)
	require.InDelta(t, 14, r.Seconds, 1e-12)
	require.Equal(t, 1, r.Ends, "the root's one write")

	// Credits never share a write in the model (Params.Coalesce): the
	// ring allreduce on 2 ranks, whose reduce-scatter credit goes back in
	// the transport's writev of the allgather's data, still writes three
	// times and reads three times.
	par.CreditWrites = true
	job = Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 8}
	require.Equal(t, 6, run(t, job, Machine{Ranks: 2}, par, Full).Ends)
	par.Coalesce = false
	require.Equal(t, 6, run(t, job, Machine{Ranks: 2}, par, Full).Ends)

	// Messages to different peers never share a write: 4 ranks' pairwise
	// all-to-all costs the same either way.
	job = Job{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 4 * 16}
	par.CreditWrites = false
	alone := run(t, job, Machine{Ranks: 4}, par, Full)
	par.Coalesce = true
	together := run(t, job, Machine{Ranks: 4}, par, Full)
	require.InDelta(t, alone.Seconds, together.Seconds, 1e-12)
	require.Equal(t, alone.Ends, together.Ends)
}

func TestNICContention(t *testing.T) {
	// Pairwise all-to-all of 4 blocks of 16 bytes on 4 ranks. Local links
	// cost nothing; a NIC moves a byte per unit, α = 3.
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkNet] = Link{Alpha: 3, Beta: 1}
	job := Job{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 4 * 16}
	// One rank per host: each NIC sends 3 blocks: 48 + α.
	r := run(t, job, Machine{Ranks: 4, RanksPerHost: 1}, par, Full)
	require.InDelta(t, 51, r.Seconds, 1e-12)
	require.Equal(t, 48.0, r.BusiestBytes)
	require.True(t, r.Busiest.Net)
	// Two ranks per host share the NIC: each host sends 2 ranks x 2 blocks
	// across: 64 + α.
	r = run(t, job, Machine{Ranks: 4, RanksPerHost: 2}, par, Full)
	require.InDelta(t, 67, r.Seconds, 1e-12)
	require.Equal(t, 64.0, r.BusiestBytes)
	require.Equal(t, 2*64.0, r.NetBytes)
}

func TestCoresAreShared(t *testing.T) {
	// Ring allreduce of 8 bytes on 2 ranks: each rank reduces one 4-byte
	// segment at γ = 1 (4 units); nothing else costs. On a core each the
	// reductions overlap; on one shared core they take turns.
	par := units(1024, 8, 1<<20)
	par.Gamma = 1
	job := Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 8}
	require.InDelta(t, 4, run(t, job, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
	require.InDelta(t, 8, run(t, job, Machine{Ranks: 2, Cores: 1, PoolRanks: 2}, par, Full).Seconds, 1e-12)
	require.InDelta(t, 4, run(t, job, Machine{Ranks: 2, Cores: 2, PoolRanks: 2}, par, Full).Seconds, 1e-12)
}

func TestBadInputs(t *testing.T) {
	par := units(1024, 8, 0)
	_, err := Simulate(Job{Coll: collectives.CollAllreduce, Algo: "nope", Bytes: 8}, Machine{Ranks: 2}, par, Options{})
	require.ErrorContains(t, err, "nope")
	_, err = Simulate(Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 8}, Machine{Ranks: 0}, par, Options{})
	require.Error(t, err)
	_, err = Simulate(Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: 8}, Machine{Ranks: 2}, units(0, 8, 0), Options{})
	require.Error(t, err)
	_, err = Simulate(Job{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: 8, Root: 5}, Machine{Ranks: 2}, par, Options{})
	require.ErrorContains(t, err, "root")
	_, err = Simulate(Job{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: 8}, Machine{Ranks: 4}, par, Options{Method: Periodic})
	require.ErrorContains(t, err, "not periodic")
}

func TestSwitchOnlyWhenOversubscribed(t *testing.T) {
	// One message of 8 bytes, o = 1, Switch = 5, SwitchGap = 100: a pool
	// of 2 ranks on 2 cores pays o at each end (2); on 1 core it pays o +
	// Switch + SwitchGap at each end and the gap for the consumption too
	// (312).
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Overhead: 1}
	par.Oversubscribed = []Oversub{{RanksPerCore: 2, Switch: 5, Gap: 100}, {RanksPerCore: 4, Switch: 15, Gap: 300}}
	job := Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 8}
	require.InDelta(t, 2, run(t, job, Machine{Ranks: 2, Cores: 2, PoolRanks: 2}, par, Full).Seconds, 1e-12)
	require.InDelta(t, 312, run(t, job, Machine{Ranks: 2, Cores: 1, PoolRanks: 2}, par, Full).Seconds, 1e-12)
	// Latency adds to the message's way (and, here, to nothing else).
	par.Oversubscribed[0].Latency = 1000
	require.InDelta(t, 1312, run(t, job, Machine{Ranks: 2, Cores: 1, PoolRanks: 2}, par, Full).Seconds, 1e-12)
	par.Oversubscribed[0].Latency = 0
	// 3 ranks per core (the pool's third rank belongs to another job):
	// halfway, Switch 10 and Gap 200: 2*(1+10) + 3*200.
	require.InDelta(t, 622, run(t, job, Machine{Ranks: 2, Cores: 1, PoolRanks: 3}, par, Full).Seconds, 1e-12)
	// Beyond the last entry, the last entry's.
	require.InDelta(t, 2*(1+15)+3*300, run(t, job, Machine{Ranks: 2, Cores: 1, PoolRanks: 8}, par, Full).Seconds, 1e-12)
	require.InDelta(t, 2, run(t, job, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
}

// TestNetLatency: what crowded cores add to a message between hosts
// (Oversub.NetLatency) adds to its way on top of Latency, and nothing to a
// message within a host, interpolated between the levels like the rest.
func TestNetLatency(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Overhead: 1, Alpha: 3}
	par.Links[collectives.LinkNet] = Link{Overhead: 1, Alpha: 7}
	par.Oversubscribed = []Oversub{{RanksPerCore: 2, Latency: 10, NetLatency: 100}, {RanksPerCore: 4, Latency: 10, NetLatency: 300}}
	job := Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 8}
	// One host: o, α, Latency, o.
	require.InDelta(t, 1+3+10+1, run(t, job, Machine{Ranks: 2, Cores: 1, PoolRanks: 2}, par, Full).Seconds, 1e-12)
	// Two hosts: o, α, Latency and NetLatency, o.
	require.InDelta(t, 1+7+10+100+1, run(t, job, Machine{Ranks: 2, RanksPerHost: 1, Cores: 1, PoolRanks: 2}, par, Full).Seconds, 1e-12)
	// 3 ranks per core: halfway.
	require.InDelta(t, 1+7+10+200+1, run(t, job, Machine{Ranks: 2, RanksPerHost: 1, Cores: 1, PoolRanks: 3}, par, Full).Seconds, 1e-12)
	// A core per rank: none of it.
	require.InDelta(t, 1+7+1, run(t, job, Machine{Ranks: 2, RanksPerHost: 1}, par, Full).Seconds, 1e-12)
	par.Oversubscribed[1].NetLatency = -1
	_, err := Simulate(job, Machine{Ranks: 2}, par, Options{Method: Full})
	require.Error(t, err)
}

// TestCallOverhead: every rank spends the call's CPU on its executor
// before its first message, so with a core per rank it adds exactly that
// to every rank's time.
func TestCallOverhead(t *testing.T) {
	par := units(1024, 8, 0)
	par.Links[collectives.LinkLocal] = Link{Alpha: 10, Beta: 1, Overhead: 2, PerByte: 0.5}
	job := Job{Coll: collectives.CollBroadcast, Algo: "pipeline", Bytes: 8}
	before := run(t, job, Machine{Ranks: 2}, par, Full)
	par.CallOverhead = 7
	after := run(t, job, Machine{Ranks: 2}, par, Full)
	require.InDelta(t, before.Seconds+7, after.Seconds, 1e-12)
	require.InDelta(t, before.MeanSeconds+7, after.MeanSeconds, 1e-12)
	par.CallOverhead = -1
	_, err := Simulate(job, Machine{Ranks: 2}, par, Options{})
	require.Error(t, err)
}

// TestSwitchOnWakeUp: with ranks sharing cores, a message's end pays
// Switch where it finds its side of the transport idle, not where it
// queues behind one in progress. The linear broadcast's root posts its 2
// messages at once on 3 ranks sharing 1 core: 3 switches (the root's
// first post, each receiver's read), not 4; the core is never idle, so
// the time grows by exactly that.
func TestSwitchOnWakeUp(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Overhead: 1}
	job := Job{Coll: collectives.CollBroadcast, Algo: "linear", Bytes: 8}
	m := Machine{Ranks: 3, Cores: 1, PoolRanks: 3}
	par.Oversubscribed = []Oversub{{RanksPerCore: 3, Switch: 0}}
	before := run(t, job, m, par, Full)
	par.Oversubscribed[0].Switch = 5
	after := run(t, job, m, par, Full)
	require.InDelta(t, before.Seconds+3*5, after.Seconds, 1e-12)
}

// TestWriteTail: a write's message leaves Link.WriteTail before the
// write's overhead ends, and the sender's thread stays busy for the rest.
// Broadcast of 8 bytes on 2 ranks, α = 10, o = 2 of which 1.5 after the
// message left, sends inline: the message leaves at 0.5, arrives at 10.5
// and is read by 12.5 (without the tail: 14). Scatter-allgather's two
// segments to the leaf, written apart: the first leaves at 0.5, the
// second is written 2-4 and leaves at 2.5; read 10.5-12.5 and 12.5-14.5.
// In one write (Coalesce) both leave at 0.5 and are read by 12.5.
func TestWriteTail(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Alpha: 10, Overhead: 2, WriteTail: 1.5}
	bc := Job{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: 8}
	r := run(t, bc, Machine{Ranks: 2}, par, Full)
	require.InDelta(t, 12.5, r.Seconds, 1e-12)
	sag := Job{Coll: collectives.CollBroadcast, Algo: "scatter-allgather", Bytes: 16}
	require.InDelta(t, 14.5, run(t, sag, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
	par.Coalesce = true
	require.InDelta(t, 12.5, run(t, sag, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
	// A tail longer than the write is the whole write.
	par.Links[collectives.LinkLocal].WriteTail = 5
	require.InDelta(t, 12, run(t, bc, Machine{Ranks: 2}, par, Full).Seconds, 1e-12)
	par.Links[collectives.LinkLocal].WriteTail = -1
	_, err := Simulate(bc, Machine{Ranks: 2}, par, Options{Method: Full})
	require.Error(t, err)
}

// TestOneThread: with Params.OneThread a rank reads only when its writes
// are done. Pairwise all-to-all of 8 bytes per peer on 3 ranks, α = 0,
// o = 2: every rank writes its two messages at 0-2 and 2-4; the first
// message for it arrives at 2. With a thread per side it is read at 2-4
// and the second at 4-6; with one thread the reads wait for the second
// write (4-6, 6-8).
func TestOneThread(t *testing.T) {
	par := units(1024, 8, 1<<20)
	par.Links[collectives.LinkLocal] = Link{Overhead: 2}
	job := Job{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 24}
	require.InDelta(t, 6, run(t, job, Machine{Ranks: 3}, par, Full).Seconds, 1e-12)
	par.OneThread = true
	require.InDelta(t, 8, run(t, job, Machine{Ranks: 3}, par, Full).Seconds, 1e-12)
}
