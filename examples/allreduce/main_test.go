package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	if !strings.Contains(out.String(), "verified on every rank") || !strings.Contains(out.String(), "over 1 rank via") {
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
	// The type is checked before Init (which waits for the other ranks),
	// and the message lists the types.
	errb.Reset()
	t.Setenv("GOCCL_RANK", "0")
	t.Setenv("GOCCL_SIZE", "2")
	t.Setenv("GOCCL_BOOTSTRAP", "127.0.0.1:1")
	if code := run(context.Background(), []string{"-type", "float16"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "want float32, float64, int32 or int64") {
		t.Errorf("-type float16 in a 2-rank job: exit %d, stderr %q; want 2 and the types, before Init", code, errb.String())
	}
	// So is a buffer larger than the host's memory: before, make ended
	// the program with the runtime's out-of-memory crash (a helper's
	// hunt, -count 100000000000).
	errb.Reset()
	if code := run(context.Background(), []string{"-count", "100000000000000", "-type", "float64"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "more than this host's") {
		t.Errorf("-count past the host's memory: exit %d, stderr %q; want 2 and the memory named, before Init", code, errb.String())
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

// TestREADMEMainJob runs the README's first command as a newcomer does
// (no GOCCL_TRANSPORT) and checks that every line the README says it
// prints is among the lines it prints, "..." standing for anything: the
// README showed TCP after the default became shared memory on one host.
func TestREADMEMainJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and starts processes; skipped with -short")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const intro = "The first command prints"
	text := string(readme)
	i := strings.Index(text, intro)
	if i < 0 {
		t.Fatalf("README.md has no %q", intro)
	}
	block := text[i:]
	start := strings.Index(block, "```\n")
	end := strings.Index(block[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatalf("no output block after %q in README.md", intro)
	}
	quoted := strings.Split(strings.TrimSpace(block[start+4:start+4+end]), "\n")
	cmdLine := "bin/gorun -n 4 bin/allreduce -count 16777216"
	if !strings.Contains(text, cmdLine) {
		t.Fatalf("README.md no longer runs %q", cmdLine)
	}
	dir := buildBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-n", "4", filepath.Join(dir, "allreduce"), "-count", "16777216")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOCCL_TRANSPORT=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, q := range quoted {
		re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(q), regexp.QuoteMeta("..."), ".*") + "$")
		if !slices.ContainsFunc(lines, re.MatchString) {
			t.Errorf("README.md says the main job prints\n\t%s\nbut it printed:\n%s", q, out)
		}
	}
}

// TestKillOneRank runs 4 processes under gorun in an allreduce loop and
// SIGKILLs one of them at a random moment, 8 times (GOCCL_TEST_TRIALS:
// that many), half over shared memory and half over TCP: every survivor must fail within 10 s with an
// error naming the dead rank, gorun must exit non-zero naming it too, and
// nothing may be left in /dev/shm (the shared-memory transport's segments
// are memfds, unlinked from the start, so they die with their processes).
func TestKillOneRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := buildBinaries(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range trials(t, 8) {
		victim := rng.IntN(4)
		delay := time.Duration(20+rng.IntN(400)) * time.Millisecond
		transport := []string{"shm", "tcp"}[round%2]
		t.Run(fmt.Sprintf("round=%d/%s/victim=%d/after=%v", round, transport, victim, delay), func(t *testing.T) {
			before := devShm(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-n", "4", filepath.Join(dir, "allreduce"),
				"-count", "65536", "-iters", "100000000", "-v")
			cmd.Env = append(os.Environ(), "GOCCL_TRANSPORT="+transport)
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
			if left := newEntries(before, devShm(t)); len(left) > 0 {
				t.Errorf("left in /dev/shm after the job: %v", left)
			}
		})
	}
}

// devShm lists /dev/shm (empty if the system has none).
func devShm(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("list /dev/shm: %v", err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// newEntries lists the names in after that were not in before.
func newEntries(before, after map[string]bool) []string {
	var n []string
	for k := range after {
		if !before[k] {
			n = append(n, k)
		}
	}
	return n
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

// trials is GOCCL_TEST_TRIALS, else def: the randomised process tests
// repeat this many times (issue 11 asks for 100% of 30; CI runs a few).
func trials(t *testing.T, def int) int {
	if s := os.Getenv("GOCCL_TEST_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("GOCCL_TEST_TRIALS=%q: want a positive integer", s)
		}
		return n
	}
	return def
}

// timedLines collects output lines with the time each arrived.
type timedLines struct {
	mu    sync.Mutex
	part  []byte
	lines []timedLine
}

type timedLine struct {
	at   time.Time
	text string
}

func (w *timedLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		w.lines = append(w.lines, timedLine{now, string(w.part[:i])})
		w.part = w.part[i+1:]
	}
	return len(p), nil
}

func (w *timedLines) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, l := range w.lines {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// first returns the first line with prefix that contains substr.
func (w *timedLines) first(prefix, substr string) (timedLine, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.HasPrefix(l.text, prefix) && strings.Contains(l.text, substr) {
			return l, true
		}
	}
	return timedLine{}, false
}

// TestStopOneRank runs 4 processes under gorun in an allreduce loop with a
// stall timeout of 2 s and stops one of them (SIGSTOP: alive, silent) at a
// random moment: every other rank must fail within the stall timeout plus
// one second, naming the stopped rank as the root of the stall, not a
// neighbour (issue 11 items 8 and 9). Over TCP (the executor's stall
// diagnosis) and over shared memory with 8-byte allreduces (the board's).
// GOCCL_TEST_TRIALS sets the number of trials (default 4, alternately).
func TestStopOneRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const stall = 2 * time.Second
	dir := buildBinaries(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for trial := range trials(t, 4) {
		victim := rng.IntN(4)
		delay := time.Duration(20+rng.IntN(400)) * time.Millisecond
		transport, count := "tcp", "65536"
		if trial%2 == 1 {
			transport, count = "shm", "2"
		}
		t.Run(fmt.Sprintf("trial=%d/%s/victim=%d/after=%v", trial, transport, victim, delay), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(dir, "gorun"), "-n", "4", "--grace", "1s", filepath.Join(dir, "allreduce"),
				"-count", count, "-iters", "100000000", "-v")
			cmd.Env = append(os.Environ(), "GOCCL_TRANSPORT="+transport, "GOCCL_STALL_TIMEOUT="+stall.String())
			var out syncBuffer
			var lines timedLines
			w := io.MultiWriter(&out, &lines)
			cmd.Stdout, cmd.Stderr = w, w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := waitForPid(t, &out, victim, 30*time.Second)
			time.Sleep(delay)
			stopped := time.Now()
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatalf("stop rank %d (pid %d): %v", victim, pid, err)
			}
			defer syscall.Kill(pid, syscall.SIGKILL)
			err := cmd.Wait()
			text := lines.String()
			if err == nil {
				t.Fatalf("gorun exited 0 after rank %d was stopped:\n%s", victim, text)
			}
			want := fmt.Sprintf("rank %d is at the root of a stall", victim)
			for r := range 4 {
				if r == victim {
					continue
				}
				l, ok := lines.first(fmt.Sprintf("[%d] allreduce:", r), "")
				switch {
				case !ok:
					t.Errorf("rank %d reported no error:\n%s", r, text)
				case !strings.Contains(l.text, want):
					t.Errorf("rank %d does not name rank %d as the root (%q): %s", r, victim, want, l.text)
				case l.at.Sub(stopped) > stall+time.Second:
					t.Errorf("rank %d failed %v after the stop, stall timeout %v: %s", r, l.at.Sub(stopped).Round(time.Millisecond), stall, l.text)
				}
				if ok {
					t.Logf("rank %d after %v: %s", r, l.at.Sub(stopped).Round(time.Millisecond), l.text)
				}
			}
		})
	}
}

