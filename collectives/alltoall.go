package collectives

// PairwiseAlltoall is the pairwise-exchange all-to-all of blocks of count
// elements.
//
// Before, rank r's BufInput holds size blocks, block j (at byte
// j*count*elemSize) for rank j; BufData has room for size blocks. After,
// BufData holds at block j the block rank j had for r. The rank's own block
// is copied locally first (a Pre copy).
//
// The pairwise algorithm works as follows. In round d (1 <= d <= size/2)
// rank r exchanges with the two ranks at distance d: it sends its block
// for rank r+d and receives from rank r-d that rank's block for r, then
// sends its block for r-d and receives r+d's (one step when r+d and r-d
// are the same rank). When size is a power of two, step s (1 <= s < size)
// pairs r with r XOR s instead, so that each step is an exchange between
// two ranks and no rank receives from one peer while sending to another;
// steps 2d-1 and 2d make round d. Each rank sends and receives size-1
// blocks; the steps do not depend on each other, so the executor keeps
// them all in flight within its credits, or, in a job of more ranks than
// its window of peers, a window of rounds at a time (Schedule.Rounds:
// both ranks of a pair meet in the same round, so the window moves over
// the pairs in the same order on every rank).
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
	s.Rounds = make([]int32, size)
	s.Rounds[rank] = -1
	add := func(to, from int) {
		s.addRange(Send, to, BufInput, sendDispls[to]*elemSize, sendCounts[to]*elemSize)
		s.addRange(Recv, from, BufData, recvDispls[from]*elemSize, recvCounts[from]*elemSize)
	}
	if size&(size-1) == 0 {
		for step := 1; step < size; step++ {
			s.Rounds[rank^step] = int32((step - 1) / 2)
			add(rank^step, rank^step)
		}
		return s
	}
	for d := 1; 2*d <= size; d++ {
		up, down := mod(rank+d, size), mod(rank-d, size)
		s.Rounds[up], s.Rounds[down] = int32(d-1), int32(d-1)
		add(up, down)
		if up != down {
			add(down, up)
		}
	}
	return s
}
