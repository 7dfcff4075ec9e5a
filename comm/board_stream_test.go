package comm_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// TestBoardStreamRunsAhead: in a run of small broadcasts, from the second
// on a root returns once it wrote its ring's line, a ring of calls ahead
// of a receiver that has not started them: rank 1 goes on after the first
// broadcast only once rank 0 finished a ring of them more. (Through the sets'
// lines the root waited for its receiver's previous call: this
// deadlocked.) Each value arrives.
func TestBoardStreamRunsAhead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ahead := make(chan struct{})
	errs := commtest.Run(ctx, "shm", 2, testOptsFast, func(c *Comm) error {
		buf := make([]int64, 3)
		for i := range StreamLen(2) + 5 {
			if c.Rank() == 1 && i == 1 {
				select {
				case <-ahead:
				case <-ctx.Done():
					return fmt.Errorf("rank 0 did not run ahead: %w", ctx.Err())
				}
			}
			if c.Rank() == 0 {
				buf[0], buf[1], buf[2] = int64(i), int64(-i), 7
			}
			if err := Broadcast(ctx, c, buf, 0); err != nil {
				return fmt.Errorf("broadcast %d: %w", i, err)
			}
			if c.Rank() == 0 && i == StreamLen(2) {
				close(ahead)
			}
			if buf[0] != int64(i) || buf[1] != int64(-i) || buf[2] != 7 {
				return fmt.Errorf("broadcast %d: got %v", i, buf)
			}
		}
		return c.Barrier(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestBoardStreamMixed: broadcasts the stream takes (1, 3 and 8 lines of
// the ring each, so that its calls wrap at different lines) from every
// root in turn, many rounds of each ring, between other collectives (a
// broadcast through a slot, an allreduce, a barrier, a scatter) on 2, 3,
// 5 and 9 ranks: every value arrives, in every order of the ways.
func TestBoardStreamMixed(t *testing.T) {
	for _, n := range []int{2, 3, 5, 9} { // 9: the shorter ring
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs := commtest.Run(ctx, "shm", n, testOptsFast, func(c *Comm) error {
				large := make([]float32, 200)
				for i := range 3 * StreamLen(n) {
					root := (i / 3) % n
					small := make([]float32, []int{2, 12, 30, 110}[i%4])
					for j := range small {
						small[j] = -1
						if c.Rank() == root {
							small[j] = float32(i*100 + j)
						}
					}
					if err := Broadcast(ctx, c, small, root); err != nil {
						return fmt.Errorf("call %d: %w", i, err)
					}
					for j := range small {
						if small[j] != float32(i*100+j) {
							return fmt.Errorf("call %d (root %d): element %d is %v", i, root, j, small[j])
						}
					}
					var err error
					switch i % 7 {
					case 2:
						large[199] = float32(c.Rank() * i)
						err = Broadcast(ctx, c, large, root)
						if err == nil && large[199] != float32(root*i) {
							err = fmt.Errorf("large broadcast: %v", large[99])
						}
					case 4:
						v := []float32{1}
						err = Allreduce(ctx, c, v, v, Sum)
						if err == nil && v[0] != float32(n) {
							err = fmt.Errorf("allreduce: %v", v[0])
						}
					case 5:
						err = c.Barrier(ctx)
					case 6:
						all := make([]float32, n)
						for p := range all {
							all[p] = float32(p + i)
						}
						mine := []float32{-1}
						err = Scatter(ctx, c, all, mine, root)
						if err == nil && mine[0] != float32(c.Rank()+i) {
							err = fmt.Errorf("scatter: %v", mine[0])
						}
					}
					if err != nil {
						return fmt.Errorf("call %d: %w", i, err)
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

// TestBoardStreamMismatch: ranks that part ways in the stream fail with a
// mismatch naming the calls, within seconds, not by timeout, however far
// the root ran ahead: a receiver expecting more bytes than its root sends
// (in the stream both), a rank that calls an allreduce while the other
// broadcasts, a rank that stops after some broadcasts and calls a barrier
// while its root goes on, and two ranks that each take themselves for the
// root, call after call.
func TestBoardStreamMismatch(t *testing.T) {
	cases := []struct {
		name string
		n    int
		run  func(ctx context.Context, c *Comm) error
	}{
		{"count", 2, func(ctx context.Context, c *Comm) error {
			for range 3 {
				if err := Broadcast(ctx, c, make([]float32, 2+c.Rank()), 0); err != nil {
					return err
				}
			}
			return c.Barrier(ctx)
		}},
		{"lines", 2, func(ctx context.Context, c *Comm) error {
			for range 3 {
				if err := Broadcast(ctx, c, make([]float32, 30+15*c.Rank()), 0); err != nil {
					return err
				}
			}
			return c.Barrier(ctx)
		}},
		{"allreduce", 3, func(ctx context.Context, c *Comm) error {
			buf := []float32{1, 2}
			if c.Rank() == 2 {
				return Allreduce(ctx, c, buf, buf, Sum)
			}
			for range 3 {
				if err := Broadcast(ctx, c, buf, 0); err != nil {
					return err
				}
			}
			return c.Barrier(ctx)
		}},
		{"stops", 2, func(ctx context.Context, c *Comm) error {
			buf := []float32{1, 2}
			calls := 2 * StreamLen(2)
			if c.Rank() == 1 {
				calls = 10
			}
			for range calls {
				if err := Broadcast(ctx, c, buf, 0); err != nil {
					return err
				}
			}
			return c.Barrier(ctx)
		}},
		{"roots", 3, func(ctx context.Context, c *Comm) error {
			buf := []float32{1, 2}
			for range 2 * StreamLen(3) {
				if err := Broadcast(ctx, c, buf, c.Rank()%2); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			comms, err := commtest.Connect(ctx, "shm", tc.n, testOptsFast)
			if err != nil {
				t.Fatal(err)
			}
			errs := make([]error, tc.n)
			done := make(chan int)
			for r, c := range comms {
				go func() {
					errs[r] = tc.run(ctx, c)
					if cerr := c.Close(); errs[r] == nil {
						errs[r] = cerr
					}
					done <- r
				}()
			}
			for range comms {
				<-done
			}
			requireFastMismatch(t, errs, start)
		})
	}
}

// TestBoardStreamPeerLeaves: a root running ahead in the stream fails
// with an error naming its receiver once its ring comes round, when the
// receiver aborted instead of reading.
func TestBoardStreamPeerLeaves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	errs := commtest.Run(ctx, "shm", 2, testOptsFast, func(c *Comm) error {
		buf := []float32{1, 2}
		if c.Rank() == 1 {
			c.Abort(fmt.Errorf("test: rank 1 gives up"))
			return nil
		}
		for i := range 2 * StreamLen(2) {
			if err := Broadcast(ctx, c, buf, 0); err != nil {
				return fmt.Errorf("broadcast %d: %w", i, err)
			}
		}
		return nil
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1") {
		t.Errorf("rank 0: %v, want an error naming rank 1", errs[0])
	} else {
		t.Logf("rank 0: %v", errs[0])
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the failure took %v to report", d)
	}
}

// TestBoardStallNamesItsRoot: rank 2 of 3 stops calling (alive, in no
// collective) in a run of small broadcasts from rank 0. Rank 0, a ring of
// calls ahead, waits for rank 2's progress; rank 1 waits for rank 0's next
// call. At the stall timeout both name rank 2 as the root of the stall:
// rank 1 follows the board's chain (it waits for rank 0, which waits for
// rank 2, which waits for nobody) instead of blaming the root it waits for.
func TestBoardStallNamesItsRoot(t *testing.T) {
	buf := func() []float32 { return []float32{1, 2} }
	runStalled(t, func(ctx context.Context, c *Comm) error {
		b := buf()
		for range 5 {
			if err := Broadcast(ctx, c, b, 0); err != nil {
				return err
			}
		}
		return nil
	}, func(ctx context.Context, c *Comm) error {
		b := buf()
		for i := range 4 * StreamLen(3) {
			if err := Broadcast(ctx, c, b, 0); err != nil {
				return fmt.Errorf("broadcast %d: %w", i, err)
			}
		}
		return nil
	})
}

// TestBoardMailStallNamesItsRoot: point to point through the board's
// mailboxes, rank 0 receives from rank 1, which receives from rank 2, which
// stops calling (alive, in no call): at the stall timeout ranks 0 and 1
// both name rank 2 as the root of the stall.
func TestBoardMailStallNamesItsRoot(t *testing.T) {
	runStalled(t, nil, func(ctx context.Context, c *Comm) error {
		return Recv(ctx, c, make([]float32, 2), c.Rank()+1, 7)
	})
}

// runStalled runs 3 ranks on the board with a stall timeout of 2 s: rank 2
// runs stop (if any), then stops calling, alive, until the others
// returned; ranks 0 and 1 run work. Each of them must fail naming rank 2
// as the root of a stall, within the stall timeout and a little more.
func runStalled(t *testing.T, stop, work func(ctx context.Context, c *Comm) error) {
	t.Helper()
	const stopper = 2
	opts := testOptsFast
	opts.StallTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	var others sync.WaitGroup
	others.Add(2)
	errs := commtest.Run(ctx, "shm", 3, opts, func(c *Comm) error {
		if c.Rank() != stopper {
			defer others.Done()
			return work(ctx, c)
		}
		if stop != nil {
			if err := stop(ctx, c); err != nil {
				return err
			}
		}
		others.Wait() // alive, in no call, until the others failed
		return nil
	})
	took := time.Since(start)
	for r, err := range errs {
		if r == stopper {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d is at the root of a stall", stopper)) {
			t.Errorf("rank %d: %v; want an error naming rank %d at the root of the stall", r, err, stopper)
		} else {
			t.Logf("rank %d: %v", r, err)
		}
	}
	if took > opts.StallTimeout+3*time.Second {
		t.Errorf("the failure took %v to report (stall timeout %v)", took, opts.StallTimeout)
	}
}
