package dp

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// mnistMLP is examples/mnist's 784-256-128-10 perceptron.
func mnistMLP(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := activations.Relu(layers.Dense(ctx.In("l1"), inputs[0], true, 256))
	x = activations.Relu(layers.Dense(ctx.In("l2"), x, true, 128))
	return []*graph.Node{layers.Dense(ctx.In("l3"), x, true, 10)}
}

// BenchmarkStep prices the split of a step into two executions with the
// host in between: one Adam step of the 235,146-parameter MLP at batch 64
// on one rank, by dp.Trainer (gradient execution, copies through the fused
// registered buffer, a one-rank allreduce, update execution) against
// GoMLX's own train.Trainer (one fused execution). The ratio of the two is
// the overhead data-parallel training adds before any communication.
//
//	go test -run '^$' -bench Step -count 5 ./dp/ | benchstat -col /trainer -
func BenchmarkStep(b *testing.B) {
	const rows = 64
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float32, rows*784)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	ys := make([]int32, rows)
	for i := range ys {
		ys[i] = int32(rng.IntN(10))
	}
	// Tensors are made per run: they keep the backend they were sent to,
	// and each run has its own backend.
	batch := func() (*tensors.Tensor, *tensors.Tensor) {
		return tensors.FromFlatDataAndDimensions(xs, rows, 784), tensors.FromFlatDataAndDimensions(ys, rows, 1)
	}

	b.Run("trainer=gomlx", func(b *testing.B) {
		x, y := batch()
		backend := newBackend(b)
		tr := train.NewTrainer(backend, mlctx.New(), mnistMLP, losses.SparseCategoricalCrossEntropyLogits,
			optimizers.Adam().Done(), nil, nil)
		if _, err := tr.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			out, err := tr.TrainStep(nil, []*tensors.Tensor{x}, []*tensors.Tensor{y})
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range out {
				o.FinalizeAll()
			}
		}
	})
	b.Run("trainer=dp", func(b *testing.B) {
		x, y := batch()
		ctx := context.Background()
		comms, err := commtest.Connect(ctx, "mem", 1, comm.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer comms[0].Close()
		tr, err := New(comms[0], newBackend(b), mlctx.New(), mnistMLP, losses.SparseCategoricalCrossEntropyLogits,
			optimizers.Adam().Done(), Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		if _, err := tr.TrainStep(ctx, []any{x}, []any{y}); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := tr.TrainStep(ctx, []any{x}, []any{y}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		st := tr.Stats()
		b.ReportMetric(100*st.Copy/(st.Gradients+st.Copy+st.Comm+st.Update), "%copy")
	})
}
