package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/goccl/goccl/transport"
)

// Connect connects to the endpoint that published remote.
//
// Of the two endpoints the one with the smaller blob dials: its Connect
// blocks until the peer's device accepted the hello (or ctx is done, or the
// handshake times out). The other side never waits for its peer: its
// Connect records the peer and returns; requests posted before the peer's
// connection arrives are queued, and if it does not arrive within
// Options.ConnectTimeout the endpoint enters the error state (ErrLink).
// So both sides may call Connect in any order, even from one goroutine.
func (e *endpoint) Connect(ctx context.Context, remote []byte) error {
	ra, err := decodeAddress(remote)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tcp: connect to %s: %w", ra.String(), err)
	}
	cmp := bytes.Compare(e.blob, remote)
	if cmp == 0 {
		return fmt.Errorf("tcp: connect to %s: endpoint connected to itself: %w", ra.String(), transport.ErrInvalid)
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return fmt.Errorf("tcp: connect to %s: endpoint: %w", ra.String(), transport.ErrClosed)
	case e.connecting:
		e.mu.Unlock()
		return fmt.Errorf("tcp: connect to %s: endpoint already connected to %s: %w", ra.String(), e.peerName, transport.ErrInvalid)
	}
	e.connecting = true
	e.peer = ra
	e.peerName = ra.String()
	e.dialer = cmp < 0
	if !e.dialer {
		e.connected = true
		if e.parked != nil {
			c, src := e.parked, e.parkedSrc
			e.parked = nil
			if src == ra.token {
				e.startLocked(c)
			} else {
				c.Close()
				e.dev.logf("dropping parked connection from %s: it names endpoint %x, Connect names %x", c.RemoteAddr(), src[:4], ra.token[:4])
			}
		}
		if !e.linked {
			e.timer = time.AfterFunc(e.dev.opts.ConnectTimeout, e.connectTimedOut)
		}
		e.mu.Unlock()
		return nil
	}
	if e.parked != nil {
		e.parked.Close()
		e.parked = nil
	}
	e.mu.Unlock()

	c, err := e.dial(ctx, ra)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil && e.closed {
		c.Close()
		err = fmt.Errorf("tcp: connect to %s: endpoint: %w", ra.String(), transport.ErrClosed)
	}
	if err != nil {
		e.connecting = false
		return err
	}
	e.connected = true
	e.startLocked(c)
	return nil
}

func (e *endpoint) connectTimedOut() {
	e.mu.Lock()
	waiting := !e.linked && e.err == nil && !e.closed
	e.mu.Unlock()
	if waiting {
		e.fail(fmt.Errorf("tcp: connect: peer %s did not connect within %v: %w", e.peerName, e.dev.opts.ConnectTimeout, transport.ErrLink), nil, nil)
	}
}

// dial opens the connection and exchanges hellos.
func (e *endpoint) dial(ctx context.Context, ra address) (*net.TCPConn, error) {
	peer := ra.String()
	d := net.Dialer{KeepAlive: -1}
	if e.dev.from.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(e.dev.from, 0))
	}
	nc, err := d.DialContext(ctx, "tcp", peer)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("tcp: connect to %s: dial: %w", peer, ctx.Err())
		}
		return nil, fmt.Errorf("tcp: connect to %s: dial: %w: %w", peer, err, transport.ErrLink)
	}
	c := nc.(*net.TCPConn)
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	if err := tune(c, &e.dev.opts); err != nil {
		return nil, fmt.Errorf("tcp: connect to %s: %w: %w", peer, err, transport.ErrLink)
	}
	deadline := time.Now().Add(e.dev.opts.HandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var b [helloSize]byte
	h := hello{typ: helloReq, dst: ra.token, src: e.token}
	h.encode(b[:])
	if _, err := c.Write(b[:]); err == nil {
		_, err = io.ReadFull(c, b[:])
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("tcp: connect to %s: handshake: %w", peer, ctx.Err())
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("tcp: connect to %s: handshake: peer hung up: %w", peer, transport.ErrPeerClosed)
		}
		return nil, fmt.Errorf("tcp: connect to %s: handshake: %w: %w", peer, err, transport.ErrLink)
	}
	var a hello
	if err := decodeHello(b[:], &a); err != nil {
		return nil, fmt.Errorf("tcp: connect to %s: handshake answer: %v: %w", peer, err, transport.ErrLink)
	}
	if a.typ != helloAck {
		return nil, fmt.Errorf("tcp: connect to %s: handshake answer of type %d: %w", peer, a.typ, transport.ErrLink)
	}
	switch a.status {
	case helloOK:
	case helloUnknown:
		return nil, fmt.Errorf("tcp: connect to %s: no endpoint %x there (closed?): %w", peer, ra.token[:4], transport.ErrPeerClosed)
	case helloBusy:
		return nil, fmt.Errorf("tcp: connect to %s: endpoint %x is connected to someone else: %w", peer, ra.token[:4], transport.ErrInvalid)
	default:
		return nil, fmt.Errorf("tcp: connect to %s: peer refused the handshake (status %d): %w", peer, a.status, transport.ErrNotSupported)
	}
	if a.dst != ra.token || a.src != e.token {
		return nil, fmt.Errorf("tcp: connect to %s: handshake answer names other endpoints: %w", peer, transport.ErrLink)
	}
	c.SetDeadline(time.Time{})
	ok = true
	return c, nil
}

// acceptable says whether a hello from the endpoint with token src may be
// accepted (checked before answering it).
func (e *endpoint) acceptable(src [16]byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.err != nil || e.linked {
		return false
	}
	if e.connecting {
		return !e.dialer && src == e.peer.token
	}
	return true
}

// attach hands an accepted, answered connection to the endpoint. It
// reports false if the endpoint no longer takes it (the caller closes it).
func (e *endpoint) attach(c *net.TCPConn, src [16]byte) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.err != nil || e.linked {
		return false
	}
	if e.connecting {
		if e.dialer || src != e.peer.token {
			return false
		}
		e.startLocked(c)
		return true
	}
	// Connect not called yet: park it. A newer hello from the same peer
	// replaces an older one (the older one is dead).
	if e.parked != nil {
		e.parked.Close()
	}
	e.parked, e.parkedSrc = c, src
	return true
}

// startLocked adopts the connection and starts its lane. Frames posted
// while the connection was not there yet leave now.
func (e *endpoint) startLocked(c *net.TCPConn) {
	e.linked = true
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	fd, err := takeSocket(c)
	if err != nil {
		c.Close()
		e.mu.Unlock()
		e.fail(fmt.Errorf("tcp: connection to %s: %v: %w", e.peerName, err, transport.ErrLink), nil, nil)
		e.mu.Lock()
		return
	}
	l := newLane(e, fd)
	e.lane.Store(l)
	l.start()
	if len(e.outq) > 0 {
		l.txWant.Store(true)
		l.txNow.Store(true)
		l.armWriter()
	}
}
