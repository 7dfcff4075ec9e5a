package collectives

// RingReduceScatter is the ring reduce-scatter of size blocks of count
// elements, in place.
//
// Before, every rank's BufData holds size blocks (block j at byte
// j*count*elemSize), its contribution to each rank's result. After, block r
// of rank r's BufData is the reduction of block r over all ranks; its other
// blocks hold partial reductions (unspecified). This is
// MPI_Reduce_scatter_block with the result left in place: the caller copies
// block r out, or points BufData at a buffer whose block r is the result.
//
// The ring algorithm works as follows. At step s (0 <= s < size-1) every
// rank r sends block r-s-1 to its right neighbour and receives block r-s-2
// from its left neighbour, reducing it into its own copy: each block starts
// at the rank after its owner and travels the ring, gathering one
// contribution per hop, to end complete at its owner after size-1 steps.
// Each rank sends and receives size-1 blocks, which is optimal in
// bandwidth; each block is reduced in one fixed order.
func RingReduceScatter(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	if size <= 1 || b == 0 {
		return s
	}
	right, left := mod(rank+1, size), mod(rank-1, size)
	for step := 0; step < size-1; step++ {
		s.add(Send, right, BufData, mod(rank-step-1, size)*b, b)
		s.add(RecvReduce, left, BufData, mod(rank-step-2, size)*b, b)
	}
	return s
}

// RecursiveHalvingReduceScatter is the recursive-halving reduce-scatter,
// with the buffers of RingReduceScatter: size blocks of count elements in
// BufData; after, block r of rank r's BufData is the reduction of block r
// over all ranks, its other blocks unspecified.
//
// The algorithm works as follows, first for a power-of-two size. Rank r
// starts responsible for all blocks. In the round at distance d (size/2,
// size/4, ..., 1) it splits the blocks it is responsible for in two halves,
// keeps the half whose index has r's bit d, sends the other half to its
// partner r XOR d and reduces the partner's copy of the kept half into its
// own. After log2(size) rounds it is responsible for block r alone, reduced
// over all ranks.
//
// For other sizes, let p be the largest power of two below size. Each of
// the size-p extra ranks p+i first sends all its blocks to rank i, which
// reduces them into its own and stands for both: it is responsible for
// blocks i and p+i, so the halving works on p pairs of blocks and each
// message is two ranges. At the end rank i sends block p+i, complete, to
// rank p+i.
//
// Cost: log2(p) rounds, plus two when size is not a power of two; each rank
// sends about (p-1)/p of the buffer (ranks that stand for an extra, plus one
// block; extras, the whole buffer once).
func RecursiveHalvingReduceScatter(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	if size <= 1 || b == 0 {
		return s
	}
	p := pow2Below(size)
	extra := size - p
	if rank >= p {
		s.add(Send, rank-p, BufData, 0, size*b)
		s.add(Recv, rank-p, BufData, rank*b, b)
		return s
	}
	if rank < extra {
		s.add(RecvReduce, rank+p, BufData, 0, size*b)
	}
	// pairs adds steps for the blocks [lo, lo+d) and [lo+p, lo+p+d) below
	// size.
	pairs := func(k Kind, peer, lo, d int) {
		s.add(k, peer, BufData, lo*b, d*b)
		if lo+p < size {
			s.add(k, peer, BufData, (lo+p)*b, (min(lo+p+d, size)-lo-p)*b)
		}
	}
	lo := 0
	for d := p / 2; d >= 1; d /= 2 {
		peer := rank ^ d
		keep, give := lo, lo+d
		if rank&d != 0 {
			keep, give = lo+d, lo
		}
		pairs(Send, peer, give, d)
		pairs(RecvReduce, peer, keep, d)
		lo = keep
	}
	if rank < extra {
		s.add(Send, rank+p, BufData, (rank+p)*b, b)
	}
	return s
}
