package collectives

// BinomialScatter is the binomial-tree scatter from root of blocks of count
// elements.
//
// Before, root's BufInput holds size blocks, block j (at byte
// j*count*elemSize) for rank j; the other ranks' BufInput is not used. After,
// every rank's BufData holds its block (count elements). A rank whose
// subtree has more ranks than itself keeps their blocks in BufScratch
// (Schedule.ScratchBytes: one block per other rank of its subtree) on their
// way down.
//
// The tree is BinomialBroadcast's. Ranks are renumbered relative to the root
// (v = rank - root mod size); v's subtree is the ranks v up to v plus its
// lowest set bit, and its children are v + 2^k for each 2^k below that bit.
// Each rank receives from its parent its own block, straight into BufData,
// then the blocks of the rest of its subtree, into scratch; then it sends
// each child, largest subtree first, the child's block and the blocks of
// the rest of the child's subtree. The root sends from BufInput, in rank
// order: a range that wraps past the last rank goes as two messages.
//
// Cost: ceil(log2 size) steps; the root sends size-1 blocks, a rank
// receives its subtree's blocks once.
func BinomialScatter(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	v := mod(rank-root, size)
	if v == 0 {
		s.copyPre(BufInput, rank*b, BufData, 0, b)
	}
	if size <= 1 || b == 0 {
		return s
	}
	sub := func(w int) int { return min(lowBit(w, pow2Ceil(size)), size-w) }
	low := lowBit(v, pow2Ceil(size))
	if v > 0 {
		parent := mod(rank-low, size)
		s.add(Recv, parent, BufData, 0, b)
		if rest := sub(v) - 1; rest > 0 {
			s.ScratchBytes = rest * b
			if v-low == 0 {
				// From the root: cut where the root's range wraps.
				first := mod(rank+1, size)
				a := min(rest, size-first)
				s.add(Recv, parent, BufScratch, 0, a*b)
				if a < rest {
					s.add(Recv, parent, BufScratch, a*b, (rest-a)*b)
				}
			} else {
				s.add(Recv, parent, BufScratch, 0, rest*b)
			}
		}
	}
	for m := low >> 1; m > 0; m >>= 1 {
		c := v + m
		if c >= size {
			continue
		}
		child := mod(c+root, size)
		if v == 0 {
			s.add(Send, child, BufInput, child*b, b)
			s.addBlocks(Send, child, BufInput, child+1, sub(c)-1, size, b)
		} else {
			// The child's blocks sit in scratch from slot m-1 on (slot
			// i holds the block of v+1+i).
			s.add(Send, child, BufScratch, (m-1)*b, b)
			s.addRange(Send, child, BufScratch, m*b, (sub(c)-1)*b)
		}
	}
	return s
}

// LinearScatter is the flat scatter: the root sends every other rank its
// block itself, all at once, straight from BufInput, and every rank
// receives straight into BufData, as Open MPI's basic linear scatter does.
//
// Buffers as BinomialScatter's; no scratch.
//
// Cost: one step of size-1 messages at the root; the root sends size-1
// blocks, every other rank receives its own once.
func LinearScatter(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	if rank == root {
		s.copyPre(BufInput, rank*b, BufData, 0, b)
	}
	if size <= 1 || b == 0 {
		return s
	}
	if rank != root {
		s.add(Recv, root, BufData, 0, b)
		return s
	}
	for i := 1; i < size; i++ {
		p := mod(root+i, size)
		s.add(Send, p, BufInput, p*b, b)
	}
	return s
}

// LinearScatterv is the scatter of blocks of different sizes
// (MPI_Scatterv), flat as LinearScatter: the root sends rank j the
// counts[j] elements at element displs[j] of its BufInput (displs nil:
// packed in rank order), all at once. counts and displs are the root's;
// every other rank knows only its own block, own elements (Args.Count),
// which it receives into BufData if it is not empty.
//
// Before, the root's BufInput holds every block; after, each rank's
// BufData holds its own. No scratch.
func LinearScatterv(rank, size, root int, counts, displs []int, own, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if rank != root {
		s.addRange(Recv, root, BufData, 0, own*elemSize)
		return s
	}
	if displs == nil {
		displs = packed(counts)
	}
	s.copyPre(BufInput, displs[root]*elemSize, BufData, 0, counts[root]*elemSize)
	for i := 1; i < size; i++ {
		p := mod(root+i, size)
		s.addRange(Send, p, BufInput, displs[p]*elemSize, counts[p]*elemSize)
	}
	return s
}
