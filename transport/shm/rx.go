package shm

import (
	"fmt"

	"github.com/goccl/goccl/transport"
)

// rxStep consumes the peer's ring: every record that can be acted on now,
// in order. A message or immediate that finds no posted receive stops it
// (the record waits in the ring, holding the ones behind it, as an RC queue
// pair does on receiver-not-ready). Under rxMu.
func (e *endpoint) rxStep() {
	if !e.live.Load() || e.failed.Load() {
		return
	}
	var rec record
	moved, answer := false, false
	for {
		cell, ok, err := e.inAns.next(&rec)
		if err != nil {
			e.protocolError(fmt.Errorf("answer ring: %w", err))
			return
		}
		if !ok {
			break
		}
		switch rec.kind {
		case recPad:
		case recReadData:
			e.placeReadData(&rec, cell)
		default:
			e.protocolError(fmt.Errorf("a %s record in the answer ring", kindName(rec.kind)))
			return
		}
		if e.failed.Load() {
			return
		}
		e.inAns.advance(&rec)
		e.inAns.commit()
		moved = true
	}
	for {
		cell, ok, err := e.in.next(&rec)
		if err != nil {
			e.protocolError(err)
			return
		}
		if !ok {
			break
		}
		wait := false
		switch rec.kind {
		case recPad:
		case recSend:
			wait = e.placeSend(&rec, cell)
		case recImm:
			wait = e.takeImm(&rec)
		case recWrite:
			wait = e.placeWrite(&rec, cell)
		case recReadReq:
			answer = e.acceptRead(&rec) || answer
		default:
			e.protocolError(fmt.Errorf("a %s record in the request ring", kindName(rec.kind)))
			return
		}
		if wait || e.failed.Load() {
			break
		}
		e.in.advance(&rec)
		e.in.commit()
		moved = true
	}
	if moved && !e.failed.Load() {
		e.peerBell.ring()
		if e.peerBlocked.Load() != 0 && !e.peerBell.sleeping() {
			e.sendNudge()
		}
	}
	if answer {
		e.txAgain.Store(true)
	}
}

// maxBytes bounds a length the peer states for a whole message or write.
const maxBytes = 1 << 48

func (e *endpoint) placeSend(rec *record, cell []byte) (wait bool) {
	last := rec.flags&flagLast != 0
	e.mu.Lock()
	if rec.flags&flagFirst != 0 {
		if e.rcvActive {
			e.mu.Unlock()
			e.protocolError(fmt.Errorf("a message starts before the previous one ended"))
			return false
		}
		if e.recvs.len() == 0 {
			e.mu.Unlock()
			return true
		}
		rv := *e.recvs.at(0)
		if rec.total > uint64(rv.n) {
			e.mu.Unlock()
			err := fmt.Errorf("shm: recv from %s: message of %d bytes longer than the posted receive of %d bytes: %w", e.peerName, rec.total, rv.n, transport.ErrLength)
			e.fail(failure{cause: err, recvFirst: true,
				bye: &frame{typ: frameBye, status: byeLength, kind: opSend, reason: reasonLength, hasSeq: true, a: rec.seq, d: rec.total, e: uint64(rv.n)}})
			return false
		}
		e.rcvActive, e.rcvTotal, e.rcvGot = true, rec.total, 0
	} else if !e.rcvActive {
		e.mu.Unlock()
		e.protocolError(fmt.Errorf("a message continues that never started"))
		return false
	}
	if rec.total != e.rcvTotal || rec.off != e.rcvGot || uint64(rec.n) > e.rcvTotal-e.rcvGot || last != (rec.off+uint64(rec.n) == e.rcvTotal) {
		e.mu.Unlock()
		e.protocolError(fmt.Errorf("message chunk at %d of %d bytes (%d placed of %d)", rec.off, rec.n, e.rcvGot, e.rcvTotal))
		return false
	}
	rv := *e.recvs.at(0)
	e.mu.Unlock()
	if rec.n > 0 {
		if !rv.r.acquire() {
			e.recvGone(rv.r)
			return false
		}
		copy(rv.r.buf[rv.off+int(rec.off):rv.off+int(rec.off)+int(rec.n)], cell[cellSize:])
		rv.r.release()
	}
	e.mu.Lock()
	if e.err == nil {
		e.rcvGot += uint64(rec.n)
		if last {
			e.recvs.pop()
			e.rcvActive = false
			e.pushLocked(transport.Completion{ID: rv.id, Op: transport.OpRecv, Bytes: int(rec.total), Endpoint: e})
		}
	}
	e.mu.Unlock()
	return false
}

