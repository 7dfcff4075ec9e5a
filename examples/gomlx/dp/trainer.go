package dp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/goccl/goccl/comm"
)

// MetricFn builds a scalar metric of a batch (for example its accuracy)
// in the gradient graph, from the labels and the model's predictions. Its
// value is averaged across ranks like the loss.
type MetricFn func(ctx *mlctx.Context, labels, predictions []*graph.Node) *graph.Node

// Options configure a Trainer.
type Options struct {
	// BucketBytes caps the gradient buckets: variables are added to a
	// bucket, from the last one backwards, until it holds at least this
	// many bytes. Zero means DefaultBucketBytes.
	BucketBytes int
	// Metrics are computed with the loss at every step and averaged
	// across ranks; Step.Metrics holds them in this order.
	Metrics []MetricFn
	// Seed seeds rank r's random number generator with Seed + r after the
	// initial broadcast, if the model uses one (dropout, noise).
	Seed int64
}

// Step is the result of one TrainStep, averaged over the ranks.
type Step struct {
	Loss float64
	// Metrics are Options.Metrics' values. The slice belongs to the
	// Trainer and is overwritten by the next step.
	Metrics []float64
}

// Stats are the cumulative times of the phases of the steps, on this
// rank, in seconds.
type Stats struct {
	Steps int
	// Gradients is the gradient execution; Copy the copies of the
	// gradients into the fused buffer and of the averages out of it;
	// Comm the time blocked waiting for the allreduces (gradients and
	// metrics); Update the update execution.
	Gradients, Copy, Comm, Update float64
}

// Trainer is one rank's replica of a data-parallel training. Its methods
// are called from one goroutine at a time; every rank calls TrainStep the
// same number of times, with batches of the same shapes.
type Trainer struct {
	c       *comm.Comm
	backend backends.Backend
	mctx    *mlctx.Context
	model   train.ModelFn
	loss    losses.LossFn
	opt     train.OptimizeWithGradients
	opts    Options

	gradExec, updateExec *mlctx.Exec
	nInputs              int
	vars                 []*mlctx.Variable // trainable variables, in context order
	bufVars              []*mlctx.Variable // non-trainable variables the gradient graph updates
	lossDType            dtypes.DType
	buildErr             error // a graph-building check that failed

	started  bool
	fused    fused
	gradIn   []*tensors.Tensor // inputs of the update execution, shared with the backend
	gradArgs []any             // gradIn as Exec's arguments
	scalars  []float64         // loss and metrics, registered
	scalAR   *comm.Persistent
	bufs     *buffers // broadcast of bufVars from rank 0
	step     Step
	args     []any
	stats    Stats
	err      error // the failure that ended training
	epoch    time.Time
}

// New prepares a data-parallel Trainer on communicator c, for the model
// and its variables in mctx (shared with the caller: after a step they hold
// the trained values), executed on backend. loss reduces the predictions
// and labels of a batch to a scalar (a non-scalar result is averaged), plus
// any losses the model adds with train.AddLoss. The optimizer must
// implement train.OptimizeWithGradients (optimizers.StochasticGradientDescent
// and optimizers.Adam do); any other is refused. New does not communicate:
// the initial broadcast is part of the first TrainStep.
func New(c *comm.Comm, backend backends.Backend, mctx *mlctx.Context, model train.ModelFn, loss losses.LossFn,
	optimizer optimizers.Interface, opts Options) (*Trainer, error) {
	switch {
	case c == nil:
		return nil, errors.New("dp: nil communicator")
	case backend == nil || mctx == nil || model == nil || loss == nil || optimizer == nil:
		return nil, errors.New("dp: New needs a backend, a context, a model, a loss and an optimizer")
	case opts.BucketBytes < 0:
		return nil, fmt.Errorf("dp: negative BucketBytes %d", opts.BucketBytes)
	}
	opt, ok := optimizer.(train.OptimizeWithGradients)
	if !ok {
		return nil, fmt.Errorf("dp: optimizer %T cannot apply averaged gradients: it does not implement "+
			"train.OptimizeWithGradients (UpdateGraphWithGradients); use optimizers.StochasticGradientDescent or optimizers.Adam", optimizer)
	}
	if opts.BucketBytes == 0 {
		opts.BucketBytes = DefaultBucketBytes
	}
	t := &Trainer{c: c, backend: backend, mctx: mctx, model: model, loss: loss, opt: opt, opts: opts,
		epoch: time.Now()}
	t.step.Metrics = make([]float64, len(opts.Metrics))
	var err error
	if t.gradExec, err = mlctx.NewExec(backend, mctx, t.gradientGraph); err != nil {
		return nil, fmt.Errorf("dp: gradient execution: %w", err)
	}
	if t.updateExec, err = mlctx.NewExec(backend, mctx, t.updateGraph); err != nil {
		return nil, fmt.Errorf("dp: update execution: %w", err)
	}
	return t, nil
}

