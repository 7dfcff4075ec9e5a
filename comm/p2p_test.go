package comm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	. "github.com/goccl/goccl/comm"
)

// TestTagsMatchExactly checks that point-to-point tags travel whole (issue
// 11 item 2: they travelled modulo 2^14, so Send(tag 1) was received by
// Recv(tag 16385) and both returned nil): tags across the whole range
// 0..MaxTag are delivered, different tags that agree modulo 2^14 or 2^16
// fail the receive naming both, and tags outside the range are refused at
// once.
func TestTagsMatchExactly(t *testing.T) {
	ctx := context.Background()
	runRanks(t, 2, testOpts, func(c *Comm) error {
		for _, tag := range []int{0, 1, 1 << 14, 1<<16 + 1, MaxTag} {
			buf := []int32{int32(tag), 7}
			var err error
			if c.Rank() == 0 {
				err = Send(ctx, c, buf, 1, tag)
			} else {
				buf[0] = -1
				err = Recv(ctx, c, buf, 0, tag)
				if err == nil && buf[0] != int32(tag) {
					err = fmt.Errorf("tag %d: received %v", tag, buf)
				}
			}
			if err != nil {
				return err
			}
		}
		// A refused call breaks the communicator on every rank: let both
		// finish the calls above first. Each refused call still reports
		// its own argument.
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		for _, tag := range []int{-1, MaxTag + 1, 1 << 40} {
			b := []int32{1}
			for name, err := range map[string]error{
				"send":     Send(ctx, c, b, 1-c.Rank(), tag),
				"recv":     Recv(ctx, c, b, 1-c.Rank(), tag),
				"sendrecv": SendRecv(ctx, c, b, 1-c.Rank(), []int32{0}, 1-c.Rank(), tag),
			} {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprint(tag)) || !strings.Contains(err.Error(), name+"(") {
					return fmt.Errorf("%s with tag %d: %v, want an error naming the call and tag", name, tag, err)
				}
			}
		}
		return nil
	})
	for _, tags := range [][2]int{{1, 1<<14 + 1}, {1, 1<<16 + 1}, {5, 1<<28 + 5}} {
		var recvErr error
		runRanksSenderLearns(t, "mem", testOpts, func(c *Comm) error {
			buf := []float32{1, 2}
			if c.Rank() == 0 {
				err := Send(ctx, c, buf, 1, tags[0])
				if err != nil && !errors.Is(err, ErrClosed) && !strings.Contains(err.Error(), "rank 1") {
					return err
				}
				return nil
			}
			recvErr = Recv(ctx, c, buf, 0, tags[1])
			return nil
		})
		if recvErr == nil || !strings.Contains(recvErr.Error(), fmt.Sprint(tags[0])) || !strings.Contains(recvErr.Error(), fmt.Sprint(tags[1])) {
			t.Errorf("Send(tag %d) received by Recv(tag %d): %v, want an error naming both tags", tags[0], tags[1], recvErr)
		} else {
			t.Log(recvErr)
		}
	}
}

// TestP2PMessageEndsWhereTheReceiveEnds: a message longer or shorter
// than its receive by whole chunks fails the receive at once, naming the
// difference. Before, a longer message's receive took its first chunks and
// returned nil, leaving the rest to the next call (which took it for its
// own data, or failed on it), and a shorter one's waited for chunks that
// never came until the stall timeout.
func TestP2PMessageEndsWhereTheReceiveEnds(t *testing.T) {
	const chunk = 4096 / 4 // testOpts.ChunkSize, in float32
	for _, tc := range []struct {
		name       string
		send, recv int
	}{
		{"longer", 4 * chunk, 2 * chunk},
		{"shorter", 2 * chunk, 4 * chunk},
	} {
		for _, kind := range []string{"mem", "tcp", "shm"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				opts := testOpts
				opts.StallTimeout = 30 * time.Second
				var recvErr, sendErr error
				start := time.Now()
				runRanksOn(t, kind, 2, opts, func(c *Comm) error {
					ctx := context.Background()
					if c.Rank() == 0 {
						// Completes (its chunks fit the slots) or fails
						// when the receiver does; if it completes, its
						// next call fails.
						if sendErr = Send(ctx, c, make([]float32, tc.send), 1, 3); sendErr == nil {
							sendErr = c.Barrier(ctx)
						}
						return nil
					}
					recvErr = Recv(ctx, c, make([]float32, tc.recv), 0, 3)
					return nil
				})
				// The sender learns the cause too (over shared memory it
				// read "rank 1 failed or aborted": reportedCause).
				if sendErr == nil || !strings.Contains(sendErr.Error(), "different sizes") && !strings.Contains(sendErr.Error(), "point-to-point mismatch") {
					t.Errorf("the sender of %d float32 to a Recv of %d: %v, want an error naming the difference", tc.send, tc.recv, sendErr)
				} else {
					t.Log(sendErr)
				}
				if recvErr == nil || !strings.Contains(recvErr.Error(), "different sizes") && !strings.Contains(recvErr.Error(), "point-to-point mismatch") {
					t.Errorf("Send of %d float32 received by Recv of %d: %v, want an error naming the difference", tc.send, tc.recv, recvErr)
				} else {
					t.Log(recvErr)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("the difference took %v to report", d)
				}
			})
		}
	}
}

