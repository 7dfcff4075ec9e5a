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
	g := NewLocalGroup(n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dev transport.Device = network.NewDevice()
			if r == 2 {
				dev = lateDevice{dev, 2500 * time.Millisecond}
			}
			// No Alpha and Beta: New measures them.
			c, err := NewWith(ctx, g.Member(r), Devices{Net: dev}, Options{OwnDevice: true, StallTimeout: time.Second, Timeout: 30 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			buf := []float32{float32(r)}
			if err := Allreduce(ctx, c, buf, buf, Sum); err != nil {
				errs[r] = err
			} else if buf[0] != n*(n-1)/2 {
				errs[r] = fmt.Errorf("allreduce = %v, want %v", buf[0], n*(n-1)/2)
			}
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
	const n = 2
	network := mem.NewNetwork(mem.Options{Seed: 7, Delay: 2500 * time.Millisecond})
	g := NewLocalGroup(n)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := testOptsFast
			opts.OwnDevice = true
			c, err := NewWith(ctx, g.Member(r), Devices{Net: network.NewDevice()}, opts)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			for i := range 3 {
				if err := Allreduce(ctx, c, []float32{}, []float32{}, Sum); err != nil {
					errs[r] = fmt.Errorf("call %d: %w", i+1, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}
