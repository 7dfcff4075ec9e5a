package collectives

// BinomialReduce is the binomial-tree reduce to root of count elements in
// place in BufData.
//
// Before, every rank's BufData holds its contribution; after, root's holds
// the reduction over all ranks. The other ranks' BufData ends holding the
// partial reduction over their subtree: it is used as the scratch of the
// algorithm, so a caller that needs its input afterwards reduces a copy.
//
// The tree is BinomialBroadcast's, run backwards. Ranks are renumbered
// relative to the root (v = rank - root mod size); the children of v are v +
// 2^k for each 2^k below v's lowest set bit. Each rank reduces its
// children's partial results into its buffer, smallest subtree first, then
// sends the result to its parent, v with its lowest set bit cleared. The
// executor cuts the buffer into chunks, so a rank sends chunk c up while
// chunk c+1 is still being reduced. Each element is reduced in one fixed
// order, whatever the timing.
//
// Cost: ceil(log2 size) steps of the whole buffer (pipelined); the root
// receives the buffer up to log2(size) times, every rank sends it once.
func BinomialReduce(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	v := mod(rank-root, size)
	low := lowBit(v, pow2Ceil(size))
	for m := 1; m < low; m <<= 1 {
		if v+m < size {
			s.add(RecvReduce, mod(rank+m, size), BufData, 0, n)
		}
	}
	if v > 0 {
		s.add(Send, mod(rank-low, size), BufData, 0, n)
	}
	return s
}
