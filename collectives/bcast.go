package collectives

// BinomialBroadcast is the binomial-tree broadcast from root.
//
// Ranks are renumbered relative to the root (v = rank - root mod size). A
// rank v > 0 receives the whole buffer from its parent, v with its highest
// set bit cleared; then every rank sends it to its children v + 2^k for each
// 2^k above v's highest set bit, largest subtree first. The tree has depth
// ceil(log2 size). The executor pipelines the buffer in chunks, so a rank
// forwards chunk c while chunk c+1 is still arriving.
func BinomialBroadcast(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	v := mod(rank-root, size)
	mask := 1
	for mask < size {
		if v&mask != 0 {
			s.add(Recv, mod(v-mask+root, size), BufData, 0, n)
			break
		}
		mask <<= 1
	}
	// mask is now v's lowest set bit (or >= size for the root); children are
	// v + 2^k for 2^k < mask.
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < size {
			s.add(Send, mod(v+mask+root, size), BufData, 0, n)
		}
	}
	return s
}

// LinearBroadcast is the flat tree: the root sends the whole buffer to every
// other rank itself, all at once (the executor keeps them in flight within
// its credits), and every receiver hears from the root alone, one hop from
// it. The root moves (size-1) times the buffer, so it is for few ranks and
// small buffers, where the binomial tree's log2(size) hops cost more than
// the root's extra sends (4 ranks on 2 cores over TCP, osu bcast 8 B-32
// KiB: 16-24 us against the binomial tree's 19-30; Open MPI's default,
// 17-28, behaves as its basic linear one there, 14-17 at 4-32 KiB, where
// its binomial tree takes 27-43). Open MPI's "basic linear" broadcast.
func LinearBroadcast(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	if rank != root {
		s.add(Recv, root, BufData, 0, n)
		return s
	}
	for i := 1; i < size; i++ {
		s.add(Send, mod(root+i, size), BufData, 0, n)
	}
	return s
}
