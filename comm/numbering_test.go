package comm_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// syncBuffer is a log destination several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFirstCallIsNumberOne checks that the selector's start-up
// measurement is invisible: the user's first collective is #1 in logs and
// errors, and the measurement logs no collective (issue 11 item 13: it
// was #14, after 13 calls logged as "algorithm ring (forced)").
func TestFirstCallIsNumberOne(t *testing.T) {
	t.Setenv("GOCCL_DEBUG", "1")
	var out syncBuffer
	log.SetOutput(&out)
	defer log.SetOutput(os.Stderr)
	opts := testOpts
	opts.Alpha, opts.Beta = 0, 0 // New measures them
	runRanks(t, 2, opts, func(c *Comm) error {
		buf := make([]float32, 2)
		return Allreduce(context.Background(), c, buf, buf, Sum)
	})
	logged := out.String()
	calls := regexp.MustCompile(`(?m)\b(allreduce|broadcast)\(\d+ bytes\) #\d+.*$`).FindAllString(logged, -1)
	if len(calls) != 2 {
		t.Fatalf("want one logged call per rank, got %d:\n%s", len(calls), logged)
	}
	for _, l := range calls {
		if !strings.HasPrefix(l, "allreduce(8 bytes) #1:") || strings.Contains(l, "forced") {
			t.Errorf("logged %q, want the user's allreduce as #1", l)
		}
	}

	// Errors: a first call with different counts names #1.
	var errs [2]error
	runRanksOn(t, "mem", 2, opts, func(c *Comm) error {
		buf := make([]float32, 4+4*c.Rank())
		errs[c.Rank()] = Allreduce(context.Background(), c, buf, buf, Sum)
		return nil
	})
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: mismatched allreduce returned nil", r)
			continue
		}
		if !regexp.MustCompile(`#1\b`).MatchString(err.Error()) {
			t.Errorf("rank %d: %v: want the call named #1", r, err)
		}
		if testing.Verbose() {
			t.Logf("rank %d: %v", r, err)
		}
	}
}

// TestMeasurementAtNew: without Alpha and Beta, New measures the cost
// model on the transport in use (ring allreduces of a small and a large
// buffer, the reduction kernel, and on several hosts a ping-pong over a
// local link). Every rank ends with the same plausible values, and the
// communicator works after.
func TestMeasurementAtNew(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm", "hosts"} {
		t.Run(kind, func(t *testing.T) {
			opts := testOpts
			opts.Alpha, opts.Beta = 0, 0
			var mu sync.Mutex
			models := map[[6]float64]int{}
			runRanksOn(t, kind, 4, opts, func(c *Comm) error {
				alpha, beta, gamma, localAlpha, localBeta := CostModel(c)
				rab := RabenseifnerBeta(c)
				mu.Lock()
				models[[6]float64{alpha, beta, gamma, localAlpha, localBeta, rab}]++
				mu.Unlock()
				if !(rab > 0 && rab < 1e-6) {
					return fmt.Errorf("implausible β for Rabenseifner's allreduce: %g", rab)
				}
				if !(alpha > 0 && alpha < 1 && beta > 0 && beta < 1e-6 && gamma > 0 && gamma < 1e-6) {
					return fmt.Errorf("implausible cost model α=%g β=%g γ=%g", alpha, beta, gamma)
				}
				if hosts := kind == "hosts"; hosts != (localAlpha > 0 && localBeta > 0) {
					return fmt.Errorf("local links priced α=%g β=%g on %s", localAlpha, localBeta, kind)
				}
				ops := commtest.AllOps
				if testing.Short() {
					// The race step: the first calls after the measurement,
					// not every operation's (the full step checks those).
					ops = []Op{Sum}
				}
				return commtest.CheckAll[float32](context.Background(), c, 13, ops)
			})
			if len(models) != 1 {
				t.Errorf("the ranks' cost models differ: %v", models)
			}
		})
	}
}