// TestAlltoallvCountsDifferByWholeChunks: an all-to-all-v whose receiver
// expects more from a peer than the peer sends, by whole chunks, fails
// with a mismatch on that receiver that names where the peer went on to
// (its message read "went on to  while", with nothing between), and the
// ranks that completed the call fail in their next one.
func TestAlltoallvCountsDifferByWholeChunks(t *testing.T) {
	const chunk = 4096 / 4 // testOpts.ChunkSize, in float32
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			opts := testOptsFast
			errs := make([]error, 3)
			start := time.Now()
			runRanksOn(t, kind, 3, opts, func(c *Comm) error {
				ctx := context.Background()
				p, me := c.Size(), c.Rank()
				sc, sd, rc, rd := make([]int, p), make([]int, p), make([]int, p), make([]int, p)
				st, rt := 0, 0
				for i := range p {
					sc[i], rc[i] = 2*chunk, 2*chunk
					if me == 2 && i == 0 {
						rc[i] = 3 * chunk // rank 0 sends two chunks
					}
					sd[i], rd[i] = st, rt
					st += sc[i]
					rt += rc[i]
				}
				err := Alltoallv(ctx, c, make([]float32, st), sc, sd, make([]float32, rt), rc, rd)
				if err == nil {
					err = c.Barrier(ctx)
				}
				errs[me] = err
				return nil
			})
			for r, err := range errs {
				switch {
				case err == nil || !strings.Contains(err.Error(), "mismatch") && !strings.Contains(err.Error(), "different sizes"):
					t.Errorf("rank %d: %v, want a mismatch", r, err)
				case strings.Contains(err.Error(), "sequence mismatch"):
					// Rank 2 waits for elements rank 0 did not send: it
					// was told the ranks made different numbers of calls.
					t.Errorf("rank %d: the error blames the number of collectives, not the counts: %v", r, err)
				case strings.Contains(err.Error(), "went on to  "):
					t.Errorf("rank %d: the error does not say where the peer went on to: %v", r, err)
				default:
					t.Logf("rank %d: %v", r, err)
				}
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("the mismatch took %v to report", d)
			}
		})
	}
}

// TestSendToSelf checks point-to-point calls of a rank with itself, which
// MPI allows (issue 11 item 14c: they were refused): Send then Recv,
// SendRecv with itself on one or both sides, and a Recv with nothing sent
// failing at once without breaking the communicator.
func TestSendToSelf(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 2} {
		runRanks(t, n, testOpts, func(c *Comm) error {
			me, peer := c.Rank(), (c.Rank()+1)%n
			// Send to oneself, then receive, with messages queued in order.
			if err := Send(ctx, c, []int64{1, 2, 3}, me, 5); err != nil {
				return err
			}
			req := SendAsync(c, []int64{4}, me, 6)
			got := make([]int64, 3)
			if err := Recv(ctx, c, got, me, 5); err != nil {
				return err
			}
			if err := req.Wait(ctx); err != nil {
				return err
			}
			one := []int64{0}
			if err := Recv(ctx, c, one, me, 6); err != nil {
				return err
			}
			if !slices.Equal(got, []int64{1, 2, 3}) || one[0] != 4 {
				return fmt.Errorf("received %v and %v from itself", got, one)
			}
			if alg := req.Algorithm(); alg != "direct" {
				return fmt.Errorf("send to itself ran %q", alg)
			}
			// SendRecv with itself on both sides.
			if err := SendRecv(ctx, c, []int64{7, 8}, me, got[:2], me, 9); err != nil {
				return err
			}
			if got[0] != 7 || got[1] != 8 {
				return fmt.Errorf("sendrecv with itself: %v", got[:2])
			}
			// SendRecv with itself on one side: send to the right, receive
			// from oneself, then the reverse.
			if err := Send(ctx, c, []int64{int64(10 + me)}, me, 11); err != nil {
				return err
			}
			if err := SendRecv(ctx, c, []int64{int64(20 + me)}, peer, one, me, 11); err != nil {
				return err
			}
			if one[0] != int64(10+me) {
				return fmt.Errorf("sendrecv from itself: %v", one)
			}
			left := (me + n - 1) % n
			if err := SendRecv(ctx, c, []int64{int64(30 + me)}, me, one, left, 11); err != nil {
				return err
			}
			if one[0] != int64(20+left) {
				return fmt.Errorf("sendrecv from rank %d: %v, want %d", left, one, 20+left)
			}
			if err := Recv(ctx, c, one, me, 11); err != nil || one[0] != int64(30+me) {
				return fmt.Errorf("recv of the sendrecv to itself: %v, %v", one, err)
			}
			// Nothing to receive, or the wrong tag: an error at once.
			if err := Recv(ctx, c, one, me, 1); err == nil || !strings.Contains(err.Error(), "no message") {
				return fmt.Errorf("recv from itself with nothing sent: %v", err)
			}
			if err := Send(ctx, c, one, me, 2); err != nil {
				return err
			}
			if err := Recv(ctx, c, one, me, 3); err == nil || !strings.Contains(err.Error(), "tag 2") {
				return fmt.Errorf("recv from itself with another tag: %v", err)
			}
			if err := Recv(ctx, c, one, me, 2); err != nil {
				return err
			}
			// The communicator is still usable.
			return Allreduce(ctx, c, one, one, Sum)
		})
	}
}

