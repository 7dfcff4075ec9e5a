package shm

import (
	"fmt"

	"github.com/goccl/goccl/transport"
)

// exec executes queued request seq of kind, under txMu. It returns true
// if the request has to wait (no room in the ring, staged requests before
// it, the peer going away); what it did so far is saved in the request.
func (e *endpoint) exec(kind uint8, seq uint64) (blocked bool) {
	e.mu.Lock()
	p := e.fifoOf(kind).seq(seq)
	if p == nil || e.err != nil || !e.live.Load() {
		e.mu.Unlock()
		return false
	}
	q := *p
	e.mu.Unlock()
	blocked = e.execReq(kind, seq, &q)
	e.mu.Lock()
	e.applyLocked(kind, seq, &q)
	e.mu.Unlock()
	return blocked
}

// applyLocked stores what executing did to request seq (q, a copy) and
// hands it to the queue if it is done and its turn has come.
func (e *endpoint) applyLocked(kind uint8, seq uint64, q *req) {
	f := e.fifoOf(kind)
	p := f.seq(seq)
	if p == nil || e.err != nil {
		return
	}
	if q.staged && !p.staged {
		e.staged.Add(1)
	}
	*p = *q
	if p.state == stDone {
		e.emitLocked(kind)
		if f.seq(seq) != nil {
			e.doneDirty.Store(true) // behind one not done
		}
	}
}

// execReq executes q, numbered seq among its kind, recording in q what it
// did: moved, staged, state, end (and err for a failed one). Under txMu.
func (e *endpoint) execReq(kind uint8, seq uint64, q *req) (blocked bool) {
	staged := int(e.staged.Load())
	switch kind {
	case opSend:
		return e.execSend(seq, q)
	case opWrite:
		return e.execWrite(seq, q, staged)
	}
	return e.execRead(seq, q, staged)
}

func (e *endpoint) execSend(seq uint64, q *req) bool {
	for first := true; first || q.moved < q.n; first = false {
		chunk := min(q.n-q.moved, e.maxChunk)
		cells := 1 + payloadCells(chunk)
		if !e.out.reserve(cells) {
			return true
		}
		rec := record{kind: recSend, cells: cells, n: uint32(chunk), total: uint64(q.n), off: uint64(q.moved), seq: seq}
		if q.moved == 0 {
			rec.flags |= flagFirst
		}
		if q.moved+chunk == q.n {
			rec.flags |= flagLast
		}
		cell := e.out.cell(e.out.pos)
		if chunk > 0 {
			if !q.pin() {
				e.localGone(opSend, seq, q)
				return false
			}
			copy(cell[cellSize:cellSize+chunk], q.src()[q.moved:])
			q.unpin()
		}
		rec.encode(cell)
		e.out.pos += uint64(cells)
		q.moved += chunk
	}
	q.state, q.end = stRing, e.out.pos
	return false
}

