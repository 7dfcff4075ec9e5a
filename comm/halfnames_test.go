package comm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// TestHalfReductionTypeMismatchIsReported: a reduction of float16 or
// bfloat16 runs on float32 (widened), and it was described on the wire as
// a float32 call: ranks that passed float16 and bfloat16 (or float16 and
// float32) of the same count reduced together without a word, and a count
// mismatch between float16 ranks was reported as one of float32 calls. The
// call is now named and fingerprinted by the caller's type.
func TestHalfReductionTypeMismatchIsReported(t *testing.T) {
	for _, kind := range []string{"mem", "shm"} {
		for _, other := range []DataType{TypeBFloat16, TypeFloat32, TypeFloat16} {
			for _, coll := range []string{"allreduce", "reduce-scatter"} {
				t.Run(fmt.Sprintf("%s/%s/%s", kind, other, coll), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					errs := commtest.Run(ctx, kind, 2, testOpts, func(c *Comm) error {
						dt, count := TypeFloat16, 8
						if c.Rank() == 1 {
							dt = other
							if other == TypeFloat16 {
								count = 9 // the same type: a count mismatch
							}
						}
						send := make([]byte, 2*count*dt.Size())
						if coll == "allreduce" {
							return c.AllreduceBytes(ctx, send[:count*dt.Size()], make([]byte, count*dt.Size()), dt, Sum)
						}
						return c.ReduceScatterBytes(ctx, send, make([]byte, count*dt.Size()), dt, Sum)
					})
					for r, err := range errs {
						if err == nil {
							t.Errorf("rank %d: no error; rank 0 reduced float16, rank 1 %s", r, other)
							continue
						}
						msg := err.Error()
						if !strings.Contains(msg, "collective mismatch") || !strings.Contains(msg, "(float16, 8") ||
							!strings.Contains(msg, fmt.Sprintf("(%s, ", other)) || (other != TypeFloat32 && strings.Contains(msg, "float32")) {
							t.Errorf("rank %d: %v; want a mismatch naming float16 and %s", r, err, other)
						}
					}
				})
			}
		}
	}
}
