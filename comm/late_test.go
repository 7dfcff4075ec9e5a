package comm_test

import (
	"context"
	"fmt"
	"sync"
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
