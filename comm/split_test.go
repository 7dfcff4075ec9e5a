package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
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

// A sub-communicator outlives the communicator it was split from, as in
// MPI (MPI_Comm_free of the parent leaves its children working): the
// parent closed first, the children still run collectives, split again
// and close cleanly. Over TCP the parent's Close closed the device the
// children used ("register staging buffer: device: closed").
func TestSplitOutlivesItsParent(t *testing.T) {
	for _, kind := range commtest.Kinds {
		t.Run(kind, func(t *testing.T) {
			const n = 4
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
				if err != nil {
					return err
				}
				dup, err := c.Dup(ctx)
				if err != nil {
					sub.Close()
					return err
				}
				if err := c.Close(); err != nil {
					sub.Close()
					dup.Close()
					return fmt.Errorf("parent close: %w", err)
				}
				for i, cc := range []*Comm{sub, dup} {
					// Registered (staging) and user memory, small and large.
					for _, count := range []int{3, 1 << 16} {
						buf, err := Alloc[float64](cc, count)
						if err != nil {
							return fmt.Errorf("communicator %d: alloc: %w", i, err)
						}
						for j := range buf {
							buf[j] = float64(c.Rank())
						}
						plain := slices.Clone(buf)
						if err := Allreduce(ctx, cc, buf, buf, Sum); err != nil {
							return fmt.Errorf("communicator %d: allreduce of %d: %w", i, count, err)
						}
						if err := Allreduce(ctx, cc, plain, plain, Max); err != nil {
							return fmt.Errorf("communicator %d: allreduce of %d (max): %w", i, count, err)
						}
						want, wantMax := 0.0, 0.0
						for r := range n {
							if i == 1 || r%2 == c.Rank()%2 {
								want += float64(r)
								wantMax = max(wantMax, float64(r))
							}
						}
						if buf[count-1] != want || plain[count-1] != wantMax {
							return fmt.Errorf("communicator %d: allreduce of %d: got %v and %v, want %v and %v", i, count, buf[count-1], plain[count-1], want, wantMax)
						}
						if err := Free(cc, buf); err != nil {
							return err
						}
					}
				}
				// A grandchild, split after its grandparent closed.
				half, err := dup.Split(ctx, c.Rank()/2, 0)
				if err != nil {
					return fmt.Errorf("split of the duplicate: %w", err)
				}
				v := []int32{1}
				if err := Allreduce(ctx, half, v, v, Sum); err != nil || v[0] != 2 {
					return fmt.Errorf("grandchild allreduce: %v, %w", v, err)
				}
				return errors.Join(half.Close(), dup.Close(), sub.Close())
			})
		})
	}
}

// An error of a sub-communicator's call names it and where its ranks are
// in the world: the ranks the error names are the sub-communicator's,
// while the launcher tags each rank's output with its world rank.
func TestSubCommunicatorErrorsSayWhere(t *testing.T) {
	// Over shared memory a blocking call takes the board's quick way,
	// which said nothing of the sub-communicator; and a later call's
	// error, made of the communicator's first, said it twice.
	for _, kind := range []string{"mem", "shm", "tcp"} {
		t.Run(kind, func(t *testing.T) { subErrorsSayWhere(t, kind) })
	}
}

func subErrorsSayWhere(t *testing.T, kind string) {
	const n = 4
	once := func(err error, want string) bool {
		return err != nil && strings.HasSuffix(err.Error(), want) && strings.Count(err.Error(), want) == 1
	}
	runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
		ctx := context.Background()
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		dup, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		defer dup.Close()
		if c.Rank() == 3 {
			sub.Abort(nil)
			dup.Abort(nil)
			return Allreduce(ctx, c, []float32{1}, []float32{0}, Sum)
		}
		want := []string{"[sub-communicator world/split1/color0, whose ranks 0-1 are world ranks 0, 2]",
			"[sub-communicator world/split1/color1, whose ranks 0-1 are world ranks 1, 3]"}[c.Rank()%2]
		if c.Rank()%2 == 1 {
			err := Allreduce(ctx, sub, []float32{1}, []float32{0}, Sum)
			if !once(err, want) || !strings.Contains(err.Error(), "rank 1") {
				return fmt.Errorf("sub-communicator error %v, want it to end with %q, once", err, want)
			}
			// The next calls say it too, once.
			if err := sub.Barrier(ctx); !once(err, want) {
				return fmt.Errorf("later call: %v", err)
			}
			if err := Allreduce(ctx, sub, []float32{1}, []float32{0}, Sum); !once(err, want) {
				return fmt.Errorf("later allreduce: %v", err)
			}
		}
		err = Allreduce(ctx, dup, []float32{1}, []float32{0}, Sum)
		if want := "[sub-communicator world/split2/color0, whose ranks are the world's]"; !once(err, want) {
			return fmt.Errorf("duplicate's error %v, want it to end with %q", err, want)
		}
		// The world's own errors are as they were.
		if err := Allreduce(ctx, c, []float32{1}, []float32{0}, Sum); err != nil {
			return err
		}
		return nil
	})
}

