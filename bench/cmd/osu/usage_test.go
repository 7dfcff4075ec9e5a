package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A bad option prints one line that names it and where the help is, not
// the whole option list (issue 11, item 20).
func TestUsageErrorIsOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"osu", "allreduce", "-q"},
		{"osu", "allreduce", "-m", "x"},
		{"osu_bcast", "--iterations"},
		{"osu", "allreduse"},
	} {
		code, out, stderr := runMain(args...)
		if code != 2 || out != "" {
			t.Errorf("%q: exit %d, stdout %q; want 2 and nothing", args, code, out)
		}
		if strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "Options:") {
			t.Errorf("%q: stderr is not one line:\n%s", args, stderr)
		}
		if !strings.Contains(stderr, " -h lists the options") && !strings.Contains(stderr, " list names them") {
			t.Errorf("%q: stderr does not say where the help is: %q", args, stderr)
		}
	}
	code, out, _ := runMain("osu", "allreduce", "-h")
	if code != 0 || !strings.Contains(out, "Options:") {
		t.Errorf("-h: exit %d, no option list:\n%s", code, out)
	}
}

// Under a launcher a rank other than 0 holds its usage error back for
// otherRankWait (the launcher stops it once rank 0 has failed), and says
// it only if it is still running then; rank 0 says it at once.
func TestUsageErrorWaitsOnOtherRanks(t *testing.T) {
	oldRank, oldWait := rankFromEnv, otherRankWait
	t.Cleanup(func() { rankFromEnv, otherRankWait = oldRank, oldWait })
	otherRankWait = 200 * time.Millisecond
	for _, rank := range []int{0, 1} {
		rankFromEnv = func() (int, bool) { return rank, true }
		t0 := time.Now()
		code, _, stderr := runMain("osu", "allreduce", "-q")
		took := time.Since(t0)
		if code != 2 || !strings.Contains(stderr, "unknown option -q") {
			t.Errorf("rank %d: exit %d, stderr %q", rank, code, stderr)
		}
		if waited := took >= otherRankWait; waited != (rank != 0) {
			t.Errorf("rank %d: answered after %v (wait %v)", rank, took, otherRankWait)
		}
	}
}

// The same under gorun, as a user meets it: one line, from rank 0.
func TestUsageErrorUnderGorun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gorun and osu and starts processes; skipped with -short")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/gorun", "./bench/cmd/osu")
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-n", "3", filepath.Join(dir, "osu"), "allreduce", "-q")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("gorun: %v, want exit status 2:\n%s", err, out)
	}
	text := string(out)
	if strings.Count(text, "unknown option -q") != 1 || !strings.Contains(text, "[0] osu allreduce: unknown option -q (osu allreduce -h lists the options)") {
		t.Errorf("want the error once, from rank 0:\n%s", text)
	}
	if strings.Contains(text, "Usage:") || strings.Contains(text, "--message-size") {
		t.Errorf("usage printed on a bad option:\n%s", text)
	}
}
