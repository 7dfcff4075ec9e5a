package main

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends/simplego"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX's graph DSL
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// TestMomentumSGD applies two steps of given gradients to two variables
// (one of them not trainable, which must be left alone) and compares with
// v = m*v + g, w -= lr*v computed by hand.
func TestMomentumSGD(t *testing.T) {
	backend, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	mctx := mlctx.New()
	w := mctx.In("a").VariableWithValue("w", []float32{1, 2, 3})
	mctx.In("b").VariableWithValue("frozen", []float32{5}).SetTrainable(false)
	u := mctx.In("b").VariableWithValue("u", []float32{-1})
	opt := momentumSGD{lr: 0.5, momentum: 0.9}
	exec, err := mlctx.NewExec(backend, mctx, func(ctx *mlctx.Context, grads []*Node) {
		g := grads[0].Graph()
		w.ValueGraph(g)
		u.ValueGraph(g)
		opt.UpdateGraphWithGradients(ctx, grads, grads[0].DType())
	})
	if err != nil {
		t.Fatal(err)
	}
	g1 := [][]float32{{1, 0, -1}, {2}}
	g2 := [][]float32{{0, 1, 1}, {-2}}
	for _, g := range [][][]float32{g1, g2} {
		if _, err := exec.Exec(tensors.FromValue(g[0]), tensors.FromValue(g[1])); err != nil {
			t.Fatal(err)
		}
	}
	// v1 = g1, w1 = w0 - lr*g1; v2 = m*g1 + g2, w2 = w1 - lr*v2.
	want := func(w0, a, b float64) float64 { return w0 - 0.5*a - 0.5*(0.9*a+b) }
	check := func(name string, v *mlctx.Variable, w0 []float64, k int) {
		got := tensors.MustCopyFlatData[float32](v.MustValue())
		for i := range got {
			if x := want(w0[i], float64(g1[k][i]), float64(g2[k][i])); math.Abs(float64(got[i])-x) > 1e-6 {
				t.Errorf("%s[%d] = %g, want %g", name, i, got[i], x)
			}
		}
	}
	check("w", w, []float64{1, 2, 3}, 0)
	check("u", u, []float64{-1}, 1)
	if f := tensors.MustCopyFlatData[float32](mctx.GetVariableByScopeAndName("/b", "frozen").MustValue()); f[0] != 5 {
		t.Errorf("the frozen variable changed to %g", f[0])
	}
}
