package collectives

// PipelineReduce is the chain reduce to root of count elements in place in
// BufData, pipelined: the bandwidth-optimal reduce for large buffers (Open
// MPI's pipeline reduce, which its fixed rules take for large messages;
// NCCL's reduce runs the same chain along its ring).
//
// Before, every rank's BufData holds its contribution; after, root's holds
// the reduction over all ranks. The other ranks' BufData ends holding the
// partial reduction over the chain behind them: it is the algorithm's
// scratch, as in BinomialReduce.
//
// PipelineBroadcast's chain, run backwards. Ranks are renumbered relative
// to the root (v = rank - root mod size) and form a chain size-1 -> ... ->
// 1 -> 0: each rank but the last reduces what v+1 sends into its buffer,
// and each but the root sends the result on to v-1. The executor cuts the
// buffer into chunks and a rank sends chunk c on as soon as it is reduced,
// so every link of the chain carries chunks at once. Each element is
// reduced in one fixed order (from the chain's end toward the root),
// whatever the timing.
//
// Cost: size-1 steps of latency to fill the pipeline, then one chunk per
// step; every rank receives, reduces and sends the buffer once, where the
// binomial tree's root receives it log2(size) times and the ring's nearly
// twice.
func PipelineReduce(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	v := mod(rank-root, size)
	if v < size-1 {
		s.add(RecvReduce, mod(rank+1, size), BufData, 0, n)
	}
	if v > 0 {
		s.add(Send, mod(rank-1, size), BufData, 0, n)
	}
	return s
}
