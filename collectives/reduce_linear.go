package collectives

// LinearReduce is the flat reduce to root of count elements in place in
// BufData: every other rank sends its contribution to the root itself,
// and the root, which receives them all at once, reduces them into its
// buffer in the order root+1, root+2, ... (mod size), as Open MPI's basic
// linear reduce does for few ranks and small buffers.
//
// Before, every rank's BufData holds its contribution; after, root's holds
// the reduction over all ranks; the others' BufData is unchanged. The
// executor cuts the buffer into chunks and applies each peer's chunk in
// step order, so each element is reduced in one fixed order, whatever the
// timing.
//
// Cost: one step of size-1 messages at the root, which receives and
// reduces the buffer size-1 times; every other rank sends it once.
func LinearReduce(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	if rank != root {
		s.add(Send, root, BufData, 0, n)
		return s
	}
	for i := 1; i < size; i++ {
		s.add(RecvReduce, mod(root+i, size), BufData, 0, n)
	}
	return s
}
