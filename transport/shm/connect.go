package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// Connecting. Of two endpoints, the one whose (device token, endpoint
// token) is smaller dials the other's device socket; the device checks the
// dialer's credentials (SO_PEERCRED: same uid) and routes the connection by
// the endpoint token its hello names to that endpoint, whose Connect
// checks that the dialer is the process and endpoint its blob names (pid,
// tokens). The dialer checks the listener's credentials the same way. Then
// both sides send their setup frame with two descriptors, the device's
// control segment and the endpoint's transmit segment, map the peer's, and
// are connected.

// offer is a dialer's connection accepted by the device, waiting for the
// endpoint it names.
type offer struct {
	c     *net.UnixConn
	fr    *frameReader
	hello frame
	pid   int32
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// handshake checks an accepted connection's credentials, reads its hello
// (bounded by HandshakeTimeout) and offers it to the endpoint it names.
func (d *Device) handshake(c *net.UnixConn) {
	defer d.wg.Done()
	cred, err := peerCred(c)
	if err != nil {
		d.logf("dropping a connection: peer credentials: %v", err)
		c.Close()
		return
	}
	if int(cred.Uid) != d.uid {
		d.logf("refusing a connection from pid %d: it runs as uid %d, not as this process (uid %d)", cred.Pid, cred.Uid, d.uid)
		c.Close()
		return
	}
	fr := newFrameReader(c)
	var h frame
	if _, err := fr.read(&h, time.Now().Add(d.opts.HandshakeTimeout)); err != nil || h.typ != frameHello {
		d.logf("dropping a connection from pid %d: reading its hello: %v (frame type %d)", cred.Pid, err, h.typ)
		c.Close()
		return
	}
	d.mu.Lock()
	e := d.eps[h.dst]
	d.mu.Unlock()
	status := helloRefused
	if e == nil {
		status = helloUnknown
	} else if e.offer(&offer{c: c, fr: fr, hello: h, pid: cred.Pid}) {
		return
	}
	ack := frame{typ: frameHelloAck, status: uint8(status), dst: h.dst, src: h.src}
	c.SetWriteDeadline(time.Now().Add(d.opts.HandshakeTimeout))
	writeFrame(c, &ack)
	d.logf("dropping a connection from pid %d: hello names %s endpoint %x", cred.Pid, map[int]string{helloUnknown: "an unknown", helloRefused: "a busy"}[status], h.dst[:4])
	c.Close()
}

// offer hands a dialer's connection to the endpoint, for its Connect.
func (e *endpoint) offer(o *offer) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.live.Load() || (e.connecting && e.dialer) {
		return false
	}
	select {
	case e.incoming <- o:
		return true
	default:
		return false
	}
}

// dials reports whether the endpoint with tokens (dev, tok) dials the one
// with (pdev, ptok).
func dials(dev, tok, pdev, ptok [16]byte) bool {
	if c := bytes.Compare(dev[:], pdev[:]); c != 0 {
		return c < 0
	}
	return bytes.Compare(tok[:], ptok[:]) < 0
}

