package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procKind is how a process runs its ranks.
type procKind int

const (
	kindLocal procKind = iota // one rank, a child of gorun
	kindSSH                   // one rank on another host, through ssh
	kindSrun                  // every rank, through srun
)

// sshExitWait is how long an ssh client may take to exit by itself after
// its rank was sent SIGKILL before gorun kills the client.
const sshExitWait = time.Second

// proc is one process gorun started: a rank, the ssh client of a remote
// rank, or srun.
type proc struct {
	kind  procKind
	ranks []int  // the ranks it carries: one, or all under srun
	host  string // where its rank runs ("" under srun)
	cmd   *exec.Cmd
	pid   int
	pipes []*os.File // read ends of its stdout and stderr
	done  bool       // Wait returned (the supervision loop's view)
	cpus  []int      // local rank bound to these CPUs (--bind-to); nil: not bound

	mu     sync.Mutex
	ctl    *os.File // ssh: write end of ssh's stdin, the control channel
	exited bool     // Wait returned (for timers)
}

// exit is what a proc's Wait reported.
type exit struct {
	p     *proc
	state *os.ProcessState
	err   error
}

// start starts p.cmd with its output pumped through out: tagged per rank,
// or, under srun, split by srun's labels with srun's own lines passed to
// other. stdin, if not nil, is the data written first to the process's
// standard input, which then stays open as p.ctl.
func (p *proc) start(out *output, pumps *sync.WaitGroup, stdin []byte, other func([]byte)) error {
	p.cmd.SysProcAttr = procAttr()
	var writeEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	defer func() { closeAll(writeEnds) }()
	for range 2 { // stdout, stderr
		pr, pw, err := os.Pipe()
		if err != nil {
			closeAll(p.pipes)
			return err
		}
		p.pipes = append(p.pipes, pr)
		writeEnds = append(writeEnds, pw)
	}
	p.cmd.Stdout, p.cmd.Stderr = writeEnds[0], writeEnds[1]
	if stdin != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			closeAll(p.pipes)
			return err
		}
		writeEnds = append(writeEnds, pr)
		p.cmd.Stdin = pr
		p.ctl = pw
	}
	if err := withAffinity(p.cpus, p.cmd.Start); err != nil {
		closeAll(p.pipes)
		if p.ctl != nil {
			p.ctl.Close()
			p.ctl = nil
		}
		return err
	}
	p.pid = p.cmd.Process.Pid
	if p.ctl != nil {
		// The pipe holds 64 KiB; an environment larger than that waits
		// for the remote side to read it.
		_ = p.ctl.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := p.ctl.Write(stdin); err != nil {
			p.signal(syscall.SIGKILL)
		}
	}
	for k, toStderr := range []bool{false, true} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			if p.kind == kindSrun {
				out.pumpLabelled(p.pipes[k], toStderr, other)
			} else {
				out.pump(p.ranks[0], p.pipes[k], toStderr)
			}
		}()
	}
	return nil
}

// wait waits for p and reports on exits.
func (p *proc) wait(exits chan<- exit) {
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
	exits <- exit{p: p, state: p.cmd.ProcessState, err: err}
}

// signal delivers sig to p's ranks: to a local rank's process group, over
// the control channel to a remote rank (SIGKILL also kills the ssh client
// if it has not exited sshExitWait later), or to srun, which forwards it
// to its tasks.
func (p *proc) signal(sig syscall.Signal) {
	if p.kind == kindSSH {
		p.sendControl(sig)
		if sig == syscall.SIGKILL {
			time.AfterFunc(sshExitWait, func() { p.killGroup() })
		}
		return
	}
	p.signalGroup(sig)
}

// killGroup kills p's process group unless p was already reaped (its pid
// might then be reused).
func (p *proc) killGroup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		p.signalGroup(syscall.SIGKILL)
	}
}

// signalGroup signals p's process group (ignoring a group that is already
// gone).
func (p *proc) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// where names a rank's place for messages: "rank 2 on h1".
func (p *proc) where() string {
	if p.kind == kindSrun {
		return fmt.Sprintf("srun (pid %d)", p.pid)
	}
	return fmt.Sprintf("rank %d on %s", p.ranks[0], p.host)
}

// describe says why p failed, in one line without "gorun: ", and the
// status gorun exits with: the rank's exit status, or 128+N for signal N.
func (p *proc) describe(e exit, srunFail *srunFailure) (string, int) {
	if p.kind == kindSrun && srunFail != nil {
		return fmt.Sprintf("rank %d on %s %s (reported by srun)", srunFail.rank, srunFail.node, srunFail.cause), srunFail.code
	}
	if e.state == nil {
		return fmt.Sprintf("%s (pid %d): %v", p.where(), p.pid, e.err), 1
	}
	what := "pid"
	if p.kind == kindSSH {
		what = "ssh pid"
	}
	if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("%s (%s %d) killed by signal: %v", p.where(), what, p.pid, ws.Signal()), 128 + int(ws.Signal())
	}
	code := e.state.ExitCode()
	if p.kind == kindSSH {
		return fmt.Sprintf("%s (%s %d) %s", p.where(), what, p.pid, describeSSH(code)), code
	}
	return fmt.Sprintf("%s (%s %d) exited with status %d", p.where(), what, p.pid, code), code
}

// rankList formats ranks with their hosts: "1 on h1, 3 on h2".
func rankList(procs []*proc) string {
	var parts []string
	for _, p := range procs {
		if p.kind == kindSrun {
			parts = append(parts, fmt.Sprintf("%d-%d under srun", p.ranks[0], p.ranks[len(p.ranks)-1]))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d on %s", p.ranks[0], p.host))
	}
	return strings.Join(parts, ", ")
}
