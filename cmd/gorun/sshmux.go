package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

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
// connection multiplexing: for each group of up to ranksPerConn ranks of a
// host gorun opens one connection of its own (ssh -N, ControlMaster=yes,
// its socket in a private directory), and the group's ranks run over it
// (ControlMaster=no). The connections to a host are opened in waves of
// connsPerWave. Without this, a host with many slots would get that many
// simultaneous handshakes, and sshd drops those beyond MaxStartups.
//
// The shared connection belongs to gorun, not to a rank: when a rank's
// ssh was the connection (an earlier design), a rank that ended quickly
// closed it before the rest of its group had attached, and they fell back
// to a handshake each. The connections close when the job is over; if one
// dies before, the sessions over it end, and their wrappers stop their
// ranks, as for any dropped link.
type muxPlan struct {
	dir   string         // holds the control sockets; "" when nothing is shared
	role  map[int]string // control socket by rank; ranks not in it connect on their own
	waves [][]muxConn    // the shared connections, by wave
	conns []connProc     // the shared connections' ssh processes, once started
}

// connProc is a shared connection's ssh; done is closed when it has exited.
type connProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// muxConn is one shared connection.
type muxConn struct {
	host   int // index in the hosts
	socket string
	ranks  []int
}

// newMuxPlan plans the shared connections; only when the ssh command is
// OpenSSH's ssh (named "ssh"): other commands get a connection per rank.
func newMuxPlan(sshCmd string, hosts []host, places []placement) (*muxPlan, error) {
	m := &muxPlan{role: map[int]string{}}
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
			c := muxConn{host: h, socket: filepath.Join(m.dir, fmt.Sprintf("%d-%d", h, g))}
			for _, pl := range group {
				m.role[pl.rank] = c.socket
				c.ranks = append(c.ranks, pl.rank)
			}
			w := g / connsPerWave
			for len(m.waves) <= w {
				m.waves = append(m.waves, nil)
			}
			m.waves[w] = append(m.waves[w], c)
		}
	}
	return m, nil
}

// shares reports whether the rank runs over a shared connection.
func (m *muxPlan) shares(pl placement) bool {
	_, ok := m.role[pl.rank]
	return ok
}

// options are the ssh options of a rank.
func (m *muxPlan) options(pl placement) []string {
	socket, ok := m.role[pl.rank]
	if !ok {
		return nil
	}
	return []string{"-o", "ControlMaster=no", "-o", "ControlPath=" + socket}
}

// connArgv is the command that opens shared connection c to host.
func connArgv(sshCmd []string, host string, c muxConn) []string {
	out := append(slices.Clip(sshCmd), sshOptions...)
	out = append(out, "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-o", "ControlPath="+c.socket, "-N", "--", host)
	return out
}

// open starts a wave's shared connections (their ssh's messages go to
// stderr) and waits, at most d, until each is up (its socket exists) or
// its ssh has exited; a rank whose connection is not up connects on its
// own.
func (m *muxPlan) open(wave []muxConn, argv func(muxConn) []string, stderr io.Writer, d time.Duration) error {
	procs := make([]connProc, len(wave))
	for i, c := range wave {
		a := argv(c)
		cmd := exec.Command(a[0], a[1:]...)
		cmd.Stderr = stderr
		cmd.SysProcAttr = procAttr()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("shared ssh connection to host %d for ranks %v: %w", c.host, c.ranks, err)
		}
		procs[i] = connProc{cmd: cmd, done: make(chan struct{})}
		m.conns = append(m.conns, procs[i])
		go func() {
			cmd.Wait()
			close(procs[i].done)
		}()
	}
	deadline := time.Now().Add(d)
	for i, c := range wave {
	wait:
		for time.Now().Before(deadline) {
			if _, err := os.Stat(c.socket); err == nil {
				break
			}
			select {
			case <-procs[i].done:
				break wait
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// close ends the shared connections (the job is over: nothing runs over
// them) and removes the socket directory.
func (m *muxPlan) close() {
	for _, p := range m.conns {
		p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range m.conns {
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	m.conns = nil
	if m.dir != "" {
		os.RemoveAll(m.dir)
	}
}
