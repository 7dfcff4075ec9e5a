package tcp

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// endpoint is one side of a connection (the "pair" of Gloo's tcp backend).
//
// Requests are posted under mu: each goes into the pending FIFO of its kind
// (sends, writes and reads wait for the peer's ACK or response; receives
// wait for a message) and, except receives, into outq, which the writer
// goroutine drains onto the socket. The reader goroutine parses frames and
// places payloads straight into registered memory. Every request leaves its
// FIFO exactly once, and whoever removes it completes it.
type endpoint struct {
	werr  error // the writer's error, while the reader drains (see writeFailed)
	dev   *Device
	cq    *cq
	token [16]byte
	blob  []byte

	mu   sync.Mutex
	cond sync.Cond // wakes the writer

	connecting bool    // Connect in progress or done
	connected  bool    // posts are accepted
	dialer     bool    // this side dialed
	peer       address // the remote blob, once Connect was called
	peerName   string  // peer ip:port for messages
	conn       *net.TCPConn
	parked     *net.TCPConn // accepted before Connect was called
	parkedSrc  [16]byte
	timer      *time.Timer // acceptor: peer must dial within ConnectTimeout
	closed     bool
	err        error       // error state cause; nil while healthy
	failed     atomic.Bool // err != nil, for the writer's hot loop
	lingering  bool        // a NAK is queued: send it, then drain and close

	seq       uint64
	sends     ring[pending]
	writes    ring[pending]
	reads     ring[pending]
	recvs     ring[pending]
	unexp     ring[unexpected]
	outq      []outItem
	sendAcks  uint64 // sends placed, to acknowledge
	writeAcks uint64 // writes placed, to acknowledge
	// immHeld has one entry per write-with-immediate in unexp, counting it
	// and the writes placed after it (before the next one): their
	// acknowledgements wait until a receive consumes the immediate.
	immHeld ring[uint64]

	spares spares // large pooled buffers kept at hand

	wg         sync.WaitGroup // reader and writer
	writerDone chan struct{}  // closed when the writer exits
}

var _ transport.Endpoint = (*endpoint)(nil)

// pending is a posted request waiting to complete.
type pending struct {
	id   uint64 // caller's id
	seq  uint64 // wire id
	r    *region
	off  int
	n    int
	key  uint64 // remote region (write, read)
	roff uint64
}

// unexpected is a message or immediate that arrived before a receive.
type unexpected struct {
	buf    *[]byte // pooled payload, nil for an immediate or empty message
	n      int
	seq    uint64
	imm    uint32
	hasImm bool
}

// outItem is one frame for the writer: a header and, for SEND and WRITE,
// the region the payload is taken from, or for READ_RESP the pooled buffer
// holding the data.
type outItem struct {
	h   header
	r   *region
	off int
	buf *[]byte
}

func newEndpoint(d *Device, q *cq, tok [16]byte) *endpoint {
	e := &endpoint{dev: d, cq: q, token: tok}
	e.cond.L = &e.mu
	a := address{ip: d.host, port: d.port, token: tok}
	e.blob = a.encode()
	return e
}

// LocalAddress returns the endpoint's address blob (a copy).
func (e *endpoint) LocalAddress() []byte { return append([]byte(nil), e.blob...) }

func (e *endpoint) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.peerName
}

// postableLocked says why a request cannot be posted now, or nil.
func (e *endpoint) postableLocked(op string) error {
	switch {
	case e.closed:
		return fmt.Errorf("tcp: post %s: endpoint: %w", op, transport.ErrClosed)
	case e.err != nil:
		return fmt.Errorf("tcp: post %s to %s: %w", op, e.peerName, e.err)
	case !e.connected:
		return fmt.Errorf("tcp: post %s: endpoint not connected: %w", op, transport.ErrInvalid)
	}
	return nil
}