func (e *endpoint) execWrite(seq uint64, q *req, staged int) bool {
	if !q.staged {
		t, path, reason := e.remote(q.rkey, q.roff, q.n, transport.AccessRemoteWrite)
		switch path {
		case pathWait:
			return true
		case pathRefused:
			e.refuseLocal(opWrite, seq, q, reason, t.size)
			return false
		case pathDirect, pathCMA:
			if staged > 0 || (q.hasImm && !e.out.reserve(1)) {
				e.releaseRemote()
				return true
			}
			if !q.pin() {
				e.releaseRemote()
				e.localGone(opWrite, seq, q)
				return false
			}
			src := q.src()
			var err error
			if path == pathDirect {
				copy(t.mem, src)
			} else {
				err = e.cmaWrite(t.addr, src)
			}
			q.unpin()
			e.releaseRemote()
			if err != nil {
				return e.cmaFailed(opWrite, seq, q, err)
			}
			e.paths[path].Add(1)
			if !q.hasImm {
				q.state, q.end = stDone, 0
				return false
			}
			rec := record{kind: recImm, cells: 1, imm: q.imm, total: uint64(q.n), seq: seq}
			rec.encode(e.out.cell(e.out.pos))
			e.out.pos++
			q.state, q.end = stRing, e.out.pos
			return false
		}
	}
	// Staged: the data goes through the ring; the peer checks and places it.
	for first := true; first || q.moved < q.n; first = false {
		chunk := min(q.n-q.moved, e.maxChunk)
		cells := 1 + payloadCells(chunk)
		if !e.out.reserve(cells) {
			return true
		}
		rec := record{kind: recWrite, cells: cells, n: uint32(chunk), total: uint64(q.n), key: q.rkey, off: q.roff + uint64(q.moved), seq: seq}
		if q.moved == 0 {
			rec.flags |= flagFirst
		}
		if q.moved+chunk == q.n {
			rec.flags |= flagLast
			if q.hasImm {
				rec.flags |= flagImm
				rec.imm = q.imm
			}
		}
		cell := e.out.cell(e.out.pos)
		if chunk > 0 {
			if !q.pin() {
				e.localGone(opWrite, seq, q)
				return false
			}
			copy(cell[cellSize:cellSize+chunk], q.src()[q.moved:])
			q.unpin()
		}
		rec.encode(cell)
		e.out.pos += uint64(cells)
		if q.moved == 0 {
			q.staged = true
			e.paths[pathStaged].Add(1)
		}
		q.moved += chunk
	}
	q.state, q.end = stRing, e.out.pos
	return false
}

func (e *endpoint) execRead(seq uint64, q *req, staged int) bool {
	t, path, reason := e.remote(q.rkey, q.roff, q.n, transport.AccessRemoteRead)
	switch path {
	case pathWait:
		return true
	case pathRefused:
		e.refuseLocal(opRead, seq, q, reason, t.size)
		return false
	case pathDirect, pathCMA:
		if staged > 0 {
			e.releaseRemote()
			return true
		}
		if !q.r.acquire() {
			e.releaseRemote()
			e.localGone(opRead, seq, q)
			return false
		}
		dst := q.r.buf[q.off : q.off+q.n]
		var err error
		if path == pathDirect {
			copy(dst, t.mem)
		} else {
			err = e.cmaRead(t.addr, dst)
		}
		q.r.release()
		e.releaseRemote()
		if err != nil {
			return e.cmaFailed(opRead, seq, q, err)
		}
		e.paths[path].Add(1)
		q.state, q.end = stDone, 0
		return false
	}
	if !e.out.reserve(1) {
		return true
	}
	rec := record{kind: recReadReq, cells: 1, total: uint64(q.n), key: q.rkey, off: q.roff, seq: seq}
	rec.encode(e.out.cell(e.out.pos))
	e.out.pos++
	e.paths[pathStaged].Add(1)
	q.staged = true
	q.state, q.end = stData, 0
	return false
}

// cmaFailed handles an error of process_vm_writev or process_vm_readv: a
// peer that is gone is waited for (its hang-up fails the endpoint), a
// kernel that refuses CMA turns it off for this connection (the request
// goes again, staged), and a bad address is a refused access.
func (e *endpoint) cmaFailed(kind uint8, seq uint64, q *req, err error) bool {
	switch {
	case cmaGone(err):
		e.peerGone.Store(true)
		return true
	case cmaRefused(err):
		e.dev.logf("%s: cross-memory attach refused (%v); using the ring", e.peerName, err)
		e.cma = false
		return true
	}
	e.refuseLocal(kind, seq, q, reasonBounds, 0)
	return false
}

