package comm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
)

// Blocking calls under a cancellable context (a signal.NotifyContext, as
// most programs pass) allocate nothing in steady state: the context is
// watched by one registration kept across the calls that use it. Before,
// every call over TCP registered a context.AfterFunc (two allocations,
// ~230 ns). A context cancelled between calls breaks nothing; the next
// calls under another context run.
func TestCancellableContextCalls(t *testing.T) {
	if raceEnabled {
		t.Skip("SKIP: the race detector allocates on its own")
	}
	runRanksOn(t, "tcp", 2, testOpts, func(c *Comm) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		buf := make([]float32, 2)
		call := func() error { return Allreduce(ctx, c, buf, buf, Sum) }
		for range 200 {
			if err := call(); err != nil {
				return err
			}
		}
		const calls = 2000
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range calls {
			if err := call(); err != nil {
				return err
			}
		}
		runtime.ReadMemStats(&m1)
		// Both ranks run in this process: count what both allocated,
		// with a little room for the runtime's own.
		if per := float64(m1.Mallocs-m0.Mallocs) / calls; c.Rank() == 0 && per > 0.1 {
			t.Errorf("%.2f allocations per allreduce under a cancellable context (both ranks), want 0", per)
		}
		if err := c.Barrier(context.Background()); err != nil {
			return err
		}
		return nil
	})
}

// A context cancelled between calls breaks nothing, also when its
// callback runs late, during a later call under another context: with one
// processor for the Go runtime (a rank bound to one core), the callback's
// goroutine runs only once the next call waits. bench/cmd/osu hit this
// at once: its Init context, cancelled after Init, broke the first call.
func TestContextCancelledBetweenCalls(t *testing.T) {
	if raceEnabled {
		t.Skip("SKIP: the race detector's scheduling hides the late callback")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	runRanksOn(t, "tcp", 2, testOpts, func(c *Comm) error {
		first, cancel := context.WithCancel(context.Background())
		buf := make([]float32, 2)
		for range 5 {
			if err := Allreduce(first, c, buf, buf, Sum); err != nil {
				cancel()
				return err
			}
		}
		cancel()
		other, cancelOther := context.WithCancel(context.Background())
		defer cancelOther()
		for range 50 {
			if err := Allreduce(other, c, buf, buf, Sum); err != nil {
				return err
			}
		}
		return nil
	})
}

// A context cancelled while a call runs under it ends that call (and the
// communicator, which a call abandoned half way leaves out of step), also
// when earlier calls used the same context, whose watch is kept across
// calls; the peer's call fails instead of hanging.
func TestContextCancelledDuringCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make([]error, 2)
	runRanksOn(t, "tcp", 2, testOpts, func(c *Comm) error {
		buf := make([]float32, 2)
		for range 20 {
			if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
				return err
			}
		}
		if c.Rank() == 0 {
			time.AfterFunc(100*time.Millisecond, cancel)
			errs[0] = Allreduce(ctx, c, buf, buf, Sum) // rank 1 never joins
			return nil
		}
		time.Sleep(300 * time.Millisecond)
		errs[1] = Allreduce(context.Background(), c, buf, buf, Sum)
		return nil
	})
	if errs[0] == nil || !errors.Is(errs[0], context.Canceled) || !strings.Contains(errs[0].Error(), "abandoned") {
		t.Errorf("rank 0: %v, want the call abandoned with context.Canceled", errs[0])
	}
	if errs[1] == nil {
		t.Error("rank 1: nil error after rank 0 abandoned its call")
	}
}

// valuesCtx is a caller's context of a type that == cannot compare (a
// map inside): watching it must not panic.
type valuesCtx struct {
	context.Context
	vals map[string]string
}

func TestUncomparableCallerContext(t *testing.T) {
	runRanksOn(t, "tcp", 2, testOpts, func(c *Comm) error {
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		buf := make([]float32, 2)
		for i := range 3 {
			ctx := valuesCtx{parent, map[string]string{"call": fmt.Sprint(i)}}
			if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
				return err
			}
		}
		return nil
	})
}
