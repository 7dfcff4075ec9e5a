package tcp

import (
	"fmt"
	"io"

	"github.com/goccl/goccl/transport"
)

const (
	// readBufferSize is a lane's receive buffer: headers and small
	// payloads are read into it many at a time and parsed from it.
	readBufferSize = 64 << 10
	// directRead is the shortest payload remainder read from the socket
	// straight into its destination rather than through the buffer.
	directRead = 16 << 10
	// Read system calls per pass: a caller's pass returns soon so that it
	// can look at its other sockets and completions; the background
	// reader's is longer.
	pollReads = 4
	bgReads   = 32
)

// Where the payload of the frame being received goes.
const (
	tgtNone   uint8 = iota
	tgtRecv         // a posted receive (SEND)
	tgtUnexp        // a pooled buffer: a SEND before its receive
	tgtWrite        // the target region of a WRITE
	tgtRead         // the local buffer of a READ (READ_RESP)
	tgtIgnore       // bytes of a frame whose endpoint failed
)

// rxState is a lane's receive side; it belongs to the holder of rxMu.
type rxState struct {
	buf     []byte // buf[r:w] is read and not yet parsed
	r, w    int
	bg      bool // the pass is the background loop's
	acked   bool // the pass made acknowledgements owed
	respond bool // the pass queued read responses
	urgent  bool // the pass owes an acknowledgement a sender waits for
	drained bool // a read of the pass came back short: the socket was empty

	// sysRead's arguments and results.
	io    []byte
	ioN   int
	ioErr error

	// The frame whose payload is being received.
	busy bool
	h    header
	tgt  uint8
	dst  []byte
	got  int
	reg  *region // reference held while dst is filled
	p    pending // the request dst belongs to (tgtRecv, tgtRead)
	// steer is the endpoint's steering entry whose buffer dst is (the
	// write is steered, steer.go), or -1.
	steer int
	ubuf  *[]byte // tgtUnexp's pooled buffer
}

func (rx *rxState) init() { rx.buf, rx.steer = make([]byte, readBufferSize), -1 }

// rxPass reads and parses what the socket holds, within a budget of read
// system calls. It reports whether bytes arrived and whether the pass
// ended on an empty socket. The caller holds rxMu.
func (l *lane) rxPass(bg bool) (moved, blocked bool) {
	e, rx := l.e, &l.rx
	if e.failed.Load() {
		l.rxCleanup()
		return false, false
	}
	rx.bg, rx.drained = bg, false
	budget := pollReads
	if bg {
		budget = bgReads
	}
	max := uint64(e.dev.opts.MaxMessage)
	for {
		if rx.busy {
			if rx.r < rx.w {
				c := copy(rx.dst[rx.got:], rx.buf[rx.r:rx.w])
				rx.got += c
				rx.r += c
			}
			if rem := len(rx.dst) - rx.got; rem > 0 {
				if rem < directRead {
					if !l.fill(&budget, &moved, &blocked) {
						return moved, blocked
					}
					continue
				}
				// A long payload read short is read again at once: its
				// sender is most likely still writing, and ending the
				// pass would send the Wait round its loop first (a
				// sched_yield with more ranks than cores).
				if budget == 0 {
					return moved, false
				}
				budget--
				n, err := l.sysRead(rx.dst[rx.got:])
				if !l.readOK(n, err, &blocked) {
					return moved, blocked
				}
				rx.got += n
				moved = true
				if rx.got < len(rx.dst) {
					continue
				}
			}
			if !l.finish() {
				return moved, false
			}
			continue
		}
		if rx.w-rx.r < headerSize {
			if !l.fill(&budget, &moved, &blocked) {
				return moved, blocked
			}
			continue
		}
		var h header
		if err := decodeHeader(rx.buf[rx.r:rx.r+headerSize], &h, max); err != nil {
			e.fail(fmt.Errorf("tcp: connection to %s: %v: %w", e.peerName, err, transport.ErrLink), nil, nil)
			return moved, false
		}
		rx.r += headerSize
		if !l.begin(&h) {
			return moved, false
		}
	}
}

