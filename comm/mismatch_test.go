package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"

	"github.com/goccl/goccl/collectives"
)

// call is one collective call used by the mismatch tests.
type call struct {
	name string
	run  func(ctx context.Context, c *Comm) error
}

func allreduceCall(count int, op Op) call {
	return call{fmt.Sprintf("allreduce(float32, %d, %s)", count, op), func(ctx context.Context, c *Comm) error {
		return Allreduce(ctx, c, make([]float32, count), make([]float32, count), op)
	}}
}

func TestMismatchDetected(t *testing.T) {
	pairs := []struct {
		what string
		a, b call
	}{
		{"collective", allreduceCall(1024, Sum), call{"broadcast(float32, 1024, root=0)", func(ctx context.Context, c *Comm) error {
			return Broadcast(ctx, c, make([]float32, 1024), 0)
		}}},
		{"count", allreduceCall(1024, Sum), allreduceCall(2048, Sum)},
		{"operation", allreduceCall(1024, Sum), allreduceCall(1024, Max)},
		{"type", allreduceCall(1024, Sum), call{"allreduce(int32, 1024, sum)", func(ctx context.Context, c *Comm) error {
			return Allreduce(ctx, c, make([]int32, 1024), make([]int32, 1024), Sum)
		}}},
		// With two ranks that both think they are the root nobody receives
		// in the broadcast itself; the next collective finds the stray data.
		{"root then barrier", call{"broadcast(root=0), barrier", func(ctx context.Context, c *Comm) error {
			if err := Broadcast(ctx, c, make([]int64, 100), 0); err != nil {
				return err
			}
			return c.Barrier(ctx)
		}}, call{"broadcast(root=1), barrier", func(ctx context.Context, c *Comm) error {
			if err := Broadcast(ctx, c, make([]int64, 100), 1); err != nil {
				return err
			}
			return c.Barrier(ctx)
		}}},
		{"sequence", allreduceCall(64, Sum), call{"barrier then allreduce", func(ctx context.Context, c *Comm) error {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			return Allreduce(ctx, c, make([]float32, 64), make([]float32, 64), Sum)
		}}},
	}
	for _, p := range pairs {
		t.Run(p.what, func(t *testing.T) {
			errs := make([]error, 2)
			start := time.Now()
			opts := testOpts
			opts.Timeout = 20 * time.Second
			runRanks(t, 2, opts, func(c *Comm) error {
				ctx := context.Background()
				call := p.a
				if c.Rank() == 1 {
					call = p.b
				}
				errs[c.Rank()] = call.run(ctx, c)
				return nil
			})
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("mismatch took %v to surface", d)
			}
			explained := false
			for r, err := range errs {
				if err == nil {
					t.Errorf("rank %d: mismatched call %s returned no error", r, []call{p.a, p.b}[r].name)
					continue
				}
				var mm *collectives.MismatchError
				if !errors.As(err, &mm) && !strings.Contains(err.Error(), "mismatch") && !strings.Contains(err.Error(), "connection lost") {
					t.Errorf("rank %d: error does not report a mismatch: %v", r, err)
				}
				if strings.Contains(err.Error(), "while rank") || strings.Contains(err.Error(), "sent data of its collective") {
					explained = true
				}
				t.Logf("rank %d: %v", r, err)
			}
			if !explained {
				t.Errorf("no rank named both sides' calls")
			}
		})
	}
}

// TestLaterCallsReturnTheFailure: once a call failed and broke the
// communicator, the calls after it return the same error, headline and
// all. Over TCP they returned the executor's own error instead: "collective
// mismatch: rank 1 called a different collective, algorithm, type, count,
// root or operation (fingerprint 0xd0c8) than rank 0's ...", where the
// failed call had named both calls.
func TestLaterCallsReturnTheFailure(t *testing.T) {
	for _, kind := range []string{"tcp", "shm", "mem"} {
		t.Run(kind, func(t *testing.T) {
			runRanksOn(t, kind, 2, testOptsFast, func(c *Comm) error {
				ctx := context.Background()
				var first error
				if c.Rank() == 0 {
					first = Allreduce(ctx, c, make([]float32, 64), make([]float32, 64), Sum)
				} else {
					first = Allgather(ctx, c, make([]float32, 32), make([]float32, 64))
				}
				if first == nil {
					return fmt.Errorf("rank %d: the mismatched call returned nil", c.Rank())
				}
				for i := range 2 {
					if err := c.Barrier(ctx); err == nil || err.Error() != first.Error() {
						return fmt.Errorf("rank %d: call %d after the failure: %v, want the failure: %v", c.Rank(), i+1, err, first)
					}
				}
				return nil
			})
		})
	}
}

// TestUnknownAlgorithmIsARefusedArgument: a rank that asks for an
// algorithm its collective does not have (WithAlgorithm("bogus")) refuses
// its call as it does a bad root or length: the call fails on every rank,
// the others' errors name that rank and the name, and the communicator
// is broken. The call failed on that rank alone once it ran and left its
// communicator working; the others waited for it, then took its next call
// for a "collective mismatch: rank 0 sent data of its collective #2", and
// over the shared-memory board its next call completed with the others'
// data of the call it had dropped. AllreduceInit refuses it at once.
func TestUnknownAlgorithmIsARefusedArgument(t *testing.T) {
	sideBySide(t)
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			runRanksOn(t, kind, 3, testOpts, func(c *Comm) error {
				ctx := context.Background()
				if _, err := AllreduceInit(c, nil, []float32{1}, Sum, WithAlgorithm("bogus")); err == nil || !strings.Contains(err.Error(), `no algorithm "bogus"`) {
					return fmt.Errorf("AllreduceInit with WithAlgorithm(\"bogus\"): %v, want it refused", err)
				}
				x := []float32{1, 2}
				var opts []CallOption
				if c.Rank() == 0 {
					opts = append(opts, WithAlgorithm("bogus"))
				}
				err := Allreduce(ctx, c, x, x, Sum, opts...)
				if err == nil || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), `no algorithm "bogus"`) {
					return fmt.Errorf("allreduce where rank 0 asks for algorithm bogus: %v, want an error naming rank 0 and the name", err)
				}
				x = []float32{1, 2}
				if err := Allreduce(ctx, c, x, x, Sum); err == nil {
					return fmt.Errorf("the allreduce after it succeeded (%v): want the communicator broken", x)
				}
				return nil
			})
		})
	}
}
