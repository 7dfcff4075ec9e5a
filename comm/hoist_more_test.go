package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
)

// linkNeighbours connects each rank to both ring neighbours (SendRecv):
// over the in-memory transport a first exchange that posts its receives
// first waits on itself (its Connect waits for the peer's).
func linkNeighbours(ctx context.Context, c *Comm) error {
	r, n := c.Rank(), c.Size()
	left, right := (r+n-1)%n, (r+1)%n
	if err := SendRecv(ctx, c, []float32{1}, right, []float32{0}, left, 99); err != nil {
		return err
	}
	return SendRecv(ctx, c, []float32{1}, left, []float32{0}, right, 99)
}

// TestHoistMixedSizesInOrder: a ring whose ranks post their receives first,
// then several sends to the next rank: one within the slots, one that
// fills more than the slots left, one small after it. The messages arrive
// in order with their contents, on every transport.
func TestHoistMixedSizesInOrder(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			sideBySide(t)
			runRanksOn(t, kind, 3, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				r, n := c.Rank(), c.Size()
				left, right := (r+n-1)%n, (r+1)%n
				sizes := []int{1, 2500, 1, 0, 700}
				if err := linkNeighbours(ctx, c); err != nil {
					return err
				}
				for it := range 3 {
					var reqs []*Request
					got := make([][]float32, len(sizes))
					for i, s := range sizes {
						got[i] = make([]float32, s)
						reqs = append(reqs, RecvAsync(c, got[i], left, i))
					}
					for i, s := range sizes {
						m := make([]float32, s)
						for j := range m {
							m[j] = float32(r*1000 + i*100 + j%100 + it)
						}
						reqs = append(reqs, SendAsync(c, m, right, i))
					}
					if err := WaitAll(ctx, reqs...); err != nil {
						return fmt.Errorf("round %d: %w", it, err)
					}
					for i := range sizes {
						for j, v := range got[i] {
							if want := float32(left*1000 + i*100 + j%100 + it); v != want {
								return fmt.Errorf("round %d message %d element %d: %v, want %v", it, i, j, v, want)
							}
						}
					}
				}
				return nil
			})
		})
	}
}

// TestHoistAcrossKinds: SendRecv, ProcNull and self sends and a Barrier
// queued between the Sends behind a waiting Recv.
func TestHoistAcrossKinds(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			sideBySide(t)
			runRanksOn(t, kind, 4, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				r, n := c.Rank(), c.Size()
				left, right := (r+n-1)%n, (r+1)%n
				if err := linkNeighbours(ctx, c); err != nil {
					return err
				}
				for it := range 3 {
					a, b, s, sr, null := []float32{-1}, []float32{-1}, []float32{-1}, []float32{-1}, []float32{-1}
					reqs := []*Request{
						RecvAsync(c, a, left, 1),
						SendAsync(c, []float32{float32(r)}, right, 1),
						SendAsync(c, []float32{float32(r + 10)}, r, 5),
						SendAsync(c, null, ProcNull, 1),
						RecvAsync(c, null, ProcNull, 1),
						SendAsync(c, []float32{float32(r + 20)}, left, 2),
						SendRecvAsync(c, []float32{float32(r + 30)}, right, sr, left, 3),
						SendAsync(c, []float32{float32(r + 40)}, right, 4),
						RecvAsync(c, s, r, 5),
						RecvAsync(c, b, right, 2),
					}
					last := []float32{-1}
					reqs = append(reqs, RecvAsync(c, last, left, 4))
					if it == 1 {
						reqs = append(reqs, c.BarrierAsync(), RecvAsync(c, []float32{0}, left, 6), SendAsync(c, []float32{1}, right, 6))
					}
					if err := WaitAll(ctx, reqs...); err != nil {
						return fmt.Errorf("round %d: %w", it, err)
					}
					if a[0] != float32(left) || b[0] != float32(right+20) || s[0] != float32(r+10) || sr[0] != float32(left+30) || last[0] != float32(left+40) {
						return fmt.Errorf("round %d: got %v %v %v %v %v", it, a, b, s, sr, last)
					}
				}
				return nil
			})
		})
	}
}

// TestHoistBlockingSendsFromGoroutines: blocking Sends from several
// goroutines while an async Recv waits, over every transport.
func TestHoistBlockingSendsFromGoroutines(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			sideBySide(t)
			runRanksOn(t, kind, 2, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				r := c.Rank()
				peer := 1 - r
				if err := SendRecv(ctx, c, []float32{1}, peer, []float32{0}, peer, 99); err != nil {
					return err
				}
				for it := range 3 {
					if r == 1 {
						seen := map[float32]bool{}
						for g := range 3 {
							x := []float32{-1}
							if err := Recv(ctx, c, x, peer, 0); err != nil {
								return fmt.Errorf("round %d: recv %d: %w", it, g, err)
							}
							seen[x[0]] = true
						}
						if len(seen) != 3 {
							return fmt.Errorf("round %d: seen %v", it, seen)
						}
						if err := Send(ctx, c, []float32{float32(r)}, peer, 100); err != nil {
							return err
						}
						continue
					}
					got := []float32{-1}
					recv := RecvAsync(c, got, peer, 100)
					time.Sleep(5 * time.Millisecond)
					errs := make(chan error, 3)
					for g := range 3 {
						go func() { errs <- Send(ctx, c, []float32{float32(g)}, peer, 0) }()
					}
					for range 3 {
						if err := <-errs; err != nil {
							return fmt.Errorf("round %d: blocking send: %w", it, err)
						}
					}
					if err := recv.Wait(ctx); err != nil {
						return err
					}
					if got[0] != float32(peer) {
						return fmt.Errorf("round %d: got %v", it, got)
					}
				}
				return nil
			})
		})
	}
}