// refuseLocal fails a request whose access the peer's table refuses: the
// request completes with ErrRemoteAccess, the peer reports OpRemoteError,
// and both endpoints enter the error state.
func (e *endpoint) refuseLocal(kind uint8, seq uint64, q *req, reason uint8, size uint64) {
	op := "write"
	if kind == opRead {
		op = "read"
	}
	err := refusal(op, e.peerName, q.rkey, q.roff, uint64(q.n), reason, size)
	q.state, q.err = stDone, err
	e.fail(failure{cause: err, kind: kind, seq: seq,
		bye: &frame{typ: frameBye, status: byeRemoteAccess, kind: kind, reason: reason, b: q.rkey, c: q.roff, d: uint64(q.n), e: size}})
}

// localGone fails the endpoint when the local region of a request in
// flight was deregistered (as an RC queue pair meeting a local protection
// error).
func (e *endpoint) localGone(kind uint8, seq uint64, q *req) {
	err := fmt.Errorf("shm: %v with %s: local region key %#x deregistered while the request was in flight: %w", opOf(kind), e.peerName, q.r.key, transport.ErrInvalid)
	q.state, q.err = stDone, err
	e.fail(failure{cause: err, kind: kind, seq: seq, bye: &frame{typ: frameBye, status: byeProtocol}})
}

// protocolError fails the endpoint when the peer broke the protocol.
func (e *endpoint) protocolError(err error) {
	cause := fmt.Errorf("shm: connection to %s: %v: %w", e.peerName, err, transport.ErrLink)
	e.dev.logf("%v", cause)
	e.fail(failure{cause: cause, bye: &frame{typ: frameBye, status: byeProtocol}})
}

// answerOne pushes the answer to the oldest staged read of the peer, as far
// as the ring has room. It reports whether it finished one.
func (e *endpoint) answerOne() bool {
	e.mu.Lock()
	if e.err != nil || e.answers.len() == 0 {
		e.mu.Unlock()
		return false
	}
	t := *e.answers.at(0)
	e.mu.Unlock()
	// The snapshot holds bytes [moved, n) of the answer as of its request.
	src := t.snap[:t.n-t.moved]
	base := t.moved
	e.answerFrom(&t, src)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.answers.len() == 0 {
		return false
	}
	if !t.done {
		a := e.answers.at(0)
		a.snap = a.snap[t.moved-base:]
		a.moved = t.moved
		return false
	}
	if done := e.answers.pop(); cap(done.snap) > cap(e.spare) {
		e.spare = done.snap[:0]
	}
	e.noteTxWorkLocked()
	return true
}

// answerFrom pushes chunks of the answer t while the ring has room. src
// holds the answer's bytes [t.moved, t.n). Under txMu.
func (e *endpoint) answerFrom(t *readTask, src []byte) {
	for first := true; first || t.moved < t.n; first = false {
		chunk := min(t.n-t.moved, uint64(e.maxChunk))
		cells := 1 + payloadCells(int(chunk))
		if !e.outAns.reserve(cells) {
			return
		}
		rec := record{kind: recReadData, cells: cells, n: uint32(chunk), off: t.moved, seq: t.seq}
		if t.moved+chunk == t.n {
			rec.flags = flagLast
		}
		cell := e.outAns.cell(e.outAns.pos)
		copy(cell[cellSize:cellSize+chunk], src[:chunk])
		src = src[chunk:]
		rec.encode(cell)
		e.outAns.pos += uint64(cells)
		t.moved += chunk
	}
	t.done = true
}

// refuseRemote refuses the peer's request seq of kind: OpRemoteError here,
// the request fails with ErrRemoteAccess there, both endpoints enter the
// error state.
func (e *endpoint) refuseRemote(kind uint8, seq, key, off, n uint64, reason uint8, size uint64) {
	op := "write"
	if kind == opRead {
		op = "read"
	}
	err := refusal(op, e.peerName, key, off, n, reason, size)
	e.fail(failure{cause: err, remote: err,
		bye: &frame{typ: frameBye, status: byeRemoteAccess, kind: kind, reason: reason, hasSeq: true, a: seq, b: key, c: off, d: n, e: size}})
}