// fill reads more of the stream into the buffer; false ends the pass.
func (l *lane) fill(budget *int, moved, blocked *bool) bool {
	rx := &l.rx
	if rx.r == rx.w {
		rx.r, rx.w = 0, 0
	} else if len(rx.buf)-rx.w < headerSize+4096 {
		rx.w = copy(rx.buf, rx.buf[rx.r:rx.w])
		rx.r = 0
	}
	// A read into the buffer (headers, short payloads) that came back
	// short found the socket empty: another would only return EAGAIN (a
	// system call per small message saved). What arrives meanwhile is
	// read by the next pass, as after an EAGAIN.
	if rx.drained {
		*blocked = true
		return false
	}
	if *budget == 0 {
		return false
	}
	*budget--
	want := len(rx.buf) - rx.w
	n, err := l.sysRead(rx.buf[rx.w:])
	if !l.readOK(n, err, blocked) {
		return false
	}
	rx.w += n
	rx.drained = n < want
	*moved = true
	return true
}

// readOK checks a read's outcome: an empty socket ends the pass (blocked),
// the end of the stream or an error fails the endpoint.
func (l *lane) readOK(n int, err error, blocked *bool) bool {
	switch {
	case err == nil && n > 0:
		return true
	case isAgain(err):
		*blocked = true
		return false
	case err == nil:
		l.e.linkFailed("read", io.EOF)
	default:
		l.e.linkFailed("read", err)
	}
	return false
}

// expect makes dst the destination of the frame's payload.
func (rx *rxState) expect(h *header, tgt uint8, dst []byte, reg *region) {
	rx.busy, rx.h, rx.tgt, rx.dst, rx.got, rx.reg = true, *h, tgt, dst, 0, reg
}

// begin starts a frame whose header was just parsed: it decides where the
// payload goes, or handles a frame without one. false: the endpoint failed.
func (l *lane) begin(h *header) bool {
	e, rx := l.e, &l.rx
	n := int(h.length)
	switch h.typ {
	case msgSend:
		e.mu.Lock()
		if e.err != nil {
			e.mu.Unlock()
			return false
		}
		if e.recvs.len() == 0 {
			e.mu.Unlock()
			// No receive posted: hold the message in a pooled buffer.
			b := e.getBuf(n)
			var dst []byte
			if b != nil {
				dst = (*b)[:n]
			}
			rx.expect(h, tgtUnexp, dst, nil)
			rx.ubuf = b
			break
		}
		p := e.recvs.pop()
		e.mu.Unlock()
		if n > p.n {
			e.refuseLength(p, n, h.id)
			return false
		}
		if n > 0 && !p.r.acquire() {
			e.fail(e.deregisteredErr("recv", p.r), nil, nil)
			e.finishOwned(p, transport.OpRecv)
			return false
		}
		var reg *region
		if n > 0 {
			reg = p.r
		}
		rx.expect(h, tgtRecv, p.r.buf[p.off:p.off+n], reg)
		rx.p = p
	case msgWrite:
		var dst []byte
		var reg *region
		if n > 0 {
			r, status, size := e.dev.remoteAccess(h.key, h.offset, h.length, transport.AccessRemoteWrite)
			if status != statusOK {
				e.refuseRemote(kindWrite, h, status, size)
				return false
			}
			dst, reg = r.buf[h.offset:h.offset+h.length], r
		}
		rx.expect(h, tgtWrite, dst, reg)
		if n > 0 && h.flags&flagImm != 0 && e.steering.Load() > 0 {
			if i := e.steerTake(reg, h); i >= 0 {
				rx.dst, rx.steer = e.steers[i].dst, i
			}
		}
	case msgReadResp:
		e.mu.Lock()
		if e.err != nil {
			e.mu.Unlock()
			return false
		}
		if e.reads.len() == 0 || e.reads.peek().seq != h.id || uint64(e.reads.peek().n) != h.length {
			e.mu.Unlock()
			e.fail(fmt.Errorf("tcp: connection to %s: read response %d of %d bytes matches no pending read: %w", e.peerName, h.id, h.length, transport.ErrLink), nil, nil)
			return false
		}
		p := e.reads.pop()
		e.mu.Unlock()
		if p.n > 0 && !p.r.acquire() {
			e.fail(e.deregisteredErr("read", p.r), nil, nil)
			e.finishOwned(p, transport.OpRead)
			return false
		}
		var reg *region
		if p.n > 0 {
			reg = p.r
		}
		rx.expect(h, tgtRead, p.r.buf[p.off:p.off+p.n], reg)
		rx.p = p
	case msgReadReq:
		return l.onReadReq(h)
	case msgAck:
		return e.onAck(h)
	case msgNak:
		e.onNak(h)
		return false
	default:
		e.fail(fmt.Errorf("tcp: connection to %s: unexpected message type %d: %w", e.peerName, h.typ, transport.ErrLink), nil, nil)
		return false
	}
	if len(rx.dst) == 0 {
		return l.finish()
	}
	return true
}

