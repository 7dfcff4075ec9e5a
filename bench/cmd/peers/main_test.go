package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/bench/peers"
)

func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// Wrong usage exits 2 with one line that says what is wrong and where the
// help is; nothing is built or run.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "no operation given"},
		{[]string{"allreduse"}, `unknown operation "allreduse"`},
		{[]string{"-m", "8:x", "allreduce"}, `-m 8:x: invalid size "x"`},
		{[]string{"-np", "3", "latency"}, "latency runs on exactly 2 ranks"},
		{[]string{"allreduce", "-peers", "mpi-tcp,nccl"}, `unknown peer "nccl"`},
		{[]string{"allreduce", "--"}, `no command after "--"`},
		{[]string{"allreduce", "extra"}, `unexpected argument "extra"`},
		{[]string{"-x", "-1", "allreduce"}, `invalid warm-up count "-1"`},
		{[]string{"-bogus", "allreduce"}, "flag provided but not defined: -bogus"},
		{[]string{"build", "--", "cmd"}, "build takes no command"},
		{[]string{"build", "-peers", "nccl"}, `unknown peer "nccl"`},
	} {
		code, out, stderr := runMain(c.args...)
		if code != 2 || out != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, c.want) || !strings.HasSuffix(stderr, "(peers -h lists the flags)\n") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", c.args, code, out, stderr, c.want)
		}
	}
	code, out, _ := runMain("-h")
	if code != 0 || !strings.HasPrefix(out, "usage: peers") || !strings.Contains(out, "-rounds") {
		t.Errorf("-h: exit %d:\n%s", code, out)
	}
}

func TestParseArgs(t *testing.T) {
	o, err := parseArgs([]string{"-np", "4", "allreduce", "-m", "1K:64M", "-i", "20", "-rounds", "5", "-peers", "gloo-tcp", "--", "sh", "-c", "x"})
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg
	if c.Op != "allreduce" || c.NP != 4 || c.Min != 1024 || c.Max != 64<<20 || c.Iters != 20 || c.Warmup != 3 ||
		c.Rounds != 5 || strings.Join(c.Peers, ",") != "gloo-tcp" || strings.Join(o.command, " ") != "sh -c x" {
		t.Errorf("parsed %+v, command %q", c, o.command)
	}
	o, err = parseArgs([]string{"latency"})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.cfg; c.Min != 8 || c.Max != 4<<20 || c.Iters != 100 || c.Warmup != 11 || c.Rounds != 3 ||
		strings.Join(c.Peers, ",") != "mpi-tcp,gloo-tcp" || o.command != nil || c.Method != "osu" {
		t.Errorf("defaults %+v", c)
	}
	// goccl runs over the peers' transport unless told otherwise (it ran
	// over shared memory against their TCP).
	for _, tc := range []struct{ args, want string }{
		{"allreduce", "tcp"},
		{"-peers mpi-tcp,gloo-tcp allreduce", "tcp"},
		{"-peers mpi-shm allreduce", "shm"},
		{"-peers mpi-shm,gloo-tcp allreduce", ""},
		{"-peers mpi-shm -transport tcp allreduce", "tcp"},
		{"allreduce -- sh -c x", ""},
	} {
		o, err := parseArgs(strings.Fields(tc.args))
		if err != nil {
			t.Errorf("%s: %v", tc.args, err)
		} else if o.cfg.Transport != tc.want {
			t.Errorf("%s: transport %q, want %q", tc.args, o.cfg.Transport, tc.want)
		}
	}
	o, err = parseArgs([]string{"-method", "b2b", "bcast"})
	if err != nil || o.cfg.Method != "b2b" || !strings.Contains(title(&o.cfg, ""), "timed back to back") {
		t.Errorf("-method b2b: %+v, %v", o, err)
	}
	if _, err := parseArgs([]string{"-method", "nccl", "bcast"}); err == nil || !strings.Contains(err.Error(), `unknown timing method "nccl"`) {
		t.Errorf("-method nccl: err %v", err)
	}
}

