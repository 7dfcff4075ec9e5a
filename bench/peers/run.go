package peers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Program is one column of the comparison: goccl's command or a peer's
// driver.
type Program struct {
	Name  string // "goccl" or the peer's name
	Label string // the column's title in markdown
	// Run runs the program once and returns its standard output. It
	// fails if a process exits non-zero, or when ctx is done.
	Run func(ctx context.Context) ([]byte, error)
}

// GocclProgram runs argv (goccl's OSU-style command) in the harness's
// environment.
func GocclProgram(argv []string) Program {
	return Program{Name: "goccl", Label: "goccl", Run: func(ctx context.Context) ([]byte, error) {
		return runProcs(ctx, []proc{{argv: argv}})
	}}
}

// PeerProgram runs peer p's driver, built in the directory bin, for c.
func PeerProgram(p *Peer, bin string, c *Config) Program {
	return Program{Name: p.Name, Label: p.Label, Run: func(ctx context.Context) ([]byte, error) {
		store, err := os.MkdirTemp("", "goccl-peers-store-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(store)
		return runProcs(ctx, p.procs(bin, c, store))
	}}
}

// runProcs starts procs together, each in its own process group, and waits
// for all of them. The first one's standard output is the result. When one
// fails, or ctx is done, the others' groups are stopped (so that nothing is
// left waiting for a peer that is gone) and the error names the process
// and ends with the tail of its standard error.
// beforeStart, if set (tests), runs before each process is started, with
// the context that stops them all.
var beforeStart func(ctx context.Context, i int)

func runProcs(parent context.Context, procs []proc) ([]byte, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		out     bytes.Buffer
		stderrs = make([]tailBuffer, len(procs))
		errs    = make([]error, len(procs))
		wg      sync.WaitGroup
		mu      sync.Mutex
		first   = -1 // the process that failed first: the cause
	)
	name := func(i int) string {
		if len(procs) > 1 {
			return fmt.Sprintf("rank %d (%s)", i, procs[i].argv[0])
		}
		return strings.Join(procs[i].argv, " ")
	}
	for i, p := range procs {
		if beforeStart != nil {
			beforeStart(ctx, i)
		}
		cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
		cmd.Env = append(os.Environ(), p.env...)
		// Its own process group, so that stopping it reaches what it
		// started (mpirun's and gorun's ranks): SIGTERM first, which
		// mpirun and gorun pass on to their ranks; what is left after
		// WaitDelay or after the leader exits gets SIGKILL.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
		if i == 0 {
			cmd.Stdout = &out
		}
		cmd.Stderr = &stderrs[i]
		if err := cmd.Start(); err != nil {
			cancel()
			wg.Wait()
			if err := parent.Err(); err != nil {
				return nil, err
			}
			if first >= 0 {
				// A process started before failed while this one was
				// starting (its context canceled): that is the cause.
				return nil, fmt.Errorf("%s: %v%s", name(first), errs[first], stderrs[first].tail())
			}
			return nil, fmt.Errorf("start %s: %w", p.argv[0], err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = cmd.Wait(); errs[i] != nil {
				mu.Lock()
				if first < 0 {
					first = i
				}
				mu.Unlock()
				cancel()
			}
			if ctx.Err() != nil {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // leftovers of a stopped run
			}
		}()
	}
	wg.Wait()
	// The others were stopped because of the first failure, or because
	// parent is done.
	if err := parent.Err(); err != nil {
		return nil, err
	}
	if first >= 0 {
		return nil, fmt.Errorf("%s: %v%s", name(first), errs[first], stderrs[first].tail())
	}
	return out.Bytes(), nil
}

// tailBuffer keeps the last tailMax bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

const tailMax = 2000

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

// tail is ": " and the last lines written, indented, or "".
func (t *tailBuffer) tail() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := bytes.TrimSpace(t.b)
	if len(b) > tailMax {
		b = b[len(b)-tailMax:]
	}
	if len(b) == 0 {
		return ""
	}
	return ":\n    " + strings.ReplaceAll(string(b), "\n", "\n    ")
}
