package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	dir := t.TempDir()
	root := filepath.Join("..", "..")
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/gorun", "./examples/allreduce")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
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
