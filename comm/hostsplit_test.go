package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// TestSplitByHost: Host, LocalRank and LocalSize say where a rank is among
// the hosts of any layout (interleaved, of unequal rank counts, one host),
// and SplitByHost (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED) makes a
// communicator of each host's ranks, ordered by key, whose collectives
// reach only them; LocalRank and LocalSize of the parent are the rank and
// size in it with key 0.
func TestSplitByHost(t *testing.T) {
	for _, kind := range []string{"mem-hosts", "hosts"} {
		for _, layout := range [][]int{{0, 1, 0, 1, 1}, {1, 1, 0, 0, 0}, {0, 0, 0}} {
			t.Run(fmt.Sprint(kind, layout), func(t *testing.T) {
				// The hosts as Host numbers them: in the order of their
				// lowest ranks.
				index := map[int]int{}
				for _, h := range layout {
					if _, ok := index[h]; !ok {
						index[h] = len(index)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				errs := commtest.RunOnHosts(ctx, kind, layout, testOptsFast, func(c *Comm) error {
					r := c.Rank()
					var local []int // world ranks on this host
					for q, h := range layout {
						if h == layout[r] {
							local = append(local, q)
						}
					}
					localRank := 0
					for localRank < len(local) && local[localRank] != r {
						localRank++
					}
					if c.Hosts() != len(index) || c.Host() != index[layout[r]] || c.LocalRank() != localRank || c.LocalSize() != len(local) {
						return fmt.Errorf("hosts %d, host %d, local rank %d of %d; want %d, %d, %d of %d",
							c.Hosts(), c.Host(), c.LocalRank(), c.LocalSize(), len(index), index[layout[r]], localRank, len(local))
					}
					for _, key := range []int{0, -r - 1} { // -r-1: the host's ranks in reverse
						sub, err := c.SplitByHost(ctx, key)
						if err != nil {
							return fmt.Errorf("key %d: %w", key, err)
						}
						want := localRank
						if key != 0 {
							want = len(local) - 1 - localRank
						}
						if sub.Size() != len(local) || sub.Rank() != want || sub.Hosts() != 1 || sub.LocalSize() != len(local) || sub.LocalRank() != sub.Rank() {
							sub.Close()
							return fmt.Errorf("key %d: rank %d of %d on %d hosts (local %d of %d), want rank %d of %d on one host",
								key, sub.Rank(), sub.Size(), sub.Hosts(), sub.LocalRank(), sub.LocalSize(), want, len(local))
						}
						sum := []int64{int64(r)}
						if err := Allreduce(ctx, sub, sum, sum, Sum); err != nil {
							sub.Close()
							return fmt.Errorf("key %d: allreduce: %w", key, err)
						}
						wantSum := int64(0)
						for _, q := range local {
							wantSum += int64(q)
						}
						if err := sub.Close(); err != nil {
							return fmt.Errorf("key %d: close: %w", key, err)
						}
						if sum[0] != wantSum {
							return fmt.Errorf("key %d: the host's allreduce of world ranks gave %d, want %d (ranks %v)", key, sum[0], wantSum, local)
						}
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}
