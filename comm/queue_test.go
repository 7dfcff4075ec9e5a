package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// runBounded runs f on n ranks like runRanks, but fails the test if the
// ranks have not finished within limit, without closing the communicators
// (a hung communicator's Close would hang too).
func runBounded(t *testing.T, n int, limit time.Duration, f func(c *Comm) error) {
	t.Helper()
	comms, err := commtest.Connect(context.Background(), "mem", n, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(c)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("the ranks did not finish within %v (hung)", limit)
	}
	for r, c := range comms {
		if err := c.Close(); err != nil && errs[r] == nil {
			errs[r] = fmt.Errorf("close: %w", err)
		}
		if errs[r] != nil {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
}

// TestManyOutstandingAsync queues 100,000 asynchronous allreduces on every
// rank before waiting for any (issue 11 item 1: more than 1024 hung the
// communicator for good).
func TestManyOutstandingAsync(t *testing.T) {
	k := 100000
	if raceEnabled {
		k = 5000 // still several times the old limit of 1024
	}
	runBounded(t, 2, 2*time.Minute, func(c *Comm) error {
		buf := make([]int32, k)
		reqs := make([]*Request, k)
		for i := range buf {
			buf[i] = int32(i + c.Rank())
			reqs[i] = AllreduceAsync(c, buf[i:i+1], buf[i:i+1], Sum)
		}
		if err := WaitAll(context.Background(), reqs...); err != nil {
			return err
		}
		for i, v := range buf {
			if want := int32(2*i + 1); v != want {
				return fmt.Errorf("allreduce %d = %d, want %d", i, v, want)
			}
		}
		return nil
	})
}

// TestAbortWithFullQueue aborts a communicator whose queue holds thousands
// of requests behind one that waits for a peer that never calls: Abort
// returns promptly and every request fails with the abort's cause.
func TestAbortWithFullQueue(t *testing.T) {
	const k = 3000
	aborted := make(chan struct{})
	runBounded(t, 2, time.Minute, func(c *Comm) error {
		if c.Rank() == 1 {
			<-aborted // rank 0's calls wait on this rank in vain
			return nil
		}
		defer close(aborted)
		buf := make([]float32, k)
		reqs := make([]*Request, k)
		for i := range reqs {
			reqs[i] = AllreduceAsync(c, buf[i:i+1], buf[i:i+1], Sum)
		}
		returned := make(chan struct{})
		go func() { c.Abort(nil); close(returned) }()
		select {
		case <-returned:
		case <-time.After(30 * time.Second):
			return errors.New("Abort with a full queue did not return within 30 s")
		}
		for i, r := range reqs {
			if err := r.Wait(context.Background()); !errors.Is(err, ErrAborted) {
				return fmt.Errorf("request %d after Abort: %v, want ErrAborted", i, err)
			}
		}
		if err := Allreduce(context.Background(), c, buf, buf, Sum); !errors.Is(err, ErrAborted) {
			return fmt.Errorf("call after Abort: %v, want ErrAborted", err)
		}
		return nil
	})
}

// TestBlockingCallsFromGoroutines: several goroutines of each rank make
// blocking calls on one communicator at once (one of them at a time
// holds the communicator's own request and runs inline, the others queue
// pooled requests), mixed with asynchronous ones. The calls are alike, so
// whichever pair up across the ranks, every result is exact.
func TestBlockingCallsFromGoroutines(t *testing.T) {
	const goroutines, calls = 4, 300
	runBounded(t, 2, 2*time.Minute, func(c *Comm) error {
		errs := make(chan error, goroutines)
		for g := range goroutines {
			go func() {
				buf := make([]int64, 3)
				for i := range calls {
					for j := range buf {
						buf[j] = int64(c.Rank() + 1)
					}
					var err error
					if g == 0 && i%3 == 0 {
						err = AllreduceAsync(c, buf, buf, Sum).Wait(context.Background())
					} else {
						err = Allreduce(context.Background(), c, buf, buf, Sum)
					}
					if err != nil {
						errs <- fmt.Errorf("goroutine %d call %d: %w", g, i, err)
						return
					}
					for j, v := range buf {
						if v != 3 {
							errs <- fmt.Errorf("goroutine %d call %d: element %d = %d, want 3", g, i, j, v)
							return
						}
					}
				}
				errs <- nil
			}()
		}
		var first error
		for range goroutines {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	})
}
