package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/bootstrap"
)

// outputDrain bounds how long gorun waits, after every rank has exited and
// their process groups were killed, for the last output to arrive.
const outputDrain = 2 * time.Second

type config struct {
	n     int
	grace time.Duration
	prog  string
	args  []string
}

// rank is one started process.
type rank struct {
	id    int
	cmd   *exec.Cmd
	pid   int
	pipes []*os.File // read ends of its stdout and stderr
	done  bool
}

// exit is what a rank's Wait reported.
type exit struct {
	rank  int
	state *os.ProcessState
	err   error
}

func launch(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	out := &lineWriter{stdout: stdout, stderr: stderr}
	logf := func(format string, a ...any) {
		out.writeLine(stderr, []byte("gorun: "+fmt.Sprintf(format, a...)+"\n"))
	}

	secret := bootstrap.NewSecret()
	srv, err := bootstrap.NewServer("127.0.0.1:0", secret,
		bootstrap.WithLogger(slog.New(slog.NewTextHandler(logWriter{out}, nil))))
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer srv.Close()
	masterPort, err := freePort()
	if err != nil {
		logf("pick MASTER_PORT: %v", err)
		return 1
	}
	// Catch signals before any rank exists, so none is lost.
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)

	ranks := make([]*rank, 0, cfg.n)
	var pumps sync.WaitGroup
	exits := make(chan exit, cfg.n)
	base := os.Environ()
	for i := range cfg.n {
		env := rankEnv(base, i, cfg.n, srv.Addr(), secret, masterPort)
		r, err := start(cfg, i, env, out, &pumps)
		if err != nil {
			logf("start rank %d: %v", i, err)
			for _, r := range ranks {
				signalGroup(r, syscall.SIGKILL)
			}
			for range ranks {
				<-exits
			}
			finish(ranks, &pumps)
			return 1
		}
		ranks = append(ranks, r)
		go func() {
			err := r.cmd.Wait()
			exits <- exit{rank: r.id, state: r.cmd.ProcessState, err: err}
		}()
	}

	var (
		cause    string    // the first rank failure
		gotSig   os.Signal // the first signal gorun received
		killTime <-chan time.Time
		ctxDone  = ctx.Done()
	)
	stopAll := func(sig syscall.Signal) {
		for _, r := range ranks {
			if !r.done {
				signalGroup(r, sig)
			}
		}
	}
	for running := len(ranks); running > 0; {
		select {
		case e := <-exits:
			running--
			ranks[e.rank].done = true
			if failed(e) && cause == "" {
				cause = describe(ranks[e.rank], e)
				if running > 0 {
					stopAll(syscall.SIGTERM)
					killTime = time.After(cfg.grace)
				}
			}
		case s := <-sigc:
			if gotSig != nil {
				stopAll(syscall.SIGKILL)
				continue
			}
			gotSig = s
			stopAll(s.(syscall.Signal))
		case <-ctxDone:
			ctxDone = nil
			if gotSig == nil {
				gotSig = syscall.SIGTERM
				stopAll(syscall.SIGTERM)
				killTime = time.After(cfg.grace)
			}
		case <-killTime:
			stopAll(syscall.SIGKILL)
		}
	}
	finish(ranks, &pumps)

	switch {
	case gotSig != nil:
		sig := gotSig.(syscall.Signal)
		logf("stopped by signal: %v", sig)
		return 128 + int(sig)
	case cause != "":
		logf("%s", cause)
		return 1
	}
	return 0
}

// rankEnv is base with the launcher variables of rank i set (replacing any
// inherited values).
func rankEnv(base []string, i, n int, storeAddr string, secret []byte, masterPort int) []string {
	vars := [][2]string{
		{"GOCCL_RANK", strconv.Itoa(i)},
		{"GOCCL_SIZE", strconv.Itoa(n)},
		{"GOCCL_LOCAL_RANK", strconv.Itoa(i)},
		{"GOCCL_LOCAL_SIZE", strconv.Itoa(n)},
		{"GOCCL_BOOTSTRAP", storeAddr},
		{"GOCCL_SECRET", hex.EncodeToString(secret)},
		{"RANK", strconv.Itoa(i)},
		{"WORLD_SIZE", strconv.Itoa(n)},
		{"LOCAL_RANK", strconv.Itoa(i)},
		{"LOCAL_WORLD_SIZE", strconv.Itoa(n)},
		{"MASTER_ADDR", "127.0.0.1"},
		{"MASTER_PORT", strconv.Itoa(masterPort)},
	}
	set := make(map[string]bool, len(vars))
	for _, kv := range vars {
		set[kv[0]] = true
	}
	env := make([]string, 0, len(base)+len(vars))
	for _, e := range base {
		k, _, _ := strings.Cut(e, "=")
		if !set[k] {
			env = append(env, e)
		}
	}
	for _, kv := range vars {
		env = append(env, kv[0]+"="+kv[1])
	}
	return env
}

// start starts one rank with its output pumped through out.
func start(cfg config, i int, env []string, out *lineWriter, pumps *sync.WaitGroup) (*rank, error) {
	cmd := exec.Command(cfg.prog, cfg.args...)
	cmd.Env = env
	cmd.SysProcAttr = procAttr()
	r := &rank{id: i, cmd: cmd}
	var writeEnds []*os.File
	defer func() {
		for _, f := range writeEnds {
			f.Close()
		}
	}()
	for range 2 { // stdout, stderr
		pr, pw, err := os.Pipe()
		if err != nil {
			for _, f := range r.pipes {
				f.Close()
			}
			return nil, err
		}
		r.pipes = append(r.pipes, pr)
		writeEnds = append(writeEnds, pw)
	}
	cmd.Stdout, cmd.Stderr = writeEnds[0], writeEnds[1]
	if err := cmd.Start(); err != nil {
		for _, f := range r.pipes {
			f.Close()
		}
		return nil, err
	}
	r.pid = cmd.Process.Pid
	for k, dst := range []io.Writer{out.stdout, out.stderr} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			out.pump(i, r.pipes[k], dst)
		}()
	}
	return r, nil
}

// finish kills whatever the ranks left in their process groups, then waits
// (bounded) for their output to drain.
func finish(ranks []*rank, pumps *sync.WaitGroup) {
	for _, r := range ranks {
		signalGroup(r, syscall.SIGKILL)
	}
	drained := make(chan struct{})
	go func() { pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputDrain):
		// A process outside the groups holds a pipe open; stop reading.
		for _, r := range ranks {
			for _, f := range r.pipes {
				f.Close()
			}
		}
		<-drained
	}
	for _, r := range ranks {
		for _, f := range r.pipes {
			f.Close()
		}
	}
}

// signalGroup signals a rank's process group (ignoring a group that is
// already gone).
func signalGroup(r *rank, sig syscall.Signal) {
	if err := syscall.Kill(-r.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = r.cmd.Process.Signal(sig)
	}
}

func failed(e exit) bool {
	return e.state == nil || !e.state.Success()
}

// describe says why a rank failed, in one line without "gorun: ".
func describe(r *rank, e exit) string {
	if e.state == nil {
		return fmt.Sprintf("rank %d (pid %d): %v", r.id, r.pid, e.err)
	}
	if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("rank %d (pid %d) killed by signal: %v", r.id, r.pid, ws.Signal())
	}
	return fmt.Sprintf("rank %d (pid %d) exited with status %d", r.id, r.pid, e.state.ExitCode())
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