// clock is seconds since the Trainer was made.
func (t *Trainer) clock() float64 { return time.Since(t.epoch).Seconds() }

// gradientGraph builds execution 1: model, loss, metrics and gradients.
// Its inputs are the model inputs followed by the labels; its outputs the
// loss, the metrics (float64 scalars) and one gradient per trainable
// variable in context order.
func (t *Trainer) gradientGraph(mctx *mlctx.Context, all []*graph.Node) []*graph.Node {
	g := all[0].Graph()
	// A graph for new batch shapes reuses the variables the first one
	// created: context.Exec marks its context Reuse after its first graph.
	mctx.SetTraining(g, true)
	inputs, labels := all[:t.nInputs], all[t.nInputs:]
	predictions := t.model(mctx, nil, inputs)
	base := t.loss(labels, predictions)
	if !base.Shape().IsScalar() {
		base = graph.ReduceAllMean(base)
	}
	train.SetLossNoRegularization(mctx, base)
	train.AddLoss(mctx, base)
	loss := train.GetLosses(mctx, g)
	outs := []*graph.Node{graph.ConvertDType(loss, dtypes.Float64)}
	for _, m := range t.opts.Metrics {
		v := m(mctx, labels, predictions)
		if !v.Shape().IsScalar() {
			v = graph.ReduceAllMean(v)
		}
		outs = append(outs, graph.ConvertDType(v, dtypes.Float64))
	}
	grads := mctx.BuildTrainableVariablesGradientsGraph(loss)
	var vars, bufVars []*mlctx.Variable
	for v := range mctx.IterVariables() {
		switch {
		case v.Trainable && v.InUseByGraph(g):
			vars = append(vars, v)
		case !v.Trainable && v.ChangedInGraph(g) && !(v.Scope() == mlctx.RootScope && v.Name() == mlctx.RNGStateVariableName):
			// Updated from this rank's share of the batch (batch
			// normalization's moving averages): kept equal by a
			// broadcast from rank 0 at every step. The random
			// generator's state is left apart on purpose.
			bufVars = append(bufVars, v)
		}
	}
	mctx.EnumerateGraphParams(g, func(_, key string, _ any) {
		if key == train.TrainerPerStepUpdateGraphFnParamKey {
			t.buildErr = errors.New("the model registers a per-step update (train.AddPerStepUpdateGraphFn), which the split into gradient and update executions cannot run")
		}
	})
	switch {
	case len(vars) != len(grads):
		t.buildErr = fmt.Errorf("%d gradients for %d trainable variables", len(grads), len(vars))
	case t.vars == nil:
		t.vars, t.bufVars, t.lossDType = vars, bufVars, loss.DType()
	case !slices.Equal(vars, t.vars):
		t.buildErr = fmt.Errorf("the batch shapes changed and the new graph trains %d variables, not the same %d", len(vars), len(t.vars))
	case !slices.Equal(bufVars, t.bufVars):
		t.buildErr = fmt.Errorf("the batch shapes changed and the new graph updates %d non-trainable variables, not the same %d", len(bufVars), len(t.bufVars))
	}
	return append(outs, grads...)
}

