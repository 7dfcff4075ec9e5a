package dp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/layers/batchnorm"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

const (
	features = 12
	classes  = 4
	batch    = 16 // global batch
	steps    = 5
)

// mlp is a 12-32-16-4 perceptron with ReLUs.
func mlp(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := inputs[0]
	x = activations.Relu(layers.Dense(ctx.In("l1"), x, true, 32))
	x = activations.Relu(layers.Dense(ctx.In("l2"), x, true, 16))
	return []*graph.Node{layers.Dense(ctx.In("l3"), x, true, classes)}
}

// accuracy is the fraction of the batch classified correctly.
func accuracy(_ *mlctx.Context, labels, predictions []*graph.Node) *graph.Node {
	pred := graph.ArgMax(predictions[0], -1, labels[0].DType())
	ok := graph.Equal(pred, graph.Reshape(labels[0], -1))
	return graph.ReduceAllMean(graph.ConvertDType(ok, predictions[0].DType()))
}

// data is steps global batches of a fixed random classification problem.
func data() (x [][]float32, y [][]int32) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range steps {
		bx := make([]float32, batch*features)
		by := make([]int32, batch)
		for i := range batch {
			c := rng.IntN(classes)
			by[i] = int32(c)
			for j := range features {
				bx[i*features+j] = float32(rng.NormFloat64()) + float32((c*3+j)%5)*0.5
			}
		}
		x, y = append(x, bx), append(y, by)
	}
	return x, y
}

// share is rank r of n's part of a global batch: rows r*B/n .. (r+1)*B/n.
func share(x []float32, y []int32, r, n int) (*tensors.Tensor, *tensors.Tensor) {
	rows := batch / n
	return tensors.FromFlatDataAndDimensions(x[r*rows*features:(r+1)*rows*features], rows, features),
		tensors.FromFlatDataAndDimensions(y[r*rows:(r+1)*rows], rows, 1)
}

// newBackend is simplego with its operations run one at a time: its
// parallel mode (the default when one execution runs) races on its own
// bookkeeping in GoMLX v0.26.0 (executeNode reads the use counts of its
// inputs unlocked while another worker updates them), which go test -race
// reports.
func newBackend(t testing.TB) backends.Backend {
	t.Helper()
	b, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Finalize)
	return b
}

// trained is what a rank ends with: the trainable variables' values (in
// context order) and the averaged losses and accuracies of the steps.
type trained struct {
	weights   [][]float32
	loss, acc []float64
	buckets   int
}

// trainRanks trains the mlp for steps steps on n ranks (goroutines over
// the in-memory transport), each on its 1/n of every global batch, and
// returns every rank's result. Rank r's variables start from seed 7+r:
// only the broadcast from rank 0 makes them equal.
func trainRanks(t *testing.T, n int, newOpt func() optimizers.Interface, bucketBytes int) []trained {
	t.Helper()
	xs, ys := data()
	out := make([]trained, n)
	onRanks(t, n, func(ctx context.Context, r int, c *comm.Comm, backend backends.Backend) (err error) {
		out[r], err = trainRank(ctx, c, backend, newOpt(), bucketBytes, xs, ys)
		return err
	})
	return out
}