// finish completes the frame whose payload has arrived. false: the
// endpoint failed.
func (l *lane) finish() bool {
	e, rx := l.e, &l.rx
	h, n := &rx.h, len(rx.dst)
	if rx.reg != nil {
		rx.reg.release()
		rx.reg = nil
	}
	rx.busy, rx.dst = false, nil
	acked := false
	switch rx.tgt {
	case tgtRecv:
		e.mu.Lock()
		if e.err != nil {
			e.mu.Unlock()
			e.finishOwned(rx.p, transport.OpRecv)
			return false
		}
		e.complete(rx.p, transport.OpRecv, n)
		e.sendAcks++
		acked = true
		e.ackOwedLocked()
		e.mu.Unlock()
	case tgtUnexp:
		b := rx.ubuf
		rx.ubuf = nil
		e.mu.Lock()
		if e.err != nil {
			e.mu.Unlock()
			e.putBuf(b)
			return false
		}
		if e.recvs.len() == 0 {
			e.unexp.push(unexpected{buf: b, n: n, seq: h.id})
			e.mu.Unlock()
			return true
		}
		// A receive was posted while the payload arrived.
		p := e.recvs.pop()
		if n > p.n {
			e.mu.Unlock()
			e.putBuf(b)
			e.refuseLength(p, n, h.id)
			return false
		}
		if n > 0 {
			if !p.r.acquire() {
				e.mu.Unlock()
				e.putBuf(b)
				e.fail(e.deregisteredErr("recv", p.r), nil, nil)
				e.finishOwned(p, transport.OpRecv)
				return false
			}
			copy(p.r.buf[p.off:p.off+n], (*b)[:n])
			p.r.release()
		}
		e.putBuf(b)
		e.complete(p, transport.OpRecv, n)
		e.sendAcks++
		acked = true
		e.ackOwedLocked()
		e.mu.Unlock()
	case tgtWrite:
		e.mu.Lock()
		if steer := rx.steer; steer >= 0 {
			rx.steer = -1
			e.steerDoneLocked(steer, e.err == nil)
		}
		if e.err != nil {
			e.mu.Unlock()
			return false
		}
		switch {
		case h.flags&flagImm != 0 && e.recvs.len() > 0:
			p := e.recvs.pop()
			e.cq.push(transport.Completion{ID: p.id, Op: transport.OpRecv, Bytes: n, Imm: h.imm, HasImm: true, Endpoint: e})
			e.writeAcks++ // recvs non-empty implies nothing held back
			acked = true
		case h.flags&flagImm != 0:
			// No receive yet: the immediate waits, and so does the write's
			// acknowledgement (as an RC queue pair answers RNR), and with it
			// those of later writes, which are acknowledged in order.
			e.unexp.push(unexpected{n: n, imm: h.imm, hasImm: true, seq: h.id})
			e.immHeld.push(1)
		case e.immHeld.len() > 0:
			*e.immHeld.back()++
		default:
			e.writeAcks++
			acked = true
		}
		if acked {
			e.ackOwedLocked()
		}
		e.mu.Unlock()
	case tgtRead:
		e.mu.Lock()
		if e.err != nil {
			e.mu.Unlock()
			e.finishOwned(rx.p, transport.OpRead)
			return false
		}
		e.complete(rx.p, transport.OpRead, n)
		e.mu.Unlock()
	}
	if acked {
		rx.acked = true
		if n > maxInline {
			// The sender did not copy the payload at post: it waits for
			// this acknowledgement to complete its request.
			rx.urgent = true
		}
	}
	return true
}

