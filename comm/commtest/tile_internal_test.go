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
