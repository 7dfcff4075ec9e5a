package comm_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/collectives"
	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// TestCollectivesAtEachSIMDLevel runs the collectives with reductions at
// every kernel level this CPU has (collectives.SetSIMD), so that the vector
// kernels are checked inside real collectives and not only against the
// portable code.
func TestCollectivesAtEachSIMDLevel(t *testing.T) {
	defer collectives.SetSIMD(collectives.SIMD())
	for _, level := range collectives.SIMDLevels() {
		if err := collectives.SetSIMD(level); err != nil {
			t.Fatal(err)
		}
		t.Run(level, func(t *testing.T) {
			runRanks(t, 3, testOpts, func(c *Comm) error {
				ctx := context.Background()
				if got := collectives.SIMD(); got != level {
					t.Errorf("SIMD level %s, want %s", got, level)
				}
				for _, count := range []int{1, 13} {
					if err := commtest.CheckAll[float32](ctx, c, count, commtest.AllOps); err != nil {
						return err
					}
					if err := commtest.CheckAll[int8](ctx, c, count, commtest.AllOps); err != nil {
						return err
					}
				}
				return commtest.CheckAll[uint64](ctx, c, 1000, []Op{Sum, Max})
			})
		})
	}
}

// TestSIMDEnvInvalid checks that an unknown GOCCL_SIMD fails communicator
// creation with a message naming the variable.
func TestSIMDEnvInvalid(t *testing.T) {
	t.Setenv("GOCCL_SIMD", "avx3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms, err := commtest.Connect(ctx, "mem", 2, testOpts)
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
	if err == nil || !strings.Contains(err.Error(), "GOCCL_SIMD") {
		t.Fatalf("New with GOCCL_SIMD=avx3: %v, want an error naming GOCCL_SIMD", err)
	}
}
