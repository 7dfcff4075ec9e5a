package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/goccl/goccl/transport"
)

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
// or event that caused the failure). With nak non-nil the background loop
// sends it after any acknowledgements still owed, then the connection is
// drained for LingerTimeout and closed; otherwise the connection is closed
// now. fail never blocks and may be called with rxMu or txMu held.
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
	l := e.ctl()
	switch {
	case nak != nil && l != nil:
		e.outq = append(e.outq, outItem{h: *nak})
		e.lingering = true
		d := deadline(e.dev.opts.LingerTimeout)
		l.rdDeadline.Store(d)
		l.wrDeadline.Store(d)
	case e.closed && l != nil:
		// Close: the peer's requests whose data is already placed (and
		// whose receives may have completed here) still get their
		// acknowledgements, as an adapter would have sent them already:
		// the background loop finishes the batch in progress, sends the
		// acks still owed and shuts the write side; Close waits for it
		// (bounded by the deadline).
		e.lingering = true
		l.wrDeadline.Store(deadline(e.dev.opts.LingerTimeout))
	default:
		e.sendAcks, e.writeAcks = 0, 0
	}
	if l != nil && e.lingering {
		l.txWant.Store(true)
		l.txNow.Store(true)
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
	lingering := e.lingering
	e.mu.Unlock()
	if l == nil {
		return
	}
	if !lingering {
		l.shutdown()
	}
	// The background loop sends what is owed, drains, and releases what
	// the lane holds.
	l.armWriter()
	l.armReader()
	l.rxMiss.Store(true)
	if l.rxMu.TryLock() {
		l.rxCleanup()
		l.rxMu.Unlock()
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
// side already placed: the background loop still sends their
// acknowledgements, then closes its half. Close blocks until that is done
// (at most Options.LingerTimeout, for a peer that does not read) and the
// endpoint's goroutines have exited; a transfer in progress is cut.
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
	parked := e.parked
	e.parked = nil
	linger := e.lingering
	e.mu.Unlock()
	if l := e.ctl(); l != nil {
		if linger && !l.closed.Load() { // a closed socket has nothing more to send
			// Let the background loop send what is still owed (bounded by
			// the deadline fail set) before the connection is cut.
			t := time.NewTimer(e.dev.opts.LingerTimeout)
			select {
			case <-l.txEnd:
			case <-t.C:
			}
			t.Stop()
		}
		l.shutdown()
		l.stop()
	}
	if parked != nil {
		parked.Close()
	}
	e.dev.forgetEndpoint(e)
	return nil
}

// linkFailed turns a socket error into the error state.
func (e *endpoint) linkFailed(op string, err error) {
	if e.failed.Load() {
		return
	}
	var cause error
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		if l := e.ctl(); l != nil && !l.closed.Load() && !peerSentFIN(l.fd) {
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

// writeFailed handles a failed write. A peer that closed right after it
// had everything it needed (a collective's last chunk) may reset the
// connection while its acknowledgements for this side's writes are still
// in the socket: completing those writes as failed would be wrong, since
// the data was placed. So the readers, not the writer, fail the endpoint:
// they take in what is left (acks complete their requests) until the end
// of the stream or the reset, and the background loop, which reads from
// now on whoever polls, fails it with the write's error after
// drainTimeout if neither comes.
func (e *endpoint) writeFailed(err error) {
	if e.failed.Load() {
		return
	}
	e.mu.Lock()
	if e.werr == nil {
		e.werr = err
	}
	e.wfail.Store(true)
	e.mu.Unlock()
	l := e.ctl()
	if l == nil {
		e.linkFailed("write", err)
		return
	}
	l.rdDeadline.Store(deadline(drainTimeout))
	l.armReader()
	l.e.dev.bg.ring()
}
