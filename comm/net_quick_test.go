package comm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
)

// quickP2P sends (send) or receives buf with peer and tag the quick way
// if it takes it, else the general way (a quick call that returns false
// has done nothing the general way depends on), and counts in quick the
// calls the quick way took.
func quickP2P(ctx context.Context, c *Comm, send bool, buf []float32, peer, tag int, quick *int) error {
	ok, err := QuickP2PTakes(ctx, c, send, buf, peer, tag)
	if ok {
		*quick++
		return err
	}
	if send {
		return Send(ctx, c, buf, peer, tag)
	}
	return Recv(ctx, c, buf, peer, tag)
}

// TestNetQuickWay: small Sends and Recvs over TCP take the quick way
// (net_quick.go, collectives/quick.go) and deliver every message whole
// and in order, between collectives and with the general way's calls
// (an asynchronous Send, a message larger than a chunk) in between.
func TestNetQuickWay(t *testing.T) {
	for _, n := range []int{2, 3} { // 3: more ranks than this host's cores take one poll
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			runRanksOn(t, "tcp", n, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				r := c.Rank()
				next, prev := (r+1)%n, (r+n-1)%n
				val := func(from, round, i int) float32 { return float32(from*10000 + round*100 + i) }
				// The links are made by a first call the general way.
				if err := SendRecv(ctx, c, []float32{1}, next, []float32{0}, prev, 0); err != nil {
					return err
				}
				const rounds = 40
				quick := 0
				for round := range rounds {
					count := []int{1, 2, 7, 100, 1024}[round%5] // 1024: a whole chunk of testOpts
					tag := round % 3
					send, recv := make([]float32, count), make([]float32, count)
					for i := range send {
						send[i] = val(r, round, i)
					}
					// A ring of messages: even ranks send first.
					if r%2 == 0 {
						if err := quickP2P(ctx, c, true, send, next, tag, &quick); err != nil {
							return fmt.Errorf("round %d: send: %w", round, err)
						}
						if err := quickP2P(ctx, c, false, recv, prev, tag, &quick); err != nil {
							return fmt.Errorf("round %d: recv: %w", round, err)
						}
					} else {
						if err := quickP2P(ctx, c, false, recv, prev, tag, &quick); err != nil {
							return fmt.Errorf("round %d: recv: %w", round, err)
						}
						if err := quickP2P(ctx, c, true, send, next, tag, &quick); err != nil {
							return fmt.Errorf("round %d: send: %w", round, err)
						}
					}
					for i, v := range recv {
						if want := val(prev, round, i); v != want {
							return fmt.Errorf("round %d: element %d of %d from %d is %v, want %v", round, i, count, prev, v, want)
						}
					}
					switch round % 4 {
					case 1: // a collective between
						sum := []float32{float32(r)}
						if err := Allreduce(ctx, c, sum, sum, Sum); err != nil {
							return err
						}
						if want := float32(n * (n - 1) / 2); sum[0] != want {
							return fmt.Errorf("round %d: allreduce %v, want %v", round, sum[0], want)
						}
					case 2: // the general way between: an asynchronous Send, a message of two chunks
						big := make([]float32, 2048)
						for i := range big {
							big[i] = val(r, round, i)
						}
						req := SendAsync(c, big, next, 9)
						got := make([]float32, 2048)
						if err := Recv(ctx, c, got, prev, 9); err != nil {
							return err
						}
						if err := req.Wait(ctx); err != nil {
							return err
						}
						for i, v := range got {
							if want := val(prev, round, i); v != want {
								return fmt.Errorf("round %d: element %d of the large message is %v, want %v", round, i, v, want)
							}
						}
					}
				}
				// The quick way takes the calls that find their link ready:
				// a Send with a credit, a Recv whose message came within
				// its polls. Goroutine ranks on few cores miss some.
				if quick < rounds {
					return fmt.Errorf("the quick way took %d of %d calls", quick, 2*rounds)
				}
				return c.Barrier(ctx)
			})
		})
	}
}

// TestNetQuickWayLateMessage: a Recv whose message comes long after its
// quick polls takes the general way, and gets it.
func TestNetQuickWayLateMessage(t *testing.T) {
	runRanksOn(t, "tcp", 2, testOptsFast, func(c *Comm) error {
		ctx := context.Background()
		buf := []float32{0, 0}
		for round := range 3 {
			if c.Rank() == 0 {
				time.Sleep(50 * time.Millisecond)
				buf[0], buf[1] = float32(round), 7
				if err := Send(ctx, c, buf, 1, round); err != nil {
					return err
				}
				continue
			}
			if ok, _ := QuickP2PTakes(ctx, c, false, buf, 0, round); ok {
				return fmt.Errorf("round %d: a quick Recv took a message sent 50 ms later", round)
			}
			if err := Recv(ctx, c, buf, 0, round); err != nil {
				return err
			}
			if buf[0] != float32(round) || buf[1] != 7 {
				return fmt.Errorf("round %d: got %v", round, buf)
			}
		}
		return nil
	})
}

