package comm

import "testing"

func TestStagingGeometry(t *testing.T) {
	const ki, mi = 1 << 10, 1 << 20
	for _, tc := range []struct {
		size, slots, chunk, budget int
		wantSlots, wantChunk       int
	}{
		{1, 8, 512 * ki, 64 * mi, 8, 512 * ki},         // no peers
		{16, 8, 512 * ki, 64 * mi, 8, 512 * ki},        // 15 x 4 MiB fit
		{17, 8, 512 * ki, 64 * mi, 8, 512 * ki},        // 16 x 4 MiB = 64 MiB fit
		{18, 8, 512 * ki, 64 * mi, 7, 512 * ki},        // fewer slots
		{64, 8, 512 * ki, 64 * mi, 2, 512 * ki},        // 63 x 1 MiB
		{65, 8, 512 * ki, 64 * mi, 2, 512 * ki},        // 64 x 1 MiB
		{66, 8, 512 * ki, 64 * mi, 2, 516160},          // smaller chunks
		{512, 8, 512 * ki, 64 * mi, 2, 65664},          // 511 x 2 x 64.1 KiB
		{65536, 8, 512 * ki, 64 * mi, 1, MinChunkSize}, // past the budget: the floor
		{512, 8, 512 * ki, 1 << 40, 8, 512 * ki},       // a budget that fits all
		{512, 1, 4 * ki, 64 * mi, 1, 4 * ki},           // already small
	} {
		slots, chunk := stagingGeometry(tc.size-1, tc.slots, tc.chunk, tc.budget)
		if slots != tc.wantSlots || chunk != tc.wantChunk {
			t.Errorf("stagingGeometry(%d ranks, %d x %d, budget %d) = %d x %d, want %d x %d",
				tc.size, tc.slots, tc.chunk, tc.budget, slots, chunk, tc.wantSlots, tc.wantChunk)
		}
		if tc.size > 1 && tc.size <= tc.budget/MinChunkSize && (tc.size-1)*slots*chunk > tc.budget {
			t.Errorf("%d ranks: %d peers x %d x %d exceed the budget %d", tc.size, tc.size-1, slots, chunk, tc.budget)
		}
		if chunk%64 != 0 {
			t.Errorf("%d ranks: chunk %d is not a multiple of 64", tc.size, chunk)
		}
	}
	// A job of more than MaxPeers+1 ranks releases its all-to-all links.
	for _, tc := range []struct {
		size, maxPeers int
		want           bool
	}{
		{2, 64, false}, {65, 64, false}, {66, 64, true}, {4096, 64, true}, {4096, 4095, false},
	} {
		if got := releasesLinks(tc.size, tc.maxPeers); got != tc.want {
			t.Errorf("releasesLinks(%d ranks, MaxPeers %d) = %v, want %v", tc.size, tc.maxPeers, got, tc.want)
		}
	}
}
