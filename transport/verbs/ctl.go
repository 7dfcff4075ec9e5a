package verbs

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// The control plane: verbs tells neither side of an RC connection that the
// other closed, and tells the target of a refused access nothing unless it
// has a receive posted. Each endpoint therefore has a second, tiny RC queue
// pair on a device-wide completion queue, served by one goroutine, that
// carries two messages:
//
//	ctlBye      the peer closed its endpoint: fail everything with ErrPeerClosed
//	ctlRefused  the peer's access was refused by this side's adapter: report
//	            OpRemoteError (once) and enter the error state
//
// A message is 16 bytes: kind (u8), three zero bytes, the ibv_wc_status the
// peer saw (u32, big endian), eight zero bytes.
const (
	ctlBye     = 1
	ctlRefused = 2

	ctlMsgLen  = 16
	ctlRecvs   = 4            // receive slots 0..3
	ctlByeSlot = ctlRecvs     // send slot for ctlBye
	ctlRefSlot = ctlRecvs + 1 // send slot for ctlRefused
	ctlPingWR  = ctlRecvs + 2 // work request id of the keepalive
	ctlBufLen  = 4096         // one page per endpoint
	ctlPerConn = ctlRecvs + 3 // completions one connection can have queued
	ctlCQMax   = 1 << 15      // device-wide control completion queue
)

type ctlPlane struct {
	dev      *Device
	hw       ibv.CQ
	cap      int
	file     *os.File
	evDone   chan struct{}
	stop     chan struct{} // closed by close: ends the keepalive ticker
	tickDone chan struct{}

	mu     sync.Mutex
	closed bool
	conns  map[uint32]*ctlConn // by control queue pair number
	wc     [32]ibv.WC
}

// ctlConn is one endpoint's control queue pair and its buffer.
type ctlConn struct {
	plane *ctlPlane
	ep    *endpoint
	qp    ibv.QP
	qpn   uint32
	psn   uint32
	buf   []byte // transport.Alloc: outside the Go heap
	mr    ibv.MR
	sent  chan int // send slots whose completion arrived

	live    atomic.Bool // connected; keepalives are sent
	pinging bool        // a keepalive is in flight; guarded by ctlPlane.mu

	closeOnce sync.Once
}

func newCtlPlane(d *Device) (*ctlPlane, error) {
	n := ctlCQMax
	if d.dattr.MaxCQE > 0 && n > d.dattr.MaxCQE {
		n = d.dattr.MaxCQE
	}
	hw, err := d.ctx.NewCQ(n)
	if err != nil {
		return nil, err
	}
	f, err := channelFile(hw, "ibv-ctl-channel")
	if err != nil {
		hw.Close()
		return nil, err
	}
	p := &ctlPlane{
		dev:    d,
		hw:     hw,
		cap:    n / ctlPerConn,
		file:   f,
		evDone: make(chan struct{}),
		conns:  make(map[uint32]*ctlConn),
	}
	p.stop, p.tickDone = make(chan struct{}), make(chan struct{})
	go serveEvents(d, p.file, p.hw, p.evDone, p.poll)
	// The interval is read here, by the opener, not by the goroutine:
	// tests change it between devices.
	go p.keepalive(keepaliveInterval)
	return p, nil
}

// poll handles every control completion queued. Messages are handled under
// p.mu so that a connection cannot be closed (its buffer unmapped) meanwhile.
func (p *ctlPlane) poll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed {
		n, err := p.hw.Poll(p.wc[:])
		if err != nil {
			p.dev.logf("verbs: %s: control queue: %v", p.dev.name, err)
			return
		}
		for _, w := range p.wc[:n] {
			c := p.conns[w.QPNum]
			if c == nil {
				continue
			}
			slot := int(w.WRID)
			if slot == ctlPingWR {
				c.pinging = false
				if w.Status != ibv.WCSuccess {
					p.dev.logf("verbs: %s: control queue pair %d: keepalive: %s", p.dev.name, c.qpn, ibv.StatusString(w.Status))
				}
				if w.Status != ibv.WCSuccess && c.live.Swap(false) {
					if w.Status != ibv.WCWRFlushErr {
						c.ep.peerLost(w.Status)
					}
				}
				continue
			}
			if slot >= ctlRecvs {
				select {
				case c.sent <- slot:
				default:
				}
				continue
			}
			if w.Status != ibv.WCSuccess {
				continue // flushed: the queue pair is going away
			}
			msg := c.buf[slot*ctlMsgLen:][:ctlMsgLen]
			kind, status := msg[0], binary.BigEndian.Uint32(msg[4:])
			switch kind {
			case ctlBye:
				c.ep.peerClosed()
			case ctlRefused:
				c.ep.peerRefused(status)
			}
			c.postRecv(slot)
		}
		if n < len(p.wc) {
			return
		}
	}
}

// serveEvents consumes the events of hw's completion channel (each
// acknowledged and the queue re-armed) and calls fn after each, until f is
// closed. It closes done when it returns. Nobody waits on the control
// queue, so a goroutine serves it.
func serveEvents(d *Device, f *os.File, hw ibv.CQ, done chan struct{}, fn func()) {
	defer close(done)
	rc, err := f.SyscallConn()
	if err != nil {
		d.logf("verbs: %s: completion channel: %v", d.name, err)
		return
	}
	for {
		var evErr error
		err := rc.Read(func(uintptr) bool {
			ok, err := hw.ConsumeEvent()
			if err != nil {
				evErr = err
				return true
			}
			return ok
		})
		if evErr != nil {
			d.logf("verbs: %s: completion channel: %v", d.name, evErr)
			return
		}
		if err != nil {
			return // closed
		}
		fn()
	}
}

