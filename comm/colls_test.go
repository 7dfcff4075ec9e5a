package comm_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// The collective table test: every collective, every algorithm (forced
// through WithAlgorithm, plus the selector's choice), several types,
// operations and sizes, on plain and registered buffers, over the
// in-memory and TCP transports, each result compared with a reference
// computed independently in float64.

func TestCollectivesTable(t *testing.T) {
	for _, kind := range transports {
		for _, n := range tableRanks(kind, []int{1, 2, 3, 5}) {
			t.Run(fmt.Sprintf("%s/ranks=%d", kind, n), func(t *testing.T) {
				runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
					ctx := context.Background()
					for _, count := range []int{0, 1, 7, 13, 3*n + 1} {
						if err := commtest.CheckAll[float32](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
						if err := commtest.CheckAll[int64](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
					}
					for _, count := range []int{1, 13} {
						if err := commtest.CheckAll[float64](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
						if err := commtest.CheckAll[int32](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
						if err := commtest.CheckAll[int8](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
						if err := commtest.CheckAll[uint8](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
						if err := commtest.CheckAll[uint32](ctx, c, count, []Op{Sum, Max}); err != nil {
							return err
						}
						if err := commtest.CheckAll[uint64](ctx, c, count, []Op{Sum, Min}); err != nil {
							return err
						}
					}
					// Registered buffers (comm.Alloc): the collectives use
					// them directly, reductions from a registered send
					// buffer fused with the first step.
					for _, count := range []int{1, 3*n + 1} {
						if err := commtest.CheckAllRegistered[float32](ctx, c, count, commtest.AllOps); err != nil {
							return err
						}
						if err := commtest.CheckAllRegistered[int64](ctx, c, count, []Op{Sum, Max}); err != nil {
							return err
						}
					}
					// 1 MiB + 3 elements' worth, once per collective.
					// 1 MiB + 3 elements per block up to 4 ranks; beyond, the block
					// shrinks so the block collectives (n blocks per rank, and
					// Bruck's log n rounds of n/2 blocks) stay a few seconds.
					return commtest.CheckAll[float32](ctx, c, bigCount/max(1, n/4), []Op{Sum})
				})
			})
		}
	}
}

// tableRanks are the rank counts the collective tables run with on kind:
// every count to 9, and 16, on the in-memory transport (raced: those of
// race); up to 4 over TCP (raced: 3), where each rank count costs seconds of sockets
// and spinning goroutines in one process and adds nothing the in-memory
// table, the schedules' simulation at 1..33 ranks and the process tests
// under gorun do not already check.
func tableRanks(kind string, race []int) []int {
	ranks := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16}
	if raceEnabled {
		ranks = race
	}
	if kind == "mem" {
		return ranks
	}
	top := 4
	if raceEnabled {
		// The race detector multiplies the TCP transport's cost; its
		// concurrency (a reader and a writer per link, several links)
		// is all there at 3 ranks.
		top = 3
	}
	var out []int
	for _, n := range ranks {
		if n >= 2 && n <= top {
			out = append(out, n)
		}
	}
	return out
}