// TestHoistWaitsForNoConnect: over the in-memory transport, whose Connect
// waits for the peer's, a Send to a rank not connected yet is not run
// ahead of a waiting Recv even when both halves of the link are
// published: the hoisted Send would wait in its set-up for the receiver's
// own call, a wait the program without hoisting does not have. Rank 0
// waits in a Recv of a message from rank 1 larger than the slots (rank 1
// waits until rank 0 takes it), with a Send to rank 2 queued behind it;
// rank 2 has published its half for rank 0 (its Recv from rank 0 is
// queued behind a Recv from rank 1 that sets up that link) and waits for
// rank 1.
func TestHoistWaitsForNoConnect(t *testing.T) {
	sideBySide(t)
	opts := testOptsFast
	opts.StallTimeout = 5 * time.Second
	for _, kind := range []string{"mem", "tcp"} {
		for _, role := range [][3]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}, {0, 2, 1}} {
			t.Run(fmt.Sprint(kind, role), func(t *testing.T) {
				runRanksOn(t, kind, 3, opts, func(c *Comm) error {
					ctx := context.Background()
					big := make([]float32, 5000)
					a, b, x := role[0], role[1], role[2]
					switch c.Rank() {
					case a:
						// The link to b first.
						if err := SendRecv(ctx, c, []float32{1}, b, []float32{0}, b, 0); err != nil {
							return err
						}
						recv := RecvAsync(c, big, b, 1)
						time.Sleep(20 * time.Millisecond)
						send := SendAsync(c, []float32{2}, x, 2)
						return WaitAll(ctx, recv, send)
					case b:
						if err := SendRecv(ctx, c, []float32{1}, a, []float32{0}, a, 0); err != nil {
							return err
						}
						time.Sleep(100 * time.Millisecond)
						if err := Send(ctx, c, big, a, 1); err != nil {
							return err
						}
						return Send(ctx, c, []float32{3}, x, 3)
					default:
						a, b := RecvAsync(c, []float32{0}, b, 3), RecvAsync(c, []float32{0}, a, 2)
						return WaitAll(ctx, a, b)
					}
				})
			})
		}
	}
}

// TestHoistBesideInlineRecv: a blocking Recv (run on the caller's
// goroutine) waits while another goroutine queues Sends from a buffer of
// Alloc; the Sends go ahead, and their buffer is freed once they are
// done. A Send too large to go ahead keeps its buffer in use until it
// ran.
func TestHoistBesideInlineRecv(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			sideBySide(t)
			runRanksOn(t, kind, 2, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				r := c.Rank()
				peer := 1 - r
				if err := SendRecv(ctx, c, []float32{1}, peer, []float32{0}, peer, 99); err != nil {
					return err
				}
				if r == 1 {
					for it := range 3 {
						x := make([]float32, 100)
						if err := Recv(ctx, c, x, peer, 1); err != nil || x[7] != float32(it) {
							return fmt.Errorf("round %d: %v %v", it, x[7], err)
						}
						big := make([]float32, 5000)
						if err := Send(ctx, c, []float32{float32(it)}, peer, 2); err != nil {
							return err
						}
						if err := Recv(ctx, c, big, peer, 3); err != nil || big[4999] != float32(it) {
							return fmt.Errorf("round %d: big %v %v", it, big[4999], err)
						}
					}
					return nil
				}
				for it := range 3 {
					buf, err := Alloc[float32](c, 100)
					if err != nil {
						return err
					}
					big, err := Alloc[float32](c, 5000)
					if err != nil {
						return err
					}
					buf[7], big[4999] = float32(it), float32(it)
					reqs := make(chan []*Request, 1)
					go func() {
						time.Sleep(10 * time.Millisecond)
						reqs <- []*Request{SendAsync(c, buf, peer, 1), SendAsync(c, big, peer, 3)}
					}()
					got := []float32{-1}
					if err := Recv(ctx, c, got, peer, 2); err != nil || got[0] != float32(it) {
						return fmt.Errorf("round %d: %v %v", it, got, err)
					}
					rs := <-reqs
					if err := rs[0].Wait(ctx); err != nil {
						return err
					}
					if err := Free(c, buf); err != nil {
						return fmt.Errorf("round %d: free after the hoisted send: %w", it, err)
					}
					if err := rs[1].Wait(ctx); err != nil {
						return err
					}
					if err := Free(c, big); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// TestHoistManyRanksAndSplit: the receives-first ring and halo exchange
// on 8 ranks, then on the halves of a Split.
func TestHoistManyRanksAndSplit(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			sideBySide(t)
			runRanksOn(t, kind, 8, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				if kind == "mem" {
					if err := linkNeighbours(ctx, c); err != nil {
						return err
					}
				}
				for _, n := range []int{1, 3000} {
					if err := irecvFirst(ctx, c, n); err != nil {
						return err
					}
				}
				sub, err := c.Split(ctx, c.Rank()%2, -c.Rank())
				if err != nil {
					return err
				}
				defer sub.Close()
				if kind == "mem" {
					if err := linkNeighbours(ctx, sub); err != nil {
						return err
					}
				}
				for _, n := range []int{1, 3000} {
					if err := irecvFirst(ctx, sub, n); err != nil {
						return fmt.Errorf("split: %w", err)
					}
				}
				return nil
			})
		})
	}
}
