package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/examples/gomlx/dp"
)

// config is what a training run needs besides the data and communicator.
type config struct {
	Model       string
	Optimizer   string
	Epochs      int
	Batch       int // global batch, split evenly over the ranks
	LR          float64
	Momentum    float64 // of the momentum optimizer
	BucketBytes int
	Seed        int64
	Points      int    // training-loss points recorded per epoch
	MaxSteps    int    // steps per epoch, 0 for the whole training set
	Backend     string // simplego's configuration
	FirstStep   func() // called after the first step, if not nil
}

// result is a finished run, as written by -json and read by -plot.
type result struct {
	Model        string        `json:"model"`
	Optimizer    string        `json:"optimizer"`
	Ranks        int           `json:"ranks"`
	Batch        int           `json:"batch"`
	LR           float64       `json:"lr"`
	Momentum     float64       `json:"momentum,omitempty"`
	Seed         int64         `json:"seed"`
	Parameters   int           `json:"parameters"`
	Buckets      int           `json:"buckets"`
	TrainSamples int           `json:"train_samples"`
	TestSamples  int           `json:"test_samples"`
	Points       []lossPoint   `json:"points"`
	Epochs       []epochResult `json:"epochs"`
	Phases       dp.Stats      `json:"phases"` // rank 0's, seconds
}

// lossPoint is the training loss averaged over the global batches since
// the previous point, at a fractional epoch.
type lossPoint struct {
	Epoch float64 `json:"epoch"`
	Loss  float64 `json:"loss"`
}

type epochResult struct {
	Epoch         int     `json:"epoch"`
	TrainLoss     float64 `json:"train_loss"`
	TrainAccuracy float64 `json:"train_accuracy"`
	TestAccuracy  float64 `json:"test_accuracy"`
	Seconds       float64 `json:"seconds"` // training, without the evaluation
}

// train trains cfg.Model data-parallel over c: every rank runs it with the
// same cfg and data. Rank 0 draws the progress bar on progress (nil: none).
func train(ctx context.Context, c *comm.Comm, cfg config, trainSet, testSet *dataset, progress io.Writer) (*result, error) {
	size, rank := c.Size(), c.Rank()
	if cfg.Batch%size != 0 {
		return nil, fmt.Errorf("global batch %d is not a multiple of %d ranks", cfg.Batch, size)
	}
	local := cfg.Batch / size
	steps := trainSet.len() / cfg.Batch
	if cfg.MaxSteps > 0 {
		steps = min(steps, cfg.MaxSteps)
	}
	if steps == 0 {
		return nil, fmt.Errorf("%d training samples make no batch of %d", trainSet.len(), cfg.Batch)
	}
	backend, err := simplego.New(cfg.Backend)
	if err != nil {
		return nil, fmt.Errorf("GoMLX backend: %w", err)
	}
	defer backend.Finalize()
	model := models[cfg.Model]
	mctx := mlctx.New()
	// Only rank 0's initial weights matter: the trainer broadcasts them,
	// and the other ranks start from another seed to prove it.
	if err := mctx.SetRNGStateFromSeed(cfg.Seed + int64(rank)*1000); err != nil {
		return nil, err
	}
	var opt optimizers.Interface
	switch cfg.Optimizer {
	case "momentum":
		opt = momentumSGD{lr: cfg.LR, momentum: cfg.Momentum}
	case "adam":
		opt = optimizers.Adam().LearningRate(cfg.LR).Done()
	case "sgd":
		opt = optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(cfg.LR)
	}
	tr, err := dp.New(c, backend, mctx, model, losses.SparseCategoricalCrossEntropyLogits, opt,
		dp.Options{BucketBytes: cfg.BucketBytes, Metrics: []dp.MetricFn{accuracy}, Seed: cfg.Seed})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	eval, err := mlctx.NewExec(backend, mctx.Reuse(), predict(model))
	if err != nil {
		return nil, err
	}
	res := &result{Model: cfg.Model, Optimizer: cfg.Optimizer, Ranks: size, Batch: cfg.Batch, LR: cfg.LR, Seed: cfg.Seed,
		Momentum:     cfg.Momentum,
		TrainSamples: trainSet.len(), TestSamples: testSet.len()}
	points := max(1, min(cfg.Points, steps))
	perm := make([]int, trainSet.len())
	idx := make([]int, local)
	x := tensors.FromShape(inputShape(local))
	y := tensors.FromShape(labelShape(local))
	bar := newProgressBar(progress, cfg.Epochs)
	for epoch := range cfg.Epochs {
		start := time.Now()
		// The same permutation on every rank; the global batch s is
		// perm[s*Batch : (s+1)*Batch] and rank r takes every size-th
		// sample of it, as PyTorch's DistributedSampler, so the union of
		// the local batches is the batch a single rank would train on.
		for i := range perm {
			perm[i] = i
		}
		rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 1<<32+uint64(epoch)))
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		var sum, accSum, epochLoss, epochAcc float64
		n := 0
		for s := range steps {
			for j := range local {
				idx[j] = perm[s*cfg.Batch+j*size+rank]
			}
			if err := fillBatch(x, y, trainSet, idx); err != nil {
				return nil, err
			}
			st, err := tr.TrainStep(ctx, []any{x}, []any{y})
			if err != nil {
				return nil, err
			}
			if epoch == 0 && s == 0 && cfg.FirstStep != nil {
				cfg.FirstStep()
			}
			// The step's loss and accuracy are already averaged over the
			// ranks: every rank records the same curve.
			sum += st.Loss
			accSum += st.Metrics[0]
			n++
			if (s+1)*points/steps != s*points/steps {
				res.Points = append(res.Points, lossPoint{Epoch: float64(epoch) + float64(s+1)/float64(steps), Loss: sum / float64(n)})
				epochLoss += sum
				epochAcc += accSum
				sum, accSum, n = 0, 0, 0
			}
			bar.update(epoch, float64(s+1)/float64(steps), res.Points)
		}
		elapsed := time.Since(start)
		acc, err := evaluate(ctx, c, eval, testSet)
		if err != nil {
			return nil, err
		}
		er := epochResult{Epoch: epoch + 1, TrainLoss: epochLoss / float64(steps), TrainAccuracy: epochAcc / float64(steps),
			TestAccuracy: acc, Seconds: elapsed.Seconds()}
		res.Epochs = append(res.Epochs, er)
		bar.finish(er, res.Points)
	}
	for _, v := range tr.Variables() {
		res.Parameters += v.Shape().Size()
	}
	res.Buckets = tr.Buckets()
	res.Phases = tr.Stats()
	return res, nil
}