// TestTorchrunKillStoreHost starts 4 processes as torchrun does (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT: rank 0 hosts the bootstrap store)
// and kills rank 0 in the allreduce loop: the store dies with it, and
// every survivor must still name rank 0, not a live neighbour (issue 11
// item 8). GOCCL_TEST_TRIALS sets the number of trials (default 3).
func TestTorchrunKillStoreHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := buildBinaries(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for trial := range trials(t, 3) {
		delay := time.Duration(20+rng.IntN(400)) * time.Millisecond
		t.Run(fmt.Sprintf("trial=%d/after=%v", trial, delay), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			const n = 4
			cmds := make([]*exec.Cmd, n)
			outs := make([]*syncBuffer, n)
			for r := range n {
				cmd := exec.CommandContext(ctx, filepath.Join(dir, "allreduce"), "-count", "65536", "-iters", "100000000", "-v")
				cmd.Env = append(launcherFree(os.Environ()), "GOCCL_TRANSPORT=tcp", fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", n),
					fmt.Sprintf("LOCAL_RANK=%d", r), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", n), "MASTER_ADDR=127.0.0.1",
					fmt.Sprintf("MASTER_PORT=%d", port), "GOCCL_SECRET=00112233445566778899aabbccddeeff")
				outs[r] = &syncBuffer{}
				cmd.Stdout, cmd.Stderr = outs[r], outs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
				defer cmd.Process.Kill()
			}
			deadline := time.Now().Add(30 * time.Second)
			for r := range n {
				for !strings.Contains(outs[r].String(), "joined") {
					if time.Now().After(deadline) {
						t.Fatalf("rank %d did not join: %s", r, outs[r].String())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			time.Sleep(delay)
			killed := time.Now()
			cmds[0].Process.Kill()
			cmds[0].Wait()
			for r := 1; r < n; r++ {
				err := cmds[r].Wait()
				text := outs[r].String()
				if err == nil {
					t.Errorf("rank %d exited 0 after rank 0 was killed: %s", r, text)
					continue
				}
				if !strings.Contains(text, "rank 0 failed") {
					t.Errorf("rank %d does not name rank 0: %s", r, text)
				}
				t.Logf("rank %d after %v: %s", r, time.Since(killed).Round(time.Millisecond), strings.TrimSpace(text))
			}
		})
	}
}

// launcherFree drops the variables of other launchers from env, which take
// precedence over torchrun's.
func launcherFree(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GOCCL_") || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PMIX_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
