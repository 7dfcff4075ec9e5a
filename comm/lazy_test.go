package comm_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// syncWriter is a log sink for many goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Peers are connected on first use: none at New, a ring's two neighbours
// after a ring allreduce, every peer after a pairwise all-to-all; each
// first use is logged with GOCCL_DEBUG.
func TestPeersConnectedOnFirstUse(t *testing.T) {
	t.Setenv("GOCCL_DEBUG", "1")
	logs := &syncWriter{}
	log.SetOutput(logs)
	defer log.SetOutput(nil)
	const n = 12
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r, err := range commtest.Run(ctx, "mem", n, testOptsFast, func(c *Comm) error {
		if got := c.ConnectedPeers(); got != 0 {
			return fmt.Errorf("%d peers connected after New, want 0", got)
		}
		buf := []float32{float32(c.Rank())}
		if err := Allreduce(ctx, c, buf, buf, Sum, WithAlgorithm("ring")); err != nil {
			return err
		}
		if want := float32(n * (n - 1) / 2); buf[0] != want {
			return fmt.Errorf("ring allreduce: got %v, want %v", buf[0], want)
		}
		if got := c.ConnectedPeers(); got != 2 {
			return fmt.Errorf("%d peers connected after a ring allreduce, want 2", got)
		}
		send, recv := make([]int64, n), make([]int64, n)
		for i := range send {
			send[i] = int64(c.Rank()*n + i)
		}
		if err := Alltoall(ctx, c, send, recv, WithAlgorithm("pairwise")); err != nil {
			return err
		}
		for i, v := range recv {
			if want := int64(i*n + c.Rank()); v != want {
				return fmt.Errorf("alltoall: element %d is %d, want %d", i, v, want)
			}
		}
		if got := c.ConnectedPeers(); got != n-1 {
			return fmt.Errorf("%d peers connected after a pairwise all-to-all, want %d", got, n-1)
		}
		return nil
	}) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	out := logs.String()
	for _, want := range []string{"goccl: rank 0: connected ranks 1, 11 (", "on first use, in allreduce(float32, 1, sum) #1"} {
		if !strings.Contains(out, want) {
			t.Errorf("GOCCL_DEBUG output lacks %q:\n%s", want, out)
		}
	}
}

// A rank that closed its communicator after fewer collectives than the
// others, before it ever connected to them: the others' next call, which
// needs a new link to it, fails at once with a sequence mismatch naming
// it, instead of waiting out the stall timeout for its address.
func TestLinkSetupSeesClosedPeer(t *testing.T) {
	const n = 4
	opts := testOptsFast // stall timeout 30 s
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, err := commtest.Connect(ctx, "mem", n, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if r == n-1 {
				return // closes after no collective at all
			}
			start := time.Now()
			buf := make([]float32, 8)
			out[r].err = Allreduce(ctx, c, buf, buf, Sum, WithAlgorithm("ring"))
			out[r].took = time.Since(start)
		}()
	}
	wg.Wait()
	for r, o := range out[:n-1] {
		switch {
		case o.err == nil:
			t.Errorf("rank %d: no error", r)
		case !strings.Contains(o.err.Error(), fmt.Sprintf("rank %d", n-1)):
			t.Errorf("rank %d: error does not name rank %d: %v", r, n-1, o.err)
		case o.took > opts.StallTimeout/2:
			t.Errorf("rank %d: failed after %v, near the stall timeout %v", r, o.took, opts.StallTimeout)
		}
		t.Logf("rank %d after %v: %v", r, o.took.Round(time.Millisecond), o.err)
	}
}

// TestGivenUpWhileConnecting: a rank whose send is given up (its context
// ends) while it sets up the link to the receiver tells the receiver at
// once. Before, if the rank was the dialing side and had already published
// its address, the receiver connected its side, ran the receive and waited
// for a connection that never came, until its stall timeout, which said
// the rank "does not answer": 1-2 of 8 trials over TCP.
func TestGivenUpWhileConnecting(t *testing.T) {
	opts := testOptsFast
	opts.StallTimeout = 20 * time.Second
	const n = 1 << 18
	for trial := range 24 {
		delay := time.Duration(trial%8) * 500 * time.Microsecond
		start := time.Now()
		errs := make([]error, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		commtest.Run(ctx, "tcp", 2, opts, func(c *Comm) error {
			buf := make([]float32, n)
			if c.Rank() == 0 {
				cctx, cancel := context.WithCancel(ctx)
				go func() { time.Sleep(delay); cancel() }()
				errs[0] = Send(cctx, c, buf, 1, 7)
				return nil
			}
			errs[1] = Recv(ctx, c, buf, 0, 7)
			return nil
		})
		cancel()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("delay %v: the receiver learnt after %v: %v", delay, d, errs[1])
		}
		if errs[0] != nil && errs[1] == nil {
			t.Errorf("delay %v: the send failed (%v), the receive returned nil", delay, errs[0])
		}
	}
}