// onRanks runs f on n ranks (goroutines over the in-memory transport, each
// with a backend of its own) and fails the test with their errors; a rank
// whose f fails aborts its communicator, so that the others fail at once.
func onRanks(t *testing.T, n int, f func(ctx context.Context, r int, c *comm.Comm, backend backends.Backend) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	comms, err := commtest.Connect(ctx, "mem", n, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		backend := newBackend(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if errs[r] = f(ctx, r, c, backend); errs[r] != nil {
				c.Abort(errs[r])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func trainRank(ctx context.Context, c *comm.Comm, backend backends.Backend, opt optimizers.Interface, bucketBytes int,
	xs [][]float32, ys [][]int32) (trained, error) {
	var res trained
	mctx := mlctx.New()
	if err := mctx.SetRNGStateFromSeed(int64(7 + c.Rank())); err != nil {
		return res, err
	}
	tr, err := New(c, backend, mctx, mlp, losses.SparseCategoricalCrossEntropyLogits, opt,
		Options{BucketBytes: bucketBytes, Metrics: []MetricFn{accuracy}})
	if err != nil {
		return res, err
	}
	defer tr.Close()
	for s := range steps {
		x, y := share(xs[s], ys[s], c.Rank(), c.Size())
		st, err := tr.TrainStep(ctx, []any{x}, []any{y})
		if err != nil {
			return res, err
		}
		res.loss = append(res.loss, st.Loss)
		res.acc = append(res.acc, st.Metrics[0])
	}
	for _, v := range tr.Variables() {
		w, err := tensors.CopyFlatData[float32](v.MustValue())
		if err != nil {
			return res, err
		}
		res.weights = append(res.weights, w)
	}
	res.buckets = tr.Buckets()
	return res, nil
}

// maxDiff is the largest absolute difference between the weights of a
// and b.
func maxDiff(t *testing.T, a, b trained) float64 {
	t.Helper()
	if len(a.weights) != len(b.weights) {
		t.Fatalf("%d and %d variables", len(a.weights), len(b.weights))
	}
	d := 0.0
	for i := range a.weights {
		if len(a.weights[i]) != len(b.weights[i]) {
			t.Fatalf("variable %d: %d and %d elements", i, len(a.weights[i]), len(b.weights[i]))
		}
		for j := range a.weights[i] {
			d = max(d, math.Abs(float64(a.weights[i][j]-b.weights[i][j])))
		}
	}
	return d
}

// TestEquivalence trains the same model from the same initial weights for
// 5 steps on one rank with the full batch of 16 and on two ranks with 8
// each: the weights must agree within a tolerance that only float32
// rounding explains (the two runs sum the batch in a different order:
// per-rank means, then their average). Measured maximum differences on
// this model: SGD 6e-8, Adam 6e-8. Adam's tolerance is the looser
// because it divides by the square root of the second moment, which
// amplifies rounding in small gradients: the issue measured 3e-8 (SGD)
// and 3e-6 (Adam) on a 1M-parameter MLP. The two ranks of
// a run must agree exactly, and the first step must match from the start,
// which holds only if rank 0's variables were broadcast (rank 1 starts
// from another seed).
func TestEquivalence(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func() optimizers.Interface
		tol  float64
	}{
		{"SGD", func() optimizers.Interface {
			return optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(0.1)
		}, 1e-6},
		{"Adam", func() optimizers.Interface { return optimizers.Adam().LearningRate(0.01).Done() }, 1e-5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one := trainRanks(t, 1, tc.opt, 0)
			// 256-byte buckets: the 12-32-16-4 model's 6 variables make
			// several buckets, so the pipeline of buckets is exercised.
			two := trainRanks(t, 2, tc.opt, 256)
			if two[0].buckets < 3 {
				t.Errorf("%d buckets, want several", two[0].buckets)
			}
			if d := maxDiff(t, two[0], two[1]); d != 0 {
				t.Errorf("ranks 0 and 1 differ by %g: the replicas diverged", d)
			}
			d := maxDiff(t, one[0], two[0])
			if d > tc.tol {
				t.Errorf("1 rank and 2 ranks differ by %g after %d steps, tolerance %g", d, steps, tc.tol)
			}
			for s := range steps {
				if math.Abs(one[0].loss[s]-two[0].loss[s]) > 1e-5*one[0].loss[s] || math.Abs(one[0].acc[s]-two[0].acc[s]) > 1e-9 ||
					two[0].loss[s] != two[1].loss[s] {
					t.Errorf("step %d: loss %.7f accuracy %.4f on 1 rank; %.7f %.4f and %.7f on 2 ranks",
						s+1, one[0].loss[s], one[0].acc[s], two[0].loss[s], two[0].acc[s], two[1].loss[s])
				}
			}
			if !(one[0].loss[steps-1] < one[0].loss[0]) {
				t.Errorf("loss went from %.4f to %.4f: not learning", one[0].loss[0], one[0].loss[steps-1])
			}
			t.Logf("%s: largest weight difference between 1 and 2 ranks after %d steps: %.2g (tolerance %g); loss %.4f -> %.4f",
				tc.name, steps, d, tc.tol, one[0].loss[0], one[0].loss[steps-1])
		})
	}
}

// noGradients is an optimizer without UpdateGraphWithGradients.
type noGradients struct{}

func (noGradients) UpdateGraph(*mlctx.Context, *graph.Graph, *graph.Node) {}
func (noGradients) Clear(*mlctx.Context) error                            { return nil }

func TestRefusesOptimizerWithoutGradients(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms, err := commtest.Connect(ctx, "mem", 1, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	_, err = New(comms[0], newBackend(t), mlctx.New(), mlp, losses.SparseCategoricalCrossEntropyLogits, noGradients{}, Options{})
	if err == nil || !strings.Contains(err.Error(), "dp.noGradients") || !strings.Contains(err.Error(), "train.OptimizeWithGradients") {
		t.Fatalf("New with an optimizer lacking UpdateGraphWithGradients: %v", err)
	}
}

// TestPeerAbort ends one of two ranks mid-training (its communicator is
// aborted, as a dying process's peers see it): the other rank's TrainStep
// must fail with goccl's error naming the failed rank, not hang, and every
// later step must return that error.
func TestPeerAbort(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	comms, err := commtest.Connect(ctx, "mem", 2, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	xs, ys := data()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range comms {
		backend := newBackend(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			mctx := mlctx.New()
			tr, err := New(c, backend, mctx, mlp, losses.SparseCategoricalCrossEntropyLogits,
				optimizers.StochasticGradientDescent(), Options{})
			if err != nil {
				errs[r] = err
				return
			}
			for s := range 1000 {
				if r == 1 && s == 2 {
					c.Abort(fmt.Errorf("rank 1 stops"))
					return
				}
				x, y := share(xs[s%steps], ys[s%steps], r, 2)
				if _, err := tr.TrainStep(ctx, []any{x}, []any{y}); err != nil {
					_, again := tr.TrainStep(ctx, []any{x}, []any{y})
					if again == nil || again.Error() != err.Error() {
						errs[r] = fmt.Errorf("step after the failure: %v, want %v", again, err)
						return
					}
					errs[r] = err
					return
				}
			}
			errs[r] = errors.New("trained 1000 steps without noticing the dead peer")
		}()
	}
	wg.Wait()
	if errs[1] != nil {
		t.Fatalf("rank 1: %v", errs[1])
	}
	if errs[0] == nil || !(strings.Contains(errs[0].Error(), "rank 1") || strings.Contains(errs[0].Error(), "-> 1")) ||
		!strings.Contains(errs[0].Error(), "dp: rank 0: step 3") {
		t.Fatalf("rank 0: %v; want the failure of step 3 naming rank 1", errs[0])
	}
	t.Logf("rank 0: %v", errs[0])
}

// TestBatchShapes trains on batches of 16, then 8 (a last, partial batch),
// then 16 rows: each new shape builds a new gradient graph, which must
// reuse the variables the first one created and train the same ones.
func TestBatchShapes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms, err := commtest.Connect(ctx, "mem", 1, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer comms[0].Close()
	tr, err := New(comms[0], newBackend(t), mlctx.New(), mlp, losses.SparseCategoricalCrossEntropyLogits,
		optimizers.Adam().Done(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	xs, ys := data()
	for i, n := range []int{1, 2, 1} {
		x, y := share(xs[i], ys[i], 0, n)
		if _, err := tr.TrainStep(ctx, []any{x}, []any{y}); err != nil {
			t.Fatalf("step %d (batch %d): %v", i+1, batch/n, err)
		}
	}
	if len(tr.Variables()) != 6 {
		t.Errorf("%d trainable variables, want 6", len(tr.Variables()))
	}
}

// bnModel is a 12-32-4 perceptron with batch normalization after the
// hidden layer, computed in the graph (simplego v0.26.0 has no
// BatchNormForTraining op).
func bnModel(ctx *mlctx.Context, _ any, inputs []*graph.Node) []*graph.Node {
	x := layers.Dense(ctx.In("l1"), inputs[0], true, 32)
	x = activations.Relu(batchnorm.New(ctx.In("bn"), x, -1).UseBackendInference(false).Done())
	return []*graph.Node{layers.Dense(ctx.In("l2"), x, true, classes)}
}

// TestBuffersSynced trains a model with batch normalization on 2 ranks:
// its moving mean and variance are non-trainable variables that each rank
// updates from its own share of the batch in the gradient execution, and
// they must still be the same on every rank after every step, as PyTorch
// DDP keeps its buffers (broadcast from rank 0). Before, only the
// trainable variables were averaged: the moving averages drifted apart,
// and the replicas evaluated, and would checkpoint, different models.
func TestBuffersSynced(t *testing.T) {
	xs, ys := data()
	// values[r][s] maps every variable but the random generator's state
	// to its value on rank r after step s.
	values := make([][]map[string][]float32, 2)
	onRanks(t, 2, func(ctx context.Context, r int, c *comm.Comm, backend backends.Backend) error {
		mctx := mlctx.New()
		tr, err := New(c, backend, mctx, bnModel, losses.SparseCategoricalCrossEntropyLogits,
			optimizers.StochasticGradientDescent(), Options{})
		if err != nil {
			return err
		}
		defer tr.Close()
		for s := range steps {
			x, y := share(xs[s], ys[s], r, 2)
			if _, err := tr.TrainStep(ctx, []any{x}, []any{y}); err != nil {
				return err
			}
			vals := map[string][]float32{}
			for v := range mctx.IterVariables() {
				if v.Name() == mlctx.RNGStateVariableName || v.DType() != dtypes.Float32 {
					continue
				}
				if vals[v.ScopeAndName()], err = tensors.CopyFlatData[float32](v.MustValue()); err != nil {
					return err
				}
			}
			values[r] = append(values[r], vals)
		}
		return nil
	})
	const mean = "/bn/batch_normalization/mean"
	if _, ok := values[0][0][mean]; !ok {
		t.Fatalf("no variable %s: %v", mean, values[0][0])
	}
	if slices.Equal(values[0][0][mean], values[0][steps-1][mean]) {
		t.Errorf("%s did not change over %d steps: the test does not exercise the moving averages", mean, steps)
	}
	for s := range steps {
		for name, v0 := range values[0][s] {
			if v1 := values[1][s][name]; !slices.Equal(v0, v1) {
				t.Errorf("step %d: %s differs between ranks 0 and 1: %v against %v", s+1, name, v0[:min(3, len(v0))], v1[:min(3, len(v1))])
			}
		}
	}
}

// TestCheckpointOnRankZero resumes training from a checkpoint that only
// rank 0 loads, as the package doc promises it may: the checkpoint holds
// Adam's moments and step count besides the weights, which the update graph
// creates, and every rank must train on from rank 0's. Before, only the
// variables of the gradient graph existed at the initial broadcast: rank 1
// started Adam from zero moments and step 0 while rank 0 had the
// checkpoint's, and the replicas parted at the first update.
func TestCheckpointOnRankZero(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	xs, ys := data()
	newOpt := func() optimizers.Interface { return optimizers.Adam().LearningRate(0.01).Done() }
	// A single rank trains 3 steps and saves its checkpoint.
	comms, err := commtest.Connect(ctx, "mem", 1, comm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = func() error {
		defer comms[0].Close()
		mctx := mlctx.New()
		tr, err := New(comms[0], newBackend(t), mctx, mlp, losses.SparseCategoricalCrossEntropyLogits, newOpt(), Options{})
		if err != nil {
			return err
		}
		defer tr.Close()
		for s := range 3 {
			x, y := share(xs[s], ys[s], 0, 1)
			if _, err := tr.TrainStep(ctx, []any{x}, []any{y}); err != nil {
				return err
			}
		}
		h, err := checkpoints.Build(mctx).Dir(dir).Done()
		if err != nil {
			return err
		}
		return h.Save()
	}()
	if err != nil {
		t.Fatal(err)
	}
	// One rank, then two, train on from it; only rank 0 loads it.
	resume := func(n int) []trained {
		out := make([]trained, n)
		onRanks(t, n, func(ctx context.Context, r int, c *comm.Comm, backend backends.Backend) error {
			// Unchecked, as GoMLX wants a context a checkpoint is
			// loaded into: its variables exist before the model
			// creates them.
			mctx := mlctx.New().Checked(false)
			if err := mctx.SetRNGStateFromSeed(int64(7 + r)); err != nil {
				return err
			}
			if r == 0 {
				if _, err := checkpoints.Build(mctx).Dir(dir).Done(); err != nil {
					return err
				}
			}
			tr, err := New(c, backend, mctx, mlp, losses.SparseCategoricalCrossEntropyLogits, newOpt(), Options{})
			if err != nil {
				return err
			}
			defer tr.Close()
			for s := 3; s < steps; s++ {
				x, y := share(xs[s], ys[s], r, n)
				if _, err := tr.TrainStep(ctx, []any{x}, []any{y}); err != nil {
					return err
				}
			}
			for _, v := range tr.Variables() {
				w, err := tensors.CopyFlatData[float32](v.MustValue())
				if err != nil {
					return err
				}
				out[r].weights = append(out[r].weights, w)
			}
			return nil
		})
		return out
	}
	one, two := resume(1), resume(2)
	if d := maxDiff(t, two[0], two[1]); d != 0 {
		t.Errorf("ranks 0 and 1 differ by %g after resuming from rank 0's checkpoint: the optimizer state was not broadcast", d)
	}
	// As in TestEquivalence (Adam's tolerance): the two ranks went on from
	// the checkpoint's optimizer state, as the single rank did.
	if d := maxDiff(t, one[0], two[0]); d > 1e-5 {
		t.Errorf("1 rank and 2 ranks resumed from the checkpoint differ by %g", d)
	}
}
