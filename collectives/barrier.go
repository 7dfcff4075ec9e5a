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

// RecursiveDoublingBarrier is the barrier of recursive doubling: in round
// k every rank exchanges an empty message with rank XOR 2^k; with a size
// that is not a power of two, each rank p+i (p the largest power of two
// below size) first sends to rank i, which stands for both, and hears back
// from it at the end (Open MPI's choice at a power of two too). Every
// message goes both ways, so a rank's proof that its partner is in the
// same call is the partner's own message; a dissemination barrier's rank
// never hears from rank+1 directly and waits for the credit of its first
// message (see checks.go). Measured over TCP, osu barrier with 4 ranks on
// 2 cores: 67-71 us against dissemination's 70-86 (Open MPI: 71-83); 8
// ranks: 269-274 against 343-350; 2 ranks: the same exchange.
func RecursiveDoublingBarrier(rank, size int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if size > 1 {
		recursiveDoubling(&s, BufToken, 0, Recv)
	}
	return s
}

// LinearBarrier is the barrier of a fan-in to rank 0 and a fan-out from it:
// every other rank sends rank 0 an empty message and waits for one back,
// which rank 0 sends once it has heard from all. Two hops whatever the
// size, rank 0 handling 2(size-1) messages; rank 0 leaves first, a hop
// before the others, where recursive doubling lets rank 0 go log2(size)
// hops after the last rank came in.
//
// That order is what a broadcast from rank 0 right after the barrier
// sees: its receivers wait for the root to leave the barrier. Open MPI
// 4.1's default barrier behaves as this one at 4 and 5 ranks (as its
// recursive doubling at 3 and 8), and its OSU broadcast times come from
// it: measured here over TCP with 4 ranks on 2 cores, Open
// MPI's 8-byte to 1 KiB broadcast took 17-20 us with its default barrier
// and 63-65 us with recursive doubling forced
// (coll_tuned_barrier_algorithm 3); goccl's took 48-52 us after its
// recursive-doubling barrier and 18-21 us after this one
// (GOCCL_ALGO=barrier:linear). The barrier itself took the same time
// either way at 4 ranks (66-70 us), 6-17% more at 5 and 20-50% more at 6.
// Measured again on another day, osu barrier, 3 000 calls: 3 ranks 50 us
// against recursive doubling's 58-70 (Open MPI's default: 81), 4 ranks
// 76-80 against 84-85 (Open MPI: 94), 5 ranks 189-204 against 180-191
// (Open MPI: 164); with it, osu allreduce and alltoall of 4 ranks took
// the same or less (8 B-16 KiB: 60-80 us either way). On 5 December
// (osu barrier, 2 000 calls, 2 alternating rounds) it took 101-112 us at
// 5 ranks, 121-125 at 6 and 188 at 7, against the priced
// dissemination's 157-165, 162-165 and 294-309 (recursive doubling
// 100-108, 137-140 and 306-321), but 285-294 at 8 against recursive
// doubling's 228 (16 ranks: all three within 10%). After it, osu bcast
// (8 B-64 KiB) took 14-19 us at 5 ranks, 19-25 at 6 against 28-51, and
// its loop's wall time fell by a fifth to a third; osu allreduce's loop
// took 12-18% less wall time at 5 ranks and the same at 6, but 5-12%
// more at 7. So the selector takes it on a crowded host of up to 6
// ranks (Algo.CrowdedUpTo), where the α-β model, which prices it at n
// α, cannot see that it costs no more: there every waiting rank yields,
// and a wake-up per dependent step, not the messages, makes the time;
// elsewhere recursive doubling.
func LinearBarrier(rank, size int) Schedule {
	s := Schedule{Rank: rank, Size: size}
	if rank != 0 {
		s.add(Send, 0, BufToken, 0, 0)
		s.add(Recv, 0, BufToken, 0, 0)
		return s
	}
	for r := 1; r < size; r++ {
		s.add(Recv, r, BufToken, 0, 0)
	}
	for r := 1; r < size; r++ {
		s.add(Send, r, BufToken, 0, 0)
	}
	return s
}

// Agreed appends to s, rank's schedule of a call on size ranks, the
// messages of a dissemination barrier. They carry the call's fingerprint
// like every message (collective, algorithm, type, count, root), so no
// rank finishes the call before every rank's fingerprint reached it,
// directly or through ranks that checked it: a rank whose call differs
// (another root, say) has each of its messages refused by its receiver,
// which fails, and every path from it to the other ranks is cut, so every
// rank fails in the same call instead of some completing with data from a
// root the others do not share. comm adds it to broadcasts and scatters of
// three or more ranks, where a leaf of the tree otherwise hears only from
// ranks that agree with it. Cost: ceil(log2 size) rounds of zero-byte
// messages, overlapping the call's own; each rank sends its barrier
// messages after its other messages to the same peer, as the receiver
// expects them.
func Agreed(s Schedule, size int) Schedule {
	if size < 2 {
		return s
	}
	b := DisseminationBarrier(s.Rank, size)
	s.Steps = append(s.Steps[:len(s.Steps):len(s.Steps)], b.Steps...)
	return s
}
