package tcp

import (
	"time"

	"golang.org/x/sys/unix"
)

const (
	// writeBufferSize is a lane's batch buffer: headers, acknowledgements
	// and small payloads are gathered in it and leave in one system call.
	writeBufferSize = 64 << 10
	// smallPayload is the largest payload in a registered region copied
	// into the batch buffer; longer ones leave straight from their memory
	// (writev).
	smallPayload = 16 << 10
	// pooledCopy is the largest payload in a pooled buffer (the copy a
	// post makes of an inline payload, endpoint.outItemLocked) copied into
	// the batch buffer; a longer one leaves from the pooled buffer, a
	// segment of its own, without a second copy. 2-rank broadcast over
	// TCP, OSU's method, 4 alternating pairs: the root's call at 16 KiB
	// 8.94-9.08 us against 9.38-9.55 copying, at 8 KiB 7.85-7.98 against
	// 8.06, 2-4 KiB the same.
	pooledCopy = 1 << 10
	// maxIov bounds the segments of one writev.
	maxIov = 64
)

// txState is a lane's transmit side; it belongs to the holder of txMu.
//
// A batch is a list of segments written with writev: runs of buf (headers
// and small payloads) and large payloads in place (a registered region, to
// which the segment holds a reference, or a pooled buffer). A batch is
// built from the acknowledgements owed and the frames queued on the
// endpoint, and is written completely before the next one is built, so
// frames leave in the order they were queued.
type txState struct {
	buf  []byte // cap writeBufferSize
	run  int    // start of the part of buf not yet in a segment
	segs []txSeg
	head int       // first segment not completely written
	pend []outItem // frames taken from the queue, not yet in a batch
	next int       // first frame of pend not yet in a batch

	writes int // writev calls that wrote bytes (for tests)

	// sysWritev's argument and results.
	iov   []unix.Iovec
	ioN   int
	ioErr error
}

type txSeg struct {
	b    []byte
	reg  *region // released once b is written
	pbuf *[]byte // returned to the pool once b is written
}

// queueCap is the room the queue of frames (endpoint.outq) and the frames
// taken from it (txState.pend) start with: the two slices swap, and each
// grows to the longest queue it has held, so a queue that starts small
// allocates whenever a burst (credits, acknowledgements and chunks of
// several calls in flight) sets a new record, long after the warm-up.
const queueCap = 32

func (tx *txState) init() {
	tx.buf = make([]byte, 0, writeBufferSize)
	tx.iov = make([]unix.Iovec, 0, maxIov)
	// A batch holds at most maxIov segments (see build).
	tx.segs = make([]txSeg, 0, maxIov)
	tx.pend = make([]outItem, 0, queueCap)
}

// txPass writes the batch in progress and the batches after it until the
// queue is empty or the socket is full. The caller holds txMu.
func (l *lane) txPass(bg bool) (moved, blocked bool) {
	e, tx := l.e, &l.tx
	if e.wfail.Load() || l.txDone.Load() {
		l.txCleanup()
		return false, false
	}
	for {
		if tx.head == len(tx.segs) {
			if !l.build() {
				return moved, false
			}
			continue
		}
		iov := tx.iov[:0]
		for i := tx.head; i < len(tx.segs) && len(iov) < maxIov; i++ {
			var v unix.Iovec
			v.Base = &tx.segs[i].b[0]
			v.SetLen(len(tx.segs[i].b))
			iov = append(iov, v)
		}
		tx.iov = iov
		n, err := l.sysWritev()
		clear(tx.iov)
		if err != nil {
			if isAgain(err) {
				return moved, true
			}
			l.txCleanup()
			if e.failed.Load() {
				l.endTx() // what was owed cannot be written
			}
			e.writeFailed(err)
			return moved, false
		}
		moved = true
		tx.writes++
		l.advance(n)
	}
}

// advance drops the n bytes written from the front of the batch.
func (l *lane) advance(n int) {
	tx := &l.tx
	for n > 0 {
		s := &tx.segs[tx.head]
		if n < len(s.b) {
			s.b = s.b[n:]
			return
		}
		n -= len(s.b)
		l.e.releaseSeg(s)
		tx.head++
	}
}

func (e *endpoint) releaseSeg(s *txSeg) {
	if s.reg != nil {
		s.reg.release()
	}
	e.putBuf(s.pbuf)
	*s = txSeg{}
}