// Connect connects to the endpoint that published remote. It blocks until
// the connection is up on this side or ctx is done. The peer must be on
// this host (same HostID) and run as the same user; the process at the
// other end of the socket must be the one the blob names.
func (e *endpoint) Connect(ctx context.Context, remote []byte) error {
	a, err := decodeAddress(remote)
	if err != nil {
		return err
	}
	if a.host != e.dev.host {
		return fmt.Errorf("shm: connect to %v: the peer is on another host, in another network, pid or user namespace, or runs as another user (see HostID): %w", &a, transport.ErrInvalid)
	}
	if a.device == e.dev.token && a.token == e.token {
		return fmt.Errorf("shm: connect: an endpoint cannot connect to itself: %w", transport.ErrInvalid)
	}
	dial := dials(e.dev.token, e.token, a.device, a.token)
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return fmt.Errorf("shm: connect: endpoint: %w", transport.ErrClosed)
	case e.connecting:
		e.mu.Unlock()
		return fmt.Errorf("shm: connect: Connect was already called: %w", transport.ErrInvalid)
	}
	e.connecting, e.dialer = true, dial
	e.peer = a
	e.peerName = fmt.Sprintf("pid %d (endpoint %x)", a.pid, a.token[:4])
	e.mu.Unlock()
	var c *net.UnixConn
	var fr *frameReader
	if dial {
		c, fr, err = e.dial(ctx)
	} else {
		c, fr, err = e.await(ctx)
	}
	if err == nil {
		err = e.setup(ctx, c, fr)
	}
	if err != nil {
		if c != nil {
			c.Close()
		}
		e.rxMu.Lock()
		e.txMu.Lock()
		e.mu.Lock()
		if e.err == nil {
			e.err = err
			e.failed.Store(true)
		}
		if !e.live.Load() {
			e.unmapLocked()
		}
		e.mu.Unlock()
		e.txMu.Unlock()
		e.rxMu.Unlock()
		return err
	}
	return nil
}

// dial connects to the peer's device socket, checks who listens on it and
// has the hello accepted.
func (e *endpoint) dial(ctx context.Context) (*net.UnixConn, *frameReader, error) {
	name := socketName(e.peer.device)
	var dialer net.Dialer
	var c *net.UnixConn
	for {
		conn, err := dialer.DialContext(ctx, "unixpacket", name)
		if err == nil {
			c = conn.(*net.UnixConn)
			break
		}
		switch {
		case ctx.Err() != nil:
			return nil, nil, fmt.Errorf("shm: connect to %s: %w", e.peerName, ctx.Err())
		case errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.ENOENT):
			return nil, nil, fmt.Errorf("shm: connect to %s: no device listens (the peer closed or exited): %w", e.peerName, transport.ErrPeerClosed)
		case errors.Is(err, unix.EAGAIN):
			time.Sleep(time.Millisecond) // the listener's backlog is full
			continue
		}
		return nil, nil, fmt.Errorf("shm: connect to %s: %v: %w", e.peerName, err, transport.ErrLink)
	}
	fail := func(err error) (*net.UnixConn, *frameReader, error) {
		c.Close()
		return nil, nil, err
	}
	cred, err := peerCred(c)
	if err != nil {
		return fail(fmt.Errorf("shm: connect to %s: peer credentials: %v: %w", e.peerName, err, transport.ErrLink))
	}
	if int(cred.Uid) != e.dev.uid || uint32(cred.Pid) != e.peer.pid {
		return fail(fmt.Errorf("shm: connect to %s: the socket belongs to pid %d uid %d, not to pid %d uid %d as the address says: %w",
			e.peerName, cred.Pid, cred.Uid, e.peer.pid, e.dev.uid, transport.ErrInvalid))
	}
	hello := frame{typ: frameHello, dst: e.peer.token, src: e.token, dev: e.dev.token, a32: uint32(e.dev.pid)}
	c.SetWriteDeadline(time.Now().Add(e.dev.opts.HandshakeTimeout))
	if err := writeFrame(c, &hello); err != nil {
		return fail(fmt.Errorf("shm: connect to %s: sending hello: %v: %w", e.peerName, err, transport.ErrLink))
	}
	fr := newFrameReader(c)
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	var ack frame
	_, err = fr.read(&ack, time.Time{})
	if !stop() && ctx.Err() != nil {
		return fail(fmt.Errorf("shm: connect to %s: waiting for the peer to accept: %w", e.peerName, ctx.Err()))
	}
	switch {
	case err != nil:
		return fail(fmt.Errorf("shm: connect to %s: reading the hello answer: %v: %w", e.peerName, err, transport.ErrPeerClosed))
	case ack.typ != frameHelloAck || ack.dst != e.peer.token || ack.src != e.token:
		return fail(fmt.Errorf("shm: connect to %s: unexpected hello answer (type %d): %w", e.peerName, ack.typ, transport.ErrLink))
	case ack.status == helloUnknown:
		return fail(fmt.Errorf("shm: connect to %s: the peer has no such endpoint (closed?): %w", e.peerName, transport.ErrPeerClosed))
	case ack.status != helloOK:
		return fail(fmt.Errorf("shm: connect to %s: the peer refused the connection: %w", e.peerName, transport.ErrInvalid))
	}
	return c, fr, nil
}

