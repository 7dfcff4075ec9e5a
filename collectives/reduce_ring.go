package collectives

// RingReduce is the reduce to root of count elements in place in BufData by
// a ring reduce-scatter followed by a gather of the reduced segments at the
// root: bandwidth-optimal, for large buffers.
//
// Before, every rank's BufData holds its contribution; after, root's holds
// the reduction over all ranks, and the other ranks' BufData holds partial
// reductions (it serves as the algorithm's scratch).
//
// The algorithm works as follows. The buffer is cut into size segments and
// reduced around the ring exactly as in the first phase of RingAllreduce:
// after size-1 steps rank r holds segment r+1 reduced over all ranks. Then
// every rank but the root sends that segment to the root, which receives
// each into place. Each segment is reduced in one fixed order around the
// ring.
//
// Cost: size steps; every rank sends about (size-1)/size of the buffer in
// the ring plus one segment, and the root receives about twice that.
func RingReduce(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if size <= 1 || count == 0 {
		return s
	}
	right, left := mod(rank+1, size), mod(rank-1, size)
	for step := 0; step < size-1; step++ {
		so, sl := segment(count, elemSize, size, mod(rank-step, size))
		ro, rl := segment(count, elemSize, size, mod(rank-step-1, size))
		s.addRange(Send, right, BufData, so, sl)
		s.addRange(RecvReduce, left, BufData, ro, rl)
	}
	if rank != root {
		off, l := segment(count, elemSize, size, mod(rank+1, size))
		s.addRange(Send, root, BufData, off, l)
		return s
	}
	for j := range size {
		if from := mod(j-1, size); from != root {
			off, l := segment(count, elemSize, size, j)
			s.addRange(Recv, from, BufData, off, l)
		}
	}
	return s
}