// TestP2PErrorsNameTheTag: a point-to-point call's number is its tag,
// and its errors say "tag N", never "#N" (which numbers collectives).
func TestP2PErrorsNameTheTag(t *testing.T) {
	for _, kind := range []string{"tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			var sendErr error
			opts := testOpts
			opts.Timeout = 20 * time.Second
			runRanksOn(t, kind, 2, opts, func(c *Comm) error {
				ctx := context.Background()
				if c.Rank() == 1 {
					// Half of what rank 0 sends, then close.
					if err := Recv(ctx, c, make([]float32, 1<<17), 0, 4321); err == nil {
						return errors.New("a receive shorter than the send succeeded")
					}
					c.Abort(errors.New("test: rank 1 leaves"))
					return nil
				}
				sendErr = Send(ctx, c, make([]float32, 1<<18), 1, 4321)
				return nil
			})
			if sendErr == nil {
				t.Fatal("send to a rank that left succeeded")
			}
			t.Log(sendErr)
			msg := sendErr.Error()
			if strings.Contains(msg, "#4321") || !strings.Contains(msg, "tag 4321") {
				t.Errorf("the send's error does not name its tag as \"tag 4321\": %v", sendErr)
			}
		})
	}
}

// TestRefusedP2PNamedByTag: the others' errors name a point-to-point call
// that a rank refused by its tag, after the last collective; they named
// it "send(float32) #3", the number of the allreduce they had completed.
func TestRefusedP2PNamedByTag(t *testing.T) {
	for _, kind := range []string{"tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			errs := make([]error, 3)
			runRanksOn(t, kind, 3, testOpts, func(c *Comm) error {
				ctx := context.Background()
				x := []float32{1}
				for range 3 {
					if err := Allreduce(ctx, c, x, x, Sum); err != nil {
						return err
					}
				}
				switch c.Rank() {
				case 0:
					errs[0] = Send(ctx, c, x, 1, -1)
				case 1:
					errs[1] = Recv(ctx, c, x, 0, 7)
				default:
					errs[2] = Allreduce(ctx, c, x, x, Sum)
				}
				return nil
			})
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				if err == nil {
					t.Errorf("rank %d: no error", r)
					continue
				}
				if r > 0 && strings.Contains(err.Error(), "refused its arguments") && !strings.Contains(err.Error(), "send(float32) tag -1 after collective #3") {
					t.Errorf("rank %d does not name the refused send by its tag: %v", r, err)
				}
				if strings.Contains(err.Error(), "send(float32) #3") {
					t.Errorf("rank %d names the refused send as collective #3: %v", r, err)
				}
			}
		})
	}
}

