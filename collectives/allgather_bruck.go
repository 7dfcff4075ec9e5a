package collectives

// BruckAllgather is Bruck's allgather of blocks of count elements, with the
// buffers of RingAllgather: BufInput holds the rank's block before, BufData
// every rank's block (rank j's at byte j*count*elemSize) after.
//
// Bruck's algorithm works as follows. Before round k rank r holds the 2^k
// blocks r, r+1, ..., r+2^k-1 (modulo size). In round k it sends all it
// holds, up to the size-2^k blocks its receiver still lacks, to rank r-2^k,
// and receives the same number of blocks r+2^k, ... from rank r+2^k. After
// ceil(log2 size) rounds every rank holds every block. The blocks a rank
// holds are a contiguous range modulo size, so BufData stays in rank order
// (no final rotation) and a range that wraps past the last block goes as
// two messages.
//
// Cost: ceil(log2 size) rounds, size-1 blocks sent per rank: the latency of
// recursive doubling for every size, with the bandwidth of the ring.
func BruckAllgather(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	s.copyPre(BufInput, 0, BufData, rank*b, b)
	if size <= 1 || b == 0 {
		return s
	}
	for d := 1; d < size; d <<= 1 {
		m := min(d, size-d)
		s.addBlocks(Send, mod(rank-d, size), BufData, rank, m, size, b)
		s.addBlocks(Recv, mod(rank+d, size), BufData, rank+d, m, size, b)
	}
	return s
}