// rxCleanup drops the frame in progress after a failure, releasing what it
// holds. The caller holds rxMu.
func (l *lane) rxCleanup() {
	rx := &l.rx
	if !rx.busy {
		return
	}
	if rx.reg != nil {
		rx.reg.release()
		rx.reg = nil
	}
	if rx.tgt == tgtRecv || rx.tgt == tgtRead {
		op := transport.OpRecv
		if rx.tgt == tgtRead {
			op = transport.OpRead
		}
		l.e.finishOwned(rx.p, op)
	}
	if steer := rx.steer; steer >= 0 {
		rx.steer = -1
		l.e.mu.Lock()
		l.e.steerDoneLocked(steer, false)
		l.e.mu.Unlock()
	}
	l.e.putBuf(rx.ubuf)
	rx.ubuf = nil
	rx.busy, rx.dst = false, nil
}

// onReadReq validates a read and snapshots the data now, so that the
// response shows the memory as it was when the request arrived, before any
// write the peer posted after the read is placed.
func (l *lane) onReadReq(h *header) bool {
	e := l.e
	var buf *[]byte
	if n := h.length; n > 0 {
		r, status, size := e.dev.remoteAccess(h.key, h.offset, n, transport.AccessRemoteRead)
		if status != statusOK {
			e.refuseRemote(kindRead, h, status, size)
			return false
		}
		buf = e.getBuf(int(n))
		copy(*buf, r.buf[h.offset:h.offset+n])
		r.release()
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		e.putBuf(buf)
		return false
	}
	e.queueLocked(outItem{h: header{typ: msgReadResp, id: h.id, length: h.length}, buf: buf})
	e.mu.Unlock()
	// The response goes out after the pass, whoever reads: the peer
	// waits for it.
	l.rx.respond = true
	return true
}

func (e *endpoint) onAck(h *header) bool {
	e.mu.Lock()
	q, op := &e.sends, transport.OpSend
	if h.kind == kindWrite {
		q, op = &e.writes, transport.OpWrite
	}
	if uint64(q.len()) < h.length {
		e.mu.Unlock()
		e.fail(fmt.Errorf("tcp: connection to %s: ack of %d %ss, %d pending: %w", e.peerName, h.length, op, q.len(), transport.ErrLink), nil, nil)
		return false
	}
	for i := uint64(0); i < h.length; i++ {
		p := q.pop()
		if p.quiet {
			e.cq.unreserve() // placed: nothing to report (PostWriteQuiet)
			continue
		}
		e.complete(p, op, p.n)
	}
	e.mu.Unlock()
	return true
}

// onNak: the peer refused the request h.id; the endpoint fails with the
// refusal as its cause.
func (e *endpoint) onNak(h *header) {
	e.mu.Lock()
	var q *ring[pending]
	var op transport.Op
	switch h.kind {
	case kindSend:
		q, op = &e.sends, transport.OpSend
	case kindWrite:
		q, op = &e.writes, transport.OpWrite
	default:
		q, op = &e.reads, transport.OpRead
	}
	if q.len() == 0 || q.peek().seq != h.id {
		e.mu.Unlock()
		e.fail(fmt.Errorf("tcp: connection to %s: refusal of %s %d matches no pending request: %w", e.peerName, op, h.id, transport.ErrLink), nil, nil)
		return
	}
	p := q.pop()
	e.mu.Unlock()
	var err error
	if h.status == statusLength {
		err = fmt.Errorf("tcp: send to %s: message of %d bytes longer than the peer's posted receive of %d bytes: %w", e.peerName, h.length, h.aux, transport.ErrLength)
	} else {
		err = fmt.Errorf("tcp: %s to %s: key %#x offset %d len %d: %s: %w",
			op, e.peerName, p.key, p.roff, p.n, refusalText(h.kind, h.status, h.aux), transport.ErrRemoteAccess)
	}
	e.fail(err, nil, &transport.Completion{ID: p.id, Op: op, Err: err, Endpoint: e})
}