// checkLocal validates the local part of a request.
func (e *endpoint) checkLocal(op string, tr transport.Region, off, n int, need transport.Access) (*region, error) {
	r, ok := e.dev.localRegion(tr)
	if !ok {
		return nil, fmt.Errorf("tcp: post %s: region of another device: %w", op, transport.ErrInvalid)
	}
	if off < 0 || n < 0 || !inBounds(uint64(off), uint64(n), uint64(len(r.buf))) {
		return nil, fmt.Errorf("tcp: post %s: offset %d len %d out of bounds of local region (len %d): %w", op, off, n, len(r.buf), transport.ErrInvalid)
	}
	if n > e.dev.opts.MaxMessage {
		return nil, fmt.Errorf("tcp: post %s: len %d exceeds the limit of %d: %w", op, n, e.dev.opts.MaxMessage, transport.ErrInvalid)
	}
	if r.access&need != need {
		return nil, fmt.Errorf("tcp: post %s: local region grants %v, needs %v: %w", op, r.access, need, transport.ErrInvalid)
	}
	r.mu.RLock()
	revoked := r.revoked
	r.mu.RUnlock()
	if revoked {
		return nil, fmt.Errorf("tcp: post %s: local region key %#x is deregistered: %w", op, r.key, transport.ErrInvalid)
	}
	return r, nil
}

// PostSend queues r.Bytes()[off:off+n] as one message. It never blocks; the
// buffer belongs to the transport until the completion, which arrives once
// the peer placed the message into a posted receive. If the peer dies or the
// link fails first, the send completes with ErrFlushed wrapping ErrPeerClosed
// or ErrLink (within Options.UserTimeout or the keepalive bound).
func (e *endpoint) PostSend(id uint64, tr transport.Region, off, n int) error {
	r, err := e.checkLocal("send", tr, off, n, 0)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.postableLocked("send"); err != nil {
		return err
	}
	if err := e.cq.reserve(); err != nil {
		return fmt.Errorf("tcp: post send to %s: %w", e.peerName, err)
	}
	e.seq++
	e.sends.push(pending{id: id, seq: e.seq, r: r, off: off, n: n})
	e.outq = append(e.outq, e.outItemLocked(header{typ: msgSend, id: e.seq, length: uint64(n)}, r, off, n))
	e.cond.Signal()
	return nil
}

