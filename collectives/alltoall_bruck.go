package collectives

import "math/bits"

// BruckAlltoall is Bruck's all-to-all of blocks of count elements, for small
// blocks on many ranks: ceil(log2 size) rounds of one message each instead
// of size-1 messages, at the price of sending each block up to log2(size)
// times.
//
// Its buffers are PairwiseAlltoall's: before, BufInput holds size blocks,
// block j for rank j; after, BufData holds at block j the block rank j had
// for this rank. BufScratch (Schedule.ScratchBytes) holds size blocks, the
// slots, then a send area and a receive area of m blocks each, where m is
// the most slots any round moves (at most size/2): size + 2m blocks in
// all.
//
// Bruck's algorithm works as follows. Rank r first rotates its input so that
// slot i of its scratch holds its block for rank r+i. In round k it sends
// rank r+2^k, in one message, every slot whose index has bit k set, and
// receives into the same slots the blocks rank r-2^k sent. A block in slot
// i travels by the set bits of i, lowest first, and stays in slot i: after
// the last round slot i of rank r holds the block that rank r-i had for r,
// which a final local copy puts at block r-i of BufData.
//
// A round's slots are packed into the send area before its message and the
// message received is unpacked from the receive area into them after, by
// Copy steps: the schedule is rotate, then per round pack, send, receive,
// unpack, then the final copies. The planner orders each copy after the
// steps whose bytes it shares and no others, so a round's packing waits for
// the unpacking of only the slots it moves, and for the previous round's
// send to leave the send area.
//
// Cost: ceil(log2 size) messages sent and received per rank; each rank
// sends and receives the sum over rounds of the slots with bit k set,
// about size/2 * log2(size) blocks. Locally each block is copied once to
// rotate, once at the end, and twice (pack, unpack) per round it travels:
// about log2(size) + 2 copies.
func BruckAlltoall(rank, size, count, elemSize int) Schedule {
	b := count * elemSize
	s := Schedule{Rank: rank, Size: size}
	if size <= 1 || b == 0 {
		s.copyPre(BufInput, rank*b, BufData, rank*b, b)
		return s
	}
	rounds := bits.Len(uint(size - 1))
	most := 0
	for k := range rounds {
		most = max(most, bruckSlots(size, k))
	}
	sendAt, recvAt := size*b, (size+most)*b
	s.ScratchBytes = (size + 2*most) * b
	// Rotate: slot i gets the block for rank+i.
	s.copyStep(BufInput, rank*b, BufScratch, 0, (size-rank)*b)
	s.copyStep(BufInput, 0, BufScratch, (size-rank)*b, rank*b)
	for k := range rounds {
		runs := bruckRunList(size, k)
		at := sendAt
		for _, run := range runs {
			n := (run[1] - run[0]) * b
			s.copyStep(BufScratch, run[0]*b, BufScratch, at, n)
			at += n
		}
		n := bruckSlots(size, k) * b
		s.add(Send, mod(rank+1<<k, size), BufScratch, sendAt, n)
		s.add(Recv, mod(rank-1<<k, size), BufScratch, recvAt, n)
		at = recvAt
		for _, run := range runs {
			n := (run[1] - run[0]) * b
			s.copyStep(BufScratch, at, BufScratch, run[0]*b, n)
			at += n
		}
	}
	// Slot i holds the block of rank r-i, for r.
	for i := range size {
		s.copyStep(BufScratch, i*b, BufData, mod(rank-i, size)*b, b)
	}
	return s
}

// bruckSlots counts the slots i in [1, size) with bit k set.
func bruckSlots(size, k int) int {
	n := 0
	for _, run := range bruckRunList(size, k) {
		n += run[1] - run[0]
	}
	return n
}

// bruckRunList cuts the slots with bit k set into maximal runs [a, e).
func bruckRunList(size, k int) [][2]int {
	var runs [][2]int
	for a := 1 << k; a < size; a += 2 << k {
		runs = append(runs, [2]int{a, min(a+1<<k, size)})
	}
	return runs
}
