package comm_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestSplit splits 7 ranks (5 over TCP under -race) by parity with keys in reverse order, checks
// the new ranks, and interleaves collectives on the parent, both children
// and a duplicate: each communicator's results are its own.
func TestSplit(t *testing.T) {
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			n := 7 // colors of 4 and 3 ranks
			if raceEnabled && kind != "mem" {
				n = 5 // 3 and 2: 7 ranks' sockets take 7 s raced
			}
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				color := c.Rank() % 2
				sub, err := c.Split(ctx, color, -c.Rank())
				if err != nil {
					return err
				}
				defer sub.Close()
				// Members of my color, by descending parent rank.
				var members []int
				for r := c.Size() - 1; r >= 0; r-- {
					if r%2 == color {
						members = append(members, r)
					}
				}
				if sub.Size() != len(members) || members[sub.Rank()] != c.Rank() {
					return fmt.Errorf("split: rank %d of %d, want position of %d in %v", sub.Rank(), sub.Size(), c.Rank(), members)
				}
				dup, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer dup.Close()
				if dup.Rank() != c.Rank() || dup.Size() != c.Size() {
					return fmt.Errorf("dup: rank %d of %d", dup.Rank(), dup.Size())
				}
				none, err := c.Split(ctx, -1, 0)
				if err != nil || none != nil {
					return fmt.Errorf("split with a negative color: %v, %v", none, err)
				}
				for i := range 5 {
					// Start one on each, then wait: they run at once on
					// separate connections.
					pb := []float32{float32(c.Rank())}
					sb := []float32{float32(c.Rank() + 100)}
					db := []float32{1}
					rp := AllreduceAsync(c, pb, pb, Sum)
					rs := AllreduceAsync(sub, sb, sb, Sum)
					rd := AllreduceAsync(dup, db, db, Sum)
					if err := WaitAll(ctx, rp, rs, rd); err != nil {
						return err
					}
					wantSub := 0
					for _, m := range members {
						wantSub += m + 100
					}
					wantParent := float32(n * (n - 1) / 2)
					if pb[0] != wantParent || sb[0] != float32(wantSub) || db[0] != float32(n) {
						return fmt.Errorf("round %d: parent %v (want %v), split %v (want %d), dup %v (want %d)", i, pb[0], wantParent, sb[0], wantSub, db[0], n)
					}
				}
				return nil
			})
		})
	}
}
