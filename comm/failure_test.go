package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"

	"github.com/goccl/goccl/transport/mem"
)

// TestDeadRankNamed kills one rank's transport in the middle of an
// allreduce loop (as a process death closes its sockets) and checks that
// every survivor fails within the bound with an error naming the dead rank,
// also the survivors that never talked to it directly.
func TestDeadRankNamed(t *testing.T) {
	for _, n := range []int{4, 6} {
		for _, victim := range []int{0, n - 1} {
			t.Run(fmt.Sprintf("ranks=%d/victim=%d", n, victim), func(t *testing.T) {
				testDeadRankNamed(t, n, victim)
			})
		}
	}
}

func testDeadRankNamed(t *testing.T, n, victim int) {
	network := mem.NewNetwork(mem.Options{})
	g := NewLocalGroup(n)
	ctx := context.Background()
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := network.NewDevice()
			c, err := New(ctx, g.Member(r), dev, Options{ChunkSize: 4096, Slots: 4, Timeout: 30 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			buf := make([]float32, 20000)
			for i := range 1000 {
				if r == victim && i == 7 {
					// Die: the transport goes away without a word.
					dev.Close()
					return
				}
				start := time.Now()
				if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
					errs[r], took[r] = err, time.Since(start)
					c.Close()
					dev.Close()
					return
				}
			}
			errs[r] = fmt.Errorf("the loop finished although rank %d died", victim)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("survivors hang after a rank died")
	}
	want := fmt.Sprintf("rank %d failed", victim)
	for r, err := range errs {
		if r == victim {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: error %v does not name the dead rank (%q)", r, err, want)
			continue
		}
		if took[r] > 10*time.Second {
			t.Errorf("rank %d: failure took %v to surface", r, took[r])
		}
		t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
	}
}

// TestTimeoutSparesTheMeasurement: Options.Timeout bounds the user's
// collectives, not the measurement at New, whose calls (up to 1 MiB, on
// links set up as they go) are the library's own. GOCCL_TIMEOUT=20ms
// failed Init on this VM ("measuring the transport: rank 0 is at the root
// of a stall"); the timeout still ends a user's call that outlives it.
func TestTimeoutSparesTheMeasurement(t *testing.T) {
	opts := testOpts
	opts.Alpha, opts.Beta = 0, 0 // measure at New
	opts.Timeout = 5 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := commtest.Run(ctx, "tcp", 2, opts, func(c *Comm) error {
		buf := make([]float32, 16<<20) // 64 MiB: longer than 5 ms
		return Allreduce(ctx, c, buf, buf, Sum)
	})
	for r, err := range errs {
		switch {
		case err != nil && strings.Contains(err.Error(), "measuring the transport"):
			t.Errorf("rank %d: New with a 5 ms timeout: %v", r, err)
		case err == nil || !strings.Contains(err.Error(), "timeout"):
			t.Errorf("rank %d: a 64 MiB allreduce with a 5 ms timeout: %v, want a timeout", r, err)
		}
	}
}

// A rank that published its part of a board call and then failed (here,
// Abort while its asynchronous allreduce waits for a late rank) fails the
// call of the ranks that wait for that late rank at once, as over the
// network: they found out only once the late rank arrived (a rank that
// died the same way left them waiting as long).
func TestBoardNoticesAFailureOfARankThatIsThere(t *testing.T) {
	var rank1Done, lateCalled atomic.Bool
	released := make(chan struct{})
	runRanksOn(t, "shm", 3, testOpts, func(c *Comm) error {
		ctx := context.Background()
		x := []float32{1, 2, 3, 4}
		switch c.Rank() {
		case 0:
			req := AllreduceAsync(c, x, x, Sum)
			time.Sleep(50 * time.Millisecond) // its part is on the board
			c.Abort(nil)
			req.Wait(ctx)
			return nil
		case 2: // late: it calls once rank 1 has its answer (or after 20 s)
			select {
			case <-released:
			case <-time.After(20 * time.Second):
			}
			lateCalled.Store(true)
			Allreduce(ctx, c, x, x, Sum)
			return nil
		}
		err := Allreduce(ctx, c, x, x, Sum)
		late := lateCalled.Load()
		rank1Done.Store(true)
		close(released)
		if err == nil || !strings.Contains(err.Error(), "rank 0") {
			return fmt.Errorf("allreduce with rank 0 aborted: %v, want an error naming rank 0", err)
		}
		if late {
			return fmt.Errorf("the error came only once the late rank called: %v", err)
		}
		return nil
	})
	if !rank1Done.Load() {
		t.Fatal("rank 1 never returned")
	}
}

// A rooted call's disagreement that the shared-memory board finds only at
// the next call (a root that did not wait for its receivers) is named as
// that earlier call: the error said "broadcast(...) #2" when #2 was an
// allreduce (the earlier call's kind with the later call's number).
func TestBoardLateMismatchNamesTheCall(t *testing.T) {
	runRanksOn(t, "shm", 3, testOpts, func(c *Comm) error {
		ctx := context.Background()
		x := []float32{1, 2, 3, 4}
		errB := Broadcast(ctx, c, x, c.Rank()%2) // ranks 0 and 2 say root 0, rank 1 root 1
		errA := Allreduce(ctx, c, x, x, Sum)
		for _, err := range []error{errB, errA} {
			if err != nil && strings.Contains(err.Error(), "broadcast(float32, 4, root=0) #2") {
				return fmt.Errorf("an error names the broadcast with the allreduce's number: %v", err)
			}
		}
		if errB == nil && errA == nil {
			return fmt.Errorf("broadcasts with roots 0 and 1 and the allreduce after them succeeded")
		}
		return nil
	})
}

// TestAbortCauseReachesThePeers: the ranks whose call fails because a
// peer aborted name the cause it gave Abort, on every transport, as
// Abort's doc says (it publishes its report and sends its notice "so
// that they name its cause"), also through a third rank that passes the
// failure on, and whether the links were made or not. Over the links the
// peers said only "rank 1 aborted" (the shared-memory board read the
// report, the links' headline did not).
func TestAbortCauseReachesThePeers(t *testing.T) {
	sideBySide(t)
	const cause = "test: the user gave up on step 7"
	for _, kind := range []string{"mem", "tcp", "shm"} {
		for _, warm := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/linked=%v", kind, warm), func(t *testing.T) {
				runRanksOn(t, kind, 3, testOpts, func(c *Comm) error {
					ctx := context.Background()
					x := []float32{1, 2}
					if warm {
						if err := Allreduce(ctx, c, x, x, Sum); err != nil {
							return err
						}
					}
					if c.Rank() == 1 {
						time.Sleep(100 * time.Millisecond) // the others wait in the call
						c.Abort(errors.New(cause))
						return nil
					}
					err := Allreduce(ctx, c, x, x, Sum)
					if err == nil || !strings.Contains(err.Error(), "rank 1 aborted") || !strings.Contains(err.Error(), cause) {
						return fmt.Errorf("allreduce while rank 1 aborts with %q: %v", cause, err)
					}
					return nil
				})
			})
		}
	}
}
