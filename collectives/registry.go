package collectives

import (
	"fmt"
	"slices"
	"strings"
)

// The registry describes every collective once (Collectives) and every
// algorithm once (Algos). Everything else is derived from these two tables:
// the selector (Select), the parsing of algorithm names (ParseAlgoSpec,
// LookupAlgo), the cost tests, and the documentation's algorithm table
// (AlgorithmTable). Adding an algorithm is one entry in algoTable.

// Coll names a collective.
type Coll uint8

const (
	CollAllreduce Coll = iota + 1
	CollBroadcast
	CollReduce
	CollAllgather
	CollAllgatherv
	CollReduceScatter
	CollAlltoall
	CollAlltoallv
	CollGather
	CollScatter
	CollBarrier
	CollSend
	CollRecv
	CollSendRecv
	CollGatherv
	CollScatterv
	CollScan
	CollExscan
	numColls
)

// CollInfo describes a collective: what all its algorithms share.
type CollInfo struct {
	Coll Coll
	// Name is the one spelling of the collective everywhere: errors, logs,
	// GOCCL_ALGO, the documentation.
	Name string
	// Rooted collectives have a root rank (broadcast, reduce, gather,
	// scatter).
	Rooted bool
	// Reducing collectives combine elements with a reduction operation.
	Reducing bool
	// P2P collectives are called by two ranks, not by every rank.
	P2P bool
	// VarCount collectives take per-rank counts that may differ by rank.
	VarCount bool
	// Blocked collectives move size blocks of Args.Count elements (the
	// gathered buffer of allgather and gather, the input of reduce-scatter
	// and scatter, either buffer of all-to-all); the others one buffer of
	// Args.Count elements (all the blocks of the v collectives).
	Blocked bool
	// Input collectives read a separate send buffer (the schedules'
	// BufInput); the others work in BufData alone.
	Input bool
	// StagedInPlace collectives overwrite blocks of an in-place buffer
	// before they send them: in place, the send side is read from a copy.
	StagedInPlace bool
	// InPlace states how a caller asks for in place (for the docs).
	InPlace string
}

var collTable = [numColls]CollInfo{
	CollAllreduce:     {Coll: CollAllreduce, Name: "allreduce", Reducing: true, InPlace: "send is recv (or nil)"},
	CollBroadcast:     {Coll: CollBroadcast, Name: "broadcast", Rooted: true, InPlace: "always (one buffer)"},
	CollReduce:        {Coll: CollReduce, Name: "reduce", Rooted: true, Reducing: true, InPlace: "send is recv on the root"},
	CollAllgather:     {Coll: CollAllgather, Name: "allgather", Blocked: true, Input: true, InPlace: "send is the rank's own block of recv"},
	CollAllgatherv:    {Coll: CollAllgatherv, Name: "allgatherv", VarCount: true, Input: true, InPlace: "send is the rank's own block of recv"},
	CollReduceScatter: {Coll: CollReduceScatter, Name: "reduce-scatter", Reducing: true, Blocked: true, InPlace: "recv is the rank's own block of send"},
	CollAlltoall:      {Coll: CollAlltoall, Name: "alltoall", Blocked: true, Input: true, StagedInPlace: true, InPlace: "send is recv"},
	CollAlltoallv:     {Coll: CollAlltoallv, Name: "alltoallv", VarCount: true, Input: true, StagedInPlace: true, InPlace: "send is recv"},
	CollGather:        {Coll: CollGather, Name: "gather", Rooted: true, Blocked: true, Input: true, InPlace: "send is the root's own block of recv"},
	CollScatter:       {Coll: CollScatter, Name: "scatter", Rooted: true, Blocked: true, Input: true, InPlace: "recv is the root's own block of send"},
	CollBarrier:       {Coll: CollBarrier, Name: "barrier", InPlace: "no buffers"},
	CollSend:          {Coll: CollSend, Name: "send", P2P: true, Input: true, InPlace: "-"},
	CollRecv:          {Coll: CollRecv, Name: "recv", P2P: true, InPlace: "-"},
	CollSendRecv:      {Coll: CollSendRecv, Name: "sendrecv", P2P: true, Input: true, InPlace: "-"},
	CollGatherv:       {Coll: CollGatherv, Name: "gatherv", Rooted: true, VarCount: true, Input: true, InPlace: "send is the root's own block of recv"},
	CollScatterv:      {Coll: CollScatterv, Name: "scatterv", Rooted: true, VarCount: true, Input: true, InPlace: "recv is the root's own block of send"},
	CollScan:          {Coll: CollScan, Name: "scan", Reducing: true, InPlace: "send is recv (or nil)"},
	CollExscan:        {Coll: CollExscan, Name: "exscan", Reducing: true, InPlace: "send is recv (or nil)"},
}

// Info describes c; the zero CollInfo for an unknown c.
func (c Coll) Info() CollInfo {
	if c == 0 || c >= numColls {
		return CollInfo{}
	}
	return collTable[c]
}

// IsP2P is c.Info().P2P without copying the description: the calls'
// hot path asks it several times per call.
func (c Coll) IsP2P() bool { return c < numColls && collTable[c].P2P }

func (c Coll) String() string {
	if n := c.Info().Name; n != "" {
		return n
	}
	return fmt.Sprintf("collective(%d)", uint8(c))
}

// Valid reports whether c is a collective.
func (c Coll) Valid() bool { return c > 0 && c < numColls }

// PricedBytes is the size at which the cost model prices a call of c on
// size ranks with count elements of elemSize bytes (Args.Count): the
// collective's full buffer (see Cost).
func (c Coll) PricedBytes(size, count, elemSize int) int {
	if c.Info().Blocked {
		return size * count * elemSize
	}
	return count * elemSize
}

