package comm_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestRingFirstExchange: the first exchange of a ring (each rank queues a
// Send to the next rank, then receives from the previous one, MPI's Isend
// and Recv) connects the pairs and completes: each rank's Send waited for
// the next rank's half of their link, which that rank published only in
// its Recv, queued behind its own Send, until the stall timeout
// (publishEarly). Over the transports whose Connect does not wait for the
// peer's (TCP, verbs); the in-memory one's does.
func TestRingFirstExchange(t *testing.T) {
	for _, kind := range []string{"tcp"} {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprint(kind, n), func(t *testing.T) {
				runRanksOn(t, kind, n, testOptsFast, func(c *Comm) error {
					ctx := context.Background()
					r := c.Rank()
					next, prev := (r+1)%n, (r+n-1)%n
					for round := range 3 { // the first connects, the others use the links
						send := []float32{float32(r*10 + round)}
						req := SendAsync(c, send, next, round)
						got := []float32{-1}
						if err := Recv(ctx, c, got, prev, round); err != nil {
							return fmt.Errorf("round %d: %w", round, err)
						}
						if err := req.Wait(ctx); err != nil {
							return fmt.Errorf("round %d: send: %w", round, err)
						}
						if want := float32(prev*10 + round); got[0] != want {
							return fmt.Errorf("round %d: got %v from %d, want %v", round, got[0], prev, want)
						}
					}
					return nil
				})
			})
		}
	}
}
