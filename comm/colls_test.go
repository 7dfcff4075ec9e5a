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

// TestGathervScattervEdges: in place on the root (send its own block of
// recv; recv its own block of send), counts the root refuses (every rank
// that sends in the call fails in it, naming them; a rank with an empty
// block sends nothing and learns in its next call), and a rank whose
// block's length differs from the root's count for it.
func TestGathervScattervEdges(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			const n = 3
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				counts, displs := []int{2, 0, 3}, []int{4, 9, 0} // root 2's block first
				// In place on root 2: its send is its own block of recv.
				all := make([]int32, 7)
				mine := make([]int32, counts[me])
				for i := range mine {
					mine[i] = int32(10*me + i)
				}
				send := mine
				if me == 2 {
					copy(all[displs[2]:], mine)
					send = all[displs[2] : displs[2]+counts[2]]
				}
				if err := Gatherv(ctx, c, send, all, counts, displs, 2); err != nil {
					return fmt.Errorf("gatherv in place: %w", err)
				}
				if me == 2 {
					if want := []int32{20, 21, 22, 0, 0, 1, 0}; fmt.Sprint(all) != fmt.Sprint(want) {
						return fmt.Errorf("gatherv in place: root has %v, want %v", all, want)
					}
					// Scatter it back in place: recv is root's own block.
					clear(all[displs[2] : displs[2]+counts[2]])
					copy(all[displs[2]:], []int32{7, 8, 9})
				}
				var recv []int32
				if me == 2 {
					recv = all[displs[2] : displs[2]+counts[2]]
				} else {
					recv = make([]int32, counts[me])
				}
				if err := Scatterv(ctx, c, all, recv, counts, displs, 2); err != nil {
					return fmt.Errorf("scatterv in place: %w", err)
				}
				want := map[int]string{0: "[0 1]", 1: "[]", 2: "[7 8 9]"}[me]
				if fmt.Sprint(recv) != want {
					return fmt.Errorf("scatterv in place: rank %d has %v, want %s", me, recv, want)
				}
				// Counts the root refuses: every rank's call fails.
				d, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				err = Gatherv(ctx, d, make([]int32, 1), make([]int32, 3), []int{1, 1}, nil, 0)
				d.Close()
				if err == nil || !strings.Contains(err.Error(), "2 recv counts for 3 ranks") {
					return fmt.Errorf("gatherv with 2 counts for 3 ranks: %v, want every rank to fail naming the counts", err)
				}
				// Rank 1 sends 4 elements where root 0 expects 1.
				d, err = c.Dup(ctx)
				if err != nil {
					return err
				}
				defer d.Close()
				block := make([]int32, 1)
				if me == 1 {
					block = make([]int32, 4)
				}
				err = Gatherv(ctx, d, block, make([]int32, 3), []int{1, 1, 1}, nil, 0)
				if err == nil && me != 0 {
					// A rank that only sends returns once its block is
					// sent, as in Gather: it learns in its next call.
					err = d.Barrier(ctx)
				}
				if err == nil || !strings.Contains(err.Error(), "rank 0 <- 1: received 16 bytes where this rank expects 4") {
					return fmt.Errorf("gatherv with rank 1's block longer than root's count: %v, want every rank to fail naming the lengths", err)
				}
				return nil
			})
		})
	}
}

// TestGathervScattervStrictEmptyBlocks: with StrictChecks a root and a
// rank that disagree on the length of the rank's block in a Gatherv or
// Scatterv both fail in the call, also where one of them sees the block as
// empty: an empty block moved nothing, so neither could check the other,
// and the side that saw it empty completed the call without error (the
// root of a gatherv that expected nothing from rank 1, rank 1 of a
// gatherv whose root expected its 2 elements, and alike in a scatterv).
func TestGathervScattervStrictEmptyBlocks(t *testing.T) {
	opts := testOpts
	opts.StrictChecks = true
	for _, kind := range []string{"mem", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			runRanksOn(t, kind, 3, opts, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				for _, tc := range []struct {
					gather     bool
					root, rank int // root's count of rank 1's block, and rank 1's own
				}{
					{true, 0, 2}, {true, 2, 0}, {false, 0, 2}, {false, 2, 0},
				} {
					d, err := c.Dup(ctx)
					if err != nil {
						return err
					}
					own := 2
					if me == 1 {
						own = tc.rank
					}
					counts := []int{2, tc.root, 2}
					name := fmt.Sprintf("scatterv (root's count %d, rank 1's block %d)", tc.root, tc.rank)
					if tc.gather {
						name = "gatherv" + name[len("scatterv"):]
						err = Gatherv(ctx, d, make([]int32, own), make([]int32, 4+tc.root), counts, nil, 0)
					} else {
						err = Scatterv(ctx, d, make([]int32, 4+tc.root), make([]int32, own), counts, nil, 0)
					}
					d.Close()
					if me != 2 && err == nil {
						return fmt.Errorf("%s: no error on rank %d, which disagrees with the other", name, me)
					}
				}
				// Agreeing empty blocks still work, and the parent is intact.
				recv := make([]int32, 2)
				counts := []int{0, 0, 2}
				send := []int32{}
				if me == 2 {
					send = []int32{5, 6}
				}
				if err := Gatherv(ctx, c, send, recv, counts, nil, 0); err != nil {
					return fmt.Errorf("gatherv with agreed empty blocks: %w", err)
				}
				out := make([]int32, counts[me])
				if err := Scatterv(ctx, c, recv, out, counts, nil, 0); err != nil {
					return fmt.Errorf("scatterv with agreed empty blocks: %w", err)
				}
				if me == 2 && fmt.Sprint(out) != "[5 6]" {
					return fmt.Errorf("rank 2 got %v, want [5 6]", out)
				}
				return c.Barrier(ctx)
			})
		})
	}
}

