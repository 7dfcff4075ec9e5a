package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/goccl/goccl/transport"
)

// readBufferSize is the reader's buffer: small frames are parsed from it
// with few system calls; a payload at least this long, once the buffered
// bytes are consumed, is read from the socket straight into its memory.
const readBufferSize = 64 << 10

// readLoop parses the peer's frames until the connection fails or the
// endpoint enters the error state. It is the only goroutine that reads c,
// and it closes c on exit.
func (e *endpoint) readLoop(c *net.TCPConn) {
	defer e.wg.Done()
	defer func() {
		// Close closes c itself, after the writer sent what it owes.
		e.mu.Lock()
		closing := e.closed
		e.mu.Unlock()
		if !closing {
			c.Close()
		}
	}()
	br := bufio.NewReaderSize(c, readBufferSize)
	hb := make([]byte, headerSize)
	var h header
	max := uint64(e.dev.opts.MaxMessage)
	for !e.failed.Load() {
		if _, err := io.ReadFull(br, hb); err != nil {
			e.mu.Lock()
			werr := e.werr
			e.mu.Unlock()
			if werr != nil && errors.Is(err, os.ErrDeadlineExceeded) {
				e.linkFailed("write", werr) // the write's error is the cause
			} else {
				e.linkFailed("read", err)
			}
			break
		}
		if err := decodeHeader(hb, &h, max); err != nil {
			e.fail(fmt.Errorf("tcp: connection to %s: %v: %w", e.peerName, err, transport.ErrLink), nil, nil)
			break
		}
		if !e.handle(br, &h) {
			break
		}
	}
	// In the error state after a refusal, keep draining (bounded by the
	// linger deadline set by fail) so the NAK reaches the peer before the
	// connection is reset.
	e.mu.Lock()
	linger := e.lingering && !e.closed
	e.mu.Unlock()
	if linger {
		io.Copy(io.Discard, br)
	}
}

// handle processes one frame; false stops the reader.
func (e *endpoint) handle(br *bufio.Reader, h *header) bool {
	switch h.typ {
	case msgSend:
		return e.onSend(br, h)
	case msgWrite:
		return e.onWrite(br, h)
	case msgReadReq:
		return e.onReadReq(h)
	case msgReadResp:
		return e.onReadResp(br, h)
	case msgAck:
		return e.onAck(h)
	case msgNak:
		e.onNak(h)
		return false
	}
	e.fail(fmt.Errorf("tcp: connection to %s: unexpected message type %d: %w", e.peerName, h.typ, transport.ErrLink), nil, nil)
	return false
}

// linkFailed turns a socket error into the error state.
func (e *endpoint) linkFailed(op string, err error) {
	if e.failed.Load() {
		return
	}
	var cause error
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		e.mu.Lock()
		c := e.conn
		e.mu.Unlock()
		if c != nil && !peerSentFIN(c) {
			cause = fmt.Errorf("tcp: connection to %s: %s: connection aborted (reset, or timed out on a dead link): %w", e.peerName, op, transport.ErrLink)
		} else {
			cause = fmt.Errorf("tcp: connection to %s: %s: peer hung up: %w", e.peerName, op, transport.ErrPeerClosed)
		}
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		cause = fmt.Errorf("tcp: connection to %s: %s: %v: %w: %w", e.peerName, op, err, transport.ErrPeerClosed, transport.ErrLink)
	case errors.Is(err, net.ErrClosed):
		cause = fmt.Errorf("tcp: connection to %s: %s: %w", e.peerName, op, transport.ErrClosed)
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT):
		cause = fmt.Errorf("tcp: connection to %s: %s: timed out (%v): %w", e.peerName, op, err, transport.ErrLink)
	default:
		cause = fmt.Errorf("tcp: connection to %s: %s: %v: %w", e.peerName, op, err, transport.ErrLink)
	}
	e.fail(cause, nil, nil)
}

// complete pushes a successful completion.
func (e *endpoint) complete(p pending, op transport.Op, n int) {
	e.cq.push(transport.Completion{ID: p.id, Op: op, Bytes: n, Endpoint: e})
}

// finishOwned completes a request the reader had taken out of its FIFO
// when the transfer into it failed or the endpoint failed meanwhile.
func (e *endpoint) finishOwned(p pending, op transport.Op) {
	e.mu.Lock()
	cause := e.err
	e.mu.Unlock()
	if cause == nil {
		cause = fmt.Errorf("tcp: connection to %s: %w", e.peerName, transport.ErrLink)
	}
	e.cq.push(transport.Completion{ID: p.id, Op: op, Err: e.flushErr(op.String(), cause), Endpoint: e})
}

