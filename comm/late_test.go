package comm_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// A rank that reaches the measurement at New later than the stall timeout
// is still joining: the others wait for it (Init's deadline bounds that),
// they do not fail. 512 ranks on 2 cores reached it up to a minute apart
// and every waiting rank failed "measuring the transport: ... no progress
// for 1m0s". Here rank 2 opens its completion queue (after the host
// exchange, before the measurement) 2.5 s late with a stall timeout of 1 s.
func TestLateRankJoinsMeasurement(t *testing.T) {
	sideBySide(t) // mostly sleeps
	const n = 3
	network := mem.NewNetwork(mem.Options{})
	opts := Options{OwnDevice: true, StallTimeout: time.Second, Timeout: 30 * time.Second} // no Alpha, Beta: New measures
	runGroup(t, n, 60*time.Second, opts, func(r int) transport.Device {
		if r == 2 {
			return lateDevice{network.NewDevice(), 2500 * time.Millisecond}
		}
		return network.NewDevice()
	}, func(ctx context.Context, c *Comm) error {
		buf := []float32{float32(c.Rank())}
		if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
			return err
		}
		if buf[0] != n*(n-1)/2 {
			return fmt.Errorf("allreduce = %v, want %v", buf[0], n*(n-1)/2)
		}
		return nil
	})
}

// runGroup runs f on n ranks of a NewLocalGroup, each on the device
// newDev makes for it, within d, and fails t with any rank's error.
func runGroup(t *testing.T, n int, d time.Duration, opts Options, newDev func(r int) transport.Device, f func(context.Context, *Comm) error) {
	t.Helper()
	g := NewLocalGroup(n)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := NewWith(ctx, g.Member(r), Devices{Net: newDev(r)}, opts)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			errs[r] = f(ctx, c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// lateDevice opens its completion queue only after a pause.
type lateDevice struct {
	transport.Device
	pause time.Duration
}

func (d lateDevice) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	time.Sleep(d.pause)
	return d.Device.NewCompletionQueue(depth)
}

// sideBySide marks a test that mostly waits (delays, timeouts, a stall
// step) and asserts no tight bound on its own time as parallel: go test
// runs such tests two at a time (-parallel, the processors) once the
// package's other tests are done, which takes a quarter of a minute off
// each of CI's two passes over comm (its longest package, run alone at
// the end of the race pass).
func sideBySide(t *testing.T) { t.Parallel() }

// A peer that went on to its next collective while this rank still waits
// for what it sent is no disagreement while that message may be on its
// way: a zero-length message (a count-0 call's dissemination barrier) is
// done once the transport took it, and the in-memory transport delivers
// it up to Options.Delay later. 512 ranks on 2 cores hit this as "rank X
// completed collective #100 without what this call needs from it" in
// count-0 all-to-alls that were correct. Here every request waits up to
// 2.5 s, so a rank regularly waits more than the 1 s stall step for a
// message of a peer already in the next call.
func TestLateMessageIsNoMismatch(t *testing.T) {
	sideBySide(t)
	network := mem.NewNetwork(mem.Options{Seed: 7, Delay: 2500 * time.Millisecond})
	opts := testOptsFast
	opts.OwnDevice = true
	runGroup(t, 2, 120*time.Second, opts, func(int) transport.Device { return network.NewDevice() },
		func(ctx context.Context, c *Comm) error {
			for i := range 3 {
				if err := Allreduce(ctx, c, []float32{}, []float32{}, Sum); err != nil {
					return fmt.Errorf("call %d: %w", i+1, err)
				}
			}
			return nil
		})
}

// A rank behind, stalled in the previous collective and waiting on a peer
// that delivered everything of that call, is no disagreement while what
// it waits for sits in its completion queue, not taken yet: with many more
// ranks than processors its poller's thread may not run for seconds after
// the transport queued it (512 processes on 2 cores over shared memory:
// "sequence mismatch ... rank 0 is stalled in allreduce(float32, 7, sum)
// #1 while rank 334 waits on it in allreduce(float32, 7, prod) #2" in a
// correct collcheck run). Here rank 0's queue hands out nothing for 2.5 s
// from its first call on, with a stall step of 1 s: rank 1 finishes #1,
// waits on rank 0 in #2, and asks it.
func TestUnpolledCompletionsAreNoMismatch(t *testing.T) {
	sideBySide(t)
	network := mem.NewNetwork(mem.Options{})
	opts := testOptsFast
	opts.OwnDevice = true
	var freeze [2]atomic.Int64 // per rank: its queue hands out nothing until then (UnixNano)
	runGroup(t, 2, 60*time.Second, opts, func(r int) transport.Device {
		return frozenDevice{network.NewDevice(), &freeze[r]}
	}, func(ctx context.Context, c *Comm) error {
		if c.Rank() == 0 {
			freeze[0].Store(time.Now().Add(2500 * time.Millisecond).UnixNano())
		}
		for i, op := range []Op{Sum, Prod} {
			buf := []float32{float32(c.Rank() + 2)}
			if err := Allreduce(ctx, c, buf, buf, op); err != nil {
				return fmt.Errorf("call %d: %w", i+1, err)
			}
			if want := []float32{5, 6}[i]; buf[0] != want {
				return fmt.Errorf("call %d: %v, want %v", i+1, buf[0], want)
			}
		}
		return nil
	})
}

// frozenDevice's completion queues hand out nothing (Poll, Wait) until
// the time in until, as if the poller did not run; Ready tells the truth.
type frozenDevice struct {
	transport.Device
	until *atomic.Int64
}

func (d frozenDevice) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	q, err := d.Device.NewCompletionQueue(depth)
	if err != nil {
		return nil, err
	}
	return &frozenCQ{q, d.until}, nil
}

func (d frozenDevice) NewEndpoint(q transport.CompletionQueue) (transport.Endpoint, error) {
	if f, ok := q.(*frozenCQ); ok {
		q = f.CompletionQueue
	}
	return d.Device.NewEndpoint(q)
}

type frozenCQ struct {
	transport.CompletionQueue
	until *atomic.Int64
}

func (q *frozenCQ) frozen() time.Duration { return time.Until(time.Unix(0, q.until.Load())) }

func (q *frozenCQ) Poll(out []transport.Completion) int {
	if q.frozen() > 0 {
		return 0
	}
	return q.CompletionQueue.Poll(out)
}

func (q *frozenCQ) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	if d := q.frozen(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	return q.CompletionQueue.Wait(ctx, out)
}

func (q *frozenCQ) Ready() bool {
	r, ok := q.CompletionQueue.(transport.Readier)
	return ok && r.Ready()
}
