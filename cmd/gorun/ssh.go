package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultSSH is the ssh command when neither --ssh nor $GORUN_SSH is set.
const defaultSSH = "ssh"

// sshOptions are always given to ssh: never prompt (a rank waiting for a
// password would hang the job), and notice a dead link within ~15 s.
var sshOptions = []string{"-o", "BatchMode=yes", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"}

// remoteScript runs one rank on a remote host, as `sh -c remoteScript
// gorun-rank GRACE DIR PROG ARGS...`. gorun writes to its standard input
// (ssh's) the rank's environment, one VAR=value per line and an empty line,
// and then, as control messages, the names of signals to send to the rank.
// The rank runs in its own session (setsid), with /dev/null as stdin, so
// that its whole process group can be signalled. When the standard input
// ends, because gorun closed it, died, or the ssh link dropped, the rank is
// sent SIGTERM and, GRACE seconds later, SIGKILL. The script exits with
// the rank's status (128+N when signal N killed it), after killing what the
// rank left in its group.
//
// It is one line, with no '!' outside "$!", so that any login shell passes
// it to sh unchanged.
var remoteScript = `g=$1 d=$2; shift 2; ` +
	`while IFS= read -r l && [ -n "$l" ]; do export "$l" || exit 126; done; ` +
	`cd "$d" || exit 127; ` +
	`if command -v setsid >/dev/null 2>&1; then setsid "$@" </dev/null & t=-$!; else "$@" </dev/null & t=$!; fi; ` +
	`p=$!; exec 3<&0; ` +
	`{ while IFS= read -r s <&3; do case $s in INT|TERM|KILL|HUP|QUIT|USR1|USR2) kill -s "$s" -- "$t";; esac; done; ` +
	`kill -s TERM -- "$t"; sleep "$g"; kill -s KILL -- "$t"; } >/dev/null 2>&1 & ` +
	`w=$!; exec 3<&-; wait "$p"; s=$?; kill "$w" 2>/dev/null; kill -s KILL -- "$t" 2>/dev/null; exit $s`

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=+,@%", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sshArgv is the command line that starts a rank on host: the ssh command
// (its words split at spaces), the fixed options, the host, and the remote
// command that runs remoteScript in dir.
func sshArgv(sshCmd []string, host string, grace time.Duration, dir string, argv []string) []string {
	remote := []string{"exec", "sh", "-c", shellQuote(remoteScript), "gorun-rank",
		strconv.FormatFloat(grace.Seconds(), 'f', -1, 64), shellQuote(dir)}
	for _, a := range argv {
		remote = append(remote, shellQuote(a))
	}
	out := append([]string{}, sshCmd...)
	out = append(out, sshOptions...)
	return append(out, "--", host, strings.Join(remote, " "))
}

// envBlock is the environment preamble gorun writes to a remote rank.
func envBlock(env []kv) []byte {
	var b strings.Builder
	for _, e := range env {
		b.WriteString(e.k + "=" + e.v + "\n")
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// signalName is a signal's name as remoteScript accepts it ("" when it
// does not).
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "INT"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGHUP:
		return "HUP"
	case syscall.SIGQUIT:
		return "QUIT"
	case syscall.SIGUSR1:
		return "USR1"
	case syscall.SIGUSR2:
		return "USR2"
	}
	return ""
}

// sendControl writes a signal to a remote rank's control channel, bounded
// in time so that a stuck ssh never blocks gorun. SIGKILL also closes the
// channel: the remote side then stops the rank even if the message is lost.
func (p *proc) sendControl(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil {
		return
	}
	if name := signalName(sig); name != "" {
		_ = p.ctl.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := p.ctl.Write([]byte(name + "\n")); err != nil {
			sig = syscall.SIGKILL
		}
	}
	if sig == syscall.SIGKILL {
		p.ctl.Close()
		p.ctl = nil
	}
}

// describeSSH says why a remote rank's ssh exited non-zero.
func describeSSH(code int) string {
	switch {
	case code == 255:
		return "ssh failed (status 255: see ssh's message above), or the rank exited with status 255"
	case code == 126 || code == 127:
		return fmt.Sprintf("exited with status %d (cannot run the program or enter the working directory there?)", code)
	case code > 128 && code < 128+65:
		return "killed by signal: " + syscall.Signal(code-128).String()
	}
	return fmt.Sprintf("exited with status %d", code)
}