// TestMutualSendsNamedOverShm: two ranks that each send the other a
// message of rendezvous size before receiving (the caller's deadlock, as
// under MPI) fail at the stall timeout saying that they are alive and wait
// for one another; over shared memory they said only "waiting for rank 0
// to take this rank's message ... a peer or link stopped without an
// error" (over TCP the stall diagnosis said they wait on each other).
func TestMutualSendsNamedOverShm(t *testing.T) {
	opts := testOpts
	opts.StallTimeout = 2 * time.Second
	errs := make([]error, 2)
	runRanksOn(t, "shm", 2, opts, func(c *Comm) error {
		ctx := context.Background()
		peer := 1 - c.Rank()
		big := make([]float32, 1<<20)
		s := SendAsync(c, big, peer, 1)
		r := RecvAsync(c, make([]float32, 1<<20), peer, 1)
		errs[c.Rank()] = WaitAll(ctx, s, r)
		return nil
	})
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if err == nil || !strings.Contains(err.Error(), "ranks 0-1 are alive and wait for one another") {
			t.Errorf("rank %d: %v; want the two ranks named as waiting for one another", r, err)
		}
	}
}

// TestP2PCallsThatCannotMeet: two ranks that each receive from the other
// first fail after about a second (the stall step), naming the calls as
// calls that cannot meet, over TCP and over the shared-memory board; so
// does, over the board, a receive facing a collective and a ring of
// receives (over TCP, which no pair of ranks shows there, at the stall
// timeout, naming every rank of the cycle). Before, they waited until the
// stall timeout and then, over TCP, blamed the links between them ("rank
// 1 failed: ranks [2 0] answer and wait on one another: the links between
// them are stalled", leaving out the rank that concluded; two helpers'
// hunts).
func TestP2PCallsThatCannotMeet(t *testing.T) {
	quick := func(t *testing.T, start time.Time) {
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("took %v, want about the stall step (1s), not the stall timeout", d)
		}
	}
	for _, kind := range []string{"tcp", "shm"} {
		t.Run(kind+"/pair", func(t *testing.T) {
			t.Parallel() // most of each is the second the stall diagnosis waits
			start := time.Now()
			runRanksOn(t, kind, 2, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				peer := 1 - c.Rank()
				if err := Send(ctx, c, []float32{1}, peer, 9); err != nil { // the link is up
					return err
				}
				if err := Recv(ctx, c, []float32{0}, peer, 9); err != nil {
					return err
				}
				err := Recv(ctx, c, make([]float32, 4), peer, c.Rank())
				if err == nil || !strings.Contains(err.Error(), "calls that cannot meet") {
					return fmt.Errorf("receives from each other: %v, want calls that cannot meet", err)
				}
				if kind == "tcp" && (!strings.Contains(err.Error(), "recv(float32, 4) tag 0") || !strings.Contains(err.Error(), "recv(float32, 4) tag 1")) {
					return fmt.Errorf("receives from each other: %v, want both calls named", err)
				}
				return nil
			})
			quick(t, start)
		})
		t.Run(kind+"/ring", func(t *testing.T) {
			t.Parallel()
			opts := testOptsFast
			if kind == "tcp" {
				opts.StallTimeout = 3 * time.Second
			}
			start := time.Now()
			runRanksOn(t, kind, 3, opts, func(c *Comm) error {
				ctx := context.Background()
				next, prev := (c.Rank()+1)%3, (c.Rank()+2)%3
				req := SendAsync(c, []float32{1}, next, 9) // the links are up
				if err := Recv(ctx, c, []float32{0}, prev, 9); err != nil {
					return err
				}
				if err := req.Wait(ctx); err != nil {
					return err
				}
				err := Recv(ctx, c, make([]float32, 4), next, 0)
				if err == nil || !strings.Contains(err.Error(), "ranks 0-2 are alive and wait") || !strings.Contains(err.Error(), "calls that cannot meet") {
					return fmt.Errorf("a ring of receives: %v, want the cycle of ranks 0-2 named, calls that cannot meet", err)
				}
				return nil
			})
			quick(t, start)
		})
	}
	t.Run("shm/collective", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		runRanksOn(t, "shm", 2, testOptsFast, func(c *Comm) error {
			ctx := context.Background()
			var err error
			if c.Rank() == 0 {
				err = Recv(ctx, c, make([]float32, 4), 1, 0)
			} else {
				err = Allreduce(ctx, c, make([]float32, 4), make([]float32, 4), Sum)
			}
			if err == nil || !strings.Contains(err.Error(), "calls that cannot meet") {
				return fmt.Errorf("a receive facing an allreduce: %v, want calls that cannot meet", err)
			}
			return nil
		})
		quick(t, start)
	})
}

