package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/internal/affinity"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// The test binary doubles as the rank program: with GORUN_TEST_CHILD set it
// runs child() instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(shimEnv) != "" {
		// The test binary as gorun's srun task shim.
		os.Exit(shim(os.Args[1:]))
	}
	if os.Getenv("GORUN_TEST_AS_GORUN") == "1" {
		// The test binary as gorun itself, for tests that signal it.
		os.Unsetenv("GORUN_TEST_AS_GORUN")
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	if mode := os.Getenv("GORUN_TEST_CHILD"); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

func child(mode string) int {
	rank, _ := strconv.Atoi(os.Getenv("GOCCL_RANK"))
	switch mode {
	case "env":
		for _, k := range []string{"GOCCL_RANK", "GOCCL_SIZE", "GOCCL_LOCAL_RANK", "GOCCL_LOCAL_SIZE", "GOCCL_BOOTSTRAP", "GOCCL_SECRET",
			"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GORUN_TEST_INHERITED", "GOCCL_BIND"} {
			fmt.Printf("env %s=%s\n", k, os.Getenv(k))
		}
		// Many lines written in pieces, on both streams at once.
		var wg sync.WaitGroup
		for _, f := range []*os.File{os.Stdout, os.Stderr} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					fmt.Fprintf(f, "line r=%d i=%d ", rank, i)
					fmt.Fprintf(f, "%s end\n", strings.Repeat("x", i))
				}
			}()
		}
		wg.Wait()
		fmt.Print("partial without newline")
		return 0
	case "bootstrap":
		info, err := bootstrap.FromEnv()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b, err := bootstrap.Connect(ctx, info)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		defer b.Close()
		all, err := b.Allgather(ctx, []byte(strconv.Itoa(rank*10)))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if err := b.Barrier(ctx); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("source=%s allgather=%s\n", info.Source, bytes.Join(all, []byte(",")))
		return 0
	case "exit3":
		if rank == 1 {
			fmt.Println("failing")
			return 3
		}
		time.Sleep(time.Minute)
		return 0
	case "sigkill":
		// Rank 0 ignores SIGTERM, so gorun must escalate to SIGKILL.
		if rank == 0 {
			signal.Ignore(syscall.SIGTERM)
		}
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), "GORUN_TEST_CHILD=grandchild")
		gc.Stdout = os.Stdout
		if err := gc.Start(); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("pid %d\n", os.Getpid())
		if rank == 2 {
			time.Sleep(300 * time.Millisecond)
			fmt.Printf("killing myself at %d\n", time.Now().UnixNano())
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(time.Minute)
		return 0
	case "grandchild":
		fmt.Printf("pid %d\n", os.Getpid())
		time.Sleep(time.Minute)
		return 0
	case "hello":
		fmt.Println("hello from", rank)
		fmt.Fprintln(os.Stderr, "err from", rank)
		return 0
	case "oneexits":
		if rank == 0 {
			return 0
		}
		time.Sleep(time.Minute)
		return 0
	case "peerfail":
		// At GORUN_TEST_T0 rank 0 fails; 50 ms later rank 2 is killed.
		t0, _ := strconv.ParseInt(os.Getenv("GORUN_TEST_T0"), 10, 64)
		time.Sleep(time.Until(time.Unix(0, t0)))
		switch rank {
		case 0:
			return 1
		case 2:
			time.Sleep(50 * time.Millisecond)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(time.Minute)
		return 0
	case "hang":
		if rank == 2 {
			signal.Ignore(syscall.SIGTERM) // only SIGKILL stops it
		}
		wd, _ := os.Getwd()
		fmt.Printf("pid %d wd %s\n", os.Getpid(), wd)
		time.Sleep(time.Minute)
		return 0
	case "blamehang", "blameabort":
		return blameChild(mode, rank)
	case "affinity":
		cpus, err := affinity.Usable()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("cpus %s gomaxprocs %d\n", cpuList(cpus), runtime.GOMAXPROCS(0))
		return 0
	case "term":
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM)
		fmt.Println("ready")
		select {
		case <-c:
			fmt.Println("got SIGTERM")
		case <-time.After(time.Minute):
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	return 1
}

// gorun runs run() with the test binary as the program in mode.
func gorun(t *testing.T, ctx context.Context, mode string, args ...string) (code int, stdout, stderr string, took time.Duration) {
	t.Helper()
	t.Setenv("GORUN_TEST_CHILD", mode)
	var o, e bytes.Buffer
	start := time.Now()
	code = run(ctx, append(args, os.Args[0]), &o, &e)
	return code, o.String(), e.String(), time.Since(start)
}

func TestUsageGolden(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout bool // golden is stdout, else stderr
	}{
		{"help", []string{"-h"}, 0, true},
		{"help-long", []string{"--help"}, 0, true},
		{"no-args", nil, 2, false},
		{"no-n", []string{"prog"}, 2, false},
		{"n-zero", []string{"-n", "0", "prog"}, 2, false},
		{"n-huge", []string{"-n", "5000", "prog"}, 2, false},
		{"n-not-int", []string{"-n", "two", "prog"}, 2, false},
		{"no-prog", []string{"-n", "2"}, 2, false},
		{"unknown-flag", []string{"-bogus", "-n", "2", "prog"}, 2, false},
		{"negative-grace", []string{"-n", "2", "-grace", "-1s", "prog"}, 2, false},
		{"negative-timeout", []string{"-n", "2", "--timeout", "-1s", "prog"}, 2, false},
		{"both-host-flags", []string{"-H", "a", "--hostfile", "f", "prog"}, 2, false},
		{"bad-host-list", []string{"-H", "a:2,b:zero", "prog"}, 2, false},
		{"missing-hostfile", []string{"--hostfile", "testdata/no-such-file", "prog"}, 2, false},
		{"more-ranks-than-slots", []string{"-n", "4", "-H", "a:2,b", "prog"}, 2, false},
		{"x-unset", []string{"-n", "2", "-x", "GORUN_TEST_SURELY_UNSET", "prog"}, 2, false},
		{"x-bad-name", []string{"-n", "2", "-x", "1A=b", "prog"}, 2, false},
		{"bad-launcher", []string{"-n", "2", "--launcher", "pbs", "prog"}, 2, false},
		{"srun-with-hosts", []string{"-H", "a", "--launcher", "srun", "prog"}, 2, false},
		{"flags-after-prog", []string{"prog", "-n", "2"}, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o, e bytes.Buffer
			code := run(context.Background(), tt.args, &o, &e)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, e.String())
			}
			got, other := e.String(), o.String()
			if tt.stdout {
				got, other = other, got
			}
			if other != "" {
				t.Errorf("unexpected output on the other stream: %q", other)
			}
			golden := filepath.Join("testdata", tt.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
}

var linePrefix = regexp.MustCompile(`^\[(\d+)\] (.*)$`)

func TestPrefixesAndEnv(t *testing.T) {
	const n = 3
	t.Setenv("GORUN_TEST_INHERITED", "kept")
	t.Setenv("RANK", "99") // a stale inherited value is replaced
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, stdout, stderr, _ := gorun(t, ctx, "env", "-n", strconv.Itoa(n))
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	env := make([]map[string]string, n)
	for r := range env {
		env[r] = map[string]string{}
	}
	lines := map[string]int{}
	for name, text := range map[string]string{"stdout": stdout, "stderr": stderr} {
		if !strings.HasSuffix(text, "\n") {
			t.Errorf("%s does not end with a newline", name)
		}
		for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
			m := linePrefix.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("%s line without a rank prefix: %q", name, line)
			}
			r, _ := strconv.Atoi(m[1])
			body := m[2]
			lines[name]++
			switch {
			case strings.HasPrefix(body, "env "):
				k, v, _ := strings.Cut(strings.TrimPrefix(body, "env "), "=")
				env[r][k] = v
			case strings.HasPrefix(body, "line "):
				var lr, i int
				if _, err := fmt.Sscanf(body, "line r=%d i=%d ", &lr, &i); err != nil || lr != r {
					t.Fatalf("%s: line %q under prefix [%d]", name, body, r)
				}
				if want := fmt.Sprintf("line r=%d i=%d %s end", r, i, strings.Repeat("x", i)); body != want {
					t.Fatalf("%s: mangled line %q", name, body)
				}
			case body == "partial without newline":
			default:
				t.Fatalf("%s: unexpected line %q", name, line)
			}
		}
	}
	if want := n * (14 + 200 + 1); lines["stdout"] != want {
		t.Errorf("%d stdout lines, want %d", lines["stdout"], want)
	}
	if want := n * 200; lines["stderr"] != want {
		t.Errorf("%d stderr lines, want %d", lines["stderr"], want)
	}
	for r := range n {
		e := env[r]
		for k, want := range map[string]string{
			"GOCCL_RANK": strconv.Itoa(r), "GOCCL_SIZE": "3", "GOCCL_LOCAL_RANK": strconv.Itoa(r), "GOCCL_LOCAL_SIZE": "3",
			"RANK": strconv.Itoa(r), "WORLD_SIZE": "3", "LOCAL_RANK": strconv.Itoa(r), "LOCAL_WORLD_SIZE": "3",
			"MASTER_ADDR": "127.0.0.1", "GORUN_TEST_INHERITED": "kept",
		} {
			if e[k] != want {
				t.Errorf("rank %d: %s=%q, want %q", r, k, e[k], want)
			}
		}
		if e["GOCCL_BOOTSTRAP"] != env[0]["GOCCL_BOOTSTRAP"] || !strings.HasPrefix(e["GOCCL_BOOTSTRAP"], "127.0.0.1:") {
			t.Errorf("rank %d: GOCCL_BOOTSTRAP=%q", r, e["GOCCL_BOOTSTRAP"])
		}
		if len(e["GOCCL_SECRET"]) != 64 || e["GOCCL_SECRET"] != env[0]["GOCCL_SECRET"] {
			t.Errorf("rank %d: GOCCL_SECRET=%q", r, e["GOCCL_SECRET"])
		}
		if p, err := strconv.Atoi(e["MASTER_PORT"]); err != nil || p < 1 || strings.HasSuffix(e["GOCCL_BOOTSTRAP"], ":"+e["MASTER_PORT"]) {
			t.Errorf("rank %d: MASTER_PORT=%q (store %s)", r, e["MASTER_PORT"], e["GOCCL_BOOTSTRAP"])
		}
	}
}