func TestDescribeWorld(t *testing.T) {
	for _, tc := range []struct {
		world []int
		want  string
	}{
		{[]int{0, 1, 2}, "whose ranks are the world's"},
		{[]int{5}, "whose rank 0 is world rank 5"},
		{[]int{1, 3, 5, 7}, "whose ranks 0-3 are world ranks 1-7 step 2"},
		{[]int{4, 5, 6, 7, 9, 0}, "whose ranks 0-5 are world ranks 4-7, 9, 0"},
		{[]int{2, 0}, "whose ranks 0-1 are world ranks 2, 0"},
		{[]int{6, 4, 2, 1}, "whose ranks 0-3 are world ranks 6-2 step -2, 1"},
	} {
		if got := DescribeWorld("x", tc.world); got != "sub-communicator x, "+tc.want {
			t.Errorf("%v: %q, want %q", tc.world, got, tc.want)
		}
	}
}

// A parent closed by one goroutine while another runs calls on a child:
// the child's calls go on and stay right (a data-parallel group closing
// while a tensor-parallel one still works).
func TestParentClosesWhileChildRuns(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			const n = 4
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				sub, err := c.Split(ctx, c.Rank()/2, 0)
				if err != nil {
					return err
				}
				defer sub.Close()
				done := make(chan error, 1)
				go func() {
					for i := range 20 {
						v := []int64{1}
						if err := Allreduce(ctx, c, v, v, Sum); err != nil || v[0] != n {
							done <- fmt.Errorf("parent call %d: %v, %w", i, v, err)
							return
						}
					}
					done <- c.Close()
				}()
				for i := range 200 {
					v := []int64{int64(c.Rank()), int64(i)}
					if err := Allreduce(ctx, sub, v, v, Sum); err != nil {
						return fmt.Errorf("child call %d: %w", i, err)
					}
					lo := int64(c.Rank() / 2 * 2)
					if v[0] != 2*lo+1 || v[1] != int64(2*i) {
						return fmt.Errorf("child call %d: %v", i, v)
					}
				}
				return <-done
			})
		})
	}
}

// Split orders a color's ranks by key over the whole int64 range: keys
// MaxInt64, MinInt64 and 0 give ranks 2, 0 and 1 (the subtraction that
// compared them overflowed: 1, 2 and 0).
func TestSplitExtremeKeys(t *testing.T) {
	keys := []int{math.MaxInt64, math.MinInt64, 0}
	runRanksOn(t, "mem", 3, testOpts, func(c *Comm) error {
		sub, err := c.Split(context.Background(), 0, keys[c.Rank()])
		if err != nil {
			return err
		}
		defer sub.Close()
		if want := []int{2, 0, 1}[c.Rank()]; sub.Rank() != want {
			return fmt.Errorf("key %d: rank %d in the split, want %d", keys[c.Rank()], sub.Rank(), want)
		}
		return nil
	})
}

// TestSplitAgainstAnAllgatherIsAMismatch: Split gathers each rank's color
// and key as two int64. A rank that calls Allgather of two int64 while
// another calls Split made the same call on the wire: the allgather
// returned nil holding the split's color and key, and the splitting rank
// formed a communicator from the allgather's data. Both fail now, as any
// other mismatch.
func TestSplitAgainstAnAllgatherIsAMismatch(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) { splitAgainstAllgather(t, kind, 20*time.Second) })
	}
}

// splitAgainstAllgather runs rank 0's Split against rank 1's Allgather of
// two int64 over kind, with the communicator timeout given, and checks
// that both ranks report a collective mismatch.
func splitAgainstAllgather(t *testing.T, kind string, timeout time.Duration) {
	t.Helper()
	errs := make([]error, 2)
	opts := testOpts
	opts.Timeout = timeout
	runRanksOn(t, kind, 2, opts, func(c *Comm) error {
		ctx := context.Background()
		if c.Rank() == 0 {
			sub, err := c.Split(ctx, 0, 0)
			if sub != nil {
				sub.Close()
			}
			errs[0] = err
			return nil
		}
		recv := make([]int64, 4)
		errs[1] = Allgather(ctx, c, []int64{7, 7}, recv)
		if errs[1] == nil {
			errs[1] = fmt.Errorf("allgather returned nil with %v", recv)
		}
		return nil
	})
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if err == nil || !strings.Contains(err.Error(), "mismatch") {
			t.Errorf("rank %d: %v, want a collective mismatch", r, err)
		}
	}
}

