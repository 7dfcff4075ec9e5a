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

// RecursiveDoublingScan is MPI_Scan by recursive doubling (MPICH's): in
// round k rank r exchanges with rank r XOR 2^k its partial reduction (of
// the block of ranks it has heard from, itself included), reducing the
// partner's into its partial and, from a lower rank, into its result:
// ceil(log2 n) rounds on any number of ranks, against the chain's n-1
// steps. BufData is the result (starting as this rank's own block, as
// LinearScan's), BufScratch the partial, then the partner's first copy
// from a higher rank. The partner's partial comes twice, as LinearExscan's
// prefix: once for the result, once for the partial (there is no local
// reduction step). A float result may round differently from the chain's,
// as the allreduce algorithms' do (the sums associate differently).
func RecursiveDoublingScan(rank, size, count, elemSize int) Schedule {
	return recursiveDoublingScan(rank, size, count, elemSize, false)
}

// RecursiveDoublingExscan is MPI_Exscan by recursive doubling: as
// RecursiveDoublingScan, but the result takes only the partials of lower
// ranks, the first one received, the later ones reduced in (rank 0 keeps
// its own block).
func RecursiveDoublingExscan(rank, size, count, elemSize int) Schedule {
	return recursiveDoublingScan(rank, size, count, elemSize, true)
}

func recursiveDoublingScan(rank, size, count, elemSize int, exclusive bool) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size == 1 || n == 0 {
		return s
	}
	// BufScratch: the partial at 0, then a place for the copy of a higher
	// partner's partial that the result does not take.
	partial, spare := 0, n
	s.ScratchBytes = 2 * n
	s.copyStep(BufData, 0, BufScratch, partial, n)
	first := true // exclusive: the result has not been set yet
	for mask := 1; mask < size; mask <<= 1 {
		dst := rank ^ mask
		if dst >= size {
			continue
		}
		s.add(Send, dst, BufScratch, partial, n)
		s.add(Send, dst, BufScratch, partial, n)
		switch {
		case dst > rank:
			s.add(Recv, dst, BufScratch, spare, n)
		case exclusive && first:
			s.add(Recv, dst, BufData, 0, n)
			first = false
		default:
			s.add(RecvReduce, dst, BufData, 0, n)
		}
		s.add(RecvReduce, dst, BufScratch, partial, n)
	}
	return s
}
