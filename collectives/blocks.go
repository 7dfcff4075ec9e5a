package collectives

// Helpers shared by the schedules that move whole blocks (allgather,
// alltoall, gather, scatter, reduce-scatter).

// addBlocks adds steps for blocks first, first+1, ..., first+n-1 of
// blockBytes each, counted modulo size: one step, or two where the range
// wraps past the last block. Sender and receiver that name the same range
// cut it the same way, so their messages match.
func (s *Schedule) addBlocks(k Kind, peer int, buf Buf, first, n, size, blockBytes int) {
	if n <= 0 || blockBytes == 0 {
		return
	}
	first = mod(first, size)
	a := min(n, size-first)
	s.add(k, peer, buf, first*blockBytes, a*blockBytes)
	if n > a {
		s.add(k, peer, buf, 0, (n-a)*blockBytes)
	}
}

// addRange adds one step for [off, off+n) unless it is empty.
func (s *Schedule) addRange(k Kind, peer int, buf Buf, off, n int) {
	if n > 0 {
		s.add(k, peer, buf, off, n)
	}
}

// pow2Below is the largest power of two not above n (n >= 1).
func pow2Below(n int) int {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return p
}

// lowBit is the lowest set bit of v, or limit if v is zero (the root of a
// binomial tree, whose subtree is everything).
func lowBit(v, limit int) int {
	if v == 0 {
		return limit
	}
	return v & -v
}
