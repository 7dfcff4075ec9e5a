package comm

import (
	"fmt"
	"testing"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
)

// TestStoreLostBlamesItsHost: a rank whose call fails because the
// bootstrap store went away (setting up links at Init under torchrun,
// when rank 0, which hosts it, died) named itself as the failed rank
// ("rank 2 failed"); it names the rank that hosted the store, in the
// world and in a sub-communicator that has it, and itself when no rank
// hosted it (gorun's store).
func TestStoreLostBlamesItsHost(t *testing.T) {
	err := fmt.Errorf("connecting ranks 1, 3: waiting for the addresses: %w", bootstrap.ErrStoreLost)
	for _, tc := range []struct {
		name      string
		rank      int
		world     []int
		storeHost int
		root      int
	}{
		{"world, rank 0 hosts", 2, nil, 0, 0},
		{"sub-communicator holding world rank 0 as its rank 2", 1, []int{4, 3, 0}, 0, 2},
		{"sub-communicator without the host", 1, []int{4, 3}, 0, 1},
		{"gorun hosts", 2, nil, -1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := 4
			if tc.world != nil {
				size = len(tc.world)
			}
			c := &Comm{rank: tc.rank, size: size, world: tc.world, fabric: fabric{held: &holders{storeHost: tc.storeHost}}}
			f := c.classify(err, nil)
			if f.root != tc.root {
				t.Fatalf("root %d, want %d (reason %v, detail %q)", f.root, tc.root, f.reason, f.detail)
			}
			if tc.root != tc.rank && f.reason != collectives.NoticeLost {
				t.Fatalf("reason %v, want lost", f.reason)
			}
		})
	}
}
