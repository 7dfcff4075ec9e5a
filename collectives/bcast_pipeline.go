package collectives

// PipelineBroadcast is the chain broadcast from root, pipelined: the
// bandwidth-optimal broadcast for large buffers.
//
// Before, root's BufData holds count elements; after, every rank's does.
// Ranks are renumbered relative to the root (v = rank - root mod size) and
// form a chain 0 -> 1 -> ... -> size-1: each rank but the root receives the
// buffer from v-1 and each but the last sends it on to v+1. The executor cuts
// the buffer into chunks and a rank forwards chunk c as soon as it has
// arrived, so all links of the chain carry chunks at once.
//
// Cost: size-1 steps of latency to fill the pipeline, then one chunk per
// step; every rank sends and receives the buffer once.
func PipelineBroadcast(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	v := mod(rank-root, size)
	if v > 0 {
		s.add(Recv, mod(rank-1, size), BufData, 0, n)
	}
	if v < size-1 {
		s.add(Send, mod(rank+1, size), BufData, 0, n)
	}
	return s
}

// ScatterAllgatherBroadcast is the broadcast from root by a binomial scatter
// followed by a ring allgather (van de Geijn's), for large buffers on many
// ranks: latency logarithmic in the scatter, bandwidth near twice the
// buffer.
//
// Before, root's BufData holds count elements; after, every rank's does.
// Ranks are renumbered relative to the root (v = rank - root mod size) and
// the buffer is cut into size segments, segment v nearly count/size
// elements long. In the scatter, the binomial tree of BinomialBroadcast
// moves segments instead of the whole buffer: rank v receives from its
// parent the segments of its subtree, v up to v plus its lowest set bit,
// and sends each child the segments of the child's subtree. Then the
// segments go round the ring v -> v+1 as in RingAllgather: at step s rank v
// sends segment v-s and receives segment v-s-1. Messages of segments the
// receiver already holds (the root holds all; a rank holds its subtree's)
// are left out on both sides.
//
// Cost: ceil(log2 size) + size-1 steps; the root sends the buffer about
// once, every other rank at most about twice (its subtree and the ring).
func ScatterAllgatherBroadcast(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if size <= 1 || count == 0 {
		return s
	}
	abs := func(v int) int { return mod(v+root, size) }
	// segs is the byte range of segments [a, b).
	segs := func(a, b int) (int, int) {
		off, _ := segment(count, elemSize, size, a)
		end, l := segment(count, elemSize, size, b-1)
		return off, end + l - off
	}
	// sub is the number of ranks in v's subtree.
	sub := func(v int) int { return min(lowBit(v, pow2Ceil(size)), size-v) }
	v := mod(rank-root, size)
	if v > 0 {
		off, l := segs(v, v+sub(v))
		s.addRange(Recv, abs(v-(v&-v)), BufData, off, l)
	}
	for m := lowBit(v, pow2Ceil(size)) >> 1; m > 0; m >>= 1 {
		if c := v + m; c < size {
			off, l := segs(c, c+sub(c))
			s.addRange(Send, abs(c), BufData, off, l)
		}
	}
	// held reports whether relative rank w holds segment j after the
	// scatter.
	held := func(w, j int) bool { return w == 0 || (j >= w && j < w+sub(w)) }
	right, left := mod(v+1, size), mod(v-1, size)
	for step := 0; step < size-1; step++ {
		sj, rj := mod(v-step, size), mod(v-step-1, size)
		if !held(right, sj) {
			off, l := segment(count, elemSize, size, sj)
			s.addRange(Send, abs(right), BufData, off, l)
		}
		if !held(v, rj) {
			off, l := segment(count, elemSize, size, rj)
			s.addRange(Recv, abs(left), BufData, off, l)
		}
	}
	return s
}

// pow2Ceil is the smallest power of two not below n (n >= 1).
func pow2Ceil(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}
