package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// TestHoistKeepsOrder: over shared memory a Send queued behind a waiting
// Recv goes ahead of it only if no earlier queued Send to the same rank
// stays behind: rank 0 waits in a Recv while a Send to rank 1 too large
// to complete without rank 1 (more than the copies kept for it) and a
// small one after it are queued; the small one must not overtake the
// large one (rank 1 receives them in order, and a small message first
// would fail its first Recv as a mismatch). A blocking Send from another
// goroutine goes ahead too, and Free refuses a buffer of a Send that was
// taken out of the queue and not finished.
func TestHoistKeepsOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const large = 5000 // float32: more than the 12 KiB kept for a receiver
	errs := commtest.Run(ctx, "shm", 2, testOptsFast, func(c *Comm) error {
		big := make([]float32, large)
		for i := range big {
			big[i] = float32(i)
		}
		if c.Rank() == 0 {
			got := []float32{0}
			recv := RecvAsync(c, got, 1, 1)
			a := SendAsync(c, big, 1, 2)
			b := SendAsync(c, []float32{42}, 1, 3)
			if err := WaitAll(ctx, recv, a, b); err != nil {
				return err
			}
			if got[0] != 7 {
				return fmt.Errorf("received %v, want 7", got[0])
			}
			// A blocking Send from another goroutine while a Recv waits.
			recv = RecvAsync(c, got, 1, 4)
			done := make(chan error, 1)
			go func() { done <- Send(ctx, c, []float32{5}, 1, 5) }()
			if err := <-done; err != nil {
				return fmt.Errorf("blocking send beside a waiting receive: %w", err)
			}
			if err := recv.Wait(ctx); err != nil {
				return err
			}
			if got[0] != 8 {
				return fmt.Errorf("received %v, want 8", got[0])
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond) // rank 0 waits in its Recv, its Sends queued
		if err := Send(ctx, c, []float32{7}, 0, 1); err != nil {
			return err
		}
		got := make([]float32, large)
		if err := Recv(ctx, c, got, 0, 2); err != nil {
			return fmt.Errorf("the large message: %w", err)
		}
		for i := range got {
			if got[i] != float32(i) {
				return fmt.Errorf("the large message: element %d is %v", i, got[i])
			}
		}
		small := []float32{0}
		if err := Recv(ctx, c, small, 0, 3); err != nil || small[0] != 42 {
			return fmt.Errorf("the small message: %v, %v", small[0], err)
		}
		// Rank 0's blocking Send went ahead of its waiting Recv: taken
		// here before this rank sends what that Recv waits for.
		if err := Recv(ctx, c, small, 0, 5); err != nil || small[0] != 5 {
			return fmt.Errorf("the blocking send's message: %v, %v", small[0], err)
		}
		return Send(ctx, c, []float32{8}, 0, 4)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
