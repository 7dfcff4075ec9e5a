package collectives

// BinomialGather is the binomial-tree gather to root of blocks of count
// elements.
//
// Before, every rank's BufInput holds its block. After, root's BufData holds
// size blocks, rank j's at byte j*count*elemSize; the other ranks' BufData is
// not used (it may be empty). A rank with children collects its subtree's
// blocks in BufScratch (Schedule.ScratchBytes: one block per rank of its
// subtree); a leaf sends straight from BufInput.
//
// The tree is BinomialBroadcast's, run backwards. Ranks are renumbered
// relative to the root (v = rank - root mod size); v's subtree is the ranks
// v up to v plus its lowest set bit, and its children are v + 2^k for each
// 2^k below that bit. A rank copies its own block to the front of its
// scratch, receives each child's subtree blocks after it, smallest subtree
// first, and sends its whole subtree's blocks to its parent in one message.
// The root receives straight into BufData, in rank order: a child's range
// that wraps past the last rank comes as two messages.
//
// Cost: ceil(log2 size) steps; the root receives size-1 blocks, a rank
// sends its subtree's blocks once.
func BinomialGather(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	v := mod(rank-root, size)
	if v == 0 {
		s.copyPre(BufInput, 0, BufData, rank*b, b)
	}
	if size <= 1 || b == 0 {
		return s
	}
	sub := func(w int) int { return min(lowBit(w, pow2Ceil(size)), size-w) }
	low := lowBit(v, pow2Ceil(size))
	if v > 0 && sub(v) > 1 {
		s.ScratchBytes = sub(v) * b
		s.copyPre(BufInput, 0, BufScratch, 0, b)
	}
	for m := 1; m < low; m <<= 1 {
		c := v + m
		if c >= size {
			break
		}
		if v == 0 {
			s.addBlocks(Recv, mod(c+root, size), BufData, c+root, sub(c), size, b)
		} else {
			s.add(Recv, mod(c+root, size), BufScratch, m*b, sub(c)*b)
		}
	}
	if v == 0 {
		return s
	}
	parent := mod(rank-low, size)
	src := BufScratch
	if sub(v) == 1 {
		src = BufInput
	}
	if v-low == 0 {
		// To the root: cut where the root's range wraps.
		first := mod(rank, size)
		a := min(sub(v), size-first)
		s.add(Send, parent, src, 0, a*b)
		if a < sub(v) {
			s.add(Send, parent, src, a*b, (sub(v)-a)*b)
		}
		return s
	}
	s.add(Send, parent, src, 0, sub(v)*b)
	return s
}

// LinearGather is the flat gather: every other rank sends its block to the
// root itself, and the root receives them all at once, straight into
// BufData (the executor keeps them in flight within its credits), as Open
// MPI's basic linear gather and Gloo's gather do. Every rank is one hop
// from the root, which receives size-1 messages where the binomial tree's
// receives ceil(log2 size) larger ones.
//
// Buffers as BinomialGather's; no scratch.
//
// Cost: one step of size-1 messages at the root; the root receives size-1
// blocks, every other rank sends its own once.
func LinearGather(rank, size, root, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	b := count * elemSize
	if rank == root {
		s.copyPre(BufInput, 0, BufData, rank*b, b)
	}
	if size <= 1 || b == 0 {
		return s
	}
	if rank != root {
		s.add(Send, root, BufInput, 0, b)
		return s
	}
	for i := 1; i < size; i++ {
		p := mod(root+i, size)
		s.add(Recv, p, BufData, p*b, b)
	}
	return s
}

// LinearGatherv is the gather of blocks of different sizes (MPI_Gatherv),
// flat as LinearGather: rank j's block of counts[j] elements lands at
// element displs[j] of the root's BufData (displs nil: packed in rank
// order). counts and displs are the root's; every other rank knows only
// its own block, own elements (Args.Count), which it sends to the root if
// it is not empty. The root receives every non-empty block at once.
//
// Before, BufInput holds the rank's block; after, the root's BufData
// holds every block at its displacement. No scratch.
func LinearGatherv(rank, size, root int, counts, displs []int, own, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if rank != root {
		s.addRange(Send, root, BufInput, 0, own*elemSize)
		return s
	}
	if displs == nil {
		displs = packed(counts)
	}
	s.copyPre(BufInput, 0, BufData, displs[root]*elemSize, counts[root]*elemSize)
	for i := 1; i < size; i++ {
		p := mod(root+i, size)
		s.addRange(Recv, p, BufData, displs[p]*elemSize, counts[p]*elemSize)
	}
	return s
}

// EmptyBlocksChecked adds to s, the schedule of a gatherv or scatterv
// (LinearGatherv, LinearScatterv), an empty message for every empty block,
// where the block's data would go (to the root in a gatherv, from it in a
// scatterv): counts are the root's (nil elsewhere), own this rank's block
// in elements. Without them a rank and the root that both see the block
// as empty exchange nothing, and neither can check that the other agrees;
// with them the receiver checks the length of every block, an empty one
// included (the message carries none, where the other side expects some,
// or the reverse), and every rank that disagrees fails in the call
// (comm's StrictChecks).
func EmptyBlocksChecked(s Schedule, c Coll, root int, counts []int, own int) Schedule {
	k := Send // gatherv: blocks go to the root
	if c == CollScatterv {
		k = Recv
	}
	if s.Rank != root {
		if own == 0 {
			s.add(k, root, BufToken, 0, 0)
		}
		return s
	}
	rootKind := Recv
	if k == Recv {
		rootKind = Send
	}
	for p, n := range counts {
		if p != root && n == 0 {
			s.add(rootKind, p, BufToken, 0, 0)
		}
	}
	return s
}
