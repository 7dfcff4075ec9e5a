package comm

import "github.com/goccl/goccl/collectives"

// DefaultStagingBudget is the default of Options.StagingBudget: 64 MiB.
const DefaultStagingBudget = 64 << 20

// minStagingSlots is the fewest slots per peer the budget reduces a link
// to before it reduces the slot size: two keep a link's pipeline going
// (one chunk in flight while the previous one is consumed).
const minStagingSlots = 2

// stagingGeometry chooses the staging slots per peer (count and size in
// bytes, the size also the plans' chunk size) so that a rank connected to
// every one of its size-1 peers holds at most budget bytes of staging:
// slots x chunk per peer when that fits; else fewer slots, down to two;
// else two slots of a smaller chunk (a multiple of 64 bytes), down to
// MinChunkSize; past that (more than budget/MinChunkSize ranks) one slot
// of MinChunkSize, which exceeds the budget. It is a pure function of its
// arguments, so every rank of a job, given the same options, chooses the
// same geometry: the plans' chunking must agree across ranks.
//
// The bound is for the worst case, a rank linked to every peer (all-to-all
// collectives); ring and tree jobs link a few peers and use a few links'
// worth of it (see lazy.go).
func stagingGeometry(size, slots, chunk, budget int) (int, int) {
	peers := size - 1
	if peers < 1 || budget <= 0 || collectives.StagingSize(slots, chunk)*peers <= budget {
		return slots, chunk
	}
	perPeer := budget / peers
	if n := perPeer / chunk; n >= minStagingSlots {
		return min(n, slots), chunk
	}
	if c := perPeer / minStagingSlots &^ 63; c >= MinChunkSize {
		return min(minStagingSlots, slots), min(c, chunk)
	}
	return 1, MinChunkSize
}
