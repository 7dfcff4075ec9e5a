package comm_test

import (
	"context"
	"fmt"
	"strings"
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
		for _, n := range tableRanks(kind, rankTable{
			mem: []int{1, 2, 3, 4, 5, 7, 8, 16}, memRace: []int{2, 5},
			tcp: []int{2, 3}, tcpRace: []int{2},
		}) {
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

// rankTable lists the rank counts a collective table runs with: on the
// in-memory transport the counts the algorithms branch on (one rank, two,
// odd counts, powers of two and 16, where the recursive and tree schedules
// have their remainders and depths), over TCP a few, where each count costs
// seconds of sockets and spinning goroutines in one process and adds
// nothing the in-memory table, the schedules' simulation at 1..33 ranks and
// the process tests under gorun do not already check. Under the race
// detector the smaller lists: the concurrency it looks at (a reader and a
// writer per link, several links, the worker and the callers) is all there
// at a few ranks, and it multiplies every count's cost.
type rankTable struct{ mem, memRace, tcp, tcpRace []int }

// tableRanks are the rank counts of table r on kind.
func tableRanks(kind string, r rankTable) []int {
	switch {
	case kind == "mem" && raceEnabled:
		return r.memRace
	case kind == "mem":
		return r.mem
	case raceEnabled:
		return r.tcpRace
	}
	return r.tcp
}

// TestBitwiseOps runs the reducing collectives with the bitwise operations
// (BAnd, BOr, BXor) on every integer type, every algorithm, over each
// transport, against the reference computed on the integers' bits; with a
// floating-point type the call is refused on every rank, naming the
// operation.
func TestBitwiseOps(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			runRanksOn(t, kind, 3, testOpts, func(c *Comm) error {
				ctx := context.Background()
				for _, count := range []int{1, 13} {
					for _, check := range []func() error{
						func() error { return commtest.CheckAll[int8](ctx, c, count, commtest.BitwiseOps) },
						func() error { return commtest.CheckAll[uint8](ctx, c, count, commtest.BitwiseOps) },
						func() error { return commtest.CheckAll[int32](ctx, c, count, commtest.BitwiseOps) },
						func() error { return commtest.CheckAll[uint32](ctx, c, count, commtest.BitwiseOps) },
						func() error { return commtest.CheckAll[int64](ctx, c, count, commtest.BitwiseOps) },
						func() error { return commtest.CheckAllRegistered[uint64](ctx, c, count, commtest.BitwiseOps) },
					} {
						if err := check(); err != nil {
							return err
						}
					}
				}
				d, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer d.Close()
				buf := make([]float32, 4)
				if err := Allreduce(ctx, d, buf, buf, BXor); err == nil || !strings.Contains(err.Error(), "bxor is a bitwise operation, for integer types only") {
					return fmt.Errorf("allreduce of float32 with BXor: %v, want a refusal naming the operation", err)
				}
				return nil
			})
		})
	}
}