// Collectives lists every collective, in declaration order.
func Collectives() []CollInfo {
	out := make([]CollInfo, 0, numColls-1)
	for c := Coll(1); c < numColls; c++ {
		out = append(out, collTable[c])
	}
	return out
}

// CollByName finds a collective by its one spelling. A known other
// spelling ("bcast", "reduce_scatter") is an error that names the right one.
func CollByName(name string) (Coll, error) {
	for c := Coll(1); c < numColls; c++ {
		if collTable[c].Name == name {
			return c, nil
		}
	}
	norm := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(name))
	if norm == "bcast" {
		norm = "broadcast"
	}
	for c := Coll(1); c < numColls; c++ {
		if strings.ReplaceAll(collTable[c].Name, "-", "") == norm {
			return 0, fmt.Errorf("unknown collective %q: did you mean %q?", name, collTable[c].Name)
		}
	}
	names := make([]string, 0, numColls-1)
	for c := Coll(1); c < numColls; c++ {
		names = append(names, collTable[c].Name)
	}
	return 0, fmt.Errorf("unknown collective %q (have %s)", name, strings.Join(names, ", "))
}

// Args is what a schedule constructor needs beyond rank and size.
type Args struct {
	Count    int // elements: of the buffer, or of one block for block collectives
	ElemSize int // bytes per element
	Root     int
	// Per-rank counts and displacements of the v collectives, in elements.
	SendCounts, SendDispls, RecvCounts, RecvDispls []int
	// Point to point: destination, source, and elements received.
	Peer, Src, RecvCount int
	// Hosts identifies each rank's host (equal values share one), for the
	// hierarchical algorithms; nil: one host. The same on every rank.
	Hosts []int
}

// Algo is one algorithm of one collective.
type Algo struct {
	Coll Coll
	// Name is the schedule's name, e.g. "ring".
	Name string
	// Schedule builds rank's schedule (unnamed: Build names it).
	Schedule func(rank, size int, a *Args) Schedule
	// Cost is the α-β cost on size ranks of a call priced at n bytes
	// (Coll.PricedBytes): message steps on the critical path and bytes
	// moved by the busiest rank. Nil: the algorithm is not priced (it is
	// the collective's only one, or is chosen only when forced).
	Cost func(size int, n float64) (steps int, bytes float64)
	// Pipelined algorithms move the buffer in chunks that follow each
	// other through Steps hops (Cost.Time adds the pipeline's fill).
	Pipelined bool
	// RootBound pipelined algorithms (binomial trees) have no fill: the
	// busiest rank, the root, sends (or receives) every chunk Steps times,
	// once per subtree, largest first, and its last message of the last
	// chunk is to (or from) a leaf, while the subtrees pass on earlier
	// ones: the root's own messages are the critical path. Bytes counts
	// each chunk Steps times, so Cost.Time's α per chunk message is that
	// path.
	RootBound bool
	// Concurrent algorithms post all their Steps messages at once (their
	// schedules have Rounds: a pairwise all-to-all), in batches of at most
	// Model.Window peers: Cost.Time prices a batch at one step's α plus
	// a share of it for each other message (concurrentShare). Measured on
	// this project's 2-core machine, 8-byte blocks, 4 ranks: pairwise
	// 92-101 us over TCP and 25-36 over shared memory, against Bruck's two
	// dependent rounds at 145-150 and 35-47; 3 ranks 54-72 against 99-109;
	// 8 ranks (credits riding with data) 261-314 against 414-531.
	Concurrent bool
	// CrowdedUpTo: on a crowded host (Model.Crowded) of at most this many
	// ranks the selector takes this algorithm without pricing: a choice
	// by measurement, as Open MPI's fixed decision rules by size are,
	// where the α-β model cannot tell the algorithms apart (waiting ranks
	// yield, and what costs is the wake-ups, not the messages).
	CrowdedUpTo int
	// CrowdedBelow, if positive, limits CrowdedUpTo to calls priced
	// below that many bytes; CrowdedRootBelow, if positive, to calls whose
	// root sends fewer bytes than that in all, size-1 times the bytes
	// priced (a flat tree, whose root's sends grow with the ranks);
	// CrowdedOneHost limits it to jobs of one host (Model.Crowded is also
	// set for ranks told to yield on several).
	CrowdedBelow     int
	CrowdedRootBelow int
	CrowdedOneHost   bool
	// CrowdedFromRanks and CrowdedBlockFrom, if positive, limit it from
	// below: to at least that many ranks, and to calls priced at no
	// fewer than that many bytes a rank (the bytes priced over the
	// ranks: an allgather's block), where a rule holds only for large
	// calls of many ranks.
	CrowdedFromRanks int
	CrowdedBlockFrom int
	// CrowdedAnySizeUpTo, if positive, lifts CrowdedBelow and
	// CrowdedRootBelow for jobs of at most that many ranks, where a rule
	// holds at every size on few ranks but only for smaller calls on more.
	CrowdedAnySizeUpTo int
	// Chain: a pipelined chain in rank order, whose fill crosses only
	// Hosts-1 network links on several hosts (each host's ranks in a
	// block), the rest of its hops local ones: Time prices those at the
	// local links' cost.
	Chain bool
	// LocalBytes, if not nil, is what the busiest rank moves on one host
	// (Topology.Hosts at most 1) where Cost counts only what it receives
	// and it also sends a share: over shared memory or loopback TCP a
	// send is a copy on the sender's own core (on loopback, the
	// receiver's protocol work too), not a NIC's. Time prices the larger
	// of the two.
	LocalBytes func(size int, n float64) float64
	// Reduced is how many bytes the busiest rank runs through the
	// reduction kernel (the γ term); nil for none.
	Reduced func(size int, n float64) float64
	// NetBytes is how many bytes the busiest host's link carries out on
	// size ranks placed rph per host (netcost.go), for a call priced at n
	// bytes; nil where that is no more than Cost's busiest rank (rings and
	// chains cross each host boundary once).
	NetBytes func(size, rph int, n float64) float64
	// Price, for algorithms whose phases cross different link classes
	// (the hierarchical ones), replaces Cost in Time: the time of a call
	// priced at n bytes on t with m, false where the algorithm does not
	// apply to t (one host, or one rank per host). Such algorithms run
	// only where picked by Price or forced.
	Price func(n float64, t Topology, m Model) (float64, bool)
	// Doc is the algorithm's line in the documentation.
	Doc string
}

