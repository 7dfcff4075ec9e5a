package commtest

import (
	"testing"

	"github.com/stretchr/testify/require"

	. "github.com/goccl/goccl/comm"
)

// The tiled inputs and expected results are the per-element ones, at every
// length around the period and its doublings, for every op and rank count.
func TestTiledInputsAndWants(t *testing.T) {
	tiled[float32](t)
	tiled[uint8](t)
	tiled[int64](t)
	tiled[Float16](t)
	tiled[BFloat16](t)
}

// Float16 and BFloat16 inputs and results are their values, not their
// bits: Go's conversion to a half type's uint16 would give a subnormal.
func TestHalfInputsAreValues(t *testing.T) {
	require.Equal(t, float32(-4), input[Float16](Sum, 0, 0).Float32())
	require.Equal(t, float32(-4), input[BFloat16](Sum, 0, 0).Float32())
	require.Equal(t, float32(-1), input[Float16](Prod, 1, 0).Float32())
	// Avg rounds once, from float32: (-4-4+...)/3 over 3 ranks.
	for _, op := range AllOps {
		for n := 1; n <= 9; n++ {
			for i := range period {
				h, f := want[Float16](op, n, i).Float32(), want[float32](op, n, i)
				require.Equal(t, F16(f).Float32(), h, "%s over %d ranks, element %d", op, n, i)
				b := want[BFloat16](op, n, i).Float32()
				require.Equal(t, BF16(f).Float32(), b, "%s over %d ranks, element %d", op, n, i)
			}
		}
	}
}

func tiled[T Number](t *testing.T) {
	for _, op := range AllOps {
		for n := 1; n <= 9; n++ {
			ws := wants[T](op, n)
			for i := range 4 * period {
				require.Equal(t, want[T](op, n, i), ws[i%period], "%s over %d ranks, element %d", op, n, i)
			}
			for _, count := range []int{0, 1, period - 1, period, period + 1, 2*period + 7, 4*period + 1, 1000} {
				got := inputs[T](op, n-1, count)
				require.Len(t, got, count)
				for i, v := range got {
					require.Equal(t, input[T](op, n-1, i), v, "%s rank %d count %d element %d", op, n-1, count, i)
				}
			}
		}
	}
}
