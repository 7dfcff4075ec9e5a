package comm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
)

// TestRingFirstExchange: the first exchange of a ring (each rank queues a
// Send to the next rank, then receives from the previous one, MPI's Isend
// and Recv) connects the pairs and completes: each rank's Send waited for
// the next rank's half of their link, which that rank published only in
// its Recv, queued behind its own Send, until the stall timeout
// (publishEarly). So does a first exchange that posts the receives first
// (the Sends go ahead of the waiting Recvs once both halves of their link
// are published: hoist.go). Over the transports whose Connect does not
// wait for the peer's (TCP, verbs); the in-memory one's does.
func TestRingFirstExchange(t *testing.T) {
	for _, kind := range []string{"tcp"} {
		for _, n := range []int{3, 5} {
			t.Run(fmt.Sprint(kind, n, "-receives-first"), func(t *testing.T) {
				runRanksOn(t, kind, n, testOptsFast, func(c *Comm) error {
					return irecvFirst(context.Background(), c, 1000)
				})
			})
			t.Run(fmt.Sprint(kind, n, "-receives-waiting"), func(t *testing.T) {
				// The sends queued once the receives wait (set up, or
				// in the executor): the link each Send needs is made
				// ahead of it (publishEarly, from the look at the queue).
				runRanksOn(t, kind, n, testOptsFast, func(c *Comm) error {
					return irecvFirstAfter(context.Background(), c, 1000, 30*time.Millisecond)
				})
			})
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

// TestP2PExchangeIdioms checks what the README says of neighbour
// exchanges, on every transport: a ring shift is one SendRecv per rank, a
// halo exchange with two neighbours two SendRecvs (one per direction),
// and sends queued before the receives (MPI's Isend, then Recv) work too;
// so do a ring and a halo exchange that post their receives first (MPI's
// Irecv, then Isend, then Waitall) for messages a Send buffers for its
// receiver; a ring that posts its receive before a send that cannot
// complete without its receiver waits on itself, and the error names the
// calls that cannot meet, well before the stall timeout.
func TestP2PExchangeIdioms(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		for _, n := range []int{3, 4} {
			t.Run(fmt.Sprint(kind, n), func(t *testing.T) {
				t.Parallel() // most of each is the second the stall diagnosis waits
				runRanksOn(t, kind, n, testOptsFast, func(c *Comm) error {
					ctx := context.Background()
					r := c.Rank()
					left, right := (r+n-1)%n, (r+1)%n
					// A single element, and more chunks (of 4 KiB) than the
					// links' staging slots (3).
					for _, count := range []int{1, 3000} {
						mine := make([]float32, count)
						for i := range mine {
							mine[i] = float32(r*1000 + i%1000)
						}
						check := func(what string, got []float32, from int) error {
							for i, v := range got {
								if want := float32(from*1000 + i%1000); v != want {
									return fmt.Errorf("%s, %d elements: element %d from rank %d is %v, want %v", what, count, i, from, v, want)
								}
							}
							return nil
						}
						fromLeft := make([]float32, count)
						if err := SendRecv(ctx, c, mine, right, fromLeft, left, 1); err != nil {
							return fmt.Errorf("ring shift: %w", err)
						}
						if err := check("ring shift", fromLeft, left); err != nil {
							return err
						}
						fromRight := make([]float32, count)
						clear(fromLeft)
						if err := SendRecv(ctx, c, mine, right, fromLeft, left, 2); err != nil {
							return fmt.Errorf("halo, first direction: %w", err)
						}
						if err := SendRecv(ctx, c, mine, left, fromRight, right, 3); err != nil {
							return fmt.Errorf("halo, second direction: %w", err)
						}
						if err := check("halo from the left", fromLeft, left); err != nil {
							return err
						}
						if err := check("halo from the right", fromRight, right); err != nil {
							return err
						}
						if count == 1 { // within what a Send buffers for its peer
							clear(fromLeft)
							req := SendAsync(c, mine, right, 4)
							if err := Recv(ctx, c, fromLeft, left, 4); err != nil {
								return fmt.Errorf("send queued before the receive: %w", err)
							}
							if err := req.Wait(ctx); err != nil {
								return fmt.Errorf("send queued before the receive: send: %w", err)
							}
							if err := check("send queued before the receive", fromLeft, left); err != nil {
								return err
							}
						}
					}
					// The Sends queued behind a waiting Recv go ahead of it
					// when they need not wait (hoist.go): a ring and a halo
					// exchange that post their receives first work, up to
					// what a Send buffers for its receiver.
					for _, count := range []int{1, 3000} {
						if err := irecvFirst(ctx, c, count); err != nil {
							return err
						}
					}
					start := time.Now()
					const count = 5000 // more than a Send buffers (3 slots, or copies, of 4 KiB)
					recv := RecvAsync(c, make([]float32, count), left, 5)
					send := SendAsync(c, make([]float32, count), right, 5)
					err := WaitAll(ctx, recv, send)
					if err == nil || !strings.Contains(err.Error(), "calls that cannot meet") {
						return fmt.Errorf("receive queued before the send: %v, want calls that cannot meet", err)
					}
					if d := time.Since(start); d > testOptsFast.StallTimeout/2 {
						return fmt.Errorf("receive queued before the send: found after %v, want well before the stall timeout (%v)", d, testOptsFast.StallTimeout)
					}
					return nil
				})
			})
		}
	}
}

// irecvFirst runs MPI's neighbour exchanges that post their receives
// before their sends, then wait for all: a ring shift (Irecv from the
// left, Isend to the right) and a halo exchange (Irecv from both sides,
// then Isend to both), a few times each with new data, and checks what
// arrived.
func irecvFirst(ctx context.Context, c *Comm, count int) error {
	return irecvFirstAfter(ctx, c, count, 0)
}

// irecvFirstAfter is irecvFirst with a pause between the receives and the
// sends: the receive waits when the sends are queued.
func irecvFirstAfter(ctx context.Context, c *Comm, count int, pause time.Duration) error {
	r, n := c.Rank(), c.Size()
	left, right := (r+n-1)%n, (r+1)%n
	value := func(from, it, i int) float32 { return float32(from*100000 + it*1000 + i%1000) }
	for it := range 4 {
		mine := make([]float32, count)
		for i := range mine {
			mine[i] = value(r, it, i)
		}
		fromLeft, fromRight := make([]float32, count), make([]float32, count)
		var reqs []*Request
		what := "ring shift"
		if it%2 == 0 {
			reqs = []*Request{RecvAsync(c, fromLeft, left, 7)}
			time.Sleep(pause)
			reqs = append(reqs, SendAsync(c, mine, right, 7))
		} else {
			what = "halo exchange"
			reqs = []*Request{RecvAsync(c, fromLeft, left, 8), RecvAsync(c, fromRight, right, 9)}
			time.Sleep(pause)
			reqs = append(reqs, SendAsync(c, mine, left, 9), SendAsync(c, mine, right, 8))
		}
		if err := WaitAll(ctx, reqs...); err != nil {
			return fmt.Errorf("%s with receives first, %d elements: %w", what, count, err)
		}
		for i := range count {
			if fromLeft[i] != value(left, it, i) || it%2 == 1 && fromRight[i] != value(right, it, i) {
				return fmt.Errorf("%s with receives first, %d elements: element %d: %v from the left, %v from the right", what, count, i, fromLeft[i], fromRight[i])
			}
		}
	}
	return nil
}

// TestProcNull: ProcNull (MPI_PROC_NULL) as a peer makes that side of a
// call do nothing: a chain without periodic boundaries exchanges halos in
// the same two SendRecvs on every rank, its end ranks' missing halos left
// as they were; a Send to and a Recv from ProcNull complete at once,
// blocking and asynchronous, in their turn; other negative ranks are
// still refused.
func TestProcNull(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			runRanksOn(t, kind, 4, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				r, n := c.Rank(), c.Size()
				left, right := r-1, r+1
				if left < 0 {
					left = ProcNull
				}
				if right == n {
					right = ProcNull
				}
				for _, count := range []int{1, 2000} { // one chunk, more than the slots (3 of 4 KiB)
					mine := make([]float64, count)
					for i := range mine {
						mine[i] = float64(r*100000 + i)
					}
					fromLeft, fromRight := make([]float64, count), make([]float64, count)
					for i := range fromLeft {
						fromLeft[i], fromRight[i] = -1, -2
					}
					if err := SendRecv(ctx, c, mine, right, fromLeft, left, 1); err != nil {
						return fmt.Errorf("%d elements, to the right: %w", count, err)
					}
					if err := SendRecv(ctx, c, mine, left, fromRight, right, 2); err != nil {
						return fmt.Errorf("%d elements, to the left: %w", count, err)
					}
					for i := range count {
						wantL, wantR := float64(-1), float64(-2)
						if left != ProcNull {
							wantL = float64(left*100000 + i)
						}
						if right != ProcNull {
							wantR = float64(right*100000 + i)
						}
						if fromLeft[i] != wantL || fromRight[i] != wantR {
							return fmt.Errorf("%d elements: element %d from the left %v (want %v), from the right %v (want %v)", count, i, fromLeft[i], wantL, fromRight[i], wantR)
						}
					}
				}
				buf := []int32{7}
				if err := Send(ctx, c, buf, ProcNull, 3); err != nil {
					return fmt.Errorf("send to ProcNull: %w", err)
				}
				if err := Recv(ctx, c, buf, ProcNull, 3); err != nil || buf[0] != 7 {
					return fmt.Errorf("recv from ProcNull: %v, buffer %v (want untouched 7)", err, buf)
				}
				reqs := []*Request{SendAsync(c, buf, ProcNull, 4), RecvAsync(c, buf, ProcNull, 4), SendRecvAsync(c, buf, ProcNull, []int32{0}, ProcNull, 4)}
				if err := WaitAll(ctx, reqs...); err != nil || buf[0] != 7 {
					return fmt.Errorf("asynchronous calls with ProcNull: %v, buffer %v", err, buf)
				}
				// A ring exchange after them: their turns passed.
				got := []int32{-1}
				if err := SendRecv(ctx, c, []int32{int32(r)}, (r+1)%n, got, (r+n-1)%n, 5); err != nil || got[0] != int32((r+n-1)%n) {
					return fmt.Errorf("ring after ProcNull calls: %v, got %v", err, got)
				}
				d, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer d.Close()
				if err := Send(ctx, d, buf, -2, 0); err == nil || !strings.Contains(err.Error(), "peer -2 is not a rank") {
					return fmt.Errorf("send to rank -2: %v, want a refusal", err)
				}
				return nil
			})
		})
	}
}
