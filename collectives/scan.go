package collectives

// LinearScan is MPI_Scan's chain, an inclusive prefix reduction: rank r
// ends with the reduction of the blocks of ranks 0 to r. BufData starts as
// this rank's own block (the caller's copy of its input, as an
// allreduce's); rank r receives the prefix of the ranks below it from
// rank r-1, reduces it into BufData, and sends the result on to rank r+1.
// size-1 steps in a row: MPI's basic scan (Open MPI's, MPICH's for few
// ranks). The executor puts the lower rank's operand first in a
// receive-and-reduce, so every rank reduces in rank order, as MPI says.
func LinearScan(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if rank > 0 {
		s.addRange(RecvReduce, rank-1, BufData, 0, n)
	}
	if rank < size-1 {
		s.addRange(Send, rank+1, BufData, 0, n)
	}
	return s
}

// LinearExscan is MPI_Exscan's chain, an exclusive prefix reduction: rank
// r > 0 ends with the reduction of the blocks of ranks 0 to r-1; rank 0's
// BufData keeps its own block (MPI leaves rank 0's result undefined).
// BufData starts as this rank's own block, copied into BufScratch first;
// rank r receives the prefix of the ranks below it from rank r-1 twice:
// once into BufData (its result), once reduced into BufScratch (its own
// block added: the prefix rank r+1 needs), which it sends on twice.
func LinearExscan(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size == 1 || n == 0 {
		return s
	}
	s.ScratchBytes = n
	if rank < size-1 {
		s.copyStep(BufData, 0, BufScratch, 0, n)
	}
	if rank > 0 {
		s.add(Recv, rank-1, BufData, 0, n)
		if rank < size-1 {
			s.add(RecvReduce, rank-1, BufScratch, 0, n)
		} else {
			s.add(Recv, rank-1, BufScratch, 0, n) // the last rank passes nothing on: taken, not reduced
		}
	}
	if rank < size-1 {
		s.add(Send, rank+1, BufScratch, 0, n)
		s.add(Send, rank+1, BufScratch, 0, n)
	}
	return s
}
