package collectives

// RecursiveDoublingAllgather is the recursive-doubling allgather of blocks
// of count elements, with the buffers of RingAllgather: BufInput holds the
// rank's block before, BufData every rank's block (rank j's at byte
// j*count*elemSize) after.
//
// The algorithm works as follows, first for a power-of-two size. A group
// of 2^k ranks is the ranks that agree in all bits but the lowest k. In
// round k every rank exchanges with its partner rank XOR 2^k everything its
// group holds, the 2^k blocks of the group, which are contiguous; after
// round k it holds the blocks of its group of 2^(k+1). After log2(size)
// rounds it holds them all.
//
// For other sizes, let p be the largest power of two below size. Each of
// the size-p extra ranks p+i first sends its block to rank i, which then
// stands for both: its group's blocks are two ranges, [g, g+2^k) and
// [g+p, g+p+2^k), sent as two messages. At the end rank i sends the extra
// rank p+i everything but its own block.
//
// Cost: log2(p) rounds, plus two when size is not a power of two; each rank
// sends (size-1) blocks (the ranks that stand for an extra, up to twice
// that).
func RecursiveDoublingAllgather(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	s.copyPre(BufInput, 0, BufData, rank*b, b)
	if size <= 1 || b == 0 {
		return s
	}
	p := pow2Below(size)
	extra := size - p
	if rank >= p {
		s.add(Send, rank-p, BufData, rank*b, b)
		s.addRange(Recv, rank-p, BufData, 0, rank*b)
		s.addRange(Recv, rank-p, BufData, (rank+1)*b, (size-rank-1)*b)
		return s
	}
	if rank < extra {
		s.add(Recv, rank+p, BufData, (rank+p)*b, b)
	}
	// group adds the steps for the blocks of the group of 2^k ranks that
	// starts at g: [g, g+d) and its extras [g+p, g+p+d) below size.
	group := func(k Kind, peer, g, d int) {
		s.add(k, peer, BufData, g*b, d*b)
		if g+p < size {
			s.add(k, peer, BufData, (g+p)*b, (min(g+p+d, size)-g-p)*b)
		}
	}
	for d := 1; d < p; d <<= 1 {
		peer := rank ^ d
		group(Send, peer, rank&^(d-1), d)
		group(Recv, peer, peer&^(d-1), d)
	}
	if rank < extra {
		s.add(Send, rank+p, BufData, 0, (rank+p)*b)
		s.addRange(Send, rank+p, BufData, (rank+p+1)*b, (size-rank-p-1)*b)
	}
	return s
}
