package comm_test

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestStaleAllocNoFault writes through slices from Alloc after Free and
// after Close (issue 11 item 12: that killed the process with a fault).
// Nothing may fault; a later Alloc gets zeroed memory. Over shared memory,
// where Alloc makes a shared segment, it faulted until Free kept the
// addresses mapped (the test ran over the in-memory transport only).
func TestStaleAllocNoFault(t *testing.T) {
	for _, kind := range []string{"mem", "shm", "tcp"} {
		t.Run(kind, func(t *testing.T) { staleAllocNoFault(t, kind) })
	}
}

func staleAllocNoFault(t *testing.T, kind string) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // a fault fails the test instead of killing it
	var kept []float64
	runRanksOn(t, kind, 2, testOpts, func(c *Comm) (err error) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // per goroutine
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("rank %d: using a freed slice faulted: %v", c.Rank(), p)
			}
		}()
		buf, err := Alloc[float64](c, 1<<16)
		if err != nil {
			return err
		}
		if err := Allreduce(context.Background(), c, buf, buf, Sum); err != nil {
			return err
		}
		if err := Free(c, buf); err != nil {
			return err
		}
		buf[0], buf[len(buf)-1] = 1, 2 // stale writes
		again, err := Alloc[float64](c, 1<<16)
		if err != nil {
			return err
		}
		if again[0] != 0 || again[len(again)-1] != 0 {
			t.Errorf("rank %d: Alloc after Free is not zeroed", c.Rank())
		}
		if c.Rank() == 0 {
			kept = again // released by Close
		}
		return nil
	})
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("using an Alloc'd slice after Close faulted: %v", p)
			}
		}()
		kept[0] = 3
	}()
}

// TestFreeNamesItself: Free of something that is not a live buffer from
// Alloc (freed already, a subslice, a plain slice) says "free", not
// "deregister", which the caller never called.
func TestFreeNamesItself(t *testing.T) {
	runRanks(t, 2, testOpts, func(c *Comm) error {
		b, err := Alloc[float32](c, 1000)
		if err != nil {
			return err
		}
		if err := Free(c, b); err != nil {
			return err
		}
		for name, bad := range map[string][]float32{"freed already": b, "a subslice": b[10:], "a plain slice": make([]float32, 5)} {
			if err := Free(c, bad); err == nil || !strings.Contains(err.Error(), "free ") || strings.Contains(err.Error(), "deregister") {
				return fmt.Errorf("Free of %s: %v, want an error naming free", name, err)
			}
		}
		return nil
	})
}