// algoTable lists every algorithm. Within a collective the order is the
// selector's preference on a tie.
var algoTable = []Algo{
	{Coll: CollAllreduce, Name: "rabenseifner", Schedule: plain(RabenseifnerAllreduce), Cost: costRabenseifnerAllreduce,
		Reduced: func(p int, n float64) float64 {
			p2, fold, _ := foldCost(p)
			return float64(p2-1)/float64(p2)*n + float64(fold/2)*n
		},
		NetBytes: netRabenseifner,
		// Taken outright on one crowded host of 4 ranks from 1 MiB (a
		// block of 256 KiB), where the job's own fit of its β (timed at
		// New, among ranks that share cores) priced the ring first: on 2
		// cores over TCP (osu allreduce, 2 alternating rounds, us,
		// Rabenseifner against the ring, 1, 2, 4, 8, 16, 32, 64 MiB)
		// 873-919 1713-1743 2713-2719 6497-6567 12083-12996
		// 25012-26154 51935-53049 against 1158-1216 2051-2059
		// 3310-3319 6886-7258 13047-13437 26583-27803 54485-55099.
		CrowdedUpTo: 4, CrowdedFromRanks: 4, CrowdedBlockFrom: 256 << 10, CrowdedOneHost: true,
		Doc: "reduce-scatter by recursive halving, then allgather by recursive doubling (any rank count; taken with 4 ranks sharing fewer cores from 1 MiB)"},
	// Taken outright on one crowded host of 3 ranks from 3 MiB (a block
	// of 1 MiB), where the fit priced Rabenseifner's first: on 2 cores
	// over TCP (osu allreduce, 2 alternating rounds, us, the ring
	// against Rabenseifner, the priced choice, 4, 8, 16 MiB) 2714-2778
	// 5761-5821 10956-11495 against 3011-3257 6367-6822 12951-13966.
	{Coll: CollAllreduce, Name: "ring", Schedule: plain(RingAllreduce), Cost: func(p int, n float64) (int, float64) {
		return 2 * (p - 1), 2 * float64(p-1) / float64(p) * n
	}, Reduced: func(p int, n float64) float64 { return float64(p-1) / float64(p) * n },
		CrowdedUpTo: 3, CrowdedFromRanks: 3, CrowdedBlockFrom: 1 << 20, CrowdedOneHost: true,
		Doc: "reduce-scatter then allgather around a ring (taken with 3 ranks sharing fewer cores from 3 MiB)"},
	// Taken outright on one crowded host of up to 4 ranks below 1 MiB,
	// where the ring's dependent steps each cost a wake-up and its price
	// (α from the ring itself, recursive doubling's β fitted to
	// Rabenseifner's 1 MiB time) chose the ring from 64 KiB. 4 ranks on 2
	// cores over TCP, osu allreduce, us (16 KiB .. 256 KiB, -i 300):
	// recursive doubling 71-73 80 180-212 229-248 336-353, ring 195-223
	// 209-282 244-309 299-499 469-746, Rabenseifner 136-170 164-214
	// 160-234 248-310 352-449; at 512 KiB (-i 30) 712-730 against the
	// ring's 897-939 (Rabenseifner's 579-636, which the price does not
	// see); from 1 MiB priced (1 MiB: 1229-1316, ring 1164-1228).
	{Coll: CollAllreduce, Name: "recursive-doubling", Schedule: plain(RecursiveDoublingAllreduce), Cost: func(p int, n float64) (int, float64) {
		_, fold, lg := foldCost(p)
		return lg + fold, float64(lg+fold/2) * n
	}, Reduced: func(p int, n float64) float64 {
		_, fold, lg := foldCost(p)
		return float64(lg+fold/2) * n
	}, NetBytes: netRecursiveDoubling, CrowdedUpTo: 4, CrowdedBelow: 1 << 20, CrowdedOneHost: true,
		Doc: "exchange the whole buffer with partners at distance 1, 2, 4, ... (small buffers; up to 4 ranks sharing fewer cores, below 1 MiB)"},
	{Coll: CollAllreduce, Name: "tree", Schedule: plain(TreeAllreduce), Pipelined: true, Cost: func(p int, n float64) (int, float64) {
		// Up and down the deeper tree; a rank sends and receives half the
		// buffer per tree edge it has.
		return 2 * dtreeDepth(p), float64(dtreeMaxEdges(p)) * n / 2
	}, Reduced: func(p int, n float64) float64 { return n }, // two children's halves at an inner node
		NetBytes: netTree,
		Doc:      "double binary tree, each tree reducing and broadcasting half the buffer, pipelined (as NCCL)"},

	{Coll: CollAllreduce, Name: "hier-ring", Schedule: HierRingAllreduce, Price: priceHierRing,
		Doc: "several ranks per host: ring reduce-scatter in each host, ring allreduce of each shard across hosts, ring allgather in each host (hosts of unequal rank counts run hier-leader, and the request says so)"},
	{Coll: CollAllreduce, Name: "hier-leader", Schedule: HierLeaderAllreduce, Price: priceHierLeader,
		Doc: "several ranks per host: reduce to each host's first rank, recursive doubling among those, then back to the host's ranks (small buffers)"},

	{Coll: CollBroadcast, Name: "binomial", Schedule: rooted(BinomialBroadcast), Pipelined: true, RootBound: true, Cost: func(p int, n float64) (int, float64) {
		return log2Ceil(p), float64(log2Ceil(p)) * n
	}, NetBytes: netBinomialBroadcast, Doc: "binomial tree, pipelined"},
	{Coll: CollBroadcast, Name: "pipeline", Schedule: rooted(PipelineBroadcast), Pipelined: true, Chain: true, Cost: func(p int, n float64) (int, float64) {
		return p - 1, n
	}, Doc: "chain from the root, pipelined"},
	{Coll: CollBroadcast, Name: "scatter-allgather", Schedule: rooted(ScatterAllgatherBroadcast), Cost: func(p int, n float64) (int, float64) {
		return log2Ceil(p) + p - 1, 2 * float64(p-1) / float64(p) * n
	}, NetBytes: netScatterAllgather, Doc: "binomial scatter, then ring allgather (large buffers)"},
	// The root's p-1 sends, all at once (a batch: one α and a share of
	// it per other message), each the whole buffer: fewer hops than the
	// binomial tree's log2 p for few ranks and small buffers, more bytes
	// from the root for large ones.
	// Taken outright on one crowded host of up to 4 ranks below 8 MiB:
	// every rank's bytes cross one processor or the other however they
	// are routed, and the fewer wake-ups the better. 4 ranks on 2 cores
	// over TCP, osu bcast -i 500, us (32 KiB .. 512 KiB): binomial (the
	// priced choice) 23-28 49-62 93-112 127-150 170-254, linear 21-25
	// 43-52 53-65 83-104 150-163; at 1-4 MiB (-i 20) 417-517 586-956
	// 1613-1946 (binomial, scatter-allgather) against 202-288 448-693
	// 1089-1377; from 16 MiB the root's copies cost more than the
	// wake-ups (16-64 MiB: 13517-17445 27753-37245 against 20727-23510
	// 36612-44085).
	// And up to 16 ranks while the root sends less than 24 MiB in all
	// (4 ranks: below 8 MiB as above). On the same 2 cores over TCP
	// (osu bcast, 2 alternating rounds, us; linear against the priced
	// choice, binomial): 6 ranks, 16 KiB-1 MiB, 47-58 .. 499-563 against
	// 73-83 .. 582-596 (8 KiB the same); 8 ranks, 8 KiB-2 MiB, 87-102
	// 72-92 83-96 162-165 201-244 198-219 451-486 898-927 1567-2000
	// against 143-214 173-183 205-249 220-282 248-250 709-964 987-1052
	// 1342-1476 2341-2721, 4 MiB the same (3932-4522 against
	// 4056-4157); 16 ranks, 8 KiB-1 MiB, 174-188 .. 2325-2498 against
	// 470-771 .. 6196-7328 (1.6-6 times faster).
	{Coll: CollBroadcast, Name: "linear", Schedule: rooted(LinearBroadcast), Concurrent: true, Cost: func(p int, n float64) (int, float64) {
		return p - 1, float64(p-1) * n
	}, CrowdedUpTo: 16, CrowdedBelow: 8 << 20, CrowdedRootBelow: 24 << 20, CrowdedOneHost: true,
		Doc: "the root sends to every rank itself, all at once (few ranks, small buffers; up to 16 ranks sharing fewer cores while the root sends under 24 MiB in all)"},
	{Coll: CollBroadcast, Name: "hier", Schedule: HierBroadcast, Price: priceHierBroadcast,
		Doc: "several ranks per host: binomial tree among one rank per host (the root on its host), then a binomial tree inside each host, pipelined"},

	// The flat tree: one batch of size-1 messages at the root, which
	// reduces each in turn, priced as the linear broadcast is (its root
	// receives and reduces the buffer size-1 times: small buffers). Taken
	// outright on one crowded host of up to 16 ranks below 8 MiB, ahead of
	// the binomial tree's rule (the first the table lists wins): on 2
	// cores over TCP (osu reduce, 2 alternating rounds, us, linear against
	// binomial, 8 B, 64 B, 512 B, 4 KiB, 32 KiB, 256 KiB) 4 ranks
	// 20.8-21.2 20.0-21.3 21.1-22.1 21.2-21.3 26.9-27.9 173-177 against
	// 27.1-31.9 24.7-34.4 26.0-33.5 26.0-33.2 35.5-43.5 187-196, 8 ranks
	// 21.7-25.4 34.7-37.3 22.3-33.0 22.1-27.0 28.4-33.3 345-441 against
	// 118-130 113-119 135-138 125-127 137-153 578-582, 16 ranks 39.0-40.2
	// 33.2-38.4 39.3-42.1 31.7-37.2 42.7-48.7 823-910 against 316-337
	// 362-408 322-363 339-390 382-434 1518-1629; over shared memory
	// (above the board's 16 KiB) 8 ranks, 32 KiB-1 MiB, 69-404 against
	// 86-590. And below 8 MiB: 1-4 MiB (osu reduce -i 20, 2 alternating
	// rounds, us, linear against binomial, 1, 2, 4 MiB) over TCP 8 ranks
	// 1273-1279 1859-1967 4193-4534 against 2215-2391 3171-3865
	// 5649-6277, 16 ranks (1, 2 MiB) 2761-2762 5879-7201 against
	// 4896-5277 9047-9467, 4 ranks 403-412 883-1086 2073-2380 against
	// 419-500 866-1168 2070-2175 (the same), 4 MiB at 16 ranks the same;
	// over shared memory 8 ranks 332-346 604-611 1095-1325 against
	// 559-661 795-797 1561-1699. From 8 MiB the binomial tree was as
	// fast or faster (4 ranks 3991-4434 against 4108-4587 over TCP, 16
	// ranks 39245-41354 against 47958-50218).
	{Coll: CollReduce, Name: "linear", Schedule: rooted(LinearReduce), Concurrent: true, Cost: func(p int, n float64) (int, float64) {
		return p - 1, float64(p-1) * n
	}, Reduced: func(p int, n float64) float64 { return float64(p-1) * n },
		CrowdedUpTo: 16, CrowdedBelow: 8 << 20, CrowdedOneHost: true,
		Doc: "every rank sends its buffer to the root itself, all at once, the root reducing them in turn (few ranks, small buffers; up to 16 ranks sharing fewer cores, below 8 MiB)"},
	// Taken outright on one crowded host of up to 4 ranks, and of up to 16
	// below 16 MiB, where the α-β model prices the ring from 256 KiB (and
	// the chain for large buffers): on 2 cores over
	// TCP (osu reduce -i 30, 2 alternating rounds, us, binomial against
	// the ring, 256 KiB .. 2 MiB) 4 ranks 172-246 266-331 464-542 999-1011
	// against 318-384 441-446 647-702 1070-1113; 8 ranks 555-642 906-928
	// 1646-1732 3280-3484 against 959-1318 1474-1775 2065-2325 3758-4172;
	// 16 ranks (from 128 KiB) 984-1037 1494-1618 2865-2910 4879-5425
	// 8827-9147 against 2558-2743 3010-3231 4216-4447 6660-7630
	// 10861-11294. At 4 MiB the ring was as fast or 7% faster then; since
	// the fused plans stopped copying the leaves' input (CompileFused's
	// keep range) the tree is faster than the ring on crowded hosts up to
	// 4 ranks at every size and up to 16 below 16 MiB (the linear
	// reduce's rule takes the calls below 8 MiB first): osu reduce, 2
	// alternating rounds, us, binomial against the ring, over TCP 4 ranks
	// (8, 16, 32, 64 MiB) 3991-4434 7612-8325 15946 36001-37199 against
	// 5078-5151 10660-11159 20825-21647 47138-49282, 6 ranks (8, 16 MiB)
	// 6673-7407 14876-14952 against 8205-8388 15821-15985, 8 ranks (8
	// MiB) 10561-11384 against 10992-14439, 16 ranks (8 MiB) 39245-41354
	// against 46712-48270; over shared memory 4 ranks (16, 64 MiB)
	// 3303-3425 16393-17387 against 4553-4919 26394-28061, 8 ranks (16,
	// 32 MiB) 9560-9983 20482-21126 against 11427-12600 24225-29725. The
	// ring was faster over TCP from 16 MiB at 8 ranks (16, 32, 64 MiB:
	// 24287-25038 48565-50362 101500-107896 against 25758-26833
	// 56604-59018 109957-114396) and at 16 (32 MiB: 132860-136412
	// against 147293-151039); there the model now prices the chain,
	// faster still over TCP (8 ranks, 16 and 32 MiB: 21999-26317
	// 56528-57709 against the ring's 30504-33143 61546-68368).
	{Coll: CollReduce, Name: "binomial", Schedule: rooted(BinomialReduce), Pipelined: true, RootBound: true, Cost: func(p int, n float64) (int, float64) {
		return log2Ceil(p), float64(log2Ceil(p)) * n
	}, Reduced: func(p int, n float64) float64 { return float64(log2Ceil(p)) * n },
		CrowdedUpTo: 16, CrowdedBelow: 16 << 20, CrowdedAnySizeUpTo: 4, CrowdedOneHost: true,
		Doc: "binomial tree toward the root, pipelined (ranks sharing fewer cores, from 8 MiB: up to 4 ranks at any size, up to 16 below 16 MiB)"},
	// The chain: every rank receives, reduces and sends the buffer once,
	// where the ring's root receives nearly twice the buffer, so the
	// model takes it for large buffers (from 4 MiB at 3-4 ranks, 16 MiB
	// at 8-16, 64 MiB at 64). Across hosts joined by 1 Gbit/s links
	// (scripts/hier-compare.sh --op reduce, network namespaces, one rank
	// a host, -i 5, us, the chain against the ring, 1, 4, 16 MiB): 3
	// hosts 9009 35363 141005 against 9988 44750 179788, 4 hosts 10374
	// 37019 142788 against 11212 52763 198914 (the link's own time for
	// 16 MiB: 134 ms). Not taken on crowded hosts below the binomial
	// tree's bound: there over shared memory the tree was faster (8
	// ranks, 8 and 32 MiB: 4881-4987 20730-20832 against 5257-5459
	// 25204-28128), over TCP the chain (11629-12607 against
	// 14919-16313).
	{Coll: CollReduce, Name: "pipeline", Schedule: rooted(PipelineReduce), Pipelined: true, Chain: true, Cost: func(p int, n float64) (int, float64) {
		return p - 1, n
	}, Reduced: func(p int, n float64) float64 { return n },
		Doc: "chain toward the root, pipelined (large buffers)"},
	// On one host the root's sends count too (LocalBytes): in the
	// reduce-scatter it sends the ring's share as it receives one, so it
	// moves 3(p-1)/p of the buffer where the flat tree's and the chain's
	// root moves the buffer once at 2 ranks and reduces it alone. Priced
	// on its receives only, the ring was taken for 2 ranks on one host
	// from 1 MiB over TCP and 256 KiB over shared memory, where it was
	// the slowest of the four (osu reduce, 2 ranks, 2 alternating rounds,
	// us, 1, 2, 4, 8, 16 MiB: over TCP the ring 210-231 414-623 840-942
	// 1820-1947 3740-3901 against the flat tree's 170-177 326-335 641-679
	// 1472-1519 3201-3284; over shared memory, 256 KiB .. 16 MiB, 98-102
	// 173-189 330 618-632 964-1051 2071-2111 against 61-80 105-151
	// 279-289 527-549 721-783 1340-1550).
	{Coll: CollReduce, Name: "ring", Schedule: rooted(RingReduce), Cost: func(p int, n float64) (int, float64) {
		// The root receives the ring's share and every other segment.
		return p, 2 * float64(p-1) / float64(p) * n
	}, LocalBytes: func(p int, n float64) float64 { return 3 * float64(p-1) / float64(p) * n },
		Reduced: func(p int, n float64) float64 { return float64(p-1) / float64(p) * n },
		Doc:     "ring reduce-scatter, then the segments gathered at the root (mid-size buffers; the chain from 4-64 MiB by the ranks)"},

	// Taken outright on one crowded host of 5 to 16 ranks from 512 KiB a
	// rank, where the α-β model prices it at (p-1) α, the others'
	// log2(p) α for the same bytes: on 2 cores over TCP (osu allgather
	// -i 20, 2 alternating rounds, us, the ring against the priced
	// choice, 512 KiB .. 4 MiB a rank) 5 ranks (Bruck's) 2688-2879
	// 5407-5867 11068-11461 against 2955-3067 6376-6433 13176-13204; 6
	// ranks (from 512 KiB to 4 MiB, doubling) 1764-1878 3434-3720
	// 7166-7208 14556-14820 against 1954-2041 3934-4882 7468-7980
	// 18952-19637; 8 ranks (recursive doubling) 4001-4954 9834-9982
	// 16894-16897 33902-35175 against 4730-6781 9695-10267 18603-21927
	// 44382-50252; 16 ranks (to 2 MiB) 22438-26795 41469-49758
	// 89225-92515 against 32319-32348 62358-64527 119335-130949. Below
	// 256 KiB a rank the priced choice was faster, and at 4 ranks at every
	// size from 256 KiB to 8 MiB (320-11805 us against 434-13425).
	{Coll: CollAllgather, Name: "ring", Schedule: plain(RingAllgather), Cost: func(p int, n float64) (int, float64) {
		return p - 1, float64(p-1) / float64(p) * n
	}, CrowdedUpTo: 16, CrowdedFromRanks: 5, CrowdedBlockFrom: 512 << 10, CrowdedOneHost: true,
		Doc: "around a ring (large buffers; taken with 5 to 16 ranks sharing fewer cores from 512 KiB a rank)"},
	{Coll: CollAllgather, Name: "recursive-doubling", Schedule: plain(RecursiveDoublingAllgather), Cost: func(p int, n float64) (int, float64) {
		// Rank 0 is the busiest: it stands for an extra rank, its groups
		// hold the most extras, and it sends the extra everything.
		p2, fold, lg := foldCost(p)
		blocks := groupBlocks(p2, p-p2)
		if fold > 0 {
			blocks += p - 1
		}
		return lg + fold, float64(blocks) / float64(p) * n
	}, Doc: "exchange with partners at distance 1, 2, 4, ..."},
	{Coll: CollAllgather, Name: "bruck", Schedule: plain(BruckAllgather), Cost: func(p int, n float64) (int, float64) {
		return log2Ceil(p), float64(p-1) / float64(p) * n
	}, Doc: "Bruck's ceil(log2 n) rounds (small blocks)"},

	{Coll: CollAllgatherv, Name: "ring", Schedule: func(r, n int, a *Args) Schedule {
		return RingAllgatherv(r, n, a.RecvCounts, a.RecvDispls, a.ElemSize)
	}, Doc: "around a ring"},

	// Taken outright on one crowded host of 8 to 16 ranks from 1 MiB a
	// rank, where the α-β model prices recursive halving below it (the
	// same bytes in log2(p) steps): on 2 cores over TCP (osu
	// reduce_scatter, 2 alternating rounds, us, the ring against
	// recursive halving) 8 ranks, 8, 16 and 32 MiB in all: 10279-11398
	// 20884-22627 42120-43120 against 11520-12913 27015-29723
	// 62125-62337 (4 MiB: 4919-5840 against 6197-7035); 16 ranks, 16 and
	// 32 MiB: 60301-66473 121634-135001 against 75935-79163
	// 156245-156472 (8 MiB the same). 4 ranks gained only from 4 to 16 MiB
	// (32 and 64 the same), 6 ranks nowhere from 1 to 16 MiB.
	{Coll: CollReduceScatter, Name: "ring", Schedule: plain(RingReduceScatter), Cost: func(p int, n float64) (int, float64) {
		return p - 1, float64(p-1) / float64(p) * n
	}, Reduced: func(p int, n float64) float64 { return float64(p-1) / float64(p) * n },
		CrowdedUpTo: 16, CrowdedFromRanks: 8, CrowdedBlockFrom: 1 << 20, CrowdedOneHost: true,
		Doc: "around a ring (large buffers; taken with 8 to 16 ranks sharing fewer cores from 1 MiB a rank)"},
	{Coll: CollReduceScatter, Name: "recursive-halving", Schedule: plain(RecursiveHalvingReduceScatter), Cost: func(p int, n float64) (int, float64) {
		// Rank 0 is the busiest: it receives the extra's buffer, then the
		// halves it keeps, which hold the most extras.
		p2, fold, lg := foldCost(p)
		blocks := groupBlocks(p2, p-p2)
		if fold > 0 {
			blocks += p
		}
		return lg + fold, float64(blocks) / float64(p) * n
	}, Reduced: func(p int, n float64) float64 { return float64(p-1) / float64(p) * n },
		Doc: "halve the buffer with partners at distance n/2, n/4, ..."},

	{Coll: CollAlltoall, Name: "pairwise", Schedule: plain(PairwiseAlltoall), Cost: func(p int, n float64) (int, float64) {
		return p - 1, float64(p-1) / float64(p) * n
	}, Concurrent: true, NetBytes: netPairwise, Doc: "exchange with rank+k, rank-k for k = 1 .. n-1, posted together (GOCCL_PEER_WINDOW peers at a time)"},
	{Coll: CollAlltoall, Name: "bruck", Schedule: plain(BruckAlltoall), Cost: func(p int, n float64) (int, float64) {
		// A message per round, of the slots with bit k set: about
		// (p/2)*log2(p) blocks, the same on every rank.
		blocks := 0
		for k := range log2Ceil(p) {
			blocks += bruckSlots(p, k)
		}
		return log2Ceil(p), float64(blocks) / float64(p) * n
	}, NetBytes: netBruckAlltoall, Doc: "Bruck's ceil(log2 n) rounds with local rotations (small blocks)"},

	{Coll: CollAlltoallv, Name: "pairwise", Schedule: func(r, n int, a *Args) Schedule {
		return PairwiseAlltoallv(r, n, a.SendCounts, a.SendDispls, a.RecvCounts, a.RecvDispls, a.ElemSize)
	}, Doc: "exchange with rank+k, rank-k for k = 1 .. n-1"},

	{Coll: CollGather, Name: "binomial", Schedule: rooted(BinomialGather), Cost: func(p int, n float64) (int, float64) {
		return log2Ceil(p), float64(p-1) / float64(p) * n
	}, Doc: "binomial tree toward the root"},
	{Coll: CollScatter, Name: "binomial", Schedule: rooted(BinomialScatter), Cost: func(p int, n float64) (int, float64) {
		return log2Ceil(p), float64(p-1) / float64(p) * n
	}, Doc: "binomial tree from the root"},
	// The flat trees: one batch of size-1 messages at the root, priced as
	// the linear broadcast is (cheaper than the binomial tree's log2(p)
	// steps up to 13 ranks, the same bytes at the root). Taken
	// outright on one crowded host of up to 16 ranks, where they were
	// faster at every size measured: on 2 cores over TCP (osu gather and
	// scatter, 2 alternating rounds, us, linear against binomial, 8 B ..
	// 1 MiB a rank) gather 4 ranks 21.7-29.7 .. 311-331 against 31.2-51.3
	// .. 457-547, 8 ranks 37.3-57.7 .. 1078-1117 against 151-299 ..
	// 1437-1636 (2-8 MiB: 1987-10962 against 3231-19383), 16 ranks
	// 32.6-79.1 .. 2767-3237 against 268-932 .. 7950-8921; scatter 4 ranks
	// 13.8-25.4 .. 298-316 against 18.5-32.1 .. 563-647, 8 ranks
	// 62.6-127 .. 994-1047 against 150-349 .. 2181-2242 (2-8 MiB:
	// 3063-15127 against 4725-21441), 16 ranks 181-380 .. 2815-5918
	// against 540-1386 .. 9593-13358.
	{Coll: CollGather, Name: "linear", Schedule: rooted(LinearGather), Concurrent: true, Cost: func(p int, n float64) (int, float64) {
		return p - 1, float64(p-1) / float64(p) * n
	}, CrowdedUpTo: 16, CrowdedOneHost: true,
		Doc: "every rank sends its block to the root itself, all at once (few ranks; up to 16 ranks sharing fewer cores)"},
	{Coll: CollScatter, Name: "linear", Schedule: rooted(LinearScatter), Concurrent: true, Cost: func(p int, n float64) (int, float64) {
		return p - 1, float64(p-1) / float64(p) * n
	}, CrowdedUpTo: 16, CrowdedOneHost: true,
		Doc: "the root sends every rank its block itself, all at once (few ranks; up to 16 ranks sharing fewer cores)"},
	{Coll: CollGatherv, Name: "linear", Schedule: func(r, n int, a *Args) Schedule {
		return LinearGatherv(r, n, a.Root, a.RecvCounts, a.RecvDispls, a.Count, a.ElemSize)
	}, Concurrent: true, Doc: "every rank sends its block to the root itself, all at once"},
	{Coll: CollScatterv, Name: "linear", Schedule: func(r, n int, a *Args) Schedule {
		return LinearScatterv(r, n, a.Root, a.SendCounts, a.SendDispls, a.Count, a.ElemSize)
	}, Concurrent: true, Doc: "the root sends every rank its block itself, all at once"},
	{Coll: CollScan, Name: "recursive-doubling", Schedule: plain(RecursiveDoublingScan), Cost: costRecursiveDoublingScan,
		Doc: "exchange partial reductions with partners at distance 1, 2, 4, ..., reducing those of lower ranks into the result (ceil(log2 n) rounds; MPICH's)"},
	{Coll: CollScan, Name: "linear", Schedule: plain(LinearScan), Cost: costLinearScan,
		Doc: "a chain: each rank reduces the prefix of the ranks below it into its block and passes it on (n-1 steps; MPI's basic scan)"},
	{Coll: CollExscan, Name: "recursive-doubling", Schedule: plain(RecursiveDoublingExscan), Cost: costRecursiveDoublingScan,
		Doc: "as scan's, the result taking only the partials of lower ranks"},
	{Coll: CollExscan, Name: "linear", Schedule: plain(LinearExscan), Cost: costLinearScan,
		Doc: "a chain: each rank takes the prefix of the ranks below it as its result and passes it on with its own block reduced in (n-1 steps; MPI's basic exscan)"},
	{Coll: CollBarrier, Name: "recursive-doubling", Schedule: func(r, n int, a *Args) Schedule { return RecursiveDoublingBarrier(r, n) },
		Cost: func(p int, n float64) (int, float64) {
			_, fold, lg := foldCost(p)
			return lg + fold, 0
		},
		Doc: "zero-byte exchanges with partners at distance 1, 2, 4, ... (a power of two of ranks; others fold in first)"},
	{Coll: CollBarrier, Name: "dissemination", Schedule: func(r, n int, a *Args) Schedule { return DisseminationBarrier(r, n) },
		Cost: func(p int, n float64) (int, float64) { return log2Ceil(p), 0 },
		Doc:  "ceil(log2 n) rounds of zero-byte messages"},
	// Two hops, each a batch of n-1 messages at rank 0, priced at n α:
	// never less than recursive doubling's price, which wins the tie at 3
	// ranks. Taken outright on a crowded host of up to 6 ranks, where it
	// costs no more or less (see LinearBarrier for why, and the
	// measurements).
	{Coll: CollBarrier, Name: "linear", Schedule: func(r, n int, a *Args) Schedule { return LinearBarrier(r, n) },
		Cost:        func(p int, n float64) (int, float64) { return p, 0 },
		CrowdedUpTo: 6,
		Doc:         "fan-in to rank 0 and fan-out from it, rank 0 leaving first (what Open MPI's default barrier does at 4 and 5 ranks; chosen when up to 6 ranks share fewer cores)"},

	{Coll: CollSend, Name: "direct", Schedule: func(r, n int, a *Args) Schedule {
		return Schedule{Rank: r, Size: n,
			Steps: []Step{{Kind: Send, Peer: a.Peer, Buf: BufInput, Len: a.Count * a.ElemSize}}}
	}, Doc: "one message"},
	{Coll: CollRecv, Name: "direct", Schedule: func(r, n int, a *Args) Schedule {
		return Schedule{Rank: r, Size: n,
			Steps: []Step{{Kind: Recv, Peer: a.Src, Buf: BufData, Len: a.RecvCount * a.ElemSize}}}
	}, Doc: "one message"},
	{Coll: CollSendRecv, Name: "direct", Schedule: func(r, n int, a *Args) Schedule {
		return Schedule{Rank: r, Size: n, Steps: []Step{
			{Kind: Send, Peer: a.Peer, Buf: BufInput, Len: a.Count * a.ElemSize},
			{Kind: Recv, Peer: a.Src, Buf: BufData, Len: a.RecvCount * a.ElemSize},
		}}
	}, Doc: "one message each way"},
}