func (p *ctlPlane) newConn(ep *endpoint) (*ctlConn, error) {
	d := p.dev
	p.mu.Lock()
	full := len(p.conns) >= p.cap
	p.mu.Unlock()
	if full {
		return nil, fmt.Errorf("too many endpoints on %s (%d): %w", d.name, p.cap, transport.ErrInvalid)
	}
	buf, err := transport.Alloc(ctlBufLen)
	if err != nil {
		return nil, err
	}
	qp, err := d.pd.NewQP(p.hw, 3, ctlRecvs, ctlMsgLen)
	if err != nil {
		transport.Free(buf)
		return nil, err
	}
	c := &ctlConn{plane: p, ep: ep, qp: qp, qpn: qp.Num(), psn: randPSN(), buf: buf, sent: make(chan int, 4)}
	fail := func(err error) (*ctlConn, error) {
		if c.mr != nil {
			c.mr.Dereg()
		}
		qp.Close()
		transport.Free(buf)
		return nil, err
	}
	// Remote write for the peer's zero-length keepalive writes (no memory
	// is exposed: the queue pair's memory regions grant no remote access).
	if err := qp.Init(d.port, ibv.AccessRemoteWrite); err != nil {
		return fail(err)
	}
	c.mr, err = d.pd.RegMR(addrOf(buf), len(buf), ibv.AccessLocalWrite)
	if err != nil {
		return fail(err)
	}
	for i := range ctlRecvs {
		if err := c.postRecvErr(i); err != nil {
			return fail(err)
		}
	}
	p.mu.Lock()
	p.conns[c.qpn] = c
	p.mu.Unlock()
	return c, nil
}

func (c *ctlConn) postRecvErr(slot int) error {
	return c.qp.PostRecv(uint64(slot), addrOf(c.buf)+uintptr(slot*ctlMsgLen), ctlMsgLen, c.mr.LKey())
}

func (c *ctlConn) postRecv(slot int) {
	if err := c.postRecvErr(slot); err != nil {
		c.plane.dev.logf("verbs: %s: control queue pair %d: %v", c.plane.dev.name, c.qpn, err)
	}
}

// send posts a control message; it does not wait.
func (c *ctlConn) send(kind byte, status uint32) error {
	slot := ctlByeSlot
	if kind == ctlRefused {
		slot = ctlRefSlot
	}
	msg := c.buf[slot*ctlMsgLen:][:ctlMsgLen]
	clear(msg)
	msg[0] = kind
	binary.BigEndian.PutUint32(msg[4:], status)
	return c.qp.PostSend(ibv.SendWR{WRID: uint64(slot), Op: ibv.OpSend, Addr: addrOf(c.buf) + uintptr(slot*ctlMsgLen),
		Len: ctlMsgLen, LKey: c.mr.LKey(), Inline: c.qp.MaxInline() >= ctlMsgLen})
}

// bye tells the peer this endpoint is closing and waits up to timeout for
// the peer's adapter to acknowledge it.
func (c *ctlConn) bye(timeout time.Duration) {
	if err := c.send(ctlBye, 0); err != nil {
		return
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case slot := <-c.sent:
			if slot == ctlByeSlot {
				return
			}
		case <-t.C:
			return
		}
	}
}

func (c *ctlConn) close() {
	c.closeOnce.Do(func() {
		p := c.plane
		p.mu.Lock()
		delete(p.conns, c.qpn)
		c.live.Store(false)
		p.mu.Unlock()
		c.qp.Close()
		c.mr.Dereg()
		transport.Free(c.buf)
	})
}

// keepaliveInterval is how often a connected control queue pair sends a
// zero-length RDMA write to its peer. A peer that died without closing
// (its queue pairs destroyed by its kernel, or its host gone) does not
// acknowledge; after the retries (about half a second) the write fails and
// the endpoint enters the error state with ErrLink and ErrPeerClosed, so
// that pending receives do not wait forever.
var keepaliveInterval = time.Second

func (p *ctlPlane) keepalive(every time.Duration) {
	defer close(p.tickDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		for _, c := range p.conns {
			if !c.live.Load() || c.pinging {
				continue
			}
			if err := c.qp.PostSend(ibv.SendWR{WRID: ctlPingWR, Op: ibv.OpWrite}); err != nil {
				p.dev.logf("verbs: %s: control queue pair %d: keepalive: %v", p.dev.name, c.qpn, err)
				c.live.Store(false)
				continue
			}
			c.pinging = true
		}
		p.mu.Unlock()
	}
}

// connected starts keepalives on c.
func (c *ctlConn) connected() { c.live.Store(true) }

func (p *ctlPlane) close() error {
	close(p.stop)
	<-p.tickDone
	p.mu.Lock()
	p.closed = true
	conns := make([]*ctlConn, 0, len(p.conns))
	for _, c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	p.file.Close()
	<-p.evDone
	return p.hw.Close()
}
