package peers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMissingPackages(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("no dpkg-query: not Debian")
	}
	if got := missingPackages([]string{"goccl-no-such-package", "dpkg"}); !reflect.DeepEqual(got, []string{"goccl-no-such-package"}) {
		t.Errorf("missing %v, want only the package that does not exist", got)
	}
}

func TestFreshLists(t *testing.T) {
	dir := t.TempDir()
	if freshLists(dir, time.Hour) {
		t.Error("fresh lists in an empty directory")
	}
	list := filepath.Join(dir, "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages")
	if err := os.WriteFile(list, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !freshLists(dir, time.Hour) {
		t.Error("a list written now is not fresh")
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(list, old, old)
	if freshLists(dir, 24*time.Hour) {
		t.Error("a list of two days ago is fresh")
	}
}

func TestBuildUnknownPeer(t *testing.T) {
	if _, err := Build(context.Background(), BuildOptions{Dir: t.TempDir(), Peers: []string{"nccl"}}); err == nil {
		t.Error("built the drivers of an unknown peer")
	}
}

// buildOrSkip builds the drivers where they are installed, without
// installing anything; a test skips, saying what is missing, otherwise.
func buildOrSkip(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles the drivers and starts mpirun and Gloo; skipped with -short")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not installed (bin/peers build installs openmpi-bin, libopenmpi-dev, libgloo-dev)")
	}
	dir, err := Build(context.Background(), BuildOptions{Install: false})
	if errors.Is(err, ErrMissing) {
		t.Skipf("peers not installed (bin/peers build installs them): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// runPeer validates c and runs peer's driver on it, failing t on an error.
func runPeer(t *testing.T, dir, peer string, c *Config) []byte {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := PeerProgram(PeerNamed(peer), dir, c).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every driver times every operation it claims, and prints exactly the
// sizes the harness expects: 3 ranks for the collectives (Gloo's
// reduce-scatter at a rank count that is not a power of 2), 2 for latency.
func TestDriversEveryOp(t *testing.T) {
	dir := buildOrSkip(t)
	for _, peer := range []string{"mpi-tcp", "gloo-tcp"} {
		for i, op := range Ops {
			// Every other operation timed back to back: the drivers take
			// the method, and time both ways with the same rows.
			method := []string{MethodOSU, MethodB2B}[i%2]
			t.Run(peer+"/"+op+"/"+method, func(t *testing.T) {
				c := Config{Op: op, NP: 3, Min: 1, Max: 256, Iters: 3, Warmup: 1, Rounds: 1, Peers: []string{peer}, Method: method}
				if op == "latency" {
					c.NP = 2
				}
				out := runPeer(t, dir, peer, &c)
				if !strings.Contains(string(out), " timing="+method) {
					t.Errorf("the driver's header does not say timing=%s:\n%s", method, out)
				}
				rows, _ := ParseRows(out)
				var sizes []int
				for _, s := range Sizes(op, c.NP, c.Min, c.Max) {
					if _, ok := rows[s]; !ok {
						t.Errorf("no row for %d bytes", s)
					}
					sizes = append(sizes, s)
				}
				if len(rows) != len(sizes) {
					t.Errorf("rows %v, want sizes %v", rows, sizes)
				}
				t.Logf("%s", fmt.Sprint(rows))
			})
		}
	}
}

// Every Gloo allreduce the harness offers runs and prints its rows.
func TestGlooAllreduceAlgorithms(t *testing.T) {
	dir := buildOrSkip(t)
	for _, algo := range []string{"ring_chunked", "ring", "halving_doubling", "torch"} {
		t.Run(algo, func(t *testing.T) {
			c := Config{Op: "allreduce", NP: 3, Min: 4, Max: 4096, Iters: 3, Warmup: 1, Rounds: 1, Peers: []string{"gloo-tcp"}, Method: MethodOSU, GlooAlgo: algo}
			out := runPeer(t, dir, "gloo-tcp", &c)
			if !strings.Contains(string(out), "allreduce="+algo) {
				t.Errorf("the header does not name allreduce=%s:\n%s", algo, out)
			}
			rows, _ := ParseRows(out)
			for _, s := range Sizes("allreduce", c.NP, c.Min, c.Max) {
				if _, ok := rows[s]; !ok {
					t.Errorf("no row for %d bytes:\n%s", s, out)
				}
			}
		})
	}
}

// Gloo's ping-pong after small messages runs at the wire's pace: its
// driver's barrier once sent bound buffers, for which Gloo sets and locks
// the pair's SO_SNDBUF to the message (4.6 KB for the barrier's), never
// resized for the unbound buffers of the ping-pong; from 64 KiB on each
// message then waited for delayed acknowledgements (80 ms a one-way
// trip at 128 KiB, 0.4 s at 1 MiB, against tens of microseconds).
func TestGlooLatencyLargeAfterSmall(t *testing.T) {
	dir := buildOrSkip(t)
	c := Config{Op: "latency", NP: 2, Min: 8, Max: 256 << 10, Iters: 5, Warmup: 1, Rounds: 1, Peers: []string{"gloo-tcp"}, Method: MethodOSU}
	out := runPeer(t, dir, "gloo-tcp", &c)
	rows, _ := ParseRows(out)
	for _, size := range []int{64 << 10, 128 << 10, 256 << 10} {
		us, ok := rows[size]
		if !ok {
			t.Fatalf("no row for %d bytes:\n%s", size, out)
		}
		// A stalled trip is 40 ms; a loaded host moves 256 KiB in a few.
		if us > 20000 {
			t.Errorf("%d bytes: %.0f us one way, a delayed acknowledgement's stall:\n%s", size, us, out)
		}
	}
}
