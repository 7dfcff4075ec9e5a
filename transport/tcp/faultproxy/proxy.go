// Package faultproxy is a user-space TCP proxy that injects faults, for
// tests. The kernel of the machines goccl is tested on has no netem, so
// delay, loss and stalls cannot be made with tc; a proxy in front of a
// listener can make all of them, per connection or for every connection,
// deterministically or from a seeded generator.
//
// A Proxy listens, and for every connection it accepts dials its target and
// forwards bytes both ways. On command it can
//
//   - delay: hold every chunk for an added latency before forwarding it
//     (the throughput is not limited: chunks in flight overlap);
//   - drop: discard the bytes of one direction while keeping the connection
//     open, a black hole (the sender's kernel sees its data acknowledged);
//   - stall: stop forwarding and stop reading, so that the proxy's and
//     then the sender's socket buffers fill and the sender blocks;
//   - cut: reset both sides of the connection (RST, as a crashed host's
//     kernel or a firewall would); connections accepted while the proxy is
//     cut are reset at once.
//
// Faults set on the Proxy apply to every open connection and to the
// connections accepted later; faults set on a Conn apply to that
// connection only. Heal undoes drop, stall and delay (not a cut).
//
// The proxy's own sockets use the system defaults (no TCP_USER_TIMEOUT, no
// keepalive): it is the path, and the endpoints' settings are under test.
package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Direction selects the bytes a fault applies to.
type Direction int

const (
	// Upstream is client to target: the bytes of whoever dialed the proxy.
	Upstream Direction = 1 << iota
	// Downstream is target to client.
	Downstream
	// Both is Upstream and Downstream.
	Both = Upstream | Downstream
)

func (d Direction) String() string {
	switch d {
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// Mode is what happens to the bytes of one direction.
type Mode int

const (
	// Forward passes bytes on (after the delay, if any).
	Forward Mode = iota
	// Drop reads and discards bytes: a black hole.
	Drop
	// Stall neither reads nor forwards.
	Stall
)

func (m Mode) String() string {
	switch m {
	case Forward:
		return "forward"
	case Drop:
		return "drop"
	case Stall:
		return "stall"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Fault is the state of one direction.
type Fault struct {
	Mode  Mode
	Delay time.Duration // added latency per chunk (Forward only)
}

// Random injects faults chosen by a generator seeded with Seed: a
// connection's draws depend only on Seed, the connection's number and the
// sequence of chunks it carries, so a run with the same traffic repeats.
type Random struct {
	Seed uint64
	// MaxDelay: every chunk is delayed by a uniform draw in [0, MaxDelay),
	// on top of any Delay set.
	MaxDelay time.Duration
	// CutProb is the probability that a chunk, instead of being forwarded,
	// cuts its connection.
	CutProb float64
}

// Options configure a Proxy. The zero value is usable.
type Options struct {
	// ChunkSize is the largest read, and so the unit of delay and of
	// random draws. Default 32 KiB.
	ChunkSize int
	// Queue is how many chunks per direction may wait in the proxy for
	// their delay to pass before it stops reading. Default 256.
	Queue int
	// DialTimeout bounds the dial to the target. Default 5 s.
	DialTimeout time.Duration
	// Random, if set, injects random faults into every connection.
	Random *Random
	// Logger receives a line per connection opened and closed, and per
	// fault injected at random (Info). Default: none.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.ChunkSize <= 0 {
		o.ChunkSize = 32 << 10
	}
	if o.Queue <= 0 {
		o.Queue = 256
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Proxy forwards the connections it accepts to its target, with faults.
// Its methods are safe for concurrent use.
type Proxy struct {
	opts   Options
	target string
	ln     net.Listener

	mu     sync.Mutex
	closed bool
	cut    bool
	faults [2]Fault // defaults for new connections, by direction index
	conns  map[*Conn]struct{}
	next   int

	wg sync.WaitGroup
}

// Listen starts a proxy listening on listen (host:port, port 0 for any)
// that forwards to target (host:port). It does not block.
func Listen(listen, target string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{opts: opts.withDefaults(), target: target, ln: ln, conns: map[*Conn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() netip.AddrPort { return p.ln.Addr().(*net.TCPAddr).AddrPort() }

// Target is the address connections are forwarded to.
func (p *Proxy) Target() string { return p.target }

// Conns returns the open connections in the order they were accepted.
func (p *Proxy) Conns() []*Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]*Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	sortConns(cs)
	return cs
}

func sortConns(cs []*Conn) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].id < cs[j-1].id; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

// Set sets the fault of direction dir on every open connection and on the
// connections accepted later.
func (p *Proxy) Set(dir Direction, f Fault) {
	p.mu.Lock()
	for i := range 2 {
		if dir&(1<<i) != 0 {
			p.faults[i] = f
		}
	}
	cs := make([]*Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Set(dir, f)
	}
}

// Delay adds latency d to every chunk in direction dir, on all connections.
func (p *Proxy) Delay(dir Direction, d time.Duration) { p.Set(dir, Fault{Mode: Forward, Delay: d}) }

// Drop black-holes direction dir on all connections.
func (p *Proxy) Drop(dir Direction) { p.Set(dir, Fault{Mode: Drop}) }

// Stall stops direction dir on all connections.
func (p *Proxy) Stall(dir Direction) { p.Set(dir, Fault{Mode: Stall}) }

// Heal forwards both directions of all connections without delay again,
// and accepts new connections if the proxy was cut.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.Set(Both, Fault{})
}

// Cut resets every open connection, and every connection accepted until
// Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	cs := make([]*Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	p.mu.Unlock()
	for _, c := range cs {
		c.Cut()
	}
}

// Close stops listening, resets every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.logf("faultproxy %s: accept: %v", p.Addr(), err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.open(nc.(*net.TCPConn))
	}
}

// open dials the target for a new client and starts forwarding.
func (p *Proxy) open(client *net.TCPConn) {
	defer p.wg.Done()
	p.mu.Lock()
	refuse := p.cut || p.closed
	p.mu.Unlock()
	if refuse {
		reset(client)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.DialTimeout)
	nc, err := (&net.Dialer{KeepAlive: -1}).DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		p.logf("faultproxy %s: dial %s for %s: %v", p.Addr(), p.target, client.RemoteAddr(), err)
		reset(client)
		return
	}
	server := nc.(*net.TCPConn)
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		reset(client)
		reset(server)
		return
	}
	c := newConn(p, p.next, client, server, p.faults)
	p.next++
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	p.logf("faultproxy %s: conn %d: %s -> %s", p.Addr(), c.id, c.client, p.target)
	c.run() // returns when the connection is over
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.logf("faultproxy %s: conn %d closed (%v)", p.Addr(), c.id, c.Stats())
}

// reset closes c with an RST instead of a FIN.
func reset(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

// logf logs an Info line "faultproxy ADDR: ...".
func (p *Proxy) logf(format string, args ...any) {
	if p.opts.Logger.Enabled(context.Background(), slog.LevelInfo) {
		p.opts.Logger.Info(fmt.Sprintf(format, args...))
	}
}