// build makes the next batch from the acknowledgements owed and the queued
// frames. false: there is nothing to write (or the endpoint failed and
// owes nothing). The caller holds txMu.
func (l *lane) build() bool {
	e, tx := l.e, &l.tx
	tx.segs, tx.head, tx.buf, tx.run = tx.segs[:0], 0, tx.buf[:0], 0
	e.mu.Lock()
	failed := e.err != nil
	if failed && !e.lingering {
		e.mu.Unlock()
		l.txCleanup()
		l.endTx()
		return false
	}
	sa, wa := e.sendAcks, e.writeAcks
	e.sendAcks, e.writeAcks = 0, 0
	if tx.next == len(tx.pend) && len(e.outq) > 0 {
		tx.pend, e.outq = e.outq, tx.pend[:0]
		tx.next = 0
	}
	l.txNow.Store(false)
	if sa == 0 && wa == 0 && tx.next == len(tx.pend) {
		l.txWant.Store(false)
		e.mu.Unlock()
		if failed {
			// Everything owed after the failure is written: shut the
			// write side, so the peer reads the end of the stream.
			unix.Shutdown(l.fd, unix.SHUT_WR)
			l.endTx()
		}
		return false
	}
	e.mu.Unlock()
	if sa > 0 {
		l.header(&header{typ: msgAck, kind: kindSend, length: sa})
	}
	if wa > 0 {
		l.header(&header{typ: msgAck, kind: kindWrite, length: wa})
	}
	for tx.next < len(tx.pend) {
		it := &tx.pend[tx.next]
		if failed && it.h.typ != msgNak {
			// The endpoint failed: frames not yet started are dropped.
			e.putBuf(it.buf)
			*it = outItem{}
			tx.next++
			continue
		}
		n := int(it.h.length)
		if it.h.typ == msgReadReq || (it.buf == nil && it.r == nil) {
			n = 0
		}
		inBuf := n <= smallPayload
		if it.buf != nil {
			inBuf = n <= pooledCopy
		}
		need := headerSize
		if inBuf {
			need += n
		}
		if cap(tx.buf)-len(tx.buf) < need || len(tx.segs) >= maxIov-2 {
			break // the next batch takes it
		}
		switch {
		case n == 0:
			l.header(&it.h)
		case it.buf != nil:
			l.header(&it.h)
			if inBuf {
				tx.buf = append(tx.buf, (*it.buf)[:n]...)
				e.putBuf(it.buf)
			} else {
				l.seg(txSeg{b: (*it.buf)[:n], pbuf: it.buf})
			}
		default:
			r := it.r
			if !r.acquire() {
				err := e.deregisteredErr(it.h.typName(), r)
				l.txCleanup()
				e.fail(err, nil, nil)
				return false
			}
			l.header(&it.h)
			if inBuf {
				tx.buf = append(tx.buf, r.buf[it.off:it.off+n]...)
				r.release()
			} else {
				l.seg(txSeg{b: r.buf[it.off : it.off+n], reg: r})
			}
		}
		*it = outItem{}
		tx.next++
	}
	if tx.next == len(tx.pend) {
		tx.pend, tx.next = tx.pend[:0], 0
	}
	l.closeRun()
	return len(tx.segs) > 0
}

// header appends an encoded header to the batch buffer.
func (l *lane) header(h *header) {
	tx := &l.tx
	n := len(tx.buf)
	tx.buf = tx.buf[:n+headerSize]
	h.encode(tx.buf[n:])
}

// seg ends the current run of the buffer and appends s after it.
func (l *lane) seg(s txSeg) {
	l.closeRun()
	l.tx.segs = append(l.tx.segs, s)
}

func (l *lane) closeRun() {
	tx := &l.tx
	if len(tx.buf) > tx.run {
		tx.segs = append(tx.segs, txSeg{b: tx.buf[tx.run:len(tx.buf)]})
		tx.run = len(tx.buf)
	}
}

// txCleanup drops the batch and the frames taken from the queue, releasing
// what they hold. The caller holds txMu.
func (l *lane) txCleanup() {
	tx := &l.tx
	for i := tx.head; i < len(tx.segs); i++ {
		l.e.releaseSeg(&tx.segs[i])
	}
	tx.segs, tx.head, tx.buf, tx.run = tx.segs[:0], 0, tx.buf[:0], 0
	for i := tx.next; i < len(tx.pend); i++ {
		l.e.putBuf(tx.pend[i].buf)
	}
	clear(tx.pend)
	tx.pend, tx.next = tx.pend[:0], 0
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

// drainTimeout bounds how long the reader may go on after a write failed,
// to take in what the peer sent before it went.
const drainTimeout = time.Second
