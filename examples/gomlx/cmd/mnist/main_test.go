package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rankEnv makes the test binary run the command instead of the tests: the
// kill test starts it as the ranks under gorun.
const rankEnv = "GOMLX_MNIST_TEST_RANK"

func TestMain(m *testing.M) {
	if os.Getenv(rankEnv) == "1" {
		// gorun stops the other ranks 250 ms after one dies (SIGTERM,
		// then SIGKILL after --grace): ignoring SIGTERM lets the test see
		// a survivor fail by itself, as it must, rather than be stopped.
		signal.Ignore(syscall.SIGTERM)
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// dataDir finds the GoMNIST module's data in the module cache with the go
// command, and checks that the program's default points at the same
// version.
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
	train, test, err := loadMNIST(dir, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if train.len() != 100 || len(train.images) != 100*imageSize || test.len() != 10000 {
		t.Errorf("-train-n 100: %d training images (%d bytes), %d test images", train.len(), len(train.images), test.len())
	}
}

func singleRank(t *testing.T) {
	t.Helper()
	for _, kv := range []string{"GOCCL_RANK", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"} {
		if _, ok := os.LookupEnv(kv); ok {
			t.Skipf("%s is set: the test runs the command as a single rank", kv)
		}
	}
}

// TestRun trains each model on one rank on a small subset, then plots the
// JSON output of both.
func TestRun(t *testing.T) {
	singleRank(t)
	dir, err := dataDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var jsons []string
	// The CNN is slow on simplego (and very slow under -race): 3 steps.
	for _, tc := range []struct {
		model string
		steps int
	}{{"mlp", 10}, {"cnn", 3}} {
		model := tc.model
		js := filepath.Join(tmp, model+".json")
		var stdout, stderr bytes.Buffer
		code := run(ctx, []string{"-data", dir, "-simplego", "ops_sequential", "-model", model, "-epochs", "1",
			"-train-n", fmt.Sprint(32 * tc.steps), "-test-n", "50", "-batch", "32", "-json", js}, &stdout, &stderr)
		if code != 0 {
			t.Fatalf("-model %s: exit %d; stderr:\n%s", model, code, &stderr)
		}
		for _, want := range []string{"test accuracy", "time per epoch", "gradient execution"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("-model %s: stdout lacks %q:\n%s", model, want, &stdout)
			}
		}
		if !strings.Contains(stderr.String(), "epoch 1/1 [") || !strings.Contains(stderr.String(), "100% loss") {
			t.Errorf("-model %s: stderr has no progress bar:\n%s", model, &stderr)
		}
		var res result
		if b, err := os.ReadFile(js); err != nil {
			t.Fatal(err)
		} else if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		if res.Ranks != 1 || len(res.Epochs) != 1 || len(res.Points) != tc.steps || res.TrainSamples != 32*tc.steps || res.Phases.Steps != tc.steps {
			t.Errorf("-model %s: JSON: %+v", model, res)
		}
		if first, last := res.Points[0].Loss, res.Points[len(res.Points)-1].Loss; !(last < first) {
			t.Errorf("-model %s: loss went from %.4f to %.4f: not learning", model, first, last)
		}
		jsons = append(jsons, js)
	}
	out := filepath.Join(tmp, "curve.png")
	var stdout, stderr bytes.Buffer
	if code := run(ctx, append([]string{"-plot", out}, jsons...), &stdout, &stderr); code != 0 {
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
		{"-model", "rnn"},
		{"-optimizer", "rmsprop"},
		{"-momentum", "1"},
		{"-bucket-kb", "0"},
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
	// Fewer training images than a batch: a usage error before Init, as in
	// goccl's examples/mnist. Before, it came from train, after Init: every
	// rank aborted the job over it and exited 1. In a 2-rank job's
	// environment, so that an Init would wait for a rank that never comes.
	dir, err := dataDir()
	if err != nil {
		t.Skipf("no MNIST data: %v", err)
	}
	t.Setenv("GOCCL_RANK", "0")
	t.Setenv("GOCCL_SIZE", "2")
	t.Setenv("GOCCL_BOOTSTRAP", "127.0.0.1:1")
	stderr.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if code := run(ctx, []string{"-data", dir, "-train-n", "10", "-test-n", "5"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "10 training images make no batch of 64") {
		t.Errorf("-train-n 10: exit %d, want 2 before Init; stderr: %s", code, &stderr)
	}
}

// TestKillRank trains on 2 processes under gorun and SIGKILLs one of them
// once both have trained a step: the other must fail within 10 s with
// goccl's error naming the dead rank (not hang), and gorun must exit
// non-zero. The ranks ignore the SIGTERM with which gorun stops a job
// (and gorun waits 30 s before its SIGKILL), so the survivor's failure is
// its own. Rank 0 is the victim too: it hosts the bootstrap store.
func TestKillRank(t *testing.T) {
	singleRank(t)
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir, err := dataDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/gorun")
	build.Dir = filepath.Join("..", "..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building gorun: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, victim := range []int{1, 0} {
		t.Run(fmt.Sprintf("victim=%d", victim), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "gorun"), "-n", "2", "--grace", "30s", self, "-v", "-data", dir,
				"-train-n", "3200", "-test-n", "100", "-epochs", "1000", "-batch", "32", "-simplego", "ops_sequential")
			cmd.Env = append(os.Environ(), rankEnv+"=1", "GOCCL_TRANSPORT=tcp")
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			pid := waitForPids(t, &out, victim, 40*time.Second)
			time.Sleep(200 * time.Millisecond)
			killed := time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill rank %d (pid %d): %v", victim, pid, err)
			}
			err := cmd.Wait()
			elapsed := time.Since(killed)
			text := out.String()
			if err == nil {
				t.Fatalf("gorun exited 0 after rank %d was killed:\n%s", victim, text)
			}
			if elapsed > 10*time.Second {
				t.Errorf("gorun took %v to exit after the kill", elapsed)
			}
			// The survivor's error is goccl's, from the collective
			// of the step, naming the link to the dead rank (or the
			// rank, when goccl learned of its failure another way).
			survivor := 1 - victim
			names := regexp.MustCompile(fmt.Sprintf(`rank %d (->|<->) %d: |rank %d failed`, survivor, victim, victim))
			// Mostly "mnist: dp: rank S: step N: ...", from TrainStep;
			// "mnist: allreduce of the test accuracy: ..." if the kill
			// fell in an evaluation.
			if !containsLine(text, fmt.Sprintf("[%d] mnist: ", survivor), names) {
				t.Errorf("rank %d did not fail with an error matching %q:\n%s", survivor, names, text)
			}
			t.Logf("gorun exited %v after the kill", elapsed.Round(time.Millisecond))
		})
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitForPids waits until both ranks have said they trained a step (-v)
// and returns rank victim's pid.
func waitForPids(t *testing.T, out *syncBuffer, victim int, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		pids := map[int]int{}
		for _, line := range strings.Split(out.String(), "\n") {
			var r, rr, pid int
			if n, _ := fmt.Sscanf(line, "[%d] rank %d pid %d trained its first step", &r, &rr, &pid); n == 3 {
				pids[rr] = pid
			}
		}
		if len(pids) == 2 {
			return pids[victim]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the ranks did not both train a step within %v:\n%s", d, out.String())
	return 0
}

func containsLine(text, prefix string, re *regexp.Regexp) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) && re.MatchString(line) {
			return true
		}
	}
	return false
}