// updateGraph builds execution 2: the optimizer's update from the given
// (averaged) gradients. The optimizer walks the context's trainable
// variables in use by this graph in context order and takes the gradients
// in that order, so exactly the variables of the gradient graph are
// touched here first; one left out would be skipped without a word.
func (t *Trainer) updateGraph(mctx *mlctx.Context, grads []*graph.Node) {
	g := grads[0].Graph()
	mctx.SetTraining(g, true)
	for _, v := range t.vars {
		v.ValueGraph(g)
	}
	t.opt.UpdateGraphWithGradients(mctx, grads, t.lossDType)
	n := 0
	for v := range mctx.IterVariables() {
		if v.Trainable && v.InUseByGraph(g) {
			n++
		}
	}
	if n != len(t.vars) {
		t.buildErr = fmt.Errorf("the update graph uses %d trainable variables, the gradient graph %d", n, len(t.vars))
	}
}

// TrainStep trains one step on this rank's share of the global batch:
// inputs for the model and labels for the loss (tensors or Go values, as
// context.Exec takes them). Every rank's share must have the same shapes,
// and each is given the same weight in the average, so shares should be of
// equal size. It blocks until the update is applied on this rank, and
// returns the loss and metrics averaged across ranks. After an error the
// Trainer is broken and every later call returns that error; other ranks
// fail in their own TrainStep (goccl fails a collective on every rank),
// and the caller should Abort or Close the communicator.
func (t *Trainer) TrainStep(ctx context.Context, inputs, labels []any) (Step, error) {
	if t.err != nil {
		return Step{}, t.err
	}
	if err := t.trainStep(ctx, inputs, labels); err != nil {
		t.err = fmt.Errorf("dp: rank %d: step %d: %w", t.c.Rank(), t.stats.Steps+1, err)
		return Step{}, t.err
	}
	t.stats.Steps++
	return t.step, nil
}

func (t *Trainer) trainStep(ctx context.Context, inputs, labels []any) error {
	if len(inputs) == 0 {
		return errors.New("no inputs")
	}
	if !t.started {
		t.nInputs = len(inputs)
	} else if len(inputs) != t.nInputs {
		return fmt.Errorf("%d inputs, the first step had %d", len(inputs), t.nInputs)
	}
	t.args = append(append(t.args[:0], inputs...), labels...)
	if !t.started {
		if err := t.start(ctx); err != nil {
			return err
		}
	}

	t0 := t.clock()
	outs, err := t.gradExec.Exec(t.args...)
	if err == nil {
		err = t.buildErr
	}
	if err != nil {
		return fmt.Errorf("gradient execution: %w", err)
	}
	defer func() {
		for _, o := range outs {
			o.FinalizeAll()
		}
	}()
	nm := 1 + len(t.opts.Metrics)
	if len(outs) != nm+len(t.vars) {
		return fmt.Errorf("gradient execution returned %d outputs, want %d", len(outs), nm+len(t.vars))
	}
	for i := range nm {
		t.scalars[i] = tensors.ToScalar[float64](outs[i])
	}
	t1 := t.clock()
	t.stats.Gradients += t1 - t0
	if err := t.bufs.sync(ctx); err != nil {
		return fmt.Errorf("broadcasting the updated non-trainable variables from rank 0: %w", err)
	}
	if err := t.scalAR.Start(); err != nil {
		return fmt.Errorf("allreduce of the loss and metrics: %w", err)
	}
	copying, err := t.fused.reduce(ctx, outs[nm:], t.gradIn)
	t2 := t.clock()
	t.stats.Copy += copying
	t.stats.Comm += t2 - t1 - copying
	if err != nil {
		// The first collective to fail is the cause; goccl fails the
		// later ones of the step with it, so that error tells it.
		t.scalAR.Wait(ctx)
		return fmt.Errorf("averaging the gradients, loss and metrics across ranks: %w", err)
	}
	_, err = t.updateExec.Exec(t.gradArgs...)
	if err == nil {
		err = t.buildErr
	}
	t3 := t.clock()
	t.stats.Update += t3 - t2
	if err2 := t.scalAR.Wait(ctx); err2 != nil {
		err = errors.Join(err, fmt.Errorf("allreduce of the loss and metrics: %w", err2))
	}
	t.stats.Comm += t.clock() - t3
	if err != nil {
		return fmt.Errorf("update execution: %w", err)
	}
	if t.stats.Steps == 0 {
		// The first update execution created the optimizer's variables
		// (moments, step count, learning rate): the initial broadcast
		// could not include them. Where a checkpoint was loaded on rank 0
		// alone, they came from it there and from zero elsewhere, and the
		// updates differed. Rank 0's variables, updated from its state,
		// are what every rank goes on from.
		t4 := t.clock()
		if err := broadcastVariables(ctx, t.c, t.mctx); err != nil {
			return fmt.Errorf("after the first update: %w", err)
		}
		t.stats.Comm += t.clock() - t4
	}
	t.step.Loss = t.scalars[0]
	copy(t.step.Metrics, t.scalars[1:nm])
	return nil
}

