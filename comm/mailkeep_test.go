package comm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// keepOpts are the staging geometry of the default options (8 slots of
// 512 KiB): a Send of up to 4 MiB completes before its receiver takes it.
var keepOpts = func() Options { o := testOptsFast; o.ChunkSize, o.Slots = 512<<10, 8; return o }()

// TestMailboxSendsBeforeReceives: over the shared-memory board a Send of
// a large message completes before its receiver takes it (the board keeps
// a copy), as one over the links completes once the message is in the
// peer's staging. Before, ranks that each queued an asynchronous Send (or
// made a blocking one) before their Recv, MPI's Isend-then-Recv exchange,
// waited on one another until the stall timeout when the message was more
// than 4 KiB (the receiver read the sender's buffer, and the sender's Send
// waited for that, ahead of its own Recv), or when more than 4 small
// messages were sent before the first was received.
func TestMailboxSendsBeforeReceives(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n, "ranks"), func(t *testing.T) {
			runRanksOn(t, "shm", n, keepOpts, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				next, prev := (me+1)%n, (me+n-1)%n
				val := func(from, i, round int) float32 { return float32(from*1_000_003 + i*7 + round) }
				// Isend to the next rank, Recv from the previous, Wait.
				for round, size := range []int{1025, 16 << 10, 256 << 10} {
					for _, alloc := range []bool{false, true} {
						send, recv := make([]float32, size), make([]float32, size)
						if alloc {
							var err error
							if send, err = Alloc[float32](c, size); err != nil {
								return err
							}
							defer Free(c, send)
						}
						for i := range send {
							send[i] = val(me, i, round)
						}
						req := SendAsync(c, send, next, round)
						if err := Recv(ctx, c, recv, prev, round); err != nil {
							return fmt.Errorf("%d floats: %w", size, err)
						}
						if err := req.Wait(ctx); err != nil {
							return fmt.Errorf("%d floats: send: %w", size, err)
						}
						if got := req.Algorithm(); got != "shm-mailbox" {
							return fmt.Errorf("%d floats ran %q, want shm-mailbox", size, got)
						}
						for i := range recv {
							if recv[i] != val(prev, i, round) {
								return fmt.Errorf("%d floats: element %d is %v, want %v", size, i, recv[i], val(prev, i, round))
							}
						}
					}
				}
				// Blocking Sends before the Recvs: as many small messages as
				// a mailbox holds, then three of 64 KiB.
				for _, m := range []struct{ count, size int }{{MailSlots, 4}, {3, 16 << 10}} {
					for j := range m.count {
						b := make([]float32, m.size)
						for i := range b {
							b[i] = val(me, i, 10+j)
						}
						if err := Send(ctx, c, b, next, 10+j); err != nil {
							return fmt.Errorf("%d sends of %d floats: send %d: %w", m.count, m.size, j, err)
						}
					}
					for j := range m.count {
						b := make([]float32, m.size)
						if err := Recv(ctx, c, b, prev, 10+j); err != nil {
							return fmt.Errorf("%d sends of %d floats: recv %d: %w", m.count, m.size, j, err)
						}
						for i := range b {
							if b[i] != val(prev, i, 10+j) {
								return fmt.Errorf("%d sends of %d floats: message %d element %d is %v", m.count, m.size, j, i, b[i])
							}
						}
					}
				}
				return nil
			})
		})
	}
}

// TestMailboxKeptCopy: a large Send that completed before its receiver
// took the message leaves the receiver the message as it was sent, also
// when the sender rewrites its buffer at once, sends more, or closes the
// communicator (Close waits for the receiver to take it).
func TestMailboxKeptCopy(t *testing.T) {
	const size = 64 << 10
	runRanksOn(t, "shm", 2, keepOpts, func(c *Comm) error {
		ctx := context.Background()
		if c.Rank() == 0 {
			buf := make([]float32, size)
			for round := range 3 {
				for i := range buf {
					buf[i] = float32(round*size + i)
				}
				if err := Send(ctx, c, buf, 1, round); err != nil {
					return err
				}
				clear(buf) // the receiver has not taken it yet
			}
			return nil // and Close
		}
		time.Sleep(300 * time.Millisecond) // the sender is done, in Close
		buf := make([]float32, size)
		for round := range 3 {
			if err := Recv(ctx, c, buf, 0, round); err != nil {
				return err
			}
			for i := range buf {
				if buf[i] != float32(round*size+i) {
					return fmt.Errorf("message %d: element %d is %v", round, i, buf[i])
				}
			}
		}
		return nil
	})
}

