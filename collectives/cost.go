package collectives

import "math/bits"

// Cost is an algorithm's cost in the α-β model, for a selector that picks
// the algorithm per call: Steps message latencies on the critical path, and
// Bytes sent or received (whichever is more) by the busiest rank. It is a
// pure function of the collective, the algorithm, the rank count and the
// size of the call; the selector supplies α (seconds per message) and β
// (seconds per byte), measured or configured.
//
// Bytes is counted against the size of the collective's full buffer: the
// buffer of allreduce, broadcast and reduce; size blocks for the block
// collectives (the gathered buffer of allgather and gather, the input of
// reduce-scatter and scatter, either buffer of alltoall).
//
// Pipelined algorithms (chain and tree broadcast, tree allreduce,
// binomial reduce) move the buffer in chunks that follow each other through
// Steps hops; for them Time adds the pipeline's fill.
type Cost struct {
	Steps     int
	Bytes     float64
	Pipelined bool
	RootBound bool // a pipelined binomial tree: no fill (Algo.RootBound)
	// Concurrent: the Steps messages are posted together, at most Window
	// peers at once (Algo.Concurrent).
	Concurrent bool
	Window     int
}

// concurrentShare is the part of a step's α that each message of a batch
// of concurrent messages beyond the first costs. Fitted on osu all-to-all
// of 8-byte blocks over TCP with ranks sharing 2 cores, once credits rode
// with the next message (transport.LazyWriter): 4 ranks, pairwise 65-70
// us where two dependent rounds of recursive doubling take 62-67 (a share
// of about 1/2); 8 ranks, pairwise 261-314 us, Bruck's three rounds
// 414-531, three rounds of recursive doubling about 340 (about 1/4). With
// 1/4 Bruck keeps tiny blocks from 16 ranks up, where MPICH starts using
// it at 8.
const concurrentShare = 0.25

// Time estimates the run time of a call: Steps*α + Bytes*β, or for a
// pipelined algorithm with chunks of chunkBytes, (Steps-1)*(α +
// chunkBytes*β) to fill the pipeline (none if RootBound) plus α per chunk
// message of the busiest rank plus Bytes*β.
//
// A Concurrent algorithm's messages overlap on the wire but not in the
// CPUs that post and take them: each batch of at most Window of them
// (all of them when Window is 0) costs α for the first and
// concurrentShare·α for each other (its share of the sender's and the
// receiver's work), batch after batch.
func (c Cost) Time(alpha, beta float64, chunkBytes int) float64 {
	if c.Concurrent && c.Steps > 0 {
		batches := 1
		if c.Window > 0 {
			batches = (c.Steps + c.Window - 1) / c.Window
		}
		return float64(batches)*alpha + float64(c.Steps-batches)*concurrentShare*alpha + c.Bytes*beta
	}
	if !c.Pipelined || chunkBytes <= 0 {
		return float64(c.Steps)*alpha + c.Bytes*beta
	}
	chunk := float64(chunkBytes)
	nchunks := max(1, c.Bytes/chunk)
	fill := max(c.Steps-1, 0)
	if c.RootBound {
		fill = 0
	}
	return float64(fill)*(alpha+chunk*beta) + nchunks*alpha + c.Bytes*beta
}

// Algorithms lists the algorithms of a collective with a flat α-β cost
// (Algo.Cost; not the hierarchical ones, priced by Algo.Price) ("allreduce",
// "broadcast", ...: CollInfo.Name) in the selector's order of preference.
func Algorithms(coll string) []string {
	c, err := CollByName(coll)
	if err != nil {
		return nil
	}
	var names []string
	for _, a := range Algos(c) {
		if a.Cost != nil {
			names = append(names, a.Name)
		}
	}
	return names
}

// CostOf is the cost of algorithm algo (a schedule name, e.g. "ring") of
// collective coll on size ranks for a full buffer of bytes bytes (see
// Cost). It reports false for an unknown or unpriced pair.
func CostOf(coll, algo string, size, bytes int) (Cost, bool) {
	c, err := CollByName(coll)
	if err != nil {
		return Cost{}, false
	}
	a, err := LookupAlgo(c, algo)
	if err != nil || a.Cost == nil {
		return Cost{}, false
	}
	return a.costAt(size, bytes), true
}

func (a *Algo) costAt(size, bytes int) Cost {
	if size <= 1 {
		return Cost{Pipelined: a.Pipelined, RootBound: a.RootBound}
	}
	steps, b := a.Cost(size, float64(bytes))
	return Cost{Steps: steps, Bytes: b, Pipelined: a.Pipelined, RootBound: a.RootBound, Concurrent: a.Concurrent}
}

// log2Ceil is ceil(log2 p) for p >= 1.
func log2Ceil(p int) int { return bits.Len(uint(p - 1)) }

// foldCost is what the power-of-two algorithms add for other sizes: the
// rounds at distance p2 and the largest power of two p2.
func foldCost(p int) (p2, rounds, lg int) {
	p2 = pow2Below(p)
	if p2 != p {
		rounds = 2
	}
	return p2, rounds, bits.Len(uint(p2)) - 1
}

// dtreeDepth is the depth of the deeper tree of TreeAllreduce on p ranks,
// in edges. Tree 1 is tree 0 renumbered, so both have NCCL's btree's
// depth; the walk up from every rank costs O(p log p) and allocates
// nothing.
func dtreeDepth(p int) int {
	depth := 0
	for r := range p {
		d := 0
		for x := r; x > 0; d++ {
			x = btreeParent(p, x)
		}
		depth = max(depth, d)
	}
	return depth
}

// dtreeMaxEdges is the largest number of tree edges (parent and children,
// over both trees of TreeAllreduce) any rank has on p ranks, in O(p log p)
// without allocation.
func dtreeMaxEdges(p int) int {
	var kids [2]int
	most := 0
	for r := range p {
		n := 0
		for t := range 2 {
			to, _ := dtreeMap(p, t)
			v := to(r)
			if v != 0 {
				n++
			}
			n += len(btreeChildren(p, v, kids[:0]))
		}
		most = max(most, n)
	}
	return most
}

// groupBlocks is how many blocks rank 0 exchanges in the rounds at distance
// 1, 2, ..., p2/2 of recursive doubling (or halving) when the first extra
// ranks are folded onto ranks 0, 1, ...: d blocks of its group plus those of
// the group's extras.
func groupBlocks(p2, extra int) int {
	n := 0
	for d := 1; d < p2; d <<= 1 {
		n += d + min(d, extra)
	}
	return n
}