// await waits for the peer's connection and checks that it comes from the
// process and endpoint the peer's blob names.
func (e *endpoint) await(ctx context.Context) (*net.UnixConn, *frameReader, error) {
	for {
		select {
		case o := <-e.incoming:
			ack := frame{typ: frameHelloAck, status: helloOK, dst: o.hello.dst, src: o.hello.src}
			if o.hello.src != e.peer.token || o.hello.dev != e.peer.device || uint32(o.pid) != e.peer.pid || o.hello.a32 != e.peer.pid {
				e.dev.logf("refusing a connection from pid %d to endpoint %x: not the peer its Connect names (%s)", o.pid, e.token[:4], e.peerName)
				ack.status = helloRefused
			}
			o.c.SetWriteDeadline(time.Now().Add(e.dev.opts.HandshakeTimeout))
			err := writeFrame(o.c, &ack)
			if ack.status != helloOK || err != nil {
				o.c.Close()
				continue
			}
			return o.c, o.fr, nil
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("shm: connect to %s: waiting for the peer to connect: %w", e.peerName, ctx.Err())
		}
	}
}

// Limits on what a peer's setup may say.
const (
	minRingCells = (64 << 10) / cellSize
	maxRingCells = (1 << 30) / cellSize
)

// setup exchanges the shared segments and starts the connection.
func (e *endpoint) setup(ctx context.Context, c *net.UnixConn, fr *frameReader) error {
	o := &e.dev.opts
	cells := uint64(o.RingSize / cellSize)
	size := txSize(cells)
	fd, err := newMemfd("goccl-shm-tx", size)
	if err != nil {
		return fmt.Errorf("shm: connect to %s: transmit segment: %w", e.peerName, err)
	}
	tx, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("shm: connect to %s: map transmit segment: %w", e.peerName, err)
	}
	writeMagic(tx, txMagic)
	binary.LittleEndian.PutUint64(tx[txCellsN:], cells)
	u32(tx, txOpen).Store(1)
	e.mu.Lock()
	e.txFD, e.tx = fd, tx
	e.mu.Unlock()

	mine := frame{typ: frameSetup, a32: uint32(e.cq.index), a: cells, b: uint64(len(e.dev.slots)), c: uint64(len(e.dev.cqs)),
		d: uint64(uintptr(unsafe.Pointer(&e.token[0]))), dst: e.token, e: uint64(e.maxChunk)}
	deadline := time.Now().Add(o.HandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c.SetWriteDeadline(deadline)
	if err := writeFrame(c, &mine, e.dev.ctlFD, fd); err != nil {
		return fmt.Errorf("shm: connect to %s: sending setup: %v: %w", e.peerName, err, transport.ErrLink)
	}
	var f frame
	fds, err := fr.read(&f, deadline)
	if err != nil {
		return fmt.Errorf("shm: connect to %s: reading setup: %v: %w", e.peerName, err, transport.ErrLink)
	}
	defer closeAll(fds)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("shm: connect to %s: bad setup: %s: %w", e.peerName, fmt.Sprintf(format, args...), transport.ErrLink)
	}
	if f.typ != frameSetup {
		return bad("frame of type %d", f.typ)
	}
	pcells, slots, maxCQs := f.a, f.b, f.c
	if pcells < minRingCells || pcells > maxRingCells || pcells&(pcells-1) != 0 {
		return bad("ring of %d cells", pcells)
	}
	if slots == 0 || slots > maxSlots || slots&(slots-1) != 0 || maxCQs == 0 || maxCQs > maxBells || uint64(f.a32) >= maxCQs {
		return bad("%d slots, %d bells, bell %d", slots, maxCQs, f.a32)
	}
	if f.e == 0 || f.e > pcells*cellSize/16 {
		return bad("records of up to %d bytes in a ring of %d cells", f.e, pcells)
	}
	if f.dst != e.peer.token {
		return bad("probe token")
	}
	bellsEnd, csize := ctlBellsEnd(int(maxCQs)), ctlSize(int(maxCQs), int(slots))
	peerCtl, err := mapPeer(fds[0], int64(csize), 0, bellsEnd, unix.PROT_READ|unix.PROT_WRITE, true)
	if err != nil {
		return bad("control segment: %v", err)
	}
	peerTab, err := mapPeer(fds[0], int64(csize), int64(bellsEnd), csize-bellsEnd, unix.PROT_READ, true)
	if err != nil {
		unix.Munmap(peerCtl)
		return bad("region table: %v", err)
	}
	peerTx, err := mapPeer(fds[1], int64(txSize(pcells)), 0, 0, unix.PROT_READ|unix.PROT_WRITE, false)
	if err != nil {
		unix.Munmap(peerCtl)
		unix.Munmap(peerTab)
		return bad("transmit segment: %v", err)
	}
	e.mu.Lock()
	e.peerCtl, e.peerTab, e.peerTx = peerCtl, peerTab, peerTx
	e.mu.Unlock()
	if string(peerCtl[:8]) != ctlMagic || binary.LittleEndian.Uint32(peerCtl[ctlPid:]) != e.peer.pid {
		return bad("control segment header")
	}
	if string(peerTx[:8]) != txMagic || binary.LittleEndian.Uint64(peerTx[txCellsN:]) != pcells {
		return bad("transmit segment header")
	}
	if int(e.peer.pid) == e.dev.pid && !o.noSelf {
		if v, ok := devices.Load(e.peer.device); ok {
			e.self = v.(*Device)
		}
	}
	if !o.DisableCMA {
		e.cma = probeCMA(int(e.peer.pid), f.d, f.dst)
	}
	e.myClock, e.peerClock = raceClock(e.token), raceClock(e.peer.token)
	e.out = producer{ring: requestRing(tx, cells)}
	e.outAns = producer{ring: answerRing(tx, cells)}
	e.in = consumer{ring: requestRing(peerTx, pcells), maxPayload: uint32(f.e)}
	e.inAns = consumer{ring: answerRing(peerTx, pcells), maxPayload: uint32(min(f.e, ansCells(pcells)*cellSize/4))}
	for _, r := range []*ring{&e.out.ring, &e.outAns.ring, &e.in.ring, &e.inAns.ring} {
		r.mine, r.theirs = e.myClock, e.peerClock
	}
	e.myBusy, e.peerBusy = u64(tx, txBusy), u64(peerTx, txBusy)
	e.myNudge, e.peerNudge = u32(tx, txNudge), u32(peerTx, txNudge)
	e.myBlocked, e.peerBlocked = u32(tx, txBlocked), u32(peerTx, txBlocked)
	e.myOpen, e.peerOpen = u32(tx, txOpen), u32(peerTx, txOpen)
	e.peerBell = bellAt(peerCtl, int(f.a32))
	c.SetDeadline(time.Time{})
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fmt.Errorf("shm: connect to %s: endpoint: %w", e.peerName, transport.ErrClosed)
	}
	e.conn = c
	e.live.Store(true)
	e.mu.Unlock()
	if err := e.dev.connected(e); err != nil {
		e.live.Store(false)
		return fmt.Errorf("shm: connect to %s: %w", e.peerName, err)
	}
	e.reader.Add(1)
	go e.readLoop(fr)
	return nil
}
