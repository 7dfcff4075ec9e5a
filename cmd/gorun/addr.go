package main

import (
	"fmt"
	"net"
	"strconv"
)

// storePlan is where the bootstrap store listens and which address the
// ranks of each host dial.
type storePlan struct {
	listen string   // host:port for the server; port 0 picks one
	dial   []string // per host: the IP (or name) its ranks dial
}

// resolver maps a host name to an IP address.
type resolver func(name string) (net.IP, error)

// lookupIP resolves name with the system resolver, preferring IPv4.
func lookupIP(name string) (net.IP, error) {
	if ip := net.ParseIP(name); ip != nil {
		return ip, nil
	}
	addrs, err := net.LookupIP(name)
	if err != nil {
		return nil, err
	}
	for _, ip := range addrs {
		if ip.To4() != nil {
			return ip, nil
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no address for %s", name)
	}
	return addrs[0], nil
}

// routeIP is this machine's source address on the route to ip: the
// address a peer at ip reaches this machine on. Connecting a UDP socket
// sends nothing.
func routeIP(ip net.IP) (net.IP, error) {
	c, err := net.Dial("udp", net.JoinHostPort(ip.String(), "9"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}

// planStore chooses the store's addresses. With --bootstrap-addr
// (host, host:port or :port) the store listens there and every rank dials
// that host, unless the host is empty or unspecified: then the store
// listens on every interface and each host's ranks dial this machine's
// address on the route to them. Without it, a job whose hosts are all
// local uses 127.0.0.1; otherwise the store listens on this machine's
// address on the route to the remote hosts, or on every interface when
// different hosts are reached through different addresses. Ranks on this
// machine then dial that routed address too, not loopback, so the address
// a rank's transport learns from its store connection is one that the
// other hosts can reach.
func planStore(flagAddr string, hosts []host, resolve resolver) (storePlan, error) {
	p := storePlan{dial: make([]string, len(hosts))}
	fixed, port := "", "0"
	if flagAddr != "" {
		h, pt, err := net.SplitHostPort(flagAddr)
		if err != nil {
			h, pt = flagAddr, "0" // a bare host
		}
		if n, err := strconv.Atoi(pt); err != nil || n < 0 || n > 65535 {
			return p, fmt.Errorf("--bootstrap-addr %q: bad port %q", flagAddr, pt)
		}
		port = pt
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			fixed = h
		}
		if fixed != "" {
			p.listen = net.JoinHostPort(fixed, port)
			for i := range p.dial {
				p.dial[i] = fixed
			}
			return p, nil
		}
	}
	// This machine's address toward each remote host.
	var first net.IP
	distinct := map[string]bool{}
	for i, h := range hosts {
		if h.local {
			continue
		}
		ip, err := resolve(h.name)
		if err != nil {
			return p, fmt.Errorf("resolve host %s: %v (or give --bootstrap-addr)", h.name, err)
		}
		src, err := routeIP(ip)
		if err != nil {
			return p, fmt.Errorf("no route to host %s (%s): %v (or give --bootstrap-addr)", h.name, ip, err)
		}
		if first == nil {
			first = src
		}
		p.dial[i] = src.String()
		distinct[src.String()] = true
	}
	switch {
	case first == nil && flagAddr == "":
		p.listen = net.JoinHostPort("127.0.0.1", port)
		for i := range p.dial {
			p.dial[i] = "127.0.0.1"
		}
		return p, nil
	case first == nil: // --bootstrap-addr :port with only local hosts
		first = net.IPv4(127, 0, 0, 1)
		p.listen = net.JoinHostPort("", port)
	case len(distinct) == 1 && flagAddr == "":
		p.listen = net.JoinHostPort(first.String(), port)
	default:
		p.listen = net.JoinHostPort("", port)
	}
	for i := range p.dial {
		if p.dial[i] == "" {
			p.dial[i] = first.String()
		}
	}
	return p, nil
}
