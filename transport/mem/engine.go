package mem

import (
	"fmt"
	"time"

	"github.com/goccl/goccl/transport"
)

// run carries out e's sends, writes and reads one at a time, in posting
// order, until e enters the error state; then it flushes what is left and
// returns. It is started when e is connected.
func (e *Endpoint) run() {
	defer close(e.done)
	var timer *time.Timer
	for {
		e.mu.Lock()
		for e.sq.len() == 0 && e.err == nil {
			e.mu.Unlock()
			select {
			case <-e.wake:
			case <-e.failed:
			}
			e.mu.Lock()
		}
		if e.err != nil {
			cause := e.err
			sq := e.sq.drain()
			e.mu.Unlock()
			e.flush(sq, cause)
			return
		}
		r := e.sq.pop()
		e.mu.Unlock()
		if !e.inject(&timer) {
			e.complete(r, e.flushError(r), 0)
			continue
		}
		e.execute(r)
	}
}

// inject applies the network's fault injection before a request: the
// random delay, the random cut and the connection's cut budget. It reports
// whether the request may go ahead.
func (e *Endpoint) inject(timer **time.Timer) bool {
	opts := &e.dev.net.opts
	if opts.Delay > 0 {
		d := time.Duration(e.rng.Int64N(int64(opts.Delay) + 1))
		if *timer == nil {
			*timer = time.NewTimer(d)
		} else {
			(*timer).Reset(d)
		}
		select {
		case <-(*timer).C:
		case <-e.failed:
			(*timer).Stop()
			return false
		}
	}
	if opts.CutProb > 0 && e.rng.Float64() < opts.CutProb {
		e.conn.cut("random cut (Options.CutProb)")
		return false
	}
	if e.conn.spend() {
		e.conn.cut("cut budget spent (CutAfter)")
		return false
	}
	select {
	case <-e.failed:
		return false
	default:
		return true
	}
}

// flushError is the error of a request that e's error state stops.
func (e *Endpoint) flushError(r *request) error {
	return fmt.Errorf("mem: %v %d on %v flushed: %w: %w", r.op, r.id, e, transport.ErrFlushed, e.cause())
}

// execute carries out one send, write or read against the peer.
func (e *Endpoint) execute(r *request) {
	p := e.peer
	switch {
	case r.op == transport.OpSend:
		rr := p.takeRecv(e)
		if rr == nil {
			e.complete(r, e.flushError(r), 0)
			return
		}
		if len(r.buf) > len(rr.buf) {
			err := fmt.Errorf("mem: message of %d bytes from %v, receive %d on %v has %d: %w",
				len(r.buf), e, rr.id, p, len(rr.buf), transport.ErrLength)
			// Each side is in the error state before its completion shows
			// (TestDelayedConformance/RecvTooShort posted on A after A's
			// completion and found it still accepting posts).
			prq := p.enterError(err)
			p.complete(rr, err, 0)
			p.flush(prq, err)
			p.recvDone()
			erq := e.enterError(err)
			e.complete(r, err, 0)
			e.flush(erq, err)
			return
		}
		copy(rr.buf, r.buf)
		p.cq.push(transport.Completion{ID: rr.id, Op: transport.OpRecv, Bytes: len(r.buf), Endpoint: p})
		freeRequest(rr)
		p.recvDone()
		e.complete(r, nil, len(r.buf))

	case r.op == transport.OpWrite:
		var rr *request
		if r.hasImm {
			// Check before waiting for a receive, so that a bad access
			// fails even if the peer never posts one.
			_, reg, err := p.dev.acquire(r.remote.Key, r.roff, len(r.buf), transport.AccessRemoteWrite)
			if err != nil {
				e.refused(r, err)
				return
			}
			reg.release()
			if rr = p.takeRecv(e); rr == nil {
				e.complete(r, e.flushError(r), 0)
				return
			}
		}
		dst, reg, err := p.dev.acquire(r.remote.Key, r.roff, len(r.buf), transport.AccessRemoteWrite)
		if err != nil {
			if rr != nil {
				p.fail(err)
				p.complete(rr, fmt.Errorf("mem: recv %d on %v flushed: %w: %w", rr.id, p, transport.ErrFlushed, err), 0)
				p.recvDone()
			}
			e.refused(r, err)
			return
		}
		copy(dst, r.buf)
		reg.release()
		if rr != nil {
			p.cq.push(transport.Completion{ID: rr.id, Op: transport.OpRecv, Bytes: len(r.buf), Imm: r.imm, HasImm: true, Endpoint: p})
			freeRequest(rr)
			p.recvDone()
		}
		e.complete(r, nil, len(r.buf))

	case r.op == transport.OpRead:
		src, reg, err := p.dev.acquire(r.remote.Key, r.roff, len(r.buf), transport.AccessRemoteRead)
		if err != nil {
			e.refused(r, err)
			return
		}
		copy(r.buf, src)
		reg.release()
		e.complete(r, nil, len(r.buf))
	}
}

// refused handles a remote access the peer's device refused: the request
// fails with err (wrapping ErrRemoteAccess), the peer reports
// OpRemoteError, and both endpoints enter the error state. If the refusal
// comes from the peer going away (its device closing revokes its keys), the
// request is flushed with the cause of that instead.
func (e *Endpoint) refused(r *request, err error) {
	p := e.peer
	if p.cause() != nil {
		// Whoever failed p fails e too, right after.
		<-e.failed
		e.complete(r, e.flushError(r), 0)
		return
	}
	// As for ErrLength: each side refuses posts before its completion shows.
	prq := p.enterError(err)
	p.cq.push(transport.Completion{Op: transport.OpRemoteError, Err: err, Endpoint: p})
	p.flush(prq, err)
	erq := e.enterError(err)
	e.complete(r, err, 0)
	e.flush(erq, err)
}
