package collectives

import "math/bits"

// BruckAlltoall is Bruck's all-to-all of blocks of count elements, for small
// blocks on many ranks: ceil(log2 size) rounds of one message each instead
// of size-1 messages, at the price of sending each block up to log2(size)
// times.
//
// Its buffers are PairwiseAlltoall's: before, BufInput holds size blocks,
// block j for rank j; after, BufData holds at block j the block rank j had
// for this rank. BufScratch holds size blocks plus two packing areas of up
// to size/2 blocks each (Schedule.ScratchBytes).
//
// Bruck's algorithm works as follows. Rank r first rotates its input so that
// slot i of its scratch holds its block for rank r+i. In round k it sends
// rank r+2^k, in one message, every slot whose index has bit k set, and
// receives into the same slots the blocks rank r-2^k sent. A block in slot
// i travels by the set bits of i, lowest first, and stays in slot i: after
// the last round slot i of rank r holds the block that rank r-i had for r,
// which a final local copy puts at block r-i of BufData.
//
// Packing the slots of a round into one message, and unpacking the message
// received, are local copies between rounds. A schedule's local copies come
// before all its steps, so the algorithm is a sequence of schedules, one per
// round plus a last one of copies only: schedule k's Pre unpacks round k-1
// and packs round k. The caller runs them in order over the same buffers
// (each as a call of its own, with its own sequence number); every rank runs
// the same number. Each is valid alone: messages of one round never overlap
// those of the next between two ranks, since each rank finishes a round
// before it starts the next.
//
// Cost: ceil(log2 size) rounds; each rank sends and receives about
// size/2 * log2(size) blocks.
func BruckAlltoall(rank, size, count, elemSize int) []Schedule {
	b := count * elemSize
	if size <= 1 || b == 0 {
		s := Schedule{Name: "bruck", Rank: rank, Size: size}
		s.copyPre(BufInput, rank*b, BufData, rank*b, b)
		return []Schedule{s}
	}
	rounds := bits.Len(uint(size - 1))
	most := 0
	for k := range rounds {
		most = max(most, bruckSlots(size, k))
	}
	// Scratch: slots [0, size), the send area and the receive area of
	// most blocks each.
	sendAt, recvAt := size*b, (size+most)*b
	scratch := (size + 2*most) * b
	// unpack copies the blocks received in round k to their slots.
	unpack := func(s *Schedule, k int) {
		at := recvAt
		for _, run := range bruckRunList(size, k) {
			n := (run[1] - run[0]) * b
			s.copyPre(BufScratch, at, BufScratch, run[0]*b, n)
			at += n
		}
	}
	var phases []Schedule
	for k := 0; k <= rounds; k++ {
		s := Schedule{Name: "bruck", Rank: rank, Size: size, ScratchBytes: scratch}
		if k == 0 {
			// Rotate: slot i gets the block for rank+i.
			s.copyPre(BufInput, rank*b, BufScratch, 0, (size-rank)*b)
			s.copyPre(BufInput, 0, BufScratch, (size-rank)*b, rank*b)
		} else {
			unpack(&s, k-1)
		}
		if k == rounds {
			// Slot i holds the block of rank r-i, for r.
			for i := range size {
				s.copyPre(BufScratch, i*b, BufData, mod(rank-i, size)*b, b)
			}
			phases = append(phases, s)
			break
		}
		at := sendAt
		for _, run := range bruckRunList(size, k) {
			n := (run[1] - run[0]) * b
			s.copyPre(BufScratch, run[0]*b, BufScratch, at, n)
			at += n
		}
		n := bruckSlots(size, k) * b
		s.add(Send, mod(rank+1<<k, size), BufScratch, sendAt, n)
		s.add(Recv, mod(rank-1<<k, size), BufScratch, recvAt, n)
		phases = append(phases, s)
	}
	return phases
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
