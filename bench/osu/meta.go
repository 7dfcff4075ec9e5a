package osu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
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

// algorithmNamer is how the benchmarks would ask a communicator which
// algorithm its selector picks for a call; comm does not offer it yet.
type algorithmNamer interface {
	Algorithm(coll string, bytes int) string
}

// algorithmOf names the algorithm of coll at the given size: the one forced
// with --algorithm, else the one GOCCL_ALGO forces for coll, else comm's
// choice if it can name it, else "auto (of ...)" listing comm.Algorithms,
// or the only algorithm there is.
func algorithmOf(c *comm.Comm, coll, forced string, bytes int) string {
	if forced != "" {
		return forced
	}
	name := commName(coll)
	for _, item := range strings.Split(os.Getenv("GOCCL_ALGO"), ",") {
		k, algo, ok := strings.Cut(strings.TrimSpace(item), ":")
		if ok && k == name { // comm refuses other spellings at Init
			return algo
		}
	}
	if a, ok := any(c).(algorithmNamer); ok {
		if s := a.Algorithm(coll, bytes); s != "" {
			return s
		}
	}
	algos := comm.Algorithms(name)
	sort.Strings(algos)
	switch len(algos) {
	case 0:
		return "default"
	case 1:
		return algos[0]
	}
	return "auto(" + strings.Join(algos, "|") + ")"
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

// hostCount is how many hosts the job spans: the communicator's count,
// which tells network namespaces and containers of one machine apart
// (comm.Options.HostID), where their host names are all one; the names'
// count without it.
func hostCount(c *comm.Comm, hosts []string) int {
	if n := c.Hosts(); n > 0 {
		return n
	}
	return countHosts(hosts)
}

func countHosts(hosts []string) int {
	seen := map[string]bool{}
	for _, h := range hosts {
		seen[h] = true
	}
	return len(seen)
}

func newMeta(c *comm.Comm, coll, forced string, maxBytes int, hosts []string) Meta {
	return Meta{
		Version:   Version(),
		Transport: c.Transport(),
		Algorithm: algorithmOf(c, coll, forced, maxBytes),
		Ranks:     c.Size(),
		Hosts:     hostCount(c, hosts),
		HostNames: hosts,
		Date:      time.Now().UTC().Format(time.RFC3339),
		GoVersion: runtime.Version(),
	}
}
