package comm_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// A broadcast root returns once its data is sent, before the other rank
// has even called the broadcast (without StrictChecks); the late rank
// still gets the data, and the root's Close waits until it has taken it,
// then returns nil. With StrictChecks the root waits for the receiver.
// On shm the broadcast goes through the board's slots (board.go). (Past
// the slots the receivers read the root's own buffer, which the root
// cannot hand back before they have: it waits for them, as MPI's
// rendezvous does.)
func TestEagerRootReturnsOnceSent(t *testing.T) {
	for _, kind := range append(transports, "shm") {
		for _, strict := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/strict=%v", kind, strict), func(t *testing.T) {
				opts := testOpts
				opts.StrictChecks = strict
				const late = 300 * time.Millisecond
				sent := make(chan time.Duration, 1)
				runRanksOn(t, kind, 2, opts, func(c *Comm) error {
					ctx := context.Background()
					// Connected first: a link is set up in the first call
					// that uses it, with both ranks in it.
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					buf := make([]int64, 100)
					if c.Rank() == 0 {
						for i := range buf {
							buf[i] = int64(i * 3)
						}
						start := time.Now()
						err := Broadcast(ctx, c, buf, 0)
						sent <- time.Since(start)
						return err
					}
					// Rank 1 calls only once the root returned (eager) or
					// after late (strict: the root is still waiting then).
					select {
					case <-sent:
						if strict {
							return fmt.Errorf("the root returned before this rank called the broadcast, with StrictChecks")
						}
					case <-time.After(late):
						if !strict {
							return fmt.Errorf("the root did not return within %v while this rank was not in the broadcast", late)
						}
					}
					time.Sleep(50 * time.Millisecond) // the root is in Close (eager) by now
					if err := Broadcast(ctx, c, buf, 0); err != nil {
						return err
					}
					for i, v := range buf {
						if v != int64(i*3) {
							return fmt.Errorf("element %d = %d, want %d", i, v, i*3)
						}
					}
					if strict {
						if d := <-sent; d < late {
							return fmt.Errorf("the root returned after %v, before this rank called (%v)", d, late)
						}
					}
					return nil
				})
			})
		}
	}
}

// Two ranks that each think they are a broadcast's root may both return
// once sent; they learn of it in their next call, or at Close when there
// is none: nothing is lost, on either rank.
func TestEagerRootsDisagree(t *testing.T) {
	for _, next := range []bool{true, false} {
		t.Run(fmt.Sprintf("next=%v", next), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			comms, err := commtest.Connect(ctx, "mem", 2, testOptsFast)
			require.NoError(t, err)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			closeErrs := make([]error, 2)
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]float32, 16)
					if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
						errs[r] = fmt.Errorf("warm-up: %w", err)
						return
					}
					errs[r] = Broadcast(ctx, c, buf, r)
					if errs[r] == nil && next {
						errs[r] = Allreduce(ctx, c, buf, buf, Sum)
					}
					closeErrs[r] = c.Close()
				}()
			}
			wg.Wait()
			for r := range comms {
				t.Logf("rank %d: call: %v; close: %v", r, errs[r], closeErrs[r])
				if next {
					require.Error(t, errs[r], "rank %d: no error in the broadcast or the call after it", r)
					require.Contains(t, errs[r].Error(), "mismatch", "rank %d", r)
				} else if errs[r] != nil {
					// The peer's data arrived while this rank was still in
					// the call.
					require.Contains(t, errs[r].Error(), "mismatch", "rank %d", r)
				} else {
					require.Error(t, closeErrs[r], "rank %d: Close lost the disagreement", r)
					msg := closeErrs[r].Error()
					require.Contains(t, msg, "collective mismatch", "rank %d", r)
					require.True(t, strings.Contains(msg, fmt.Sprintf("rank %d never took", 1-r)), "rank %d: Close does not name rank %d: %s", r, 1-r, msg)
				}
			}
		})
	}
}

