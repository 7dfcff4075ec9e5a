package collectives

// DisseminationBarrier is the dissemination barrier: in round k (2^k <
// size) every rank sends an empty message to rank+2^k and waits for one from
// rank-2^k. After ceil(log2 size) rounds every rank has heard, directly or
// through others, from every rank, so none leaves before all have entered.
func DisseminationBarrier(rank, size int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	for d := 1; d < size; d <<= 1 {
		s.add(Send, mod(rank+d, size), BufToken, 0, 0)
		s.add(Recv, mod(rank-d, size), BufToken, 0, 0)
	}
	return s
}