const evalBatch = 500

// evaluate returns the accuracy on the test set, each rank scoring a
// contiguous share of it and the counts summed with an allreduce.
func evaluate(ctx context.Context, c *comm.Comm, eval *mlctx.Exec, set *dataset) (float64, error) {
	n := set.len()
	lo, hi := n*c.Rank()/c.Size(), n*(c.Rank()+1)/c.Size()
	correct := 0
	for i := lo; i < hi; i += evalBatch {
		k := min(evalBatch, hi-i)
		idx := make([]int, k)
		for j := range k {
			idx[j] = i + j
		}
		x, y := tensors.FromShape(inputShape(k)), tensors.FromShape(labelShape(k))
		if err := fillBatch(x, y, set, idx); err != nil {
			return 0, err
		}
		out, err := eval.Exec(x)
		if err != nil {
			return 0, fmt.Errorf("evaluation: %w", err)
		}
		err = tensors.ConstFlatData(out[0], func(pred []int32) {
			for j, p := range pred {
				if p == int32(set.labels[idx[j]]) {
					correct++
				}
			}
		})
		out[0].FinalizeAll()
		if err != nil {
			return 0, fmt.Errorf("evaluation: %w", err)
		}
	}
	total := []int64{int64(correct)}
	if err := comm.Allreduce(ctx, c, total, total, comm.Sum); err != nil {
		return 0, fmt.Errorf("allreduce of the test accuracy: %w", err)
	}
	return float64(total[0]) / float64(n), nil
}

// fillBatch writes the images idx of set, normalised with MNIST's mean and
// standard deviation, as the rows of x, and their labels into y.
func fillBatch(x, y *tensors.Tensor, set *dataset, idx []int) error {
	const mean, std = 0.1307, 0.3081
	err := tensors.MutableFlatData(x, func(flat []float32) {
		for j, i := range idx {
			row := flat[j*imageSize : (j+1)*imageSize]
			for k, p := range set.images[i*imageSize : (i+1)*imageSize] {
				row[k] = (float32(p)/255 - mean) / std
			}
		}
	})
	if err != nil {
		return err
	}
	return tensors.MutableFlatData(y, func(flat []int32) {
		for j, i := range idx {
			flat[j] = int32(set.labels[i])
		}
	})
}

// progressBar draws `epoch 1/2 [=====>    ] 45% loss 0.31`: on a
// terminal one line redrawn at most every 100 ms, elsewhere (a pipe, gorun)
// a new line at every recorded loss point.
type progressBar struct {
	w      io.Writer
	tty    bool
	epochs int
	last   time.Time
	shown  int // loss points printed (not on a terminal)
}

func newProgressBar(w io.Writer, epochs int) *progressBar {
	p := &progressBar{w: w, epochs: epochs}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progressBar) update(epoch int, frac float64, points []lossPoint) {
	if p.w == nil || frac >= 1 {
		return
	}
	if p.tty && time.Since(p.last) < 100*time.Millisecond || !p.tty && len(points) == p.shown {
		return
	}
	p.last = time.Now()
	p.shown = len(points)
	loss := "-"
	if len(points) > 0 && points[len(points)-1].Epoch > float64(epoch) {
		loss = fmt.Sprintf("%.4f", points[len(points)-1].Loss)
	}
	end := "\n"
	if p.tty {
		end = ""
	}
	fmt.Fprintf(p.w, "%sepoch %d/%d %s %3.0f%% loss %s%s", p.start(), epoch+1, p.epochs, bar(frac), 100*frac, loss, end)
}

func (p *progressBar) start() string {
	if p.tty {
		return "\r"
	}
	return ""
}

func (p *progressBar) finish(e epochResult, points []lossPoint) {
	if p.w == nil {
		return
	}
	fmt.Fprintf(p.w, "%sepoch %d/%d %s 100%% loss %.4f, training accuracy %.2f%%, test accuracy %.2f%%, %.1fs\n",
		p.start(), e.Epoch, p.epochs, bar(1), e.TrainLoss, 100*e.TrainAccuracy, 100*e.TestAccuracy, e.Seconds)
	p.last = time.Time{}
	p.shown = len(points)
}

// bar is a 30-column progress bar at fraction frac.
func bar(frac float64) string {
	const width = 30
	done := min(width, int(frac*width))
	b := strings.Repeat("=", done)
	if done < width {
		b += ">" + strings.Repeat(" ", width-done-1)
	}
	return "[" + b + "]"
}