// The default goccl command is built from the module in the current
// directory; elsewhere the harness says what to do instead.
func TestBuildGocclOutsideTheRepository(t *testing.T) {
	err := buildGoccl(context.Background(), io.Discard) // the test runs in bench/cmd/peers
	if err == nil || !strings.Contains(err.Error(), "repository root") {
		t.Errorf("err %v", err)
	}
}

// The harness end to end at tiny sizes: the drivers as installed, goccl's
// gorun and osu built from this module, every peer, two rounds.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts gorun, mpirun and Gloo; skipped with -short")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not installed (bin/peers build installs openmpi-bin, libopenmpi-dev, libgloo-dev)")
	}
	if _, err := peers.Build(context.Background(), peers.BuildOptions{}); errors.Is(err, peers.ErrMissing) {
		t.Skipf("peers not installed (bin/peers build installs them): %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/gorun", "./bench/cmd/osu")
	build.Dir = filepath.Join("..", "..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"-no-install", "-m", "4:32", "-i", "3", "-x", "1", "-rounds", "2", "-peers", "mpi-tcp,mpi-shm,gloo-tcp",
		"-markdown", "-steady", "0", "allreduce", "--",
		filepath.Join(dir, "gorun"), "-n", "2", filepath.Join(dir, "osu"), "allreduce", "-m", "4:32", "-i", "3", "-x", "1", "-T", "float32"},
		&out, &errb)
	if code != 0 {
		t.Fatalf("exit %d:\n%s\n%s", code, out.String(), errb.String())
	}
	text := out.String()
	t.Logf("\n%s\n%s", text, errb.String())
	if !strings.Contains(text, "# bytes          goccl_us     mpi-tcp_us    ratio     mpi-shm_us    ratio    gloo-tcp_us    ratio\n") {
		t.Errorf("no header")
	}
	for _, size := range []string{"4 ", "8 ", "16 ", "32 "} {
		found := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, size) {
				found = true
				if f := strings.Fields(line); len(f) != 8 || strings.Contains(line, " -") {
					t.Errorf("row %q: want a time and a ratio for every peer", line)
				}
			}
		}
		if !found {
			t.Errorf("no row for %sbytes", size)
		}
	}
	if !strings.Contains(text, "| bytes | goccl (µs) | Open MPI TCP (µs) | ratio | Open MPI shm (µs) | ratio | Gloo TCP (µs) | ratio |") {
		t.Errorf("no markdown table")
	}
	// -steady 0: the host's state is sampled and reported, no round
	// runs again.
	if n := strings.Count(errb.String(), "peers: round "); n != 8 {
		t.Errorf("%d runs logged, want 2 rounds x 4 programs", n)
	}
	if _, err := peers.HostProbe(); err == nil && !strings.Contains(text, "# host: cache-line round trip between the ranks' first two CPUs") {
		t.Errorf("no note on the host's state")
	}
}

// The notes on the host's state: the range over the rounds kept, the
// rounds run again, and those kept in mixed states.
func TestStateNotes(t *testing.T) {
	if n := stateNotes(nil, peers.SteadySpread); n != nil {
		t.Errorf("notes without a probe: %q", n)
	}
	got := stateNotes([]peers.RoundState{
		{Min: 130 * time.Nanosecond, Max: 160 * time.Nanosecond, Tries: 1},
		{Min: 520 * time.Nanosecond, Max: 580 * time.Nanosecond, Tries: 2},
		{Min: 140 * time.Nanosecond, Max: 590 * time.Nanosecond, Tries: 4},
	}, peers.SteadySpread)
	want := []string{
		"host: cache-line round trip between the ranks' first two CPUs, sampled around every run: 130ns to 590ns; rounds run again because it changed during them: 2 of 3",
		"rounds kept with runs in different host states (their small sizes compare unlike machines): 3 (140ns to 590ns)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("notes\n%q\nwant\n%q", got, want)
	}
}
