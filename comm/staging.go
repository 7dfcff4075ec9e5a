package comm

import "github.com/goccl/goccl/collectives"

// DefaultStagingBudget is the default of Options.StagingBudget: 64 MiB.
const DefaultStagingBudget = 64 << 20

// DefaultPeerWindow is the default of Options.PeerWindow: an all-to-all
// exchanges with 16 peers at a time, both ways (MPICH's medium-message
// all-to-all posts its receives and sends in batches of 32 peers,
// MPIR_CVAR_ALLTOALL_THROTTLE; a window here also bounds the links held).
const DefaultPeerWindow = 16

// DefaultMaxPeers is the default of Options.MaxPeers: jobs of up to 65
// ranks keep every link they make.
const DefaultMaxPeers = 64

// minStagingSlots is the fewest slots per peer the budget reduces a link
// to before it reduces the slot size: two keep a link's pipeline going
// (one chunk in flight while the previous one is consumed).
const minStagingSlots = 2

// stagingGeometry chooses the staging slots per peer (count and size in
// bytes, the size also the plans' chunk size) so that a rank linked to
// links peers holds at most budget bytes of staging: slots x chunk per
// peer when that fits; else fewer slots, down to two; else two slots of a
// smaller chunk (a multiple of 64 bytes), down to MinChunkSize; past that
// (more than budget/MinChunkSize links) one slot of MinChunkSize, which
// exceeds the budget. It is a pure function of its arguments, so every
// rank of a job, given the same options, chooses the same geometry: the
// plans' chunking must agree across ranks.
//
// links is the job's size-1: the bound holds whatever peers a rank
// connects. Ring and tree jobs link a few peers and use a few links'
// worth of it; an all-to-all in a job of more than MaxPeers+1 ranks
// holds a window of links at a time (lazy.go). (Sizing for MaxPeers
// links instead would give larger chunks at scale, but a rank that keeps
// more links than that would exceed the budget.)
func stagingGeometry(links, slots, chunk, budget int) (int, int) {
	if links < 1 || budget <= 0 || collectives.StagingSize(slots, chunk)*links <= budget {
		return slots, chunk
	}
	perPeer := budget / links
	if n := perPeer / chunk; n >= minStagingSlots {
		return min(n, slots), chunk
	}
	if c := perPeer / minStagingSlots &^ 63; c >= MinChunkSize {
		return min(minStagingSlots, slots), min(c, chunk)
	}
	return 1, MinChunkSize
}

// releasesLinks reports whether a job of size ranks closes the links its
// windowed all-to-alls make once a batch is done (Options.MaxPeers). It
// depends only on the job and the options, so both ranks of a pair agree.
func releasesLinks(size, maxPeers int) bool { return size-1 > maxPeers }
