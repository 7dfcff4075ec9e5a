package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccl/goccl/bench/osu"
)

func runMain(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"osu"}, 2, "Usage: osu BENCHMARK"},
		{[]string{"osu", "allreduse"}, 2, `unknown benchmark "allreduse"`},
		{[]string{"osu", "allreduce", "-m", "x"}, 2, `invalid message size "x"`},
		{[]string{"osu", "allreduce", "-q"}, 2, "unknown option -q"},
		{[]string{"/usr/bin/osu_bcast", "--iterations"}, 2, "option --iterations needs a value"},
		{[]string{"osu", "plot"}, 2, "Usage: osu plot"},
		{[]string{"osu", "allreduce", "--algorithm", "nope"}, 2, `allreduce has no algorithm "nope"`},
	} {
		code, _, stderr := runMain(c.args...)
		if code != c.code || !strings.Contains(stderr, c.stderr) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.stderr)
		}
	}
}

// A benchmark whose collective comm lacks fails before joining the job.
func TestNotYetSupported(t *testing.T) {
	osu.Benchmarks = append(osu.Benchmarks, &osu.Benchmark{Name: "future", OSU: "osu_future", Title: "Future Latency Test", Coll: "future"})
	defer func() { osu.Benchmarks = osu.Benchmarks[:len(osu.Benchmarks)-1] }()
	for _, args := range [][]string{{"osu", "future"}, {"osu", "osu_future", "-c"}, {"bin/osu_future"}} {
		code, out, stderr := runMain(args...)
		if code != 1 || out != "" || !strings.Contains(stderr, "not yet supported") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and not yet supported", args, code, out, stderr)
		}
	}
}

func TestListAndHelp(t *testing.T) {
	code, out, _ := runMain("osu", "list")
	if code != 0 || !strings.Contains(out, "osu_allreduce") || !strings.Contains(out, "reduce_scatter") {
		t.Errorf("list: exit %d:\n%s", code, out)
	}
	code, out, _ = runMain("osu_allreduce", "-h")
	if code != 0 || !strings.HasPrefix(out, "Usage: osu_allreduce [options]") || !strings.Contains(out, "--message-size") {
		t.Errorf("help: exit %d:\n%s", code, out)
	}
}

// Started without a launcher the program is one rank, and OSU's
// collective tests need two.
func TestSingleRank(t *testing.T) {
	t.Setenv("GOCCL_TRANSPORT", "tcp")
	code, out, stderr := runMain("osu", "allreduce", "-m", "8:8", "-i", "1")
	if code != 2 || stderr != "osu allreduce: this test requires at least two processes, got 1\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestPlot(t *testing.T) {
	png := filepath.Join(t.TempDir(), "out.png")
	code, out, stderr := runMain("osu", "plot", "-o", png, "-title", "allreduce np=2", "testdata/tcp.json", "testdata/tcp.json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "wrote "+png) {
		t.Errorf("stdout %q", out)
	}
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 10000 {
		t.Errorf("not a PNG image, or an empty one: %d bytes", len(b))
	}
	code, _, stderr = runMain("osu", "plot", "-o", png, "testdata/missing.json")
	if code != 1 || !strings.Contains(stderr, "missing.json") {
		t.Errorf("missing file: exit %d, %s", code, stderr)
	}
}
