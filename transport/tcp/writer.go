package tcp

import (
	"net"
	"time"
)

const (
	// writeBufferSize is the writer's staging buffer: headers, acks and
	// small payloads are gathered in it and leave in one system call.
	writeBufferSize = 64 << 10
	// smallPayload is the largest payload copied into the staging buffer;
	// longer ones are written to the socket straight from their region.
	smallPayload = 16 << 10
)

// writeLoop drains outq onto the socket. It is the only goroutine that
// writes c. Acknowledgements owed to the peer are sent first in each batch,
// coalesced into one ACK per kind.
func (e *endpoint) writeLoop(c *net.TCPConn) {
	defer e.wg.Done()
	defer close(e.writerDone)
	w := writer{c: c, buf: make([]byte, 0, writeBufferSize)}
	var batch []outItem
	for {
		e.mu.Lock()
		for len(e.outq) == 0 && e.sendAcks == 0 && e.writeAcks == 0 && e.err == nil {
			e.cond.Wait()
		}
		if e.err != nil && !e.lingering {
			e.mu.Unlock()
			return
		}
		batch, e.outq = e.outq, batch[:0]
		sa, wa := e.sendAcks, e.writeAcks
		e.sendAcks, e.writeAcks = 0, 0
		final := e.err != nil // lingering: this batch carries the NAK
		e.mu.Unlock()

		if sa > 0 {
			w.header(&header{typ: msgAck, kind: kindSend, length: sa})
		}
		if wa > 0 {
			w.header(&header{typ: msgAck, kind: kindWrite, length: wa})
		}
		for i := range batch {
			it := &batch[i]
			if w.err != nil {
				break
			}
			if it.h.typ != msgNak && e.failed.Load() {
				continue // the endpoint failed: drop the rest
			}
			if !e.writeItem(&w, it) {
				break
			}
		}
		for i := range batch {
			e.putBuf(batch[i].buf) // items skipped after a failure
		}
		clear(batch)
		w.flush()
		if w.err != nil {
			e.writeFailed(w.err)
			return
		}
		if final {
			c.CloseWrite()
			return
		}
	}
}

// writeItem encodes one frame; false stops the batch.
func (e *endpoint) writeItem(w *writer, it *outItem) bool {
	n := int(it.h.length)
	if it.buf != nil {
		w.payload(&it.h, (*it.buf)[:n])
		e.putBuf(it.buf)
		it.buf = nil
		return w.err == nil
	}
	if it.r == nil || n == 0 || it.h.typ == msgReadReq {
		w.header(&it.h)
		return true
	}
	r := it.r
	if !r.acquire() {
		e.fail(e.deregisteredErr(it.h.typName(), r), nil, nil)
		return false
	}
	w.payload(&it.h, r.buf[it.off:it.off+n])
	r.release()
	return w.err == nil
}

func (h *header) typName() string {
	switch h.typ {
	case msgSend:
		return "send"
	case msgWrite:
		return "write"
	case msgReadResp:
		return "read response"
	}
	return "frame"
}

// writer stages frames in buf; the first error sticks.
type writer struct {
	c    *net.TCPConn
	buf  []byte
	err  error
	iov  [2][]byte
	bufs net.Buffers
}

func (w *writer) header(h *header) {
	if len(w.buf)+headerSize > cap(w.buf) {
		w.flush()
	}
	l := len(w.buf)
	w.buf = w.buf[:l+headerSize]
	h.encode(w.buf[l:])
}

// payload writes a frame with its payload: a small one is staged with the
// header, a large one leaves from where it lies.
func (w *writer) payload(h *header, p []byte) {
	w.header(h)
	if len(p) <= smallPayload {
		w.small(p)
		return
	}
	// Header(s) staged so far and the payload in one writev.
	if w.err != nil {
		return
	}
	w.iov[0], w.iov[1] = w.buf, p
	w.bufs = w.iov[:]
	_, w.err = w.bufs.WriteTo(w.c)
	w.iov[0], w.iov[1] = nil, nil
	w.buf = w.buf[:0]
}

func (w *writer) small(p []byte) {
	if len(w.buf)+len(p) > cap(w.buf) {
		w.flush()
	}
	w.buf = append(w.buf, p...)
}

func (w *writer) flush() {
	if len(w.buf) > 0 {
		w.write(w.buf)
		w.buf = w.buf[:0]
	}
}

func (w *writer) write(p []byte) {
	if w.err != nil {
		return
	}
	_, w.err = w.c.Write(p)
}

// drainTimeout bounds how long the reader may go on after the writer
// failed, to take in what the peer sent before it went.
const drainTimeout = time.Second

// writeFailed handles a failed write. A peer that closed right after it
// had everything it needed (a collective's last chunk) may reset the
// connection while its acknowledgements for this side's writes are still
// in the socket: completing those writes as failed would be wrong, since
// the data was placed. So the reader, not the writer, fails the endpoint:
// it takes in what is left (acks complete their requests) until the end of
// the stream, the reset, or drainTimeout, and then fails with the cause.
func (e *endpoint) writeFailed(err error) {
	if e.failed.Load() {
		return
	}
	e.mu.Lock()
	if e.werr == nil {
		e.werr = err
	}
	c := e.conn
	e.mu.Unlock()
	if c == nil {
		e.linkFailed("write", err)
		return
	}
	c.SetReadDeadline(time.Now().Add(drainTimeout))
}