// PostWrite queues a write of local.Bytes()[off:off+n] into the peer's
// region at roff. It never blocks; the buffer belongs to the transport until
// the completion, which arrives once the peer placed the data. The target
// validates key, bounds and access first; a refusal completes the write with
// ErrRemoteAccess and puts both endpoints into the error state. On a dead
// peer it completes as PostSend does.
func (e *endpoint) PostWrite(id uint64, tr transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	r, err := e.checkLocal("write", tr, off, n, 0)
	if err != nil {
		return err
	}
	h := header{typ: msgWrite, key: remote.Key, offset: roff, length: uint64(n)}
	if imm != nil {
		h.flags, h.imm = flagImm, *imm
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.postableLocked("write"); err != nil {
		return err
	}
	if err := e.cq.reserve(); err != nil {
		return fmt.Errorf("tcp: post write to %s: %w", e.peerName, err)
	}
	e.seq++
	h.id = e.seq
	e.writes.push(pending{id: id, seq: e.seq, r: r, off: off, n: n, key: remote.Key, roff: roff})
	e.outq = append(e.outq, e.outItemLocked(h, r, off, n))
	e.cond.Signal()
	return nil
}

// PostRead queues a read of n bytes of the peer's region at roff into
// local.Bytes()[off:off+n]. It never blocks; the buffer belongs to the
// transport until the completion. The peer copies the data when the request
// arrives (so the read sees every write posted before it and none posted
// after). Refusal and a dead peer complete it as PostWrite.
func (e *endpoint) PostRead(id uint64, tr transport.Region, off, n int, remote transport.RemoteRegion, roff uint64) error {
	r, err := e.checkLocal("read", tr, off, n, transport.AccessLocalWrite)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.postableLocked("read"); err != nil {
		return err
	}
	if err := e.cq.reserve(); err != nil {
		return fmt.Errorf("tcp: post read to %s: %w", e.peerName, err)
	}
	e.seq++
	e.reads.push(pending{id: id, seq: e.seq, r: r, off: off, n: n, key: remote.Key, roff: roff})
	e.outq = append(e.outq, outItem{h: header{typ: msgReadReq, id: e.seq, key: remote.Key, offset: roff, length: uint64(n)}})
	e.cond.Signal()
	return nil
}

// PostRecv posts a receive. It never blocks; the buffer belongs to the
// transport until the completion. A message or immediate that already
// arrived completes it at once (the completion is queued before PostRecv
// returns). A message longer than n fails it with ErrLength and puts both
// endpoints into the error state. On a dead peer it completes with
// ErrFlushed wrapping ErrPeerClosed or ErrLink.
func (e *endpoint) PostRecv(id uint64, tr transport.Region, off, n int) error {
	r, err := e.checkLocal("recv", tr, off, n, transport.AccessLocalWrite)
	if err != nil {
		return err
	}
	e.mu.Lock()
	if err := e.postableLocked("recv"); err != nil {
		e.mu.Unlock()
		return err
	}
	if err := e.cq.reserve(); err != nil {
		e.mu.Unlock()
		return fmt.Errorf("tcp: post recv from %s: %w", e.peerName, err)
	}
	p := pending{id: id, r: r, off: off, n: n}
	if e.unexp.len() == 0 {
		e.recvs.push(p)
		e.mu.Unlock()
		return nil
	}
	u := e.unexp.pop()
	if u.hasImm {
		e.cq.push(transport.Completion{ID: id, Op: transport.OpRecv, Bytes: u.n, Imm: u.imm, HasImm: true, Endpoint: e})
		e.writeAcks += e.immHeld.pop() // this write and those held behind it
		e.cond.Signal()
		e.mu.Unlock()
		return nil
	}
	if u.n > n {
		e.putBuf(u.buf)
		e.mu.Unlock()
		e.refuseLength(p, u.n, u.seq)
		return nil
	}
	ok := u.n == 0 || r.acquire()
	if ok && u.n > 0 {
		copy(r.buf[off:off+u.n], (*u.buf)[:u.n])
		r.release()
	}
	e.putBuf(u.buf)
	if !ok {
		e.mu.Unlock()
		err := e.deregisteredErr("recv", r)
		e.fail(err, nil, &transport.Completion{ID: id, Op: transport.OpRecv, Err: err, Endpoint: e})
		return nil
	}
	e.cq.push(transport.Completion{ID: id, Op: transport.OpRecv, Bytes: u.n, Endpoint: e})
	e.sendAcks++
	e.cond.Signal()
	e.mu.Unlock()
	return nil
}

func (e *endpoint) deregisteredErr(op string, r *region) error {
	return fmt.Errorf("tcp: %s with %s: local region key %#x deregistered while the request was in flight: %w", op, e.peerName, r.key, transport.ErrInvalid)
}

// refuseLength handles a message of n bytes that does not fit the receive
// p: the receive fails with ErrLength, the sender is told, and the endpoint
// enters the error state (as an RC queue pair does).
func (e *endpoint) refuseLength(p pending, n int, seq uint64) {
	err := fmt.Errorf("tcp: recv from %s: message of %d bytes longer than the posted receive of %d bytes: %w", e.peerName, n, p.n, transport.ErrLength)
	nak := header{typ: msgNak, kind: kindSend, status: statusLength, id: seq, length: uint64(n), aux: uint64(p.n)}
	e.fail(err, &nak, &transport.Completion{ID: p.id, Op: transport.OpRecv, Err: err, Endpoint: e})
}

// refuseRemote handles a peer's access that failed validation: NAK to the
// initiator, OpRemoteError here, error state on both sides.
func (e *endpoint) refuseRemote(kind uint8, h *header, status uint8, size uint64) {
	err := fmt.Errorf("tcp: remote %s from %s: key %#x offset %d len %d: %s: %w",
		kindName(kind), e.peerName, h.key, h.offset, h.length, refusalText(kind, status, size), transport.ErrRemoteAccess)
	nak := header{typ: msgNak, kind: kind, status: status, id: h.id, key: h.key, offset: h.offset, length: h.length, aux: size}
	e.fail(err, &nak, &transport.Completion{Op: transport.OpRemoteError, Err: err, Endpoint: e})
}

func kindName(kind uint8) string {
	switch kind {
	case kindSend:
		return "send"
	case kindWrite:
		return "write"
	case kindRead:
		return "read"
	}
	return fmt.Sprintf("kind(%d)", kind)
}

func refusalText(kind, status uint8, size uint64) string {
	switch status {
	case statusBadKey:
		return "unknown or revoked key"
	case statusBounds:
		return fmt.Sprintf("out of bounds of region (len %d)", size)
	case statusAccess:
		if kind == kindRead {
			return "region does not grant remote-read"
		}
		return "region does not grant remote-write"
	case statusLength:
		return fmt.Sprintf("longer than the posted receive of %d bytes", size)
	}
	return fmt.Sprintf("refused (status %d)", status)
}

// fail moves the endpoint into the error state; the first cause wins.
// first, if non-nil, is completed before the flushed requests (the request
// or event that caused the failure). With nak non-nil the writer sends it
// after any acknowledgements still owed, then the connection is drained
// for LingerTimeout and closed; otherwise the connection is closed now.
func (e *endpoint) fail(cause error, nak *header, first *transport.Completion) {
	e.mu.Lock()
	if prev := e.err; prev != nil {
		e.mu.Unlock()
		if first != nil {
			// Already failed: the request is flushed with the first cause.
			c := *first
			if c.Op != transport.OpRemoteError {
				c.Err = e.flushErr(opName(c.Op), prev)
			}
			e.cq.push(c)
		}
		return
	}
	e.err = cause
	e.failed.Store(true)
	if e.timer != nil {
		e.timer.Stop()
	}
	for i := range e.outq {
		e.putBuf(e.outq[i].buf)
	}
	clear(e.outq)
	e.outq = e.outq[:0]
	conn := e.conn
	switch {
	case nak != nil && conn != nil:
		e.outq = append(e.outq, outItem{h: *nak})
		e.lingering = true
		conn.SetReadDeadline(time.Now().Add(e.dev.opts.LingerTimeout))
	case e.closed && conn != nil:
		// Close: the peer's requests whose data is already placed (and
		// whose receives may have completed here) still get their
		// acknowledgements, as an adapter would have sent them already:
		// the writer finishes its batch, sends the acks still owed and
		// closes its half; Close waits for it (bounded by the deadline).
		e.lingering = true
		conn.SetWriteDeadline(time.Now().Add(e.dev.opts.LingerTimeout))
	default:
		e.sendAcks, e.writeAcks = 0, 0
	}
	if first != nil {
		e.cq.push(*first)
	}
	e.flushLocked(&e.recvs, transport.OpRecv, cause)
	e.flushLocked(&e.sends, transport.OpSend, cause)
	e.flushLocked(&e.writes, transport.OpWrite, cause)
	e.flushLocked(&e.reads, transport.OpRead, cause)
	for e.unexp.len() > 0 {
		e.putBuf(e.unexp.pop().buf)
	}
	e.immHeld.clear()
	closeNow := conn != nil && !e.lingering
	e.cond.Broadcast()
	e.mu.Unlock()
	if closeNow {
		conn.Close()
	}
}

func (e *endpoint) flushLocked(q *ring[pending], op transport.Op, cause error) {
	for q.len() > 0 {
		p := q.pop()
		e.cq.push(transport.Completion{ID: p.id, Op: op, Err: e.flushErr(op.String(), cause), Endpoint: e})
	}
}

func (e *endpoint) flushErr(op string, cause error) error {
	dir := "to"
	if op == "recv" {
		dir = "from"
	}
	return fmt.Errorf("tcp: %s %s %s: %w: %w", op, dir, e.peerName, transport.ErrFlushed, cause)
}

func opName(op transport.Op) string { return op.String() }

// Close disconnects. Pending requests complete with an error wrapping
// ErrClosed; the peer's with ErrPeerClosed, except those whose data this
// side already placed: the writer still sends their acknowledgements, then
// closes its half. Close blocks until that is done (at most
// Options.LingerTimeout, for a peer that does not read) and the endpoint's
// goroutines have exited; a transfer in progress is cut.
func (e *endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	peer := e.peerName
	e.mu.Unlock()
	e.fail(fmt.Errorf("tcp: endpoint to %s closed: %w", peer, transport.ErrClosed), nil, nil)
	e.mu.Lock()
	conn, parked := e.conn, e.parked
	e.parked = nil
	linger, writerDone := e.lingering, e.writerDone
	e.mu.Unlock()
	if conn != nil && linger && writerDone != nil {
		// Let the writer send what it still owes (bounded by the write
		// deadline fail set) before the connection is cut.
		t := time.NewTimer(e.dev.opts.LingerTimeout)
		select {
		case <-writerDone:
		case <-t.C:
		}
		t.Stop()
	}
	if conn != nil {
		conn.Close()
	}
	if parked != nil {
		parked.Close()
	}
	e.dev.forgetEndpoint(e)
	e.wg.Wait()
	return nil
}

// outItemLocked makes the queue entry of a send or write: a payload of at
// most maxInline bytes is copied now into a pooled buffer (the caller may
// reuse its own, see Device.MaxInline); a larger one is written straight
// from the region later.
func (e *endpoint) outItemLocked(h header, r *region, off, n int) outItem {
	if n == 0 || n > maxInline {
		return outItem{h: h, r: r, off: off}
	}
	b := e.getBuf(n)
	copy((*b)[:n], r.buf[off:off+n])
	return outItem{h: h, buf: b}
}
