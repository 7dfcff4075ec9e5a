package main

import (
	"fmt"
	"os"
	"path/filepath"
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
