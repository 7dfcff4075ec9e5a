package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// host is one machine ranks are placed on.
type host struct {
	name  string
	slots int  // ranks it takes before the next host is used
	local bool // ranks on it are started directly, not over ssh
}

// maxSlots bounds one host's slot count.
const maxSlots = maxRanks

// parseHostList parses -H: "host1:slots,host2,..."; a host without ":slots"
// has one slot. A host named twice adds its slots to its first place.
func parseHostList(s string) ([]host, error) {
	var hosts []host
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("-H %q: empty host name", s)
		}
		name, slots := item, 1
		// A bracketed IPv6 address may contain colons: [::1]:2.
		if i := strings.LastIndexByte(item, ':'); i >= 0 && !strings.HasSuffix(item, "]") {
			n, err := strconv.Atoi(item[i+1:])
			if err != nil || n < 1 || n > maxSlots {
				return nil, fmt.Errorf("-H %q: slots in %q must be an integer between 1 and %d", s, item, maxSlots)
			}
			name, slots = item[:i], n
		}
		name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
		if name == "" {
			return nil, fmt.Errorf("-H %q: empty host name in %q", s, item)
		}
		hosts = addHost(hosts, name, slots)
	}
	return hosts, nil
}

// parseHostfile reads a host file: one host per line, "name [slots=N]",
// with '#' starting a comment. A host without slots= has one slot.
func parseHostfile(name string, r io.Reader) ([]host, error) {
	var hosts []host
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		slots := 1
		for _, f := range fields[1:] {
			v, ok := strings.CutPrefix(f, "slots=")
			if !ok {
				return nil, fmt.Errorf("%s:%d: %q: want \"host slots=N\"", name, line, f)
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxSlots {
				return nil, fmt.Errorf("%s:%d: slots=%q must be an integer between 1 and %d", name, line, v, maxSlots)
			}
			slots = n
		}
		hosts = addHost(hosts, fields[0], slots)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%s: no hosts", name)
	}
	return hosts, nil
}

func addHost(hosts []host, name string, slots int) []host {
	for i := range hosts {
		if hosts[i].name == name {
			hosts[i].slots = min(hosts[i].slots+slots, maxSlots)
			return hosts
		}
	}
	return append(hosts, host{name: name, slots: slots})
}

func totalSlots(hosts []host) int {
	n := 0
	for _, h := range hosts {
		n += h.slots
	}
	return n
}

// placement is where one rank runs.
type placement struct {
	rank      int
	host      int // index into the host list
	localRank int // index among the ranks on the same host
	localSize int
}

// place puts n ranks on hosts by slots, in order: the first host's slots
// are filled before the second host gets a rank (mpirun's --map-by slot).
// With oversubscribe, ranks beyond the slots go round again. It returns an
// error when n exceeds the slots and oversubscribe is off.
func place(hosts []host, n int, oversubscribe bool) ([]placement, error) {
	total := totalSlots(hosts)
	if n > total && !oversubscribe {
		return nil, fmt.Errorf("%d ranks asked for but the hosts have %d slots (give fewer ranks, more slots, or --oversubscribe)", n, total)
	}
	ps := make([]placement, 0, n)
	// Local ranks are counted per machine: the hosts that are this
	// machine (localhost, its name, its addresses: markLocal) are one.
	// Counted per entry, -H localhost:1,$(hostname):1 gave both ranks
	// LOCAL_RANK 0 of 1.
	machine := make([]int, len(hosts))
	firstLocal := -1
	for h := range hosts {
		machine[h] = h
		if hosts[h].local {
			if firstLocal < 0 {
				firstLocal = h
			}
			machine[h] = firstLocal
		}
	}
	counts := make([]int, len(hosts))
	for len(ps) < n {
		for h := range hosts {
			for s := 0; s < hosts[h].slots && len(ps) < n; s++ {
				ps = append(ps, placement{rank: len(ps), host: h, localRank: counts[machine[h]]})
				counts[machine[h]]++
			}
		}
	}
	for i := range ps {
		ps[i].localSize = counts[machine[ps[i].host]]
	}
	return ps, nil
}

// markLocal sets host.local for the hosts that are this machine: named
// localhost, this machine's host name, or resolving to an address of one
// of its interfaces (or a loopback address).
func markLocal(hosts []host) {
	self, _ := os.Hostname()
	var mine []net.IP
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				mine = append(mine, ipn.IP)
			}
		}
	}
	for i := range hosts {
		hosts[i].local = isLocal(hosts[i].name, self, mine)
	}
}

func isLocal(name, self string, mine []net.IP) bool {
	if name == "localhost" || (self != "" && name == self) {
		return true
	}
	ips := []net.IP{net.ParseIP(name)}
	if ips[0] == nil {
		addrs, err := net.LookupHost(name)
		if err != nil {
			return false
		}
		ips = ips[:0]
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip != nil {
				ips = append(ips, ip)
			}
		}
	}
	for _, ip := range ips {
		if ip.IsLoopback() {
			return true
		}
		for _, m := range mine {
			if ip.Equal(m) {
				return true
			}
		}
	}
	return false
}