// takeImm completes the oldest receive with an immediate.
func (e *endpoint) takeImm(rec *record) (wait bool) {
	if rec.total > maxBytes {
		e.protocolError(fmt.Errorf("immediate of a %d-byte write", rec.total))
		return false
	}
	e.mu.Lock()
	if e.rcvActive {
		e.mu.Unlock()
		e.protocolError(fmt.Errorf("an immediate inside a message"))
		return false
	}
	if e.recvs.len() == 0 {
		e.mu.Unlock()
		return true
	}
	rv := e.recvs.pop()
	e.pushLocked(transport.Completion{ID: rv.id, Op: transport.OpRecv, Bytes: int(rec.total), Imm: rec.imm, HasImm: true, Endpoint: e})
	e.mu.Unlock()
	return false
}

// placeWrite checks and places one chunk of a staged write.
func (e *endpoint) placeWrite(rec *record, cell []byte) (wait bool) {
	last, imm := rec.flags&flagLast != 0, rec.flags&flagImm != 0
	if (imm && !last) || rec.total > maxBytes {
		e.protocolError(fmt.Errorf("staged write chunk with flags %#x of a %d-byte write", rec.flags, rec.total))
		return false
	}
	if imm {
		e.mu.Lock()
		n := e.recvs.len()
		active := e.rcvActive
		e.mu.Unlock()
		if active {
			e.protocolError(fmt.Errorf("a staged write inside a message"))
			return false
		}
		if n == 0 {
			return true
		}
	}
	start := rec.off
	length := uint64(rec.n)
	if rec.flags&flagFirst != 0 {
		length = rec.total // the whole write is checked before any of it lands
	}
	r := e.dev.lookup(rec.key)
	var reason uint8
	var size uint64
	switch {
	case r == nil:
		reason = reasonKey
	case r.access&transport.AccessRemoteWrite == 0:
		reason = reasonAccess
	case !inBounds(start, length, uint64(len(r.buf))) || !inBounds(rec.off, uint64(rec.n), uint64(len(r.buf))):
		reason = reasonBounds
	}
	if r != nil {
		size = uint64(len(r.buf))
	}
	if reason != 0 {
		if r != nil {
			r.release()
		}
		e.refuseRemote(opWrite, rec.seq, rec.key, rec.off, rec.total, reason, size)
		return false
	}
	copy(r.buf[rec.off:rec.off+uint64(rec.n)], cell[cellSize:])
	r.release()
	if imm {
		e.mu.Lock()
		if e.err == nil && e.recvs.len() > 0 {
			rv := e.recvs.pop()
			e.pushLocked(transport.Completion{ID: rv.id, Op: transport.OpRecv, Bytes: int(rec.total), Imm: rec.imm, HasImm: true, Endpoint: e})
		}
		e.mu.Unlock()
	}
	return false
}