// TestVPlansFollowTheirCounts runs v-collectives whose calls differ only
// in how the same total is split (counts, then displacements), back and
// forth: their plans are cached by the counts and displacements
// themselves, and each call must get the blocks where its own arguments
// put them.
func TestVPlansFollowTheirCounts(t *testing.T) {
	for _, kind := range []string{"mem", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			const n = 3
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				for i, v := range []struct{ counts, displs []int }{
					{[]int{1, 2, 3}, nil},
					{[]int{3, 2, 1}, nil},
					{[]int{1, 2, 3}, []int{5, 3, 0}},
					{[]int{1, 2, 3}, nil},
					{[]int{3, 2, 1}, []int{3, 1, 0}},
				} {
					send := make([]int32, v.counts[me])
					for j := range send {
						send[j] = int32(100*me + j + 1)
					}
					recv := make([]int32, 6)
					if err := Allgatherv(ctx, c, send, recv, v.counts, v.displs); err != nil {
						return err
					}
					grecv := make([]int32, 6)
					if err := Gatherv(ctx, c, send, grecv, v.counts, v.displs, 1); err != nil {
						return err
					}
					want := make([]int32, 6)
					off := 0
					for r, cnt := range v.counts {
						d := off
						if v.displs != nil {
							d = v.displs[r]
						}
						for j := range cnt {
							want[d+j] = int32(100*r + j + 1)
						}
						off += cnt
					}
					if fmt.Sprint(recv) != fmt.Sprint(want) {
						return fmt.Errorf("call %d (counts %v, displs %v): allgatherv gave %v, want %v", i, v.counts, v.displs, recv, want)
					}
					if me == 1 && fmt.Sprint(grecv) != fmt.Sprint(want) {
						return fmt.Errorf("call %d (counts %v, displs %v): gatherv gave %v, want %v", i, v.counts, v.displs, grecv, want)
					}
				}
				return nil
			})
		})
	}
}

// TestPersistentVCollectives starts persistent v-collectives
// (AllgathervInit, GathervInit, ScattervInit, AlltoallvInit) several times
// on new data, with the counts copied at Init (the caller's slices are
// changed after it), and checks every result.
func TestPersistentVCollectives(t *testing.T) {
	for _, kind := range []string{"mem", "tcp"} {
		t.Run(kind, func(t *testing.T) {
			const n = 3
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				counts := []int{1, 2, 3}
				a2a := []int{2, 2, 2}
				mine := make([]int32, counts[me])
				all, gall := make([]int32, 6), make([]int32, 6)
				sall, smine := make([]int32, 6), make([]int32, counts[me])
				asend, arecv := make([]int32, 6), make([]int32, 6)
				var ps []*Persistent
				for _, mk := range []func() (*Persistent, error){
					func() (*Persistent, error) { return AllgathervInit(c, mine, all, counts, nil) },
					func() (*Persistent, error) { return GathervInit(c, mine, gall, counts, nil, 1) },
					func() (*Persistent, error) { return ScattervInit(c, sall, smine, counts, nil, 2) },
					func() (*Persistent, error) { return AlltoallvInit(c, asend, a2a, nil, arecv, a2a, nil) },
				} {
					p, err := mk()
					if err != nil {
						return err
					}
					ps = append(ps, p)
				}
				counts[0], a2a[0] = 9, 9 // copied at Init: the starts do not see it
				for step := range 5 {
					val := func(r, i int) int32 { return int32(1000*step + 10*r + i) }
					for i := range mine {
						mine[i] = val(me, i)
					}
					for i := range sall {
						sall[i] = val(me, i)
						asend[i] = val(me, i)
					}
					for _, p := range ps {
						if err := p.Start(); err != nil {
							return err
						}
						if err := p.Wait(ctx); err != nil {
							return fmt.Errorf("step %d: %w", step, err)
						}
					}
					off := 0
					for r, cnt := range []int{1, 2, 3} {
						for i := range cnt {
							if all[off+i] != val(r, i) || (me == 1 && gall[off+i] != val(r, i)) {
								return fmt.Errorf("step %d: block %d: allgatherv %v, gatherv %v", step, r, all, gall)
							}
						}
						off += cnt
					}
					soff := []int{0, 1, 3}[me]
					for i := range smine {
						if smine[i] != val(2, soff+i) {
							return fmt.Errorf("step %d: scatterv gave %v", step, smine)
						}
					}
					for r := range n {
						for i := range 2 {
							if arecv[2*r+i] != val(r, 2*me+i) {
								return fmt.Errorf("step %d: alltoallv gave %v", step, arecv)
							}
						}
					}
				}
				return nil
			})
		})
	}
}