// TestMailboxKeptCopyWithdrawn: a copy its receiver did not take before
// the sender's Close gave up waiting is withdrawn: the sender's Close says
// so, and the receiver's Recv fails naming the sender, not with the bytes
// of freed memory.
func TestMailboxKeptCopyWithdrawn(t *testing.T) {
	sideBySide(t) // mostly sleeps
	opts := keepOpts
	opts.StallTimeout = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var recvErr error
	errs := commtest.Run(ctx, "shm", 2, opts, func(c *Comm) error {
		buf := make([]float32, 16<<10)
		if c.Rank() == 0 {
			return Send(ctx, c, buf, 1, 0)
		}
		time.Sleep(2 * time.Second)
		recvErr = Recv(ctx, c, buf, 0, 0)
		return nil
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 has not taken 1 messages") {
		t.Errorf("rank 0's Close: %v, want it to name rank 1 and the message it did not take", errs[0])
	}
	if recvErr == nil || !strings.Contains(recvErr.Error(), "rank 0 closed the communicator before this rank took its message") {
		t.Errorf("rank 1's Recv: %v, want an error naming rank 0's Close", recvErr)
	}
	t.Logf("rank 0: %v; rank 1: %v", errs[0], recvErr)
}

// TestMailboxKeepRace: a receiver that comes as its sender decides to keep
// a copy (spins of 0-60 µs before each Recv, around mailKeepAfter) gets
// every message whole, whichever of the two takes the entry first, while
// the sender rewrites its buffer as soon as each Send returns.
func TestMailboxKeepRace(t *testing.T) {
	const size, rounds = 3000, 300
	runRanksOn(t, "shm", 2, keepOpts, func(c *Comm) error {
		ctx := context.Background()
		buf := make([]float32, size)
		for round := range rounds {
			if c.Rank() == 0 {
				for i := range buf {
					buf[i] = float32(round + i)
				}
				if err := Send(ctx, c, buf, 1, round%7); err != nil {
					return err
				}
				continue
			}
			for end := time.Now().Add(time.Duration(round%13) * 5 * time.Microsecond); time.Now().Before(end); {
			}
			if err := Recv(ctx, c, buf, 0, round%7); err != nil {
				return err
			}
			for i := range buf {
				if buf[i] != float32(round+i) {
					return fmt.Errorf("message %d: element %d is %v", round, i, buf[i])
				}
			}
		}
		return nil
	})
}

// TestMailboxKeptCopiesFillTheRing: copies take the ring of a receiver
// round, so that any messages that fit in it together are kept, as the
// links' slots hold any chunks that fit: rounds of Isends of 1 MiB and of
// 1 MiB and 2.5 MiB (3.5 of the 4 MiB), then the Recvs. Before, a copy
// that did not fit between the last one and the ring's end started over
// at its start, where an untaken copy stood in the way: the 2.5 MiB Send
// waited for its receiver, queued behind it, and both ranks failed as
// calls that cannot meet (a helper's hunt, 5 of 5 runs; TCP ran it).
func TestMailboxKeptCopiesFillTheRing(t *testing.T) {
	const mib = 1 << 18 // floats
	groups := [][]int{{mib}, {mib, 5 * mib / 2}, {mib}, {mib, 5 * mib / 2}, {5 * mib / 2, mib}, {mib, mib, mib}}
	runRanksOn(t, "shm", 2, keepOpts, func(c *Comm) error {
		ctx := context.Background()
		peer := 1 - c.Rank()
		for g, sizes := range groups {
			var reqs []*Request
			for j, n := range sizes {
				b := make([]float32, n)
				for i := range b {
					b[i] = float32(c.Rank()*7 + g*3 + j + i%1000)
				}
				reqs = append(reqs, SendAsync(c, b, peer, j))
			}
			for j, n := range sizes {
				b := make([]float32, n)
				if err := Recv(ctx, c, b, peer, j); err != nil {
					return fmt.Errorf("group %d message %d: %w", g, j, err)
				}
				for i := range b {
					if want := float32(peer*7 + g*3 + j + i%1000); b[i] != want {
						return fmt.Errorf("group %d message %d: element %d is %v, want %v", g, j, i, b[i], want)
					}
				}
			}
			if err := WaitAll(ctx, reqs...); err != nil {
				return fmt.Errorf("group %d: %w", g, err)
			}
		}
		return nil
	})
}

// TestMailboxSendWithoutRecvNamedAtClose: a small Send over the mailbox
// that its receiver never matches with a Recv (it completes at once) is
// named by the receiver's Close. Nothing else reads the mailboxes: the
// calls after it succeeded on both ranks and so did their Close, the
// message dropped without a word (over the links the receiver's next
// call that receives from the sender finds it).
func TestMailboxSendWithoutRecvNamedAtClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := commtest.Run(ctx, "shm", 2, testOptsFast, func(c *Comm) error {
		if c.Rank() == 0 {
			if err := Send(ctx, c, make([]float32, 8), 1, 2); err != nil {
				return err
			}
		}
		return c.Barrier(ctx) // rank 0's message is there once rank 1 is past it
	})
	if errs[0] != nil && !strings.Contains(errs[0].Error(), "rank 1 closed the communicator without receiving a message this rank sent it") {
		t.Errorf("rank 0: %v", errs[0]) // (the sender may see it too: TestSendWithoutRecvNamedAtClose)
	}
	const want = "rank 0 sent this rank a message of 32 bytes with tag 2 that it never received"
	if errs[1] == nil || !strings.Contains(errs[1].Error(), want) {
		t.Errorf("rank 1: %v; want its Close to say %q", errs[1], want)
	} else {
		t.Log(errs[1])
	}
}

