package comm_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// tagMatchKinds are the transports TestP2PMatchesByTag runs over.
var tagMatchKinds = []string{"mem", "tcp", "shm"}

// TestP2PMatchesByTag: point-to-point messages between two ranks match
// by tag, as MPI's do: a receive passes over messages of other tags
// (they wait for their own receives), and messages of one tag arrive in
// the order they were sent. A receive whose tag was not the first to
// arrive failed ("the peer sent a message with tag 9"): a halo exchange
// of two ranks that posts its receives in another order than its peer's
// sends, say. One element, and messages of three chunks (testOpts: 4
// KiB chunks, 3 slots), so that two of them need more than the slots.
// A collective passes over the messages sent before it, as MPI's do.
func TestP2PMatchesByTag(t *testing.T) {
	for _, kind := range tagMatchKinds {
		for _, count := range []int{1, 3000} {
			t.Run(fmt.Sprint(kind, count), func(t *testing.T) {
				sideBySide(t)
				runRanksOn(t, kind, 2, testOptsFast, func(c *Comm) error {
					ctx := context.Background()
					me, peer := c.Rank(), 1-c.Rank()
					msg := func(from, tag, round int) []float32 {
						b := make([]float32, count)
						for i := range b {
							b[i] = float32(from*1e6 + tag*1e4 + round*1e3 + i%1000)
						}
						return b
					}
					check := func(what string, got []float32, tag, round int) error {
						want := msg(peer, tag, round)
						for i := range got {
							if got[i] != want[i] {
								return fmt.Errorf("%s: element %d of %d is %v, want %v (tag %d, round %d from rank %d)", what, i, count, got[i], want[i], tag, round, peer)
							}
						}
						return nil
					}
					recv := func(what string, tag, round int) error {
						got := make([]float32, count)
						if err := Recv(ctx, c, got, peer, tag); err != nil {
							return fmt.Errorf("%s: %w", what, err)
						}
						return check(what, got, tag, round)
					}
					// Blocking: rank 0 sends tags 9, 8 and 9; rank 1 receives
					// tag 8 first, then the two of tag 9 in order.
					if me == 0 {
						for i, tag := range []int{9, 8, 9} {
							if err := Send(ctx, c, msg(me, tag, i), peer, tag); err != nil {
								return fmt.Errorf("send %d (tag %d): %w", i, tag, err)
							}
						}
					} else {
						if err := recv("tag 8, sent second", 8, 1); err != nil {
							return err
						}
						if err := recv("the first of tag 9", 9, 0); err != nil {
							return err
						}
						if err := recv("the second of tag 9", 9, 2); err != nil {
							return err
						}
					}
					// A halo exchange of two ranks whose receives are posted
					// in the other order than the peer's sends.
					a, b := make([]float32, count), make([]float32, count)
					reqs := []*Request{
						RecvAsync(c, a, peer, 8),
						RecvAsync(c, b, peer, 9),
						SendAsync(c, msg(me, 9, 3), peer, 9),
						SendAsync(c, msg(me, 8, 3), peer, 8),
					}
					for i, r := range reqs {
						if err := r.Wait(ctx); err != nil {
							return fmt.Errorf("halo: request %d: %w", i, err)
						}
					}
					if err := check("halo, tag 8", a, 8, 3); err != nil {
						return err
					}
					if err := check("halo, tag 9", b, 9, 3); err != nil {
						return err
					}
					// A collective between: the messages set aside do not
					// stand in its way.
					if me == 0 {
						if err := Send(ctx, c, msg(me, 5, 4), peer, 5); err != nil {
							return err
						}
						if err := Send(ctx, c, msg(me, 4, 4), peer, 4); err != nil {
							return err
						}
					} else if err := recv("tag 4 past tag 5", 4, 4); err != nil {
						return err
					}
					sum := []float32{1}
					if err := Allreduce(ctx, c, sum, sum, Sum); err != nil {
						return err
					}
					if me == 1 {
						if err := recv("tag 5 after the allreduce", 5, 4); err != nil {
							return err
						}
					}
					// A Send before a collective whose Recv comes after it
					// on the receiver: the collective passes over it, as
					// MPI's do.
					if me == 0 {
						if err := Send(ctx, c, msg(me, 6, 5), peer, 6); err != nil {
							return err
						}
					}
					for range 2 {
						if err := Allreduce(ctx, c, sum, sum, Sum); err != nil {
							return fmt.Errorf("allreduce after a send: %w", err)
						}
					}
					if me == 1 {
						return recv("tag 6, sent before two allreduces", 6, 5)
					}
					return nil
				})
			})
		}
	}
}

