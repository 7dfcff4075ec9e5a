package main

import (
	"fmt"
	"os"
	"path/filepath"
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

// sshMasterWait bounds how long gorun waits for a wave of shared ssh
// connections to come up before it goes on (a rank whose connection is not
// up yet connects on its own).
const sshMasterWait = 15 * time.Second

// Limits of OpenSSH's sshd defaults: MaxSessions 10 sessions over one
// connection, MaxStartups 10 handshakes at once before it starts dropping.
const (
	ranksPerConn = 8 // ranks sharing one ssh connection
	connsPerWave = 8 // connections opened to one host at once
)

// muxPlan shares ssh connections among the ranks of a host, with OpenSSH's
// connection multiplexing: the first rank of each group of up to
// ranksPerConn ranks opens a connection (ControlMaster=yes, its socket in a
// private directory) and the others run over it (ControlMaster=no). The
// connections to a host are opened in waves of connsPerWave. Without this,
// a host with many slots would get that many simultaneous handshakes, and
// sshd drops those beyond MaxStartups. A group's first ssh exits only when
// every session over it has ended; if it dies, so do they, and their
// wrappers stop their ranks, as for any dropped link.
type muxPlan struct {
	dir   string          // holds the control sockets; "" when nothing is shared
	role  map[int]muxRole // by rank; ranks not in it connect on their own
	waves [][]placement   // ranks that open a shared connection, by wave
}

type muxRole struct {
	socket string
	master bool
}

// newMuxPlan plans the shared connections; only when the ssh command is
// OpenSSH's ssh (named "ssh"): other commands get a connection per rank.
func newMuxPlan(sshCmd string, hosts []host, places []placement) (*muxPlan, error) {
	m := &muxPlan{role: map[int]muxRole{}}
	if filepath.Base(sshCmd) != "ssh" {
		return m, nil
	}
	byHost := map[int][]placement{}
	for _, pl := range places {
		if !hosts[pl.host].local {
			byHost[pl.host] = append(byHost[pl.host], pl)
		}
	}
	for h := range hosts {
		ranks := byHost[h]
		if len(ranks) < 2 {
			continue
		}
		if m.dir == "" {
			dir, err := os.MkdirTemp("", "gorun-ssh-")
			if err != nil {
				return nil, fmt.Errorf("ssh control socket directory: %w", err)
			}
			m.dir = dir
		}
		for g := 0; g*ranksPerConn < len(ranks); g++ {
			group := ranks[g*ranksPerConn : min((g+1)*ranksPerConn, len(ranks))]
			if len(group) < 2 {
				continue // alone: a plain connection
			}
			socket := filepath.Join(m.dir, fmt.Sprintf("%d-%d", h, g))
			for k, pl := range group {
				m.role[pl.rank] = muxRole{socket: socket, master: k == 0}
			}
			w := g / connsPerWave
			for len(m.waves) <= w {
				m.waves = append(m.waves, nil)
			}
			m.waves[w] = append(m.waves[w], group[0])
		}
	}
	return m, nil
}

// shares reports whether the rank runs over a connection another opens.
func (m *muxPlan) shares(pl placement) bool {
	r, ok := m.role[pl.rank]
	return ok && !r.master
}

// opens reports whether the rank opens a shared connection.
func (m *muxPlan) opens(pl placement) bool {
	r, ok := m.role[pl.rank]
	return ok && r.master
}

// options are the ssh options of a rank.
func (m *muxPlan) options(pl placement) []string {
	r, ok := m.role[pl.rank]
	switch {
	case !ok:
		return nil
	case r.master:
		return []string{"-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-o", "ControlPath=" + r.socket}
	}
	return []string{"-o", "ControlMaster=no", "-o", "ControlPath=" + r.socket}
}

// waitUp waits, at most d, until the connections the ranks open are up
// (their sockets exist) or their ssh has exited (gone reports that).
func (m *muxPlan) waitUp(ranks []placement, d time.Duration, gone func(rank int) bool) {
	deadline := time.Now().Add(d)
	for _, pl := range ranks {
		for time.Now().Before(deadline) && !gone(pl.rank) {
			if _, err := os.Stat(m.role[pl.rank].socket); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// close removes the socket directory.
func (m *muxPlan) close() {
	if m.dir != "" {
		os.RemoveAll(m.dir)
	}
}