// TestMismatchFoundWhileLinking: rank 0 calls Split, rank 1 Allgather, and
// rank 0's link set-up gets rank 1's address only after 150 ms (as on a
// loaded host), so that its look-around (20 ms in) finds rank 1 in another
// call before the link is made, while rank 1 has made its side and waits
// for rank 0's data. Rank 0 failed at once, without the link, and rank 1
// waited for its timeout and then took itself for the root of a stall (CI
// under load: "rank 1 is at the root of a stall: rank 0 failed and found
// rank 1 at the root"), or, where it had dialled, took rank 0 for lost.
// Rank 0 now fails in the set-up's grace: it makes the link, and its
// notice tells rank 1 of the mismatch.
func TestMismatchFoundWhileLinking(t *testing.T) {
	mismatchWhileLinking(t, 150*time.Millisecond)
}

// TestMismatchFoundWhileLinkingLate: as TestMismatchFoundWhileLinking, but
// rank 1's address reaches rank 0's set-up only after its grace (800 ms),
// so that rank 0 fails without the link. Rank 1 learns of the mismatch
// from rank 0's report: at its first stall look, if it accepts (it waits
// for rank 0's dial; before, it said "the root of a stall" at its
// timeout), or once rank 0 closes the connection it dialled (before,
// "rank 0 failed or lost its connection").
func TestMismatchFoundWhileLinkingLate(t *testing.T) {
	mismatchWhileLinking(t, 800*time.Millisecond)
}

// mismatchWhileLinking runs splitAgainstAllgather over TCP with rank 1's
// address reaching rank 0's link set-up delay late, and wants both ranks'
// mismatch well before their 20 s timeout.
func mismatchWhileLinking(t *testing.T, delay time.Duration) {
	t.Helper()
	restore := SetAddrHook(func(rank, peer int) {
		if rank == 0 {
			time.Sleep(delay)
		}
	})
	defer restore()
	start := time.Now()
	splitAgainstAllgather(t, "tcp", 20*time.Second)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the ranks failed after %v: rank 1 waited for its timeout", d)
	}
}