// TestP2PSetAsideOutlivesItsSender: a message set aside for its tag is
// this rank's once it arrived: its receive completes though the sender
// closed since (MPI delivers what a rank sent before it finalized). The
// sender's Close returns once its messages are taken, set aside
// included; rank 1 receives tag 7 (setting tag 6 aside), waits for rank
// 0 to close, then receives tag 6. The receive failed "connection lost"
// when the executor had already taken the news of the close in a call
// that completed (1 run in 100 of TestP2PMatchesByTag/mem1 under -race,
// where rank 0 closes during rank 1's last allreduce): that order, which
// a test of processes cannot force, is collectives'
// TestStrayOutlivesLinkDown.
func TestP2PSetAsideOutlivesItsSender(t *testing.T) {
	for _, kind := range tagMatchKinds {
		for _, count := range []int{1, 1000} {
			t.Run(fmt.Sprint(kind, count), func(t *testing.T) {
				sideBySide(t)
				closed := make(chan struct{})
				runRanksOn(t, kind, 2, testOptsFast, func(c *Comm) error {
					ctx := context.Background()
					msg := func(tag int) []float32 {
						b := make([]float32, count)
						for i := range b {
							b[i] = float32(tag*1e4 + i)
						}
						return b
					}
					if err := c.Barrier(ctx); err != nil { // connects the two (lazily: rank 1 must take part)
						return err
					}
					if c.Rank() == 0 {
						for _, tag := range []int{6, 7} {
							if err := Send(ctx, c, msg(tag), 1, tag); err != nil {
								return fmt.Errorf("send tag %d: %w", tag, err)
							}
						}
						err := c.Close()
						close(closed)
						return err
					}
					for i, tag := range []int{7, 6} {
						if i == 1 {
							<-closed
							time.Sleep(100 * time.Millisecond) // the close reaches this rank
						}
						got := make([]float32, count)
						if err := Recv(ctx, c, got, 0, tag); err != nil {
							return fmt.Errorf("recv tag %d after the sender closed: %w", tag, err)
						}
						for i, want := range msg(tag) {
							if got[i] != want {
								return fmt.Errorf("recv tag %d: element %d is %v, want %v", tag, i, got[i], want)
							}
						}
					}
					return nil
				})
			})
		}
	}
}

// TestP2PTagMatchErrors: a message set aside for its tag and received
// with another size fails the receive naming both sizes; one never
// received is named at Close by its receiver.
func TestP2PTagMatchErrors(t *testing.T) {
	for _, kind := range tagMatchKinds {
		for _, size := range []bool{true, false} {
			t.Run(fmt.Sprint(kind, map[bool]string{true: "/size", false: "/close"}[size]), func(t *testing.T) {
				sideBySide(t)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				var sizeErr error
				errs := commtest.Run(ctx, kind, 2, testOptsFast, func(c *Comm) error {
					d, err := c.Dup(ctx) // orders the ranks without touching c's messages
					if err != nil {
						return err
					}
					defer d.Close()
					if c.Rank() == 0 {
						for _, tag := range []int{9, 8} {
							if err := Send(ctx, c, make([]float32, 2), 1, tag); err != nil && !size {
								return fmt.Errorf("send tag %d: %w", tag, err)
							}
						}
						return d.Barrier(ctx)
					}
					if err := Recv(ctx, c, make([]float32, 2), 0, 8); err != nil {
						return fmt.Errorf("recv tag 8: %w", err)
					}
					if size {
						sizeErr = Recv(ctx, c, make([]float32, 3), 0, 9)
					}
					return d.Barrier(ctx)
				})
				if size {
					if sizeErr == nil || (!strings.Contains(sizeErr.Error(), "8 bytes where this rank's receive expects 12") &&
						!strings.Contains(sizeErr.Error(), "rank 0 sent 8 bytes with tag 9 where rank 1 receives 12 bytes")) {
						t.Errorf("rank 1: a receive of 3 elements of a message of 2 set aside: %v, want an error naming both sizes", sizeErr)
					}
					return
				}
				if errs[1] == nil || !strings.Contains(errs[1].Error(), "rank 0 sent this rank a message with tag 9 that it never received") {
					t.Errorf("rank 1: %v; want its Close to name the message with tag 9 it never received", errs[1])
				}
				if errs[0] != nil {
					t.Errorf("rank 0: %v; want nil (its messages were taken, one of them aside)", errs[0])
				}
			})
		}
	}
}

