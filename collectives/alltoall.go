package collectives

// PairwiseAlltoall is the pairwise-exchange all-to-all of blocks of count
// elements.
//
// Before, rank r's BufInput holds size blocks, block j (at byte
// j*count*elemSize) for rank j; BufData has room for size blocks. After,
// BufData holds at block j the block rank j had for r. The rank's own block
// is copied locally first (a Pre copy).
//
// The pairwise algorithm works as follows. At step s (1 <= s < size) rank r
// sends its block for rank r+s and receives from rank r-s that rank's block
// for r. When size is a power of two, step s pairs r with r XOR s instead,
// so that each step is an exchange between two ranks and no rank receives
// from one peer while sending to another. Each rank sends and receives
// size-1 blocks in size-1 steps; the steps do not depend on each other, so
// the executor keeps them all in flight within its credits.
func PairwiseAlltoall(rank, size, count, elemSize int) Schedule {
	counts, displs := make([]int, size), make([]int, size)
	for j := range size {
		counts[j], displs[j] = count, j*count
	}
	return PairwiseAlltoallv(rank, size, counts, displs, counts, displs, elemSize)
}

// PairwiseAlltoallv is the pairwise all-to-all of blocks of any size, in
// elements: this rank's block for rank j is sendCounts[j] elements at
// element sendDispls[j] of BufInput, and rank j's block for this rank lands
// at element recvDispls[j] of BufData, recvCounts[j] elements long. As in
// MPI_Alltoallv, sendCounts[j] on rank i must equal recvCounts[i] on rank
// j; a mismatch is a size mismatch the executor reports (the rank's own
// block, copied locally, is cut to the shorter of its two counts). Empty
// blocks are not sent. The order of steps is that of PairwiseAlltoall.
func PairwiseAlltoallv(rank, size int, sendCounts, sendDispls, recvCounts, recvDispls []int, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	s.copyPre(BufInput, sendDispls[rank]*elemSize, BufData, recvDispls[rank]*elemSize,
		min(sendCounts[rank], recvCounts[rank])*elemSize)
	xor := size&(size-1) == 0
	for step := 1; step < size; step++ {
		to, from := mod(rank+step, size), mod(rank-step, size)
		if xor {
			to, from = rank^step, rank^step
		}
		s.addRange(Send, to, BufInput, sendDispls[to]*elemSize, sendCounts[to]*elemSize)
		s.addRange(Recv, from, BufData, recvDispls[from]*elemSize, recvCounts[from]*elemSize)
	}
	return s
}
