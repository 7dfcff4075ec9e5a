package mem

import (
	"fmt"
	"sync/atomic"

	"github.com/goccl/goccl/transport"
)

// conn is a connection between two endpoints.
type conn struct {
	a, b *Endpoint
	// budget is how many more requests (sends, writes, reads, in either
	// direction) the connection carries before it is cut; negative means
	// no limit.
	budget atomic.Int64
}

// spend counts one request against the budget and reports whether the
// budget was already spent.
func (c *conn) spend() bool {
	if c.budget.Load() < 0 {
		return false
	}
	return c.budget.Add(-1) < 0
}

// cut breaks the connection: both endpoints enter the error state with a
// cause wrapping transport.ErrLink.
func (c *conn) cut(why string) {
	err := fmt.Errorf("mem: connection %v <-> %v: %s: %w", c.a, c.b, why, transport.ErrLink)
	c.a.fail(err)
	c.b.fail(err)
}

// Cut cuts e's connection now, as a failed link: both sides enter the error
// state with ErrLink and their pending requests complete with errors. It
// does nothing if e is not connected. It does not block.
func (e *Endpoint) Cut() {
	e.mu.Lock()
	c := e.conn
	e.mu.Unlock()
	if c != nil {
		c.cut("cut by Endpoint.Cut")
	}
}

// CutAfter arms e's connection to be cut after k more sends, writes and
// reads (counted over both directions) have been carried out; the next one
// fails with ErrLink. A negative k disarms. It does nothing if e is not
// connected.
func (e *Endpoint) CutAfter(k int) {
	e.mu.Lock()
	c := e.conn
	e.mu.Unlock()
	if c != nil {
		c.budget.Store(int64(max(k, -1)))
	}
}

// conns returns the connections between endpoints of a and b (of a and
// anything if b is nil).
func conns(a, b transport.Device) []*conn {
	da, ok := a.(*Device)
	if !ok {
		return nil
	}
	var out []*conn
	for _, e := range da.endpoints() {
		e.mu.Lock()
		c, p := e.conn, e.peer
		e.mu.Unlock()
		if c != nil && (b == nil || p.dev == b) {
			out = append(out, c)
		}
	}
	return out
}

// Cut cuts every connection between endpoints of devices a and b, as a
// failed link, and returns how many it cut. Connections made later are not
// affected. It does not block.
func (n *Network) Cut(a, b transport.Device) int {
	cs := conns(a, b)
	for _, c := range cs {
		c.cut(fmt.Sprintf("cut by Network.Cut(%s, %s)", a.Name(), b.Name()))
	}
	return len(cs)
}

// Isolate cuts every connection of device d, as if its host dropped off
// the network, and returns how many it cut.
func (n *Network) Isolate(d transport.Device) int {
	cs := conns(d, nil)
	for _, c := range cs {
		c.cut(fmt.Sprintf("cut by Network.Isolate(%s)", d.Name()))
	}
	return len(cs)
}

// CutAfter arms every existing connection between a and b to be cut after
// k more requests each (see Endpoint.CutAfter), and returns how many it
// armed.
func (n *Network) CutAfter(a, b transport.Device, k int) int {
	cs := conns(a, b)
	for _, c := range cs {
		c.budget.Store(int64(max(k, -1)))
	}
	return len(cs)
}
