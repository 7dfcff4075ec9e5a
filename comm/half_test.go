package comm_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// Half-precision reductions run in float32 and round once, so the result
// is within half a unit in the last place of the exact value (plus
// float32's own error, 2^-24 relative per addition, negligible here):
// relative error <= 2^-11 for float16 and <= 2^-8 for bfloat16.
func TestHalfReductions(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			runRanks(t, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				const count = 1000
				// Element i on rank r: (i+1)/(r+3), not representable exactly.
				x := func(r, i int) float64 { return float64(i+1) / float64(r+3) }
				for _, op := range []Op{Sum, Avg} {
					h := make([]Float16, count)
					b := make([]BFloat16, count)
					for i := range h {
						h[i] = F16(float32(x(c.Rank(), i)))
						b[i] = BF16(float32(x(c.Rank(), i)))
					}
					// The reference sums the inputs as rounded to the type.
					hin := make([]float64, count)
					bin := make([]float64, count)
					for i := range h {
						for r := range n {
							hin[i] += float64(F16(float32(x(r, i))).Float32())
							bin[i] += float64(BF16(float32(x(r, i))).Float32())
						}
					}
					if err := Allreduce(ctx, c, h, h, op); err != nil {
						return err
					}
					if err := Allreduce(ctx, c, b, b, op); err != nil {
						return err
					}
					div := 1.0
					if op == Avg {
						div = float64(n)
					}
					for i := range h {
						if err := within(float64(h[i].Float32()), hin[i]/div, math.Exp2(-11)); err != nil {
							return fmt.Errorf("float16 %s element %d: %w", op, i, err)
						}
						if err := within(float64(b[i].Float32()), bin[i]/div, math.Exp2(-8)); err != nil {
							return fmt.Errorf("bfloat16 %s element %d: %w", op, i, err)
						}
					}
				}
				// Reduce and reduce-scatter take the same path.
				send := make([]Float16, n*count)
				for i := range send {
					send[i] = F16(float32(i%7 + c.Rank()))
				}
				var recv []Float16
				if c.Rank() == 0 {
					recv = make([]Float16, n*count)
				}
				if err := Reduce(ctx, c, send, recv, Max, 0); err != nil {
					return err
				}
				for i, v := range recv {
					if want := float32(i%7 + n - 1); v.Float32() != want {
						return fmt.Errorf("reduce max element %d = %v, want %v", i, v.Float32(), want)
					}
				}
				block := make([]Float16, count)
				if err := ReduceScatter(ctx, c, send, block, Sum); err != nil {
					return err
				}
				for i, v := range block {
					j := c.Rank()*count + i
					if want := float32(n*(j%7) + n*(n-1)/2); v.Float32() != want {
						return fmt.Errorf("reduce-scatter element %d = %v, want %v", i, v.Float32(), want)
					}
				}
				// Broadcast moves halves as data.
				if err := Broadcast(ctx, c, send, n-1); err != nil {
					return err
				}
				if want := float32(1 + n - 1); send[1].Float32() != want {
					return fmt.Errorf("broadcast element 1 = %v, want %v", send[1].Float32(), want)
				}
				return nil
			})
		})
	}
}

func within(got, want, rel float64) error {
	if math.Abs(got-want) > rel*math.Abs(want)+1e-30 {
		return fmt.Errorf("%v, want %v (relative error %.3g > %.3g)", got, want, math.Abs(got-want)/math.Abs(want), rel)
	}
	return nil
}

// Float16 and BFloat16 print as numbers (fmt's %v went through uint16:
// 17536 for 4.5).
func TestHalfStrings(t *testing.T) {
	if got := fmt.Sprint(F16(4.5), " ", BF16(-0.75), " ", []Float16{F16(1), F16(2.5)}); got != "4.5 -0.75 [1 2.5]" {
		t.Fatalf("got %q", got)
	}
	if got := fmt.Sprintf("%v %v", F16(float32(math.Inf(1))), BF16(float32(math.NaN()))); got != "+Inf NaN" {
		t.Fatalf("got %q", got)
	}
}