// The scans' prices: the chain's n-1 steps in a row against recursive
// doubling's ceil(log2 n) rounds, each of which moves the partial twice
// (recursiveDoublingScan). The chain takes 2 ranks (one step either way,
// half the bytes), and 3 and 4 from about the bytes where its extra
// steps cost less than the doubled volume.
func costLinearScan(p int, n float64) (int, float64) { return p - 1, float64(p-1) * n }

func costRecursiveDoublingScan(p int, n float64) (int, float64) {
	return log2Ceil(p), 2 * float64(log2Ceil(p)) * n
}

func costRabenseifnerAllreduce(p int, n float64) (int, float64) {
	p2, fold, lg := foldCost(p)
	return 2*lg + fold, 2*float64(p2-1)/float64(p2)*n + float64(fold/2)*n
}

// plain adapts a schedule constructor of (rank, size, count, elemSize).
func plain(f func(rank, size, count, elemSize int) Schedule) func(int, int, *Args) Schedule {
	return func(r, n int, a *Args) Schedule { return f(r, n, a.Count, a.ElemSize) }
}

// rooted adapts a schedule constructor of (rank, size, root, count,
// elemSize).
func rooted(f func(rank, size, root, count, elemSize int) Schedule) func(int, int, *Args) Schedule {
	return func(r, n int, a *Args) Schedule { return f(r, n, a.Root, a.Count, a.ElemSize) }
}