func (e *endpoint) onSend(br *bufio.Reader, h *header) bool {
	n := int(h.length)
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return false
	}
	if e.recvs.len() > 0 {
		p := e.recvs.pop()
		e.mu.Unlock()
		if n > p.n {
			e.refuseLength(p, n, h.id)
			return false
		}
		if n > 0 {
			if !p.r.acquire() {
				e.fail(e.deregisteredErr("recv", p.r), nil, nil)
				e.finishOwned(p, transport.OpRecv)
				return false
			}
			_, err := io.ReadFull(br, p.r.buf[p.off:p.off+n])
			p.r.release()
			if err != nil {
				e.linkFailed("read", err)
				e.finishOwned(p, transport.OpRecv)
				return false
			}
		}
		e.mu.Lock()
		if e.err != nil {
			e.mu.Unlock()
			e.finishOwned(p, transport.OpRecv)
			return false
		}
		e.complete(p, transport.OpRecv, n)
		e.sendAcks++
		e.cond.Signal()
		e.mu.Unlock()
		return true
	}
	e.mu.Unlock()

	// No receive posted: hold the message in a pooled buffer.
	buf := e.getBuf(n)
	if n > 0 {
		if _, err := io.ReadFull(br, (*buf)[:n]); err != nil {
			e.putBuf(buf)
			e.linkFailed("read", err)
			return false
		}
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		e.putBuf(buf)
		return false
	}
	if e.recvs.len() == 0 {
		e.unexp.push(unexpected{buf: buf, n: n, seq: h.id})
		e.mu.Unlock()
		return true
	}
	// A receive was posted while the payload arrived.
	p := e.recvs.pop()
	if n > p.n {
		e.mu.Unlock()
		e.putBuf(buf)
		e.refuseLength(p, n, h.id)
		return false
	}
	if n > 0 {
		if !p.r.acquire() {
			e.mu.Unlock()
			e.putBuf(buf)
			e.fail(e.deregisteredErr("recv", p.r), nil, nil)
			e.finishOwned(p, transport.OpRecv)
			return false
		}
		copy(p.r.buf[p.off:p.off+n], (*buf)[:n])
		p.r.release()
	}
	e.putBuf(buf)
	e.complete(p, transport.OpRecv, n)
	e.sendAcks++
	e.cond.Signal()
	e.mu.Unlock()
	return true
}

func (e *endpoint) onWrite(br *bufio.Reader, h *header) bool {
	n := h.length
	if n > 0 {
		r, status, size := e.dev.remoteAccess(h.key, h.offset, n, transport.AccessRemoteWrite)
		if status != statusOK {
			e.refuseRemote(kindWrite, h, status, size)
			return false
		}
		_, err := io.ReadFull(br, r.buf[h.offset:h.offset+n])
		r.release()
		if err != nil {
			e.linkFailed("read", err)
			return false
		}
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return false
	}
	switch {
	case h.flags&flagImm != 0 && e.recvs.len() > 0:
		p := e.recvs.pop()
		e.cq.push(transport.Completion{ID: p.id, Op: transport.OpRecv, Bytes: int(n), Imm: h.imm, HasImm: true, Endpoint: e})
		e.writeAcks++ // recvs non-empty implies nothing held back
	case h.flags&flagImm != 0:
		// No receive yet: the immediate waits, and so does the write's
		// acknowledgement (as an RC queue pair answers RNR), and with it
		// those of later writes, which are acknowledged in order.
		e.unexp.push(unexpected{n: int(n), imm: h.imm, hasImm: true, seq: h.id})
		e.immHeld.push(1)
	case e.immHeld.len() > 0:
		*e.immHeld.back()++
	default:
		e.writeAcks++
	}
	e.cond.Signal()
	e.mu.Unlock()
	return true
}

// onReadReq validates a read and snapshots the data now, so that the
// response shows the memory as it was when the request arrived, before any
// write the peer posted after the read is placed.
func (e *endpoint) onReadReq(h *header) bool {
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
	e.outq = append(e.outq, outItem{h: header{typ: msgReadResp, id: h.id, length: h.length}, buf: buf})
	e.cond.Signal()
	e.mu.Unlock()
	return true
}

func (e *endpoint) onReadResp(br *bufio.Reader, h *header) bool {
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
	if p.n > 0 {
		if !p.r.acquire() {
			e.fail(e.deregisteredErr("read", p.r), nil, nil)
			e.finishOwned(p, transport.OpRead)
			return false
		}
		_, err := io.ReadFull(br, p.r.buf[p.off:p.off+p.n])
		p.r.release()
		if err != nil {
			e.linkFailed("read", err)
			e.finishOwned(p, transport.OpRead)
			return false
		}
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		e.finishOwned(p, transport.OpRead)
		return false
	}
	e.complete(p, transport.OpRead, p.n)
	e.mu.Unlock()
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

// Pooled buffers for messages that arrive before their receive, in
// power-of-two size classes from 4 KiB.
var bufPools [64]sync.Pool

func bufClass(n int) int { return max(12, bits.Len(uint(n-1))) }

func getBuf(n int) *[]byte {
	if n == 0 {
		return nil
	}
	c := bufClass(n)
	if v := bufPools[c].Get(); v != nil {
		return v.(*[]byte)
	}
	b := make([]byte, 1<<c)
	return &b
}

func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	bufPools[bufClass(len(*b))].Put(b)
}

// spareMin is the smallest buffer an endpoint keeps in its spare slots
// rather than returning it to the shared pool, which the garbage collector
// empties: large buffers are costly to fault in again.
const spareMin = 64 << 10

// spareSlots is how many large buffers an endpoint keeps (reads in flight).
const spareSlots = 8

type spares struct {
	mu   sync.Mutex
	bufs [spareSlots]*[]byte
}

func (e *endpoint) getBuf(n int) *[]byte {
	if n >= spareMin {
		s := &e.spares
		s.mu.Lock()
		for i, b := range s.bufs {
			if b != nil && len(*b) >= n {
				s.bufs[i] = nil
				s.mu.Unlock()
				return b
			}
		}
		s.mu.Unlock()
	}
	return getBuf(n)
}

func (e *endpoint) putBuf(b *[]byte) {
	if b == nil || len(*b) < spareMin {
		putBuf(b)
		return
	}
	s := &e.spares
	s.mu.Lock()
	small := 0
	for i, o := range s.bufs {
		if o == nil {
			s.bufs[i] = b
			s.mu.Unlock()
			return
		}
		if len(*o) < len(*s.bufs[small]) {
			small = i
		}
	}
	// Full: keep the larger of b and the smallest kept one.
	if len(*s.bufs[small]) < len(*b) {
		b, s.bufs[small] = s.bufs[small], b
	}
	s.mu.Unlock()
	putBuf(b)
}