// TestSendRecvWithItselfKeepsItsContext: a SendRecv with this rank on one
// side and a peer that does not come fails when its context ends, over
// shared memory as over the links. Over the board the side with the peer
// ran without the caller's context (run leaves a board call to watch it
// in its own waits), so the call waited until the peer closed, or the
// stall timeout, and failed without naming the deadline.
func TestSendRecvWithItselfKeepsItsContext(t *testing.T) {
	for _, form := range []string{"send to itself", "receive from itself", "send to ProcNull", "receive from ProcNull"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel() // most of each is rank 1's sleep
			var err0 error
			var took time.Duration
			runRanksOn(t, "shm", 2, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if c.Rank() == 1 {
					time.Sleep(1500 * time.Millisecond) // in no call
					return nil
				}
				cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				start := time.Now()
				switch form {
				case "send to itself":
					err0 = SendRecv(cctx, c, []float32{1}, 0, []float32{0}, 1, 3)
				case "send to ProcNull":
					err0 = SendRecv(cctx, c, []float32{1}, ProcNull, []float32{0}, 1, 3)
				case "receive from ProcNull":
					err0 = SendRecv(cctx, c, make([]float32, 1<<20), 1, []float32{0}, ProcNull, 3)
				default:
					if err := Send(ctx, c, []float32{1}, 0, 3); err != nil {
						return err
					}
					// Large: the send waits for its receiver.
					err0 = SendRecv(cctx, c, make([]float32, 1<<20), 1, []float32{0}, 0, 3)
				}
				took = time.Since(start)
				return nil
			})
			t.Logf("after %v: %v", took, err0)
			if err0 == nil || !errors.Is(err0, context.DeadlineExceeded) && !strings.Contains(err0.Error(), "deadline exceeded") || took > time.Second {
				t.Errorf("a SendRecv with a deadline of 100ms: %v after %v; want the deadline's error at once", err0, took)
			}
		})
	}
}

// TestP2PSizesDifferWithinAChunk: a send and a receive whose lengths
// differ within a chunk fail the receive naming point-to-point calls of
// different sizes, over the links as over shared memory. Over the links
// the error said "the ranks called collectives with different sizes" of
// a send and a receive.
func TestP2PSizesDifferWithinAChunk(t *testing.T) {
	for _, kind := range []string{"mem", "tcp"} {
		for _, n := range [][2]int{{10, 12}, {12, 10}, {5000, 10}} {
			t.Run(fmt.Sprintf("%s/%d-%d", kind, n[0], n[1]), func(t *testing.T) {
				var recvErr error
				runRanksSenderLearns(t, kind, testOptsFast, func(c *Comm) error {
					ctx := context.Background()
					if c.Rank() == 0 {
						Send(ctx, c, make([]float32, n[0]), 1, 6) // fails, or completes once sent
						return nil
					}
					recvErr = Recv(ctx, c, make([]float32, n[1]), 0, 6)
					return nil
				})
				t.Log(recvErr)
				if recvErr == nil || !strings.Contains(recvErr.Error(), "point-to-point calls have different sizes") || strings.Contains(recvErr.Error(), "collectives") {
					t.Errorf("a Send of %d float32 received by a Recv of %d: %v; want an error naming point-to-point calls of different sizes", n[0], n[1], recvErr)
				}
			})
		}
	}
}

// TestMailboxLengthBeyond32Bits: a message of 4 GiB or more over the
// shared-memory mailbox is compared with its receive by its whole length.
// The entry held the low 32 bits only: a Send of 4 GiB + 16 bytes received
// by a Recv of 16 returned nil on both ranks, the receiver holding the
// message's first 16 bytes and the rest dropped (and a Recv of its own
// length failed as a mismatch); a Recv of 100 (a size whose message the
// receiver polls in lines) waited for lines that never came and failed as
// calls that cannot meet. The sender's buffer is never read whole (nothing
// matches it), so the test needs 4 GiB of address space, not of memory.
func TestMailboxLengthBeyond32Bits(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 4 GiB (untouched); skipped with -short")
	}
	for _, n := range []int{16, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// Mapped, not made: make may clear (touch) all 4 GiB when
			// the heap reuses memory (18 s in the package's run on a busy
			// machine, and 4 GiB of memory).
			big, err := unix.Mmap(-1, 0, 1<<32+n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
			if err != nil {
				t.Skipf("4 GiB of address space: %v", err)
			}
			defer unix.Munmap(big)
			errs := make([]error, 2)
			runRanksOn(t, "shm", 2, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				if c.Rank() == 0 {
					errs[0] = c.SendBytes(ctx, big, TypeUint8, 1, 1)
				} else {
					errs[1] = c.RecvBytes(ctx, make([]byte, n), TypeUint8, 0, 1)
				}
				return nil
			})
			want := fmt.Sprintf("rank 0 sent %d bytes with tag 1 where rank 1 receives %d bytes", 1<<32+n, n)
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("rank %d: %v; want a mismatch naming both lengths (%q)", r, err, want)
				}
			}
		})
	}
}