// start builds the gradient graph for the first batch's shapes (which
// creates the model's variables), initializes the variables, broadcasts
// them from rank 0, seeds the random number generators apart, and
// allocates the buffers of the steps.
func (t *Trainer) start(ctx context.Context) error {
	if err := t.gradExec.PreCompile(t.args...); err != nil {
		return fmt.Errorf("building the gradient graph: %w", err)
	}
	if t.buildErr != nil {
		return t.buildErr
	}
	if len(t.vars) == 0 {
		return errors.New("the model has no trainable variables")
	}
	if err := t.mctx.InitializeVariables(t.backend, nil); err != nil {
		return fmt.Errorf("initializing variables: %w", err)
	}
	if err := broadcastVariables(ctx, t.c, t.mctx); err != nil {
		return err
	}
	var err error
	if t.bufs, err = newBuffers(t.c, t.bufVars); err != nil {
		return err
	}
	if t.mctx.GetVariableByScopeAndName(mlctx.RootScope, mlctx.RNGStateVariableName) != nil {
		if err := t.mctx.SetRNGStateFromSeed(t.opts.Seed + int64(t.c.Rank())); err != nil {
			return fmt.Errorf("seeding the random number generator: %w", err)
		}
	}
	dtype := t.vars[0].DType()
	sizes := make([]int, len(t.vars))
	t.gradIn = make([]*tensors.Tensor, len(t.vars))
	t.gradArgs = make([]any, len(t.vars))
	for i, v := range t.vars {
		if v.DType() != dtype {
			return fmt.Errorf("trainable variables %s (%s) and %s (%s): mixed dtypes are not supported",
				t.vars[0].ScopeAndName(), dtype, v.ScopeAndName(), v.DType())
		}
		sizes[i] = v.Shape().Size()
		t.gradIn[i] = tensors.FromShape(v.Shape())
		if err := t.gradIn[i].MaterializeOnDevice(t.backend, true, 0); err != nil {
			return fmt.Errorf("gradient input %d: %w", i, err)
		}
		t.gradArgs[i] = t.gradIn[i]
	}
	if t.fused, err = newFused(t.c, dtype, sizes, t.opts.BucketBytes, t.clock); err != nil {
		return err
	}
	if t.scalars, err = comm.Alloc[float64](t.c, 1+len(t.opts.Metrics)); err != nil {
		return fmt.Errorf("allocating the metrics buffer: %w", err)
	}
	if t.scalAR, err = comm.AllreduceInit(t.c, t.scalars, t.scalars, comm.Avg); err != nil {
		return fmt.Errorf("preparing the metrics allreduce: %w", err)
	}
	t.started = true
	return nil
}

// Variables returns the trainable variables in the order of the fused
// gradient buffer (nil before the first step).
func (t *Trainer) Variables() []*mlctx.Variable { return t.vars }

// Buckets returns the number of gradient buckets (0 before the first step).
func (t *Trainer) Buckets() int {
	if f, ok := t.fused.(interface{ nBuckets() int }); ok {
		return f.nBuckets()
	}
	return 0
}

// Stats returns the cumulative phase times of this rank's steps.
func (t *Trainer) Stats() Stats { return t.stats }

// Close releases the registered buffers (the communicator stays open). It
// does not release them while a failed step may have left an allreduce
// running on them; the communicator's Close does then.
func (t *Trainer) Close() error {
	if t.fused == nil || t.err != nil {
		return nil
	}
	err := errors.Join(t.fused.free(), t.bufs.free())
	if e := comm.Free(t.c, t.scalars); e != nil {
		err = errors.Join(err, e)
	}
	t.fused, t.scalars, t.bufs = nil, nil, nil
	return err
}
