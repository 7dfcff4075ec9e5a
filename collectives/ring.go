package collectives

// RingAllreduce is the ring allreduce: a reduce-scatter followed by an
// allgather, both around the ring rank -> rank+1.
//
// The ring algorithm works as follows. The buffer of count elements is cut
// into size segments, segment i nearly count/size elements long. In the
// reduce-scatter phase, at step s (0 <= s < size-1) every rank r sends
// segment r-s to its right neighbour and receives segment r-s-1 from its
// left neighbour, reducing it into its own copy. After size-1 steps rank r
// holds the full reduction of segment r+1. In the allgather phase, at step s
// rank r sends segment r+1-s (fully reduced) to the right and receives
// segment r-s from the left, overwriting its copy. Each rank sends and
// receives 2(size-1)/size of the buffer, which is optimal in bandwidth.
//
// Each segment is reduced in one fixed order around the ring and then
// copied, so every rank ends with bitwise identical results.
func RingAllreduce(rank, size, count, elemSize int) Schedule {
	s := ringReduceScatterPhase(rank, size, count, elemSize)
	s.Steps = append(s.Steps, ringAllgatherPhase(rank, size, count, elemSize).Steps...)
	return s
}

// ringReduceScatterPhase is the ring allreduce's first half: afterwards
// rank r holds segment r+1 (mod size) reduced over all ranks.
func ringReduceScatterPhase(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if size <= 1 || count == 0 {
		return s
	}
	right, left := mod(rank+1, size), mod(rank-1, size)
	for step := 0; step < size-1; step++ {
		so, sl := segment(count, elemSize, size, mod(rank-step, size))
		ro, rl := segment(count, elemSize, size, mod(rank-step-1, size))
		if sl > 0 {
			s.add(Send, right, BufData, so, sl)
		}
		if rl > 0 {
			s.add(RecvReduce, left, BufData, ro, rl)
		}
	}
	return s
}

// ringAllgatherPhase is the ring allreduce's second half: from rank r
// holding segment r+1 (mod size), every rank ends with every segment.
func ringAllgatherPhase(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if size <= 1 || count == 0 {
		return s
	}
	right, left := mod(rank+1, size), mod(rank-1, size)
	for step := 0; step < size-1; step++ {
		so, sl := segment(count, elemSize, size, mod(rank+1-step, size))
		ro, rl := segment(count, elemSize, size, mod(rank-step, size))
		if sl > 0 {
			s.add(Send, right, BufData, so, sl)
		}
		if rl > 0 {
			s.add(Recv, left, BufData, ro, rl)
		}
	}
	return s
}
