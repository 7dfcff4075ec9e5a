package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSingleRank runs the example in process without a launcher: one rank.
func TestSingleRank(t *testing.T) {
	for _, k := range []string{"GOCCL_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"-count", "1000", "-iters", "2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "verified on every rank") || !strings.Contains(out.String(), "over 1 ranks") {
		t.Fatalf("unexpected output %q", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	for _, args := range [][]string{{"-count", "-1"}, {"-type", "complex"}, {"extra"}, {"-nope"}} {
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestUnderGorun builds gorun and this example and runs real processes:
// 4 ranks over TCP, sizes from 0 elements to 64 MiB, each rank checking
// every element.
func TestUnderGorun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and starts processes; skipped with -short")
	}
	dir := buildBinaries(t)
	cases := []struct {
		n     int
		count int
		typ   string
		extra []string
	}{
		{4, 0, "float32", nil},
		{4, 1, "float32", nil},
		{4, 7, "int32", nil},
		{3, 1000003, "float64", nil},
		{4, 1000003, "int64", []string{"-registered"}},
		{4, 16777216, "float32", []string{"-iters", "2"}},
		{4, 16777216, "float32", []string{"-iters", "2", "-registered"}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("n=%d/count=%d/%s%s", tc.n, tc.count, tc.typ, strings.Join(tc.extra, "")), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			args := append([]string{"-n", fmt.Sprint(tc.n), filepath.Join(dir, "allreduce"), "-count", fmt.Sprint(tc.count), "-type", tc.typ}, tc.extra...)
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), args...)
			cmd.Env = append(os.Environ(), "GOCCL_TRANSPORT=tcp")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("gorun: %v\n%s", err, out)
			}
			want := fmt.Sprintf("allreduce(sum) of %d %s", tc.count, tc.typ)
			if !strings.Contains(string(out), "[0] "+want) || !strings.Contains(string(out), "verified on every rank") {
				t.Fatalf("output lacks %q and the verification:\n%s", want, out)
			}
			t.Logf("%s", bytes.TrimSpace(out))
		})
	}
}

// TestKillOneRank runs 4 processes under gorun in an allreduce loop and
// SIGKILLs one of them at a random moment, 20 times: every survivor must
// fail within 10 s with an error naming the dead rank, and gorun must exit
// non-zero naming it too.
func TestKillOneRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := buildBinaries(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	rounds := 20
	for round := range rounds {
		victim := rng.IntN(4)
		delay := time.Duration(20+rng.IntN(400)) * time.Millisecond
		t.Run(fmt.Sprintf("round=%d/victim=%d/after=%v", round, victim, delay), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-n", "4", filepath.Join(dir, "allreduce"),
				"-count", "65536", "-iters", "100000000", "-v")
			cmd.Env = append(os.Environ(), "GOCCL_TRANSPORT=tcp")
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := waitForPid(t, &out, victim, 30*time.Second)
			time.Sleep(delay)
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
			want := fmt.Sprintf("rank %d failed", victim)
			for r := range 4 {
				if r == victim {
					continue
				}
				if !containsLine(text, fmt.Sprintf("[%d] ", r), want) {
					t.Errorf("rank %d did not report %q:\n%s", r, want, text)
				}
			}
			if !strings.Contains(text, fmt.Sprintf("rank %d", victim)) || !strings.Contains(text, "gorun:") {
				t.Errorf("gorun's summary does not name rank %d:\n%s", victim, text)
			}
		})
	}
}

// buildBinaries builds gorun and this example into a temporary directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/gorun", "./examples/allreduce")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return dir
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

// waitForPid waits for the line "rank R pid P joined" of every rank (so all
// are in the loop) and returns rank victim's pid.
func waitForPid(t *testing.T, out *syncBuffer, victim int, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		text := out.String()
		pids := map[int]int{}
		for _, line := range strings.Split(text, "\n") {
			var r, rr, pid int
			if n, _ := fmt.Sscanf(line, "[%d] rank %d pid %d joined", &r, &rr, &pid); n == 3 {
				pids[rr] = pid
			}
		}
		if len(pids) == 4 {
			return pids[victim]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("ranks did not all join within %v:\n%s", d, out.String())
	return 0
}

func containsLine(text, prefix, substr string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, substr) {
			return true
		}
	}
	return false
}