// The ranks meet through the store gorun hosts.
func TestBootstrapThroughGorun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, stdout, stderr, _ := gorun(t, ctx, "bootstrap", "-n", "4")
	if code != 0 {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for r := range 4 {
		want := fmt.Sprintf("[%d] source=gorun allgather=0,10,20,30\n", r)
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q in:\n%s", want, stdout)
		}
	}
}

func TestNonZeroExitStopsOthers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, stdout, stderr, took := gorun(t, ctx, "exit3", "-n", "3")
	if code != 3 {
		t.Fatalf("exit %d, want 3 (the failing rank's); stderr:\n%s", code, stderr)
	}
	if !regexp.MustCompile(`(?m)^gorun: rank 1 on \S+ \(pid \d+\) exited with status 3\n\z`).MatchString(stderr) {
		t.Errorf("summary missing or not last; stderr:\n%s", stderr)
	}
	if !strings.Contains(stdout, "[1] failing\n") {
		t.Errorf("stdout:\n%s", stdout)
	}
	if took > 5*time.Second {
		t.Errorf("took %v to stop the sleeping ranks", took)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func TestSigkilledRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, stdout, stderr, _ := gorun(t, ctx, "sigkill", "-n", "3")
	end := time.Now()
	if code == 0 {
		t.Fatalf("exit 0 after a rank was killed")
	}
	if !regexp.MustCompile(`(?m)^gorun: rank 2 on \S+ \(pid \d+\) killed by signal: killed$`).MatchString(stderr) {
		t.Errorf("no summary naming rank 2; stderr:\n%s", stderr)
	}
	// Rank 0 ignores SIGTERM, so this includes the default 3 s grace.
	m := regexp.MustCompile(`(?m)^\[2\] killing myself at (\d+)$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("rank 2 did not report its death; stdout:\n%s", stdout)
	}
	killed, _ := strconv.ParseInt(m[1], 10, 64)
	if took := end.Sub(time.Unix(0, killed)); took > 5*time.Second {
		t.Errorf("gorun exited %v after rank 2 was killed, want under 5 s", took)
	} else {
		t.Logf("gorun exited %v after rank 2 was killed", took)
	}
	var pids []int
	for _, m := range regexp.MustCompile(`(?m)^\[\d\] pid (\d+)$`).FindAllStringSubmatch(stdout, -1) {
		p, _ := strconv.Atoi(m[1])
		pids = append(pids, p)
	}
	if len(pids) != 6 { // 3 ranks, 3 grandchildren
		t.Fatalf("saw %d pids, want 6; stdout:\n%s", len(pids), stdout)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := slices.DeleteFunc(slices.Clone(pids), func(p int) bool { return !alive(p) })
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// When ranks fail at about the same time, the summary names the one that
// was killed (the likely cause), and the others after it.
func TestRootCause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv("GORUN_TEST_T0", strconv.FormatInt(time.Now().Add(3*time.Second).UnixNano(), 10))
	code, _, stderr, _ := gorun(t, ctx, "peerfail", "-n", "3")
	if code != 128+9 {
		t.Errorf("exit %d, want 137 (rank 2's SIGKILL)", code)
	}
	if !regexp.MustCompile(`(?m)^gorun: rank 2 on \S+ \(pid \d+\) killed by signal: killed; also failed: rank 0 on \S+\n\z`).MatchString(stderr) {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// Cancelling run's context behaves like SIGTERM to gorun: it is forwarded
// to the ranks.
func TestTerminationForwarded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Setenv("GORUN_TEST_CHILD", "term")
	var o, e syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-n", "2", os.Args[0]}, &o, &e) }()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(o.String(), "ready") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("ranks not ready; stdout:\n%s", o.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 128+int(syscall.SIGTERM) {
			t.Errorf("exit %d, want %d", code, 128+int(syscall.SIGTERM))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gorun did not exit 10 s after cancellation")
	}
	for r := range 2 {
		if !strings.Contains(o.String(), fmt.Sprintf("[%d] got SIGTERM\n", r)) {
			t.Errorf("rank %d did not get SIGTERM; stdout:\n%s", r, o.String())
		}
	}
	if !strings.Contains(e.String(), "gorun: stopped by signal: terminated") {
		t.Errorf("stderr:\n%s", e.String())
	}
}

// A real SIGINT to gorun reaches the ranks, and gorun exits 130.
func TestSIGINTForwarded(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-n", "2", os.Args[0])
	cmd.Env = append(os.Environ(), "GORUN_TEST_AS_GORUN=1", "GORUN_TEST_CHILD=term")
	var e syncBuffer
	cmd.Stderr = &e
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(20 * time.Second)
	for ready := 0; ready < 2; {
		select {
		case l := <-lines:
			if strings.HasSuffix(l, "] ready") {
				ready++
			}
		case <-timeout:
			t.Fatal("ranks not ready after 20 s")
		}
	}
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	for range lines { // drain until gorun closes stdout
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("gorun still running 10 s after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d (%v), want 130; stderr:\n%s", code, err, e.String())
	}
	if !strings.Contains(e.String(), "gorun: stopped by signal: interrupt") {
		t.Errorf("stderr:\n%s", e.String())
	}
	t.Logf("gorun exited %v after SIGINT", time.Since(start))
}

// TestMPIRunHabits: mpirun's -np is -n; GOCCL_BIND in gorun's environment
// is its --bind-to for the ranks it starts, and a wrong value is refused
// naming it (it was ignored: gorun set GOCCL_BIND=none for its ranks);
// a program in the working directory named without ./ gets a hint.
func TestMPIRunHabits(t *testing.T) {
	env := func(vars ...string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			for i := 0; i+1 < len(vars); i += 2 {
				if vars[i] == k {
					return vars[i+1], true
				}
			}
			return "", false
		}
	}
	var o, e bytes.Buffer
	if cfg, code := parseArgs([]string{"-np", "3", "prog"}, env(), &o, &e); code != -1 || cfg.n != 3 {
		t.Fatalf("-np 3: n %d, status %d, stderr %q", cfg.n, code, e.String())
	}
	if cfg, code := parseArgs([]string{"-n", "2", "prog"}, env("GOCCL_BIND", "core"), &o, &e); code != -1 || cfg.bindTo != "core" {
		t.Fatalf("GOCCL_BIND=core: --bind-to %q, status %d", cfg.bindTo, code)
	}
	if cfg, code := parseArgs([]string{"-n", "2", "--bind-to", "none", "prog"}, env("GOCCL_BIND", "core"), &o, &e); code != -1 || cfg.bindTo != "none" {
		t.Fatalf("--bind-to none with GOCCL_BIND=core: %q, status %d", cfg.bindTo, code)
	}
	e.Reset()
	if _, code := parseArgs([]string{"-n", "2", "prog"}, env("GOCCL_BIND", "cores"), &o, &e); code != 2 || !strings.Contains(e.String(), `GOCCL_BIND (gorun's --bind-to for the ranks it starts) "cores": want auto, core or none`) {
		t.Fatalf("GOCCL_BIND=cores: status %d, stderr %q", code, e.String())
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "myprog"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	e.Reset()
	if code := run(context.Background(), []string{"-n", "1", "myprog"}, &o, &e); code == 0 || !strings.Contains(e.String(), "say ./myprog") {
		t.Fatalf("myprog in the working directory: exit %d, stderr %q", code, e.String())
	}
}

func TestStartFailure(t *testing.T) {
	var o, e bytes.Buffer
	code := run(context.Background(), []string{"-n", "2", filepath.Join(t.TempDir(), "missing")}, &o, &e)
	if code != 1 || !strings.Contains(e.String(), "gorun: start rank 0:") {
		t.Fatalf("exit %d, stderr %q", code, e.String())
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