// TestP2PTagMatchSteered: over TCP a receive's chunks of 16 KiB or more
// are placed straight into its buffer as they arrive (steered: the
// transport matches each write's length and immediate with the slot it
// lands in). A message of another tag set aside before them moves the
// peer's writes on by its chunks, so a chunk can land in a slot armed for
// a later chunk of the same length and immediate: it must still end up in
// its own place.
func TestP2PTagMatchSteered(t *testing.T) {
	opts := testOptsFast
	opts.ChunkSize = 16 << 10
	const count = 3 * 4 << 10 // three chunks of float32
	for _, strayChunks := range []int{1, 2} {
		t.Run(fmt.Sprint(strayChunks), func(t *testing.T) {
			sideBySide(t)
			runRanksOn(t, "tcp", 2, opts, func(c *Comm) error {
				ctx := context.Background()
				if err := c.Barrier(ctx); err != nil { // the link
					return err
				}
				a := make([]float32, count)
				for i := range a {
					a[i] = float32(i)
				}
				b := make([]float32, strayChunks*4<<10)
				for i := range b {
					b[i] = -float32(i)
				}
				for round := range 3 {
					if c.Rank() == 0 {
						time.Sleep(20 * time.Millisecond) // rank 1's receive is armed by then
						if err := Send(ctx, c, b, 1, 8); err != nil {
							return err
						}
						if err := Send(ctx, c, a, 1, 9); err != nil {
							return err
						}
					} else {
						gotA, gotB := make([]float32, count), make([]float32, len(b))
						if err := Recv(ctx, c, gotA, 0, 9); err != nil {
							return err
						}
						if err := Recv(ctx, c, gotB, 0, 8); err != nil {
							return err
						}
						for i := range gotA {
							if gotA[i] != a[i] {
								return fmt.Errorf("round %d: tag 9: element %d is %v, want %v", round, i, gotA[i], a[i])
							}
						}
						for i := range gotB {
							if gotB[i] != b[i] {
								return fmt.Errorf("round %d: tag 8: element %d is %v, want %v", round, i, gotB[i], b[i])
							}
						}
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// TestP2PSenderClosesDuringALook: over shared memory a receive that
// waits looks at its sender's state now and then; a sender that sent,
// then closed between the receive's test of its mailbox and that look,
// left its messages there to take. The receive failed "rank 0 closed the
// communicator ... before this call" (CI, beside three busy loops). Not
// parallel: the hook is the package's.
func TestP2PSenderClosesDuringALook(t *testing.T) {
	looked, closed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer SetMailLookHook(func() {
		once.Do(func() {
			close(looked)
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
			}
		})
	})()
	runRanksOn(t, "shm", 2, testOptsFast, func(c *Comm) error {
		ctx := context.Background()
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			<-looked
			for _, tag := range []int{6, 7} {
				if err := Send(ctx, c, []float32{float32(tag)}, 1, tag); err != nil {
					return fmt.Errorf("send tag %d: %w", tag, err)
				}
			}
			err := c.Close()
			close(closed)
			return err
		}
		for _, tag := range []int{7, 6} {
			got := []float32{0}
			if err := Recv(ctx, c, got, 0, tag); err != nil {
				return fmt.Errorf("recv tag %d: %w", tag, err)
			}
			if got[0] != float32(tag) {
				return fmt.Errorf("recv tag %d: got %v", tag, got[0])
			}
		}
		return nil
	})
}
