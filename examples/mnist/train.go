package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/examples/ddp"
)

// config is what a training run needs besides the data and communicator.
type config struct {
	Dims        []int
	Epochs      int
	Batch       int // global batch, split evenly over the ranks
	LR          float64
	Momentum    float64
	BucketBytes int
	Seed        uint64
	Points      int // training-loss points recorded per epoch
}

// result is a finished run, as written by -json and read by -compare.
type result struct {
	Ranks        int           `json:"ranks"`
	Batch        int           `json:"batch"`
	LR           float64       `json:"lr"`
	Momentum     float64       `json:"momentum"`
	BucketBytes  int           `json:"bucket_bytes"`
	Buckets      int           `json:"buckets"`
	Seed         uint64        `json:"seed"`
	TrainSamples int           `json:"train_samples"`
	TestSamples  int           `json:"test_samples"`
	Points       []lossPoint   `json:"points"`
	Epochs       []epochResult `json:"epochs"`
	// Communication of gradients, rank 0's view, in seconds.
	CommSeconds       float64 `json:"comm_seconds"`
	BlockedSeconds    float64 `json:"blocked_seconds"`
	OverlappedSeconds float64 `json:"overlapped_seconds"`
}

// lossPoint is the training loss averaged over the global batches since
// the previous point, at a fractional epoch.
type lossPoint struct {
	Epoch float64 `json:"epoch"`
	Loss  float64 `json:"loss"`
}

type epochResult struct {
	Epoch        int     `json:"epoch"`
	TrainLoss    float64 `json:"train_loss"`
	TestAccuracy float64 `json:"test_accuracy"`
	Seconds      float64 `json:"seconds"` // training, without the evaluation
}

// train trains an MLP data-parallel over c: every rank runs it with the
// same cfg and data. Rank 0 draws the progress bar on progress (nil: none).
func train(ctx context.Context, c *comm.Comm, cfg config, trainSet, testSet *dataset, progress io.Writer) (*result, error) {
	size, rank := c.Size(), c.Rank()
	if cfg.Batch%size != 0 {
		return nil, fmt.Errorf("global batch %d is not a multiple of %d ranks", cfg.Batch, size)
	}
	local := cfg.Batch / size
	steps := trainSet.len() / cfg.Batch
	if steps == 0 {
		return nil, fmt.Errorf("%d training samples make no batch of %d", trainSet.len(), cfg.Batch)
	}
	d, err := ddp.New(c, paramSizes(cfg.Dims), ddp.Options{BucketBytes: cfg.BucketBytes})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	m := newMLP(cfg.Dims, d, max(local, evalBatch))
	// Only rank 0's initial parameters matter: the broadcast overwrites the
	// others, which start from a different seed to prove it.
	m.init(rand.New(rand.NewPCG(cfg.Seed, uint64(rank))))
	if err := d.BroadcastParams(ctx); err != nil {
		return nil, err
	}
	opt := &sgd{lr: float32(cfg.LR), momentum: float32(cfg.Momentum)}
	res := &result{Ranks: size, Batch: cfg.Batch, LR: cfg.LR, Momentum: cfg.Momentum, BucketBytes: cfg.BucketBytes,
		Buckets: len(d.Buckets()), Seed: cfg.Seed, TrainSamples: trainSet.len(), TestSamples: testSet.len()}
	points := max(1, min(cfg.Points, steps))
	perm := make([]int, trainSet.len())
	idx := make([]int, local)
	labels := make([]uint8, local)
	red := make([]float64, 2)
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
		rng := rand.New(rand.NewPCG(cfg.Seed, 1<<32+uint64(epoch)))
		rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
		var sum, epochSum float64
		n := 0
		for s := range steps {
			for j := range local {
				idx[j] = perm[s*cfg.Batch+j*size+rank]
			}
			fillBatch(m.input(local), labels, trainSet, idx)
			m.forward(local)
			sum += m.loss(local, labels)
			n++
			if err := m.backward(local, labels); err != nil {
				return nil, err
			}
			if err := d.Wait(ctx); err != nil {
				return nil, err
			}
			opt.step(d.Params(), d.Grads())
			// Record a point of the loss curve: the mean over ranks of the
			// local mean losses is the mean over the global batches.
			if (s+1)*points/steps != s*points/steps {
				red[0], red[1] = sum, float64(n)
				if err := comm.Allreduce(ctx, c, red, red, comm.Avg); err != nil {
					return nil, fmt.Errorf("allreduce of the loss: %w", err)
				}
				res.Points = append(res.Points, lossPoint{Epoch: float64(epoch) + float64(s+1)/float64(steps), Loss: red[0] / red[1]})
				epochSum += red[0]
				sum, n = 0, 0
			}
			bar.update(epoch, float64(s+1)/float64(steps), res.Points)
		}
		elapsed := time.Since(start)
		acc, err := evaluate(ctx, c, m, testSet)
		if err != nil {
			return nil, err
		}
		er := epochResult{Epoch: epoch + 1, TrainLoss: epochSum / float64(steps), TestAccuracy: acc, Seconds: elapsed.Seconds()}
		res.Epochs = append(res.Epochs, er)
		bar.finish(er, res.Points)
	}
	st := d.Stats()
	res.CommSeconds, res.BlockedSeconds, res.OverlappedSeconds = st.Comm.Seconds(), st.Blocked.Seconds(), st.Overlapped().Seconds()
	return res, nil
}

const evalBatch = 500

// evaluate returns the accuracy on the test set, each rank scoring a
// contiguous share of it.
func evaluate(ctx context.Context, c *comm.Comm, m *mlp, set *dataset) (float64, error) {
	n := set.len()
	lo, hi := n*c.Rank()/c.Size(), n*(c.Rank()+1)/c.Size()
	idx := make([]int, evalBatch)
	labels := make([]uint8, evalBatch)
	correct := 0
	for i := lo; i < hi; i += evalBatch {
		k := min(evalBatch, hi-i)
		for j := range k {
			idx[j] = i + j
		}
		fillBatch(m.input(k), labels[:k], set, idx[:k])
		m.forward(k)
		correct += m.correct(k, labels[:k])
	}
	total := []int64{int64(correct)}
	if err := comm.Allreduce(ctx, c, total, total, comm.Sum); err != nil {
		return 0, fmt.Errorf("allreduce of the test accuracy: %w", err)
	}
	return float64(total[0]) / float64(n), nil
}

// fillBatch writes the images idx of set, normalised with MNIST's mean and
// standard deviation, as the rows of x, and their labels.
func fillBatch(x []float32, labels []uint8, set *dataset, idx []int) {
	const mean, std = 0.1307, 0.3081
	for j, i := range idx {
		row := x[j*imageSize : (j+1)*imageSize]
		for k, p := range set.images[i*imageSize : (i+1)*imageSize] {
			row[k] = (float32(p)/255 - mean) / std
		}
		labels[j] = set.labels[i]
	}
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
	fmt.Fprintf(p.w, "%sepoch %d/%d %s 100%% loss %.4f, test accuracy %.2f%%, %.1fs\n",
		p.start(), e.Epoch, p.epochs, bar(1), e.TrainLoss, 100*e.TestAccuracy, e.Seconds)
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