// acceptRead checks a staged read of the peer and answers it. The answer
// reflects the region as the request finds it (later writes of the peer
// must not show in it), so what does not fit into the ring now is copied
// aside first.
func (e *endpoint) acceptRead(rec *record) bool {
	r := e.dev.lookup(rec.key)
	var reason uint8
	var size uint64
	switch {
	case r == nil:
		reason = reasonKey
	case r.access&transport.AccessRemoteRead == 0:
		reason = reasonAccess
	case !inBounds(rec.off, rec.total, uint64(len(r.buf))):
		reason = reasonBounds
	}
	if r != nil {
		size = uint64(len(r.buf))
	}
	if reason != 0 {
		if r != nil {
			r.release()
		}
		e.refuseRemote(opRead, rec.seq, rec.key, rec.off, rec.total, reason, size)
		return false
	}
	defer r.release()
	t := readTask{key: rec.key, off: rec.off, n: rec.total, seq: rec.seq}
	e.mu.Lock()
	first := e.answers.len() == 0
	e.mu.Unlock()
	if first && e.txMu.TryLock() {
		if e.live.Load() && !e.failed.Load() {
			e.answerFrom(&t, r.buf[t.off:t.off+t.n])
			e.flushTx()
		}
		e.txMu.Unlock()
		if t.done {
			return false
		}
	}
	t.snap = append(e.takeSnap(), r.buf[t.off+t.moved:t.off+t.n]...)
	e.mu.Lock()
	e.answers.push(t)
	e.noteTxWorkLocked()
	e.mu.Unlock()
	return true
}

// takeSnap returns a spare buffer for a snapshot, emptied.
func (e *endpoint) takeSnap() []byte {
	e.mu.Lock()
	b := e.spare
	e.spare = nil
	e.mu.Unlock()
	return b[:0]
}

// placeReadData places one chunk of the answer to our oldest staged read.
func (e *endpoint) placeReadData(rec *record, cell []byte) {
	last := rec.flags&flagLast != 0
	e.mu.Lock()
	p := e.reads.seq(rec.seq)
	if p == nil || p.state != stData || rec.off != uint64(p.moved) || uint64(rec.n) > uint64(p.n-p.moved) || last != (rec.off+uint64(rec.n) == uint64(p.n)) {
		e.mu.Unlock()
		e.protocolError(fmt.Errorf("read data for read %d at %d of %d bytes, which is not awaited", rec.seq, rec.off, rec.n))
		return
	}
	q := *p
	r, off := p.r, p.off
	e.mu.Unlock()
	if rec.n > 0 {
		if !r.acquire() {
			e.localGone(opRead, rec.seq, &q)
			return
		}
		copy(r.buf[off+int(rec.off):off+int(rec.off)+int(rec.n)], cell[cellSize:])
		r.release()
	}
	e.mu.Lock()
	if p := e.reads.seq(rec.seq); p != nil && e.err == nil {
		p.moved += int(rec.n)
		if last {
			p.state = stDone
			e.doneDirty.Store(true)
			if p.staged {
				p.staged = false
				e.staged.Add(-1)
			}
		}
	}
	e.mu.Unlock()
}

// recvGone fails the endpoint when the region of the receive being filled
// was deregistered.
func (e *endpoint) recvGone(r *region) {
	err := fmt.Errorf("shm: recv from %s: local region key %#x deregistered while the request was pending: %w", e.peerName, r.key, transport.ErrInvalid)
	e.fail(failure{cause: err, recvFirst: true, bye: &frame{typ: frameBye, status: byeProtocol}})
}

// sendNudge asks the peer to run progress on this connection: its caller
// may not be polling while we wait for it. At most one nudge is pending.
func (e *endpoint) sendNudge() {
	if e.peerNudge.CompareAndSwap(0, 1) {
		stats.nudges.Add(1)
		writeFrame(e.conn, &frame{typ: frameNudge})
	}
}

// nudgePeer is called by a waiter about to sleep: if the peer has records
// of ours to consume, or has its own waiting for room, and no waiter of
// its queue sleeps (one that does was rung and will act), nudge it.
func (e *endpoint) nudgePeer() {
	if !e.txMu.TryLock() {
		return // someone is busy with the connection
	}
	if e.live.Load() && !e.failed.Load() {
		if e.peerHasWork() && !e.peerBell.sleeping() {
			e.sendNudge()
		}
	}
	e.txMu.Unlock()
}