// TestSendWithoutRecvNamedAtClose: a Send that completes before its
// receiver calls Recv (it fits the links' slots or the mailbox) and that
// no Recv ever takes is named at Close, on every transport: over the
// links by the sender, whose Close waits for the message's credit or the
// receiver's closing notice, and by the receiver if the message arrived
// before it closed; over the shared-memory board by the receiver, which
// finds it in its mailbox, and by the sender if the receiver closed
// first. A message a rank sends itself and never receives is named by
// its Close too. Before, both ranks' Close returned nil over the links
// and for messages to oneself, and the data was dropped without a word.
func TestSendWithoutRecvNamedAtClose(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		for _, count := range []int{8, 3000} { // one chunk; the slots' worth (3 of 4 KiB)
			t.Run(fmt.Sprint(kind, count), func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				errs := commtest.Run(ctx, kind, 2, testOptsFast, func(c *Comm) error {
					// A second communicator orders the ranks without
					// touching c's messages: rank 0's Send has returned
					// before rank 1 closes c.
					d, err := c.Dup(ctx)
					if err != nil {
						return err
					}
					defer d.Close()
					if err := c.Barrier(ctx); err != nil { // the links are up
						return err
					}
					if c.Rank() == 0 {
						if err := Send(ctx, c, make([]float32, count), 1, 2); err != nil {
							return fmt.Errorf("send: %w", err)
						}
					}
					return d.Barrier(ctx)
				})
				sender := "rank 1 closed the communicator without receiving"
				receiver := "rank 0 sent this rank a message"
				if kind == "shm" {
					sender = sender + " a message this rank sent it"
				} else {
					sender = fmt.Sprintf("rank 0's send(float32, %d) tag 2 sent rank 1 a message that rank 1 never received: ", count) + sender
				}
				// The side that always sees it: the sender over the links,
				// the receiver over the board; the other may see it too.
				sure, maybe := 0, 1
				if kind == "shm" {
					sure, maybe = 1, 0
				}
				want := [2]string{sender, receiver}
				if errs[sure] == nil || !strings.Contains(errs[sure].Error(), want[sure]) {
					t.Errorf("rank %d: %v; want its Close to say %q", sure, errs[sure], want[sure])
				}
				if errs[maybe] != nil && !strings.Contains(errs[maybe].Error(), want[maybe]) {
					t.Errorf("rank %d: %v; want nil or %q", maybe, errs[maybe], want[maybe])
				}
				for _, err := range errs {
					if err != nil && !strings.Contains(err.Error(), "tag 2") {
						t.Errorf("%v: does not name the tag", err)
					}
				}
			})
		}
		t.Run(kind+"-self", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs := commtest.Run(ctx, kind, 2, testOptsFast, func(c *Comm) error {
				if c.Rank() == 0 {
					if err := Send(ctx, c, make([]float32, 4), 0, 7); err != nil {
						return err
					}
					if err := SendAsync(c, make([]float32, 2), 0, 8).Wait(ctx); err != nil {
						return err
					}
				}
				return c.Barrier(ctx)
			})
			const want = "this rank sent itself 2 messages that it never received (the first: 16 bytes with tag 7"
			if errs[0] == nil || !strings.Contains(errs[0].Error(), want) {
				t.Errorf("rank 0: %v; want its Close to say %q", errs[0], want)
			}
			if errs[1] != nil {
				t.Errorf("rank 1: %v", errs[1])
			}
		})
	}
}
