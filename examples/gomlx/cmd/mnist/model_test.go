package main

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends/simplego"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's graph DSL
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// TestPatchConv compares patchConv with GoMLX's own convolution (whose
// forward pass simplego runs) on the same kernel, for even and odd sizes,
// strides 1 and 2, and 3x3 and 5x5 windows.
func TestPatchConv(t *testing.T) {
	backend, err := simplego.New("ops_sequential") // see -simplego in main.go
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ size, channels, kernel, stride, out int }{
		{8, 1, 5, 2, 4}, {9, 3, 3, 2, 5}, {7, 2, 3, 1, 3}, {28, 1, 5, 2, 16},
	} {
		x := make([]float32, 2*tc.size*tc.size*tc.channels)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		xt := tensors.FromFlatDataAndDimensions(x, 2, tc.size, tc.size, tc.channels)
		mctx := mlctx.New()
		got, err := mlctx.ExecOnce(backend, mctx, func(ctx *mlctx.Context, x *Node) *Node {
			return patchConv(ctx, x, tc.kernel, tc.stride, tc.out)
		}, xt)
		if err != nil {
			t.Fatal(err)
		}
		var weights, bias *tensors.Tensor
		for v := range mctx.IterVariables() {
			switch {
			case !v.Trainable:
			case v.Shape().Rank() == 2:
				weights = v.MustValue()
			case v.Shape().Rank() == 1:
				bias = v.MustValue()
			}
		}
		want, err := ExecOnce(backend, func(x, w, b *Node) *Node {
			kernel := Reshape(w, tc.kernel, tc.kernel, tc.channels, tc.out)
			return Add(Convolve(x, kernel).Strides(tc.stride).PadSame().Done(), Reshape(b, 1, 1, 1, tc.out))
		}, xt, weights, bias)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Shape().Equal(want.Shape()) {
			t.Fatalf("%+v: shape %s, GoMLX's convolution gives %s", tc, got.Shape(), want.Shape())
		}
		g, w := tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want)
		worst := 0.0
		for i := range g {
			worst = max(worst, math.Abs(float64(g[i]-w[i])))
		}
		if worst > 1e-5 {
			t.Errorf("%+v: differs from GoMLX's convolution by up to %g", tc, worst)
		}
	}
}
