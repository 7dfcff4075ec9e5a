package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is one proxied connection: the client that dialed the proxy and the
// proxy's connection to the target. Its methods are safe for concurrent use.
type Conn struct {
	p      *Proxy
	id     int
	client netip.AddrPort
	cc, sc *net.TCPConn // client side, server (target) side

	mu      sync.Mutex
	faults  [2]Fault      // by direction index: 0 upstream, 1 downstream
	changed chan struct{} // closed and replaced when faults change

	done     chan struct{}
	doneOnce sync.Once
	eofs     atomic.Int32 // directions that ended with a FIN

	forwarded, dropped [2]atomic.Int64
}

func newConn(p *Proxy, id int, cc, sc *net.TCPConn, faults [2]Fault) *Conn {
	return &Conn{
		p: p, id: id, cc: cc, sc: sc,
		client:  cc.RemoteAddr().(*net.TCPAddr).AddrPort(),
		faults:  faults,
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// ID numbers the proxy's connections from 0 in the order they were
// accepted.
func (c *Conn) ID() int { return c.id }

// Client is the address of the peer that dialed the proxy.
func (c *Conn) Client() netip.AddrPort { return c.client }

// Done is closed when the connection is over (closed by both ends, or cut).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Stats counts the bytes forwarded and dropped so far.
type Stats struct {
	Forwarded, Dropped [2]int64 // by direction: [0] upstream, [1] downstream
}

func (s Stats) String() string {
	return fmt.Sprintf("up %d forwarded %d dropped, down %d forwarded %d dropped",
		s.Forwarded[0], s.Dropped[0], s.Forwarded[1], s.Dropped[1])
}

// Stats returns the connection's byte counts.
func (c *Conn) Stats() Stats {
	var s Stats
	for i := range 2 {
		s.Forwarded[i] = c.forwarded[i].Load()
		s.Dropped[i] = c.dropped[i].Load()
	}
	return s
}

// Set sets the fault of direction dir on this connection.
func (c *Conn) Set(dir Direction, f Fault) {
	c.mu.Lock()
	for i := range 2 {
		if dir&(1<<i) != 0 {
			c.faults[i] = f
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// Delay adds latency d to every chunk in direction dir.
func (c *Conn) Delay(dir Direction, d time.Duration) { c.Set(dir, Fault{Mode: Forward, Delay: d}) }

// Drop black-holes direction dir: its bytes are read and discarded.
func (c *Conn) Drop(dir Direction) { c.Set(dir, Fault{Mode: Drop}) }

// Stall stops reading and forwarding direction dir.
func (c *Conn) Stall(dir Direction) { c.Set(dir, Fault{Mode: Stall}) }

// Heal forwards both directions without delay again.
func (c *Conn) Heal() { c.Set(Both, Fault{}) }

// Cut resets both sides of the connection. Bytes held by the proxy are
// lost.
func (c *Conn) Cut() {
	c.doneOnce.Do(func() {
		close(c.done)
		reset(c.cc)
		reset(c.sc)
	})
}

// closeGracefully ends a connection whose both directions finished.
func (c *Conn) closeGracefully() {
	c.doneOnce.Do(func() {
		close(c.done)
		c.cc.Close()
		c.sc.Close()
	})
}

func (c *Conn) fault(i int) (Fault, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.faults[i], c.changed
}

// waitNotStalled blocks while direction i is stalled; false if the
// connection ended meanwhile.
func (c *Conn) waitNotStalled(i int) bool {
	for {
		f, changed := c.fault(i)
		if f.Mode != Stall {
			select {
			case <-c.done:
				return false
			default:
				return true
			}
		}
		select {
		case <-changed:
		case <-c.done:
			return false
		}
	}
}

type chunk struct {
	b  []byte
	at time.Time // when the proxy read it
}

// run forwards both directions until the connection is over.
func (c *Conn) run() {
	var wg sync.WaitGroup
	for i, ends := range [2][2]*net.TCPConn{{c.cc, c.sc}, {c.sc, c.cc}} {
		q := make(chan chunk, c.p.opts.Queue)
		wg.Add(2)
		go func() { defer wg.Done(); c.read(i, ends[0], q) }()
		go func() { defer wg.Done(); c.write(i, ends[1], q) }()
	}
	wg.Wait()
}

// read moves direction i's bytes from src into q; it closes q at EOF.
func (c *Conn) read(i int, src *net.TCPConn, q chan<- chunk) {
	for {
		if !c.waitNotStalled(i) {
			return
		}
		buf := make([]byte, c.p.opts.ChunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case q <- chunk{buf[:n], time.Now()}:
			case <-c.done:
				return
			}
		}
		if errors.Is(err, io.EOF) {
			close(q)
			return
		}
		if err != nil {
			// Reset by the peer or closed by a cut: cut the other side too.
			c.Cut()
			return
		}
	}
}

// write forwards direction i's chunks from q to dst, applying the faults.
func (c *Conn) write(i int, dst *net.TCPConn, q <-chan chunk) {
	var rng *rand.Rand
	r := c.p.opts.Random
	if r != nil {
		rng = rand.New(rand.NewPCG(r.Seed, uint64(c.id)*2+uint64(i)))
	}
	var timer *time.Timer
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-q:
		case <-c.done:
			return
		}
		if !ok {
			// EOF. A black hole swallows the FIN as well.
			if f, _ := c.fault(i); f.Mode != Drop {
				dst.CloseWrite()
			}
			if c.eofs.Add(1) == 2 {
				c.closeGracefully()
			}
			return
		}
		var extra time.Duration
		if rng != nil {
			if r.MaxDelay > 0 {
				extra = time.Duration(rng.Int64N(int64(r.MaxDelay)))
			}
			if r.CutProb > 0 && rng.Float64() < r.CutProb {
				c.p.logf("faultproxy %s: conn %d: random cut (%v)", c.p.Addr(), c.id, Direction(1<<i))
				c.Cut()
				return
			}
		}
		for {
			if !c.waitNotStalled(i) {
				return
			}
			f, changed := c.fault(i)
			if f.Mode == Drop {
				break
			}
			wait := time.Until(ch.at.Add(f.Delay + extra))
			if wait <= 0 {
				break
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-changed: // re-evaluate: healed, dropped or stalled meanwhile
				timer.Stop()
			case <-c.done:
				return
			}
		}
		if f, _ := c.fault(i); f.Mode == Drop {
			c.dropped[i].Add(int64(len(ch.b)))
			continue
		}
		if _, err := dst.Write(ch.b); err != nil {
			c.Cut()
			return
		}
		c.forwarded[i].Add(int64(len(ch.b)))
	}
}