// TestNetQuickWayMismatch: what arrives for a quick Recv and is not its
// message (another size, a collective's data; a message of another tag,
// which the general way sets aside for its own receive, then the
// sender's next call, a collective) fails the Recv as the general way
// says it, and the sender learns of it.
func TestNetQuickWayMismatch(t *testing.T) {
	cases := []struct {
		name string
		send func(ctx context.Context, c *Comm) error
		want string
	}{
		{"tag", func(ctx context.Context, c *Comm) error { return Send(ctx, c, []float32{1, 2}, 1, 7) },
			"called different operations"},
		{"size", func(ctx context.Context, c *Comm) error { return Send(ctx, c, []float32{1}, 1, 5) },
			"different sizes"},
		{"collective", func(ctx context.Context, c *Comm) error {
			return Allreduce(ctx, c, []float32{1, 2}, make([]float32, 2), Sum)
		}, "called different operations"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := make([]error, 2)
			runRanksOn(t, "tcp", 2, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				// A first message, so that the link is up and the quick way
				// is open.
				warm := []float32{0, 0}
				if c.Rank() == 0 {
					if err := Send(ctx, c, warm, 1, 5); err != nil {
						return err
					}
					errs[0] = tc.send(ctx, c)
					if errs[0] == nil {
						errs[0] = c.Barrier(ctx)
					}
					return nil
				}
				if err := Recv(ctx, c, warm, 0, 5); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond) // the message is there: the quick way looks at it
				errs[1] = Recv(ctx, c, []float32{0, 0}, 0, 5)
				return nil
			})
			if errs[1] == nil || !strings.Contains(errs[1].Error(), tc.want) {
				t.Errorf("rank 1: Recv: %v, want an error saying %q", errs[1], tc.want)
			}
			if errs[0] == nil {
				t.Errorf("rank 0: no error after rank 1 failed")
			}
			if errs[0] != nil && !strings.Contains(errs[0].Error(), "rank 1") {
				t.Errorf("rank 0: %v: does not name rank 1", errs[0])
			}
		})
	}
}

// TestNetQuickWayBroadcast: a broadcast of two ranks over TCP takes the
// quick way on both (the root's one send, the other's one receive), with
// the collectives' numbering and checks: the values arrive, calls of
// other kinds between stay in step, and a broadcast whose ranks disagree
// on the count fails as the general way says it.
func TestNetQuickWayBroadcast(t *testing.T) {
	runRanksOn(t, "tcp", 2, testOptsFast, func(c *Comm) error {
		ctx := context.Background()
		r := c.Rank()
		if err := c.Barrier(ctx); err != nil { // the link
			return err
		}
		quick := 0
		const rounds = 60
		for round := range rounds {
			count := []int{1, 3, 64, 1000}[round%4]
			root := round % 2
			buf := make([]float32, count)
			if r == root {
				for i := range buf {
					buf[i] = float32(round*1000 + i)
				}
			}
			ok, err := QuickTakes(ctx, c, "broadcast", nil, buf, 0, root)
			if err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			if ok {
				quick++
			} else if err := Broadcast(ctx, c, buf, root); err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			for i, v := range buf {
				if want := float32(round*1000 + i); v != want {
					return fmt.Errorf("round %d: element %d of %d from %d is %v, want %v", round, i, count, root, v, want)
				}
			}
			if round%5 == 4 {
				sum := []float32{1}
				if err := Allreduce(ctx, c, sum, sum, Sum); err != nil {
					return err
				}
			}
		}
		// Each rank is the root of half of them, always quick (a credit
		// is back by then); it receives the others quick when they come
		// within its polls.
		if quick < rounds/2 {
			return fmt.Errorf("the quick way took %d of %d broadcasts", quick, rounds)
		}
		// The ranks disagree on the count.
		buf := make([]float32, 4+r)
		err := Broadcast(ctx, c, buf, 0)
		if r == 1 {
			if err == nil || (!strings.Contains(err.Error(), "broadcast(float32, 4, root=0)") && !strings.Contains(err.Error(), "different sizes")) {
				return fmt.Errorf("a broadcast of 4 floats received as 5: %v, want an error saying so", err)
			}
			return nil
		}
		if err == nil { // the root's eager send completed: its next call learns it
			err = c.Barrier(ctx)
		}
		if err == nil || !strings.Contains(err.Error(), "rank 1") {
			return fmt.Errorf("the root after its peer failed: %v, want an error naming rank 1", err)
		}
		return nil
	})
}
