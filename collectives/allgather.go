package collectives

// RingAllgather is the ring allgather of blocks of count elements.
//
// Before, rank r's BufInput holds its block (count elements); BufData has
// room for size blocks. After, BufData holds every rank's block, rank j's at
// byte j*count*elemSize. The rank's own block is copied into place first (a
// Pre copy; BufInput may be that very place, for an in-place allgather).
//
// The ring algorithm works as follows. At step s (0 <= s < size-1) every
// rank r sends block r-s to its right neighbour r+1 and receives block
// r-s-1 from its left neighbour r-1: its own block first, then each block
// it has just received. After size-1 steps every block has gone round the
// ring. Each rank sends and receives size-1 blocks in size-1 steps, which is
// optimal in bandwidth; the executor's chunking lets a rank forward the
// start of a block while its end still arrives.
func RingAllgather(rank, size, count, elemSize int) Schedule {
	counts, displs := make([]int, size), make([]int, size)
	for j := range size {
		counts[j], displs[j] = count, j*count
	}
	return RingAllgatherv(rank, size, counts, displs, elemSize)
}

// RingAllgatherv is the ring allgather of blocks of different sizes: rank
// j's block is counts[j] elements long and lands at element displs[j] of
// BufData on every rank (displs nil: blocks packed in rank order). Every
// rank must pass the same counts and displs.
//
// Before, BufInput holds counts[rank] elements; after, BufData holds every
// block at its displacement. It runs the ring of RingAllgather, skipping
// empty blocks; each rank sends and receives every block but its own
// (respectively its right neighbour's) once.
func RingAllgatherv(rank, size int, counts, displs []int, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if displs == nil {
		displs = packed(counts)
	}
	s.copyPre(BufInput, 0, BufData, displs[rank]*elemSize, counts[rank]*elemSize)
	if size <= 1 {
		return s
	}
	right, left := mod(rank+1, size), mod(rank-1, size)
	for step := 0; step < size-1; step++ {
		sb, rb := mod(rank-step, size), mod(rank-step-1, size)
		s.addRange(Send, right, BufData, displs[sb]*elemSize, counts[sb]*elemSize)
		s.addRange(Recv, left, BufData, displs[rb]*elemSize, counts[rb]*elemSize)
	}
	return s
}

// packed returns the displacements of blocks of the given counts laid out
// one after the other.
func packed(counts []int) []int {
	d := make([]int, len(counts))
	for j := 1; j < len(counts); j++ {
		d[j] = d[j-1] + counts[j-1]
	}
	return d
}
