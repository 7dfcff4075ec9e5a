package collectives

// RecursiveDoublingAllreduce is the recursive-doubling allreduce of count
// elements in place in BufData: the latency-optimal allreduce for small
// buffers.
//
// The algorithm works as follows, first for a power-of-two size. In the
// round at distance d (1, 2, 4, ..., size/2) rank r sends its whole buffer
// to its partner r XOR d and reduces the partner's buffer into its own.
// After the round, both partners hold the reduction over their group of 2d
// ranks, computed as (the lower group of d) op (the higher group of d) on
// both sides (the executor puts a lower peer's data first), which is the
// same expression, so the results stay bitwise identical on every rank,
// NaN payloads included.
//
// For other sizes, let p be the largest power of two below size. Each of
// the size-p extra ranks p+i first sends its buffer to rank i, which reduces
// it into its own; the p ranks run the rounds; then rank i sends the result
// to rank p+i.
//
// Cost: log2(p) rounds of the whole buffer, plus two when size is not a
// power of two.
func RecursiveDoublingAllreduce(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	recursiveDoubling(&s, BufData, n, RecvReduce)
	return s
}

// recursiveDoubling appends to s the exchanges of recursive doubling over
// buf[0:n): with p the largest power of two below s.Size, extra rank p+i
// sends to rank i and receives from it at the end; the p ranks exchange
// with partners at distance 1, 2, 4, ..., taking in what arrives with
// recv (RecvReduce in the allreduce, Recv in the barrier).
func recursiveDoubling(s *Schedule, buf Buf, n int, recv Kind) {
	rank := s.Rank
	p := pow2Below(s.Size)
	extra := s.Size - p
	if rank >= p {
		s.add(Send, rank-p, buf, 0, n)
		s.add(Recv, rank-p, buf, 0, n)
		return
	}
	if rank < extra {
		s.add(recv, rank+p, buf, 0, n)
	}
	for d := 1; d < p; d <<= 1 {
		s.add(Send, rank^d, buf, 0, n)
		s.add(recv, rank^d, buf, 0, n)
	}
	if rank < extra {
		s.add(Send, rank+p, buf, 0, n)
	}
}

// RabenseifnerAllreduce is Rabenseifner's allreduce of count elements in
// place in BufData: a reduce-scatter by recursive halving followed by an
// allgather by recursive doubling, bandwidth-optimal in a logarithmic
// number of rounds, for medium and large buffers.
//
// The algorithm works as follows. Let p be the largest power of two below
// size; the buffer is cut into p segments, segment i nearly count/p
// elements long. If size is not a power of two, each extra rank p+i first
// sends its buffer to rank i, which reduces it into its own and stands for
// both. In the reduce-scatter, rank r starts responsible for all segments;
// in the round at distance d (p/2, ..., 1) it keeps the half of its
// segments on the side of r's bit d, sends the other half to its partner r
// XOR d and reduces the partner's copy of the kept half into its own. After
// log2(p) rounds rank r holds segment r reduced over all ranks. In the
// allgather, at distances 1, 2, ..., p/2, it exchanges all the reduced
// segments it holds with its partner. Finally rank i sends the result to
// rank p+i. Every segment is reduced at one rank and copied everywhere, so
// every rank ends with bitwise identical results.
//
// Cost: 2 log2(p) rounds, plus two when size is not a power of two; each
// rank sends 2(p-1)/p of the buffer (ranks that stand for an extra, one
// buffer more).
func RabenseifnerAllreduce(rank, size, count, elemSize int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	n := count * elemSize
	if size <= 1 || n == 0 {
		return s
	}
	p := pow2Below(size)
	extra := size - p
	if rank >= p {
		s.add(Send, rank-p, BufData, 0, n)
		s.add(Recv, rank-p, BufData, 0, n)
		return s
	}
	if rank < extra {
		s.add(RecvReduce, rank+p, BufData, 0, n)
	}
	// segs adds a step for segments [lo, lo+d).
	segs := func(k Kind, peer, lo, d int) {
		a, _ := segment(count, elemSize, p, lo)
		b, l := segment(count, elemSize, p, lo+d-1)
		s.addRange(k, peer, BufData, a, b+l-a)
	}
	lo := 0
	for d := p / 2; d >= 1; d /= 2 {
		keep, give := lo, lo+d
		if rank&d != 0 {
			keep, give = lo+d, lo
		}
		segs(Send, rank^d, give, d)
		segs(RecvReduce, rank^d, keep, d)
		lo = keep
	}
	for d := 1; d < p; d <<= 1 {
		segs(Send, rank^d, rank&^(d-1), d)
		segs(Recv, rank^d, (rank^d)&^(d-1), d)
	}
	if rank < extra {
		s.add(Send, rank+p, BufData, 0, n)
	}
	return s
}
