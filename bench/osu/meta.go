package osu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/comm"
)

// version may be set at link time, for builds without VCS stamping
// (GOFLAGS=-buildvcs=false):
//
//	go build -ldflags "-X github.com/goccl/goccl/bench/osu.version=$(git describe --always --dirty)" ./bench/cmd/osu
var version string

// Version is goccl's version: the one set at link time, else the module
// version the build recorded (a pseudo-version with the commit when built
// from a checkout), else the VCS revision, else "(devel)".
func Version() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// algorithmNamer is what the benchmarks ask a communicator for the
// algorithm it uses; comm does not have it yet.
type algorithmNamer interface {
	Algorithm(coll string, bytes int) string
}

// fixedAlgorithms are the schedules comm runs today, one per collective
// (comm/collectives.go: plan); used until comm can name its choice.
var fixedAlgorithms = map[string]string{
	"allreduce": "ring",
	"bcast":     "binomial",
	"barrier":   "dissemination",
}

// algorithmOf names the algorithm c uses for coll at the given size.
func algorithmOf(c *comm.Comm, coll string, bytes int) string {
	if a, ok := any(c).(algorithmNamer); ok {
		if s := a.Algorithm(coll, bytes); s != "" {
			return s
		}
	}
	if s, ok := fixedAlgorithms[coll]; ok {
		return s
	}
	return "default"
}

const hostSlot = 128

// gatherHosts returns "pid host" of every rank, gathered with an allreduce
// (sum) of zero-padded slots: each rank fills its own slot only.
func gatherHosts(ctx context.Context, c *comm.Comm) ([]int, []string, error) {
	host, _ := os.Hostname()
	n := c.Size()
	buf := make([]uint8, n*hostSlot)
	s := fmt.Sprintf("%d %s", os.Getpid(), host)
	copy(buf[c.Rank()*hostSlot:(c.Rank()+1)*hostSlot-1], s)
	if err := comm.Allreduce(ctx, c, buf, buf, comm.Sum); err != nil {
		return nil, nil, err
	}
	pids := make([]int, n)
	hosts := make([]string, n)
	for r := range n {
		slot := buf[r*hostSlot : (r+1)*hostSlot]
		if i := bytes.IndexByte(slot, 0); i >= 0 {
			slot = slot[:i]
		}
		p, h, _ := strings.Cut(string(slot), " ")
		pids[r], _ = strconv.Atoi(p)
		hosts[r] = h
	}
	return pids, hosts, nil
}

func countHosts(hosts []string) int {
	seen := map[string]bool{}
	for _, h := range hosts {
		seen[h] = true
	}
	return len(seen)
}

func newMeta(c *comm.Comm, coll string, maxBytes int, hosts []string) Meta {
	return Meta{
		Version:   Version(),
		Transport: c.Transport(),
		Algorithm: algorithmOf(c, coll, maxBytes),
		Ranks:     c.Size(),
		Hosts:     countHosts(hosts),
		HostNames: hosts,
		Date:      time.Now().UTC().Format(time.RFC3339),
		GoVersion: runtime.Version(),
	}
}
