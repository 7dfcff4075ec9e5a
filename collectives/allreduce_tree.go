package collectives

// TreeAllreduce is the double-binary-tree allreduce of count elements in
// place in BufData, after NCCL's: logarithmic latency with the full
// bandwidth of every rank's links, for large rank counts.
//
// The algorithm works as follows. A binary tree reduces a buffer with half
// the ranks as leaves, which send but never receive: their bandwidth is
// wasted. So the buffer is cut in two halves, each reduced and broadcast on
// its own tree, and the second tree is the first one mirrored (rank r plays
// rank size-1-r) when size is even, or shifted by one (rank r plays rank
// r-1) when size is odd. The first tree's leaves are the odd ranks; the
// second tree's are the even ones, so every rank but at most one is an inner
// node in exactly one tree: a rank has at most four tree edges in all, and
// each edge carries half the buffer each way.
//
// The first tree is NCCL's btree: rank 0 is the root, with one child; a rank
// with lowest set bit b has parent (r XOR b) OR 2b, or r XOR b when that is
// out of range. On each tree every rank reduces its children's partial
// results into its half, lower rank first, sends the result to its
// parent, receives the complete half back from its parent and sends it on to
// its children. The root holds the complete half when its children are
// done. The executor cuts each half into chunks, so a rank passes chunk c
// up while chunk c+1 is still being reduced below and, later, passes chunk
// c down while the root finishes chunk c+1: reduction and broadcast overlap
// as in a pipeline. Each half is reduced at its root in one fixed order and
// copied to every rank, so every rank ends with bitwise identical results.
//
// Both trees' reductions come before both broadcasts in each rank's program
// order, which is the order messages between two ranks keep. Two ranks
// linked in both trees therefore exchange both halves' reductions before
// both halves' results; elsewhere the trees do not wait for each other.
//
// Cost: about 2 log2(size) steps of latency, pipelined; a rank sends and
// receives at most about two buffers (half a buffer on each of up to four
// tree edges), like the ring, but in logarithmic latency.
func TreeAllreduce(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if size <= 1 || count == 0 {
		return s
	}
	type half struct {
		off, len int
		parent   int
		children []int
	}
	var halves [2]half
	for t := range 2 {
		h := &halves[t]
		h.off, h.len = segment(count, elemSize, 2, t)
		h.parent, h.children = dtree(size, rank, t)
	}
	for _, h := range halves {
		if h.len == 0 {
			continue
		}
		for _, c := range h.children {
			s.add(RecvReduce, c, BufData, h.off, h.len)
		}
		if h.parent >= 0 {
			s.add(Send, h.parent, BufData, h.off, h.len)
		}
	}
	for _, h := range halves {
		if h.len == 0 {
			continue
		}
		if h.parent >= 0 {
			s.add(Recv, h.parent, BufData, h.off, h.len)
		}
		for _, c := range h.children {
			s.add(Send, c, BufData, h.off, h.len)
		}
	}
	return s
}

// btreeParent is rank's parent in NCCL's binary tree over size ranks, or
// -1 for the root, rank 0.
func btreeParent(size, rank int) int {
	if rank == 0 {
		return -1
	}
	bit := rank & -rank
	up := rank ^ bit | bit<<1
	if up >= size {
		up = rank ^ bit
	}
	return up
}

// dtreeMap returns the maps between a rank and the rank it plays in the
// btree, for tree t (0 or 1) of the double binary tree over size ranks:
// none for tree 0; for tree 1, a mirror when size is even, a shift by one
// when it is odd.
func dtreeMap(size, t int) (to, from func(int) int) {
	switch {
	case t == 0:
		id := func(r int) int { return r }
		return id, id
	case size%2 == 1:
		return func(r int) int { return mod(r-1, size) }, func(v int) int { return mod(v+1, size) }
	default:
		m := func(r int) int { return size - 1 - r }
		return m, m
	}
}

// dtreeParent is rank's parent in tree t of the double binary tree, or -1
// at the root.
func dtreeParent(size, rank, t int) int {
	to, from := dtreeMap(size, t)
	if u := btreeParent(size, to(rank)); u >= 0 {
		return from(u)
	}
	return -1
}

// dtree returns rank's parent (-1 at the root) and children, in increasing
// order, in tree t (0 or 1) of the double binary tree over size ranks.
func dtree(size, rank, t int) (parent int, children []int) {
	to, from := dtreeMap(size, t)
	for _, c := range btreeChildren(size, to(rank), nil) {
		children = append(children, from(c))
	}
	if len(children) == 2 && children[0] > children[1] {
		children[0], children[1] = children[1], children[0]
	}
	return dtreeParent(size, rank, t), children
}

// btreeChildren appends rank's children in NCCL's binary tree over size
// ranks (at most two) to out. A child c names as parent c with its lowest
// set bit b cleared, possibly with bit 2b set: it differs from its parent
// by b, so the candidates are rank +- 2^k, O(log size) of them.
func btreeChildren(size, rank int, out []int) []int {
	for b := 1; b < size; b <<= 1 {
		for _, c := range [2]int{rank - b, rank + b} {
			if c > 0 && c < size && btreeParent(size, c) == rank {
				out = append(out, c)
			}
		}
	}
	return out
}
