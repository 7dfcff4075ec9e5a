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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"allreduce", "-q"}, "osu allreduce: unknown option -q (osu allreduce -h lists the options)"},
		// Found once the ranks know the type and their number: an empty
		// table with exit status 0 before.
		{[]string{"allreduce", "-m", "1:4", "-T", "float64"},
			"osu allreduce: no message size from 1 to 4 bytes (-m) holds one float64 element (8 bytes)\n"},
		{[]string{"reduce_scatter", "-m", "8:16", "-T", "float64"},
			"osu reduce_scatter: no message size from 8 to 16 bytes (-m) holds one float64 element (8 bytes) for each of the 3 ranks (24 bytes)\n"},
		// "osu latency: rank 2: osu: latency: this test requires ...", exit 1.
		{[]string{"latency"}, "osu latency: this test requires exactly two processes, got 3\n"},
		{[]string{"bcast", "-k", "5"}, "osu bcast: root rank 5 (-k) is not below the number of processes 3\n"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		// A grace period longer than the other ranks' wait (otherRankWait):
		// they must end on gorun's SIGTERM, not wait it out (3.5 s a
		// usage error with gorun's default grace, before).
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), append([]string{"-n", "3", "--grace", "30s", filepath.Join(dir, "osu")}, tc.args...)...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		cancel()
		if took >= otherRankWait {
			t.Errorf("gorun osu %q took %v: the other ranks waited out their %v instead of ending on SIGTERM", tc.args, took.Round(time.Millisecond), otherRankWait)
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("gorun osu %q: %v, want exit status 2:\n%s", tc.args, err, out)
			continue
		}
		text := string(out)
		if strings.Count(text, "] osu ") != 1 || !strings.Contains(text, "[0] "+tc.want) {
			t.Errorf("gorun osu %q: want %q once, from rank 0:\n%s", tc.args, tc.want, text)
		}
		if strings.Contains(text, "Usage:") || strings.Contains(text, "--message-size") || strings.Contains(text, "# Size") {
			t.Errorf("gorun osu %q: usage or a table printed on a bad option:\n%s", tc.args, text)
		}
	}
}