// The measurement at New ends with a broadcast whose root returns once
// sent; that rank's first calls may then reach ranks still in the
// measurement. Their data must wait there as a later call's, not fail as
// an earlier call's: the measurement's calls are numbered apart from the
// user's (a 4-node srun job over TCP, on a loaded machine, failed with
// "collective mismatch" in its first allreduce when they were not). Here,
// as there, each rank is a host of its own, and the ranks other than the
// root take their completions late (slowDevice), so that data of the
// user's first calls arrives with the measurement's last. Fails without
// the numbering apart on the first trial.
func TestFirstCallsAfterMeasurement(t *testing.T) {
	sideBySide(t) // each trial waits on slowed completions (2 s of waiting, no bound on it)
	const n = 4
	for trial := range trials(t, 3) {
		network := mem.NewNetwork(mem.Options{})
		g := NewLocalGroup(n)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var dev transport.Device = network.NewDevice()
				if r != 0 {
					dev = slowDevice{dev, 20 * time.Millisecond}
				}
				// No Alpha and Beta: New measures them.
				c, err := NewWith(ctx, g.Member(r), Devices{Net: dev}, Options{OwnDevice: true, Timeout: 30 * time.Second, HostID: fmt.Sprint("host ", r)})
				if err != nil {
					errs[r] = err
					return
				}
				defer c.Close()
				for i := range 3 {
					buf := []float32{float32(r + i)}
					if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
						errs[r] = fmt.Errorf("allreduce %d: %w", i+1, err)
						return
					}
					if want := float32(n*(n-1)/2 + n*i); buf[0] != want {
						errs[r] = fmt.Errorf("allreduce %d = %v, want %v", i+1, buf[0], want)
						return
					}
				}
			}()
		}
		wg.Wait()
		cancel()
		for r, err := range errs {
			require.NoError(t, err, "trial %d, rank %d", trial, r)
		}
	}
}

// slowDevice is a device whose completion queues hand out completions
// only from Wait, and only after a pause: a rank that is slow to look, so
// that completions pile up and are taken together.
type slowDevice struct {
	transport.Device
	pause time.Duration
}

func (d slowDevice) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	q, err := d.Device.NewCompletionQueue(depth)
	if err != nil {
		return nil, err
	}
	return slowCQ{q, d.pause}, nil
}

func (d slowDevice) NewEndpoint(cq transport.CompletionQueue) (transport.Endpoint, error) {
	if q, ok := cq.(slowCQ); ok {
		cq = q.CompletionQueue
	}
	return d.Device.NewEndpoint(cq)
}

type slowCQ struct {
	transport.CompletionQueue
	pause time.Duration
}

func (q slowCQ) Poll(out []transport.Completion) int {
	if len(out) == 0 {
		return q.CompletionQueue.Poll(out)
	}
	return 0
}

func (q slowCQ) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	time.Sleep(q.pause)
	return q.CompletionQueue.Wait(ctx, out)
}

// A root whose receiver dies before taking the broadcast learns it at
// Close, at once, naming the receiver (not after the stall timeout).
func TestEagerCloseAfterReceiverDied(t *testing.T) {
	network := mem.NewNetwork(mem.Options{})
	g := NewLocalGroup(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := testOptsFast
	opts.OwnDevice = true
	var closeErr error
	var took time.Duration
	var wg sync.WaitGroup
	sent := make(chan struct{})
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := network.NewDevice()
			c, err := NewWith(ctx, g.Member(r), Devices{Net: dev}, opts)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			buf := make([]float32, 16)
			if err := Allreduce(ctx, c, buf, buf, Sum); err != nil { // the link is up
				t.Errorf("rank %d: %v", r, err)
				return
			}
			if r == 1 {
				<-sent
				dev.Close() // dies without a word, the broadcast untaken
				return
			}
			if err := Broadcast(ctx, c, buf, 0); err != nil {
				t.Errorf("root: broadcast: %v", err)
			}
			close(sent)
			start := time.Now()
			closeErr = c.Close()
			took = time.Since(start)
		}()
	}
	wg.Wait()
	t.Logf("root's Close after %v: %v", took, closeErr)
	require.Error(t, closeErr)
	require.Contains(t, closeErr.Error(), "sent rank 1 data that rank 1 never took")
	require.Less(t, took, 5*time.Second, "Close waited for the stall timeout (%v)", opts.StallTimeout)
}

// TestCloseAfterMeasurementPeerDied: the measurement at New (tune) ends
// with broadcasts whose proof a peer may hold back; a peer that died
// after New, before any call of the user's, made Close report that this
// rank's "collective #8221" (the measurement's internal number) was never
// taken. The measurement cannot disagree: Close has nothing to prove.
func TestCloseAfterMeasurementPeerDied(t *testing.T) {
	network := mem.NewNetwork(mem.Options{})
	g := NewLocalGroup(3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := testOptsFast
	opts.OwnDevice = true
	opts.Alpha, opts.Beta = 0, 0 // measure
	var closeErr error
	var wg, made sync.WaitGroup
	made.Add(3)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := network.NewDevice()
			c, err := NewWith(ctx, g.Member(r), Devices{Net: dev}, opts)
			made.Done()
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			made.Wait() // every rank made it
			if r != 0 {
				time.Sleep(50 * time.Millisecond)
				dev.Close() // dies without a word
				return
			}
			time.Sleep(200 * time.Millisecond)
			closeErr = c.Close()
		}()
	}
	wg.Wait()
	t.Logf("rank 0's Close: %v", closeErr)
	if closeErr != nil && strings.Contains(closeErr.Error(), "never took") {
		t.Fatalf("Close reports data of the measurement untaken: %v", closeErr)
	}
}