// TestParentWorksAfterSubFailure: a parent used after a sub-communicator
// of its family failed closes as usual: a peer that calls once more is
// told that rank 1 closed, not the sub-communicator's old failure (only a
// parent closed on that error, with no call since, passes the failure
// on: TestParentCloseAfterSubFailure).
func TestParentWorksAfterSubFailure(t *testing.T) {
	for _, kind := range []string{"tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			comms, err := commtest.Connect(context.Background(), kind, 3, testOpts)
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 3)
			for _, c := range comms {
				go func() {
					errs <- func() error {
						ctx := context.Background()
						sub, err := c.Split(ctx, min(c.Rank(), 1), c.Rank())
						if err != nil {
							return err
						}
						if c.Rank() == 2 {
							sub.Abort(errors.New("rank 2 gives up on its sub-communicator"))
						} else if err := Allreduce(ctx, sub, []float32{1}, make([]float32, 1), Sum); c.Rank() == 1 && err == nil {
							return errors.New("rank 1: the allreduce with an aborted peer succeeded")
						}
						for range 3 {
							if err := c.Barrier(ctx); err != nil {
								return fmt.Errorf("rank %d: parent barrier: %w", c.Rank(), err)
							}
						}
						if c.Rank() == 1 {
							return c.Close()
						}
						// Rank 1 closed: a barrier more fails, naming it,
						// not the failure it had before.
						err = c.Barrier(ctx)
						if err == nil || !strings.Contains(err.Error(), "rank 1 ") || strings.Contains(err.Error(), "rank 2 failed") {
							return fmt.Errorf("rank %d: a barrier after rank 1 closed: %v, want an error naming rank 1", c.Rank(), err)
						}
						c.Close()
						return nil
					}()
				}()
			}
			for range comms {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestConcurrentSplitsNamedInCallOrder: Splits made from several goroutines
// of each rank, in the same order on every rank, each give every goroutine
// the sub-communicator of its own call, ranked by its key, that works. The
// first ranks start a goroutine every 10 ms; the last comes late and
// starts all of its at once (its calls are alike: any order is the same
// to it), so the first ranks' queued calls finish in a burst. The children
// were named by a count each Split's caller bumped after its call
// returned, unguarded: a data race, and goroutines that woke together
// named their children in the order they woke, or two by the same number,
// and so joined the other ranks' children of another call (a rank taken
// twice, calls that never met).
func TestConcurrentSplitsNamedInCallOrder(t *testing.T) {
	const n, k = 3, 8
	runRanksOn(t, "mem", n, testOptsFast, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		last := c.Rank() == n-1
		if last {
			time.Sleep(100*time.Millisecond + k*10*time.Millisecond)
		}
		errs := make(chan error, k)
		for g := range k {
			if !last {
				time.Sleep(10 * time.Millisecond) // call order g = 0, 1, ...
			}
			go func() {
				errs <- func() error {
					// Odd calls order the first ranks backwards; the
					// last rank is last in each.
					key, want := c.Rank(), c.Rank()
					if last {
						key = n
					} else if g%2 == 1 {
						key, want = -c.Rank(), n-2-c.Rank()
					}
					sub, err := c.Split(ctx, 0, key)
					if err != nil {
						return fmt.Errorf("split %d: %w", g, err)
					}
					defer sub.Close()
					if sub.Rank() != want || sub.Size() != n {
						return fmt.Errorf("split %d (key %d): rank %d of %d, want %d of %d", g, key, sub.Rank(), sub.Size(), want, n)
					}
					x := []int64{int64(1) << sub.Rank()}
					if err := Allreduce(ctx, sub, x, x, Sum); err != nil {
						return fmt.Errorf("split %d: %w", g, err)
					}
					if x[0] != 1<<n-1 {
						return fmt.Errorf("split %d: allreduce gave %d, want %d", g, x[0], 1<<n-1)
					}
					return nil
				}()
			}()
		}
		var first error
		for range k {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	})
}

// TestCrossedCommunicatorsSayWhy: ranks that call blocking collectives of
// two communicators in different orders (rank 0 the first's, then the
// second's; rank 1 the other way round) wait on each other, as they would
// under MPI. At the stall timeout a rank's error says so: the rank it
// waits on is in the other communicator's call, which waits on this rank.
// It said "rank 1 is alive but in no collective: it made 0 collectives
// and has not called #1", as of a rank that skipped the call.
func TestCrossedCommunicatorsSayWhy(t *testing.T) {
	sideBySide(t)
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			sideBySide(t)
			opts := testOpts
			opts.StallTimeout = 2 * time.Second
			var mu sync.Mutex
			var errs []error
			runRanksOn(t, kind, 2, opts, func(c *Comm) error {
				ctx := context.Background()
				a, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer a.Close()
				b, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer b.Close()
				first, second := a, b
				if c.Rank() == 1 {
					first, second = b, a
				}
				x, y := []float32{1}, []float32{1}
				e1 := Allreduce(ctx, first, x, x, Sum)
				e2 := Allreduce(ctx, second, y, y, Sum)
				mu.Lock()
				errs = append(errs, e1, e2)
				mu.Unlock()
				return nil
			})
			said := false
			for _, err := range errs {
				said = said || err != nil && strings.Contains(err.Error(), "called collectives of different communicators in different orders")
			}
			if !said {
				t.Errorf("no error says the ranks called the communicators in different orders: %v", errs)
			}
		})
	}
}

// TestSubWaitTimeoutSaysWhere: a Wait whose context ends before a
// sub-communicator's request finishes names the rank in the
// sub-communicator, and says where that is in the world, as the
// sub-communicator's other errors do (it said "comm: rank 0: waiting for
// allreduce: context deadline exceeded", rank 0 of which communicator
// left unsaid).
func TestSubWaitTimeoutSaysWhere(t *testing.T) {
	runRanksOn(t, "mem", 3, testOpts, func(c *Comm) error {
		ctx := context.Background()
		sub, err := c.Split(ctx, c.Rank()%2, 0)
		if err != nil {
			return err
		}
		defer sub.Close()
		if c.Rank() == 2 {
			time.Sleep(300 * time.Millisecond) // world rank 0 waits for it
		}
		x := []float32{1}
		req := AllreduceAsync(sub, x, x, Sum)
		p, err := AllreduceInit(sub, nil, x, Sum)
		if err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
		if c.Rank() == 0 {
			short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			for what, err := range map[string]error{"request": req.Wait(short), "persistent": p.Wait(short)} {
				if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "[sub-communicator world/split1/color0, whose ranks 0-1 are world ranks 0, 2]") {
					return fmt.Errorf("%s's Wait with a context that ends first: %v, want its deadline, with where the sub-communicator's ranks are", what, err)
				}
			}
		}
		if err := req.Wait(ctx); err != nil {
			return err
		}
		return p.Wait(ctx)
	})
}