// Build is rank's schedule of a on size ranks, named as the table names
// the algorithm.
func (a *Algo) Build(rank, size int, args *Args) Schedule {
	s := a.Schedule(rank, size, args)
	if s.Name == "" { // named by the schedule when it runs another's (HierRingAllreduce)
		s.Name = a.Name
	}
	return s
}

// Algos lists the algorithms of c in the selector's order of preference.
func Algos(c Coll) []*Algo {
	var out []*Algo
	for i := range algoTable {
		if algoTable[i].Coll == c {
			out = append(out, &algoTable[i])
		}
	}
	return out
}

// AlgoNames lists the names of c's algorithms, sorted.
func AlgoNames(c Coll) []string {
	var names []string
	for _, a := range Algos(c) {
		names = append(names, a.Name)
	}
	slices.Sort(names)
	return names
}

// LookupAlgo finds algorithm name of c; the error names the algorithms c
// has.
func LookupAlgo(c Coll, name string) (*Algo, error) {
	for _, a := range Algos(c) {
		if a.Name == name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("%s has no algorithm %q (have %s)", c, name, strings.Join(AlgoNames(c), ", "))
}

// ParseAlgoSpec reads a per-collective algorithm override such as
// "allreduce:tree,broadcast:pipeline" (GOCCL_ALGO's syntax). An error names
// the item it refuses; the caller names the setting.
func ParseAlgoSpec(spec string) (map[Coll]*Algo, error) {
	out := map[Coll]*Algo{}
	if strings.TrimSpace(spec) == "" {
		return out, nil
	}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		coll, algo, ok := strings.Cut(item, ":")
		if !ok {
			return nil, fmt.Errorf("item %q is not collective:algorithm", item)
		}
		c, err := CollByName(coll)
		if err != nil {
			return nil, fmt.Errorf("item %q: %w", item, err)
		}
		a, err := LookupAlgo(c, algo)
		if err != nil {
			return nil, fmt.Errorf("item %q: %w", item, err)
		}
		if prev, dup := out[c]; dup && prev != a {
			return nil, fmt.Errorf("item %q: %s is given %s already: one algorithm per collective", item, c, prev.Name)
		}
		out[c] = a
	}
	return out, nil
}

// AlgorithmTable is the documentation's table of collectives and their
// algorithms, in Markdown.
func AlgorithmTable() string {
	var b strings.Builder
	b.WriteString("| collective | algorithm | how |\n|---|---|---|\n")
	for c := Coll(1); c < numColls; c++ {
		for _, a := range Algos(c) {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", c, a.Name, a.Doc)
		}
	}
	return b.String()
}
