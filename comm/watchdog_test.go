package comm_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// Options.Timeout ends a collective that outlives it, measured from the
// call's own start, whatever the earlier calls left of the watchdog: it
// stays armed across calls (no Reset and Stop per call), so a call may
// start while it is still pending from the one before (it then fires
// early, finds this call and waits for the rest) or after it fired with
// no call running and stopped (the call arms it).
func TestTimeoutAcrossCalls(t *testing.T) {
	const timeout = 400 * time.Millisecond
	for _, tc := range []struct {
		name string
		gap  time.Duration // between the completed call and the stuck one
	}{{"pending", 100 * time.Millisecond}, {"stopped", 700 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			comms, err := commtest.Connect(ctx, "tcp", 2, comm.Options{Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
			bufs := make([][]float32, 2)
			errc := make(chan error, 2)
			for r, c := range comms {
				bufs[r] = []float32{float32(r + 1)}
				go func() { errc <- comm.Allreduce(ctx, c, bufs[r], bufs[r], comm.Sum) }()
			}
			for range 2 {
				if err := <-errc; err != nil {
					t.Fatalf("the first allreduce: %v", err)
				}
			}
			time.Sleep(tc.gap)
			// Rank 0 alone: its peer never joins.
			start := time.Now()
			err = comm.Allreduce(ctx, comms[0], bufs[0], bufs[0], comm.Sum)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "communicator timeout") {
				t.Fatalf("a call its peer never joined ended with %v after %v, want the communicator timeout", err, took)
			}
			if took < timeout || took > timeout+5*time.Second {
				t.Fatalf("the call timed out after %v, want %v from its start (and not much later)", took, timeout)
			}
		})
	}
}
