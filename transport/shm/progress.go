package shm

import (
	"time"

	"github.com/goccl/goccl/transport"
)

// progress moves the endpoint forward: consume the peer's ring, push what
// waits to be pushed, complete what is done. Any goroutine may call it;
// the parts that need the ring are serialized by try-locks (a caller that
// finds one held leaves a mark so that the holder runs once more).
//
// The fast path looks at shared words without locks (Close leaves zeros
// mapped where the rings were, see retire) and takes a lock only where
// there is something to do: records to consume, requests or answers
// queued, our records unconsumed (watchPeer), requests whose completion
// may be due.
func (e *endpoint) progress() {
	if e.live.Load() && !e.failed.Load() {
		if e.rxAgain.Load() || e.in.tail.Load() != e.in.head.Load() || e.inAns.tail.Load() != e.inAns.head.Load() {
			e.runRx()
		}
		if e.txWork.Load() != 0 || e.txAgain.Load() {
			e.runTx()
		} else if e.peerHasWork() {
			// Waiting for the peer: look whether it needs a nudge now and
			// then.
			if e.watchTick.Add(1)&31 == 0 && e.txMu.TryLock() {
				e.watchPeer()
				e.txMu.Unlock()
			}
		}
		if e.inflight.Load() != 0 && (e.doneDirty.Load() || e.out.head.Load() != e.lastHead.Load()) {
			e.complete()
		}
	}
}

// runRx runs rxStep, or leaves a mark for the goroutine that holds rxMu,
// which runs it once more after it unlocked: it unlocks, then looks at the
// mark, while we set the mark, then try the lock again; one of us runs it.
func (e *endpoint) runRx() {
	for {
		if !e.rxMu.TryLock() {
			e.rxAgain.Store(true)
			if !e.rxMu.TryLock() {
				return
			}
		}
		if e.rxAgain.Load() {
			e.rxAgain.Store(false)
		}
		e.rxStep()
		e.rxMu.Unlock()
		if !e.rxAgain.Load() {
			return
		}
	}
}

// runTx is runRx for txStep.
func (e *endpoint) runTx() {
	for {
		if !e.txMu.TryLock() {
			e.txAgain.Store(true)
			if !e.txMu.TryLock() {
				return
			}
		}
		if e.txAgain.Load() {
			e.txAgain.Store(false)
		}
		e.txStep()
		e.txMu.Unlock()
		if !e.txAgain.Load() {
			return
		}
	}
}

// complete marks requests whose records the peer consumed as done and
// hands every finished request, in post order per kind, to the queue.
func (e *endpoint) complete() {
	e.mu.Lock()
	if e.doneDirty.Load() {
		e.doneDirty.Store(false)
	}
	if e.live.Load() && e.err == nil {
		head := e.out.head.Load()
		e.raceAcquire()
		if e.lastHead.Load() != head {
			e.lastHead.Store(head)
		}
		e.consumedLocked(&e.sends, head)
		e.consumedLocked(&e.writes, head)
	}
	e.emitLocked(opSend)
	e.emitLocked(opWrite)
	e.emitLocked(opRead)
	e.mu.Unlock()
}

// consumedLocked marks the requests of f whose last record lies before
// head as done, up to the first that is not.
func (e *endpoint) consumedLocked(f *fifo[req], head uint64) {
	for i := 0; i < f.len(); i++ {
		p := f.at(i)
		switch {
		case p.state == stDone:
			continue
		case p.state == stRing && p.end <= head:
			p.state = stDone
			if p.staged {
				p.staged = false
				e.staged.Add(-1)
			}
			continue
		}
		return
	}
}

func (e *endpoint) emitLocked(kind uint8) {
	f := e.fifoOf(kind)
	for f.len() > 0 && f.at(0).state == stDone {
		p := f.pop()
		e.inflight.Add(-1)
		if p.inl != nil {
			e.inlFree = append(e.inlFree, p.inl)
		}
		c := transport.Completion{ID: p.id, Op: opOf(kind), Err: p.err, Endpoint: e}
		if p.err == nil {
			c.Bytes = p.n
		}
		e.pushLocked(c)
	}
}

// txStep answers the peer's staged reads and executes queued requests
// while the ring has room. Under txMu.
func (e *endpoint) txStep() {
	if !e.live.Load() || e.failed.Load() {
		return
	}
	if e.txWork.Load() != 0 {
		for e.answerOne() {
		}
		for {
			e.mu.Lock()
			if e.err != nil || e.txq.len() == 0 {
				e.mu.Unlock()
				break
			}
			q := *e.txq.at(0)
			e.mu.Unlock()
			if e.exec(q.kind, q.seq) {
				break
			}
			e.mu.Lock()
			if e.txq.len() > 0 && *e.txq.at(0) == q {
				e.txq.pop()
				e.noteTxWorkLocked()
			}
			e.mu.Unlock()
		}
	}
	e.flushTx()
	if e.watchTick.Add(1)&31 == 0 {
		e.watchPeer()
	}
}

// peerHasWork reports whether the peer has something to do for us: our
// records to consume, or its own waiting for room in its rings.
func (e *endpoint) peerHasWork() bool {
	return e.out.tail.Load() != e.out.head.Load() || e.outAns.tail.Load() != e.outAns.head.Load() || e.peerBlocked.Load() != 0
}

// Nudges from a caller that polls without sleeping: while the peer leaves
// our records unconsumed (or has its own waiting for room), nudge it after
// firstNudge, then at doubling intervals up to maxNudge.
const (
	firstNudge = 100 * time.Microsecond
	maxNudge   = 20 * time.Millisecond
)

var epoch = time.Now()

// watchPeer nudges a peer that seems not to drive progress. Under txMu.
func (e *endpoint) watchPeer() {
	if !e.live.Load() || e.failed.Load() {
		return
	}
	if !e.peerHasWork() {
		e.stuckSince = 0
		return
	}
	now := time.Since(epoch)
	if e.stuckSince == 0 {
		e.stuckSince, e.nudgeDelay = now, firstNudge
		return
	}
	if now-e.stuckSince < e.nudgeDelay {
		return
	}
	e.stuckSince, e.nudgeDelay = now, min(2*e.nudgeDelay, maxNudge)
	if !e.peerBell.sleeping() {
		e.sendNudge()
	}
}

// flushTx publishes the records written since the last publish, rings the
// peer, and says in the shared blocked flag whether records wait for room.
// Under txMu.
func (e *endpoint) flushTx() {
	if !e.live.Load() {
		return
	}
	rung := false
	if e.out.pos != e.published {
		e.out.publish()
		e.published, rung = e.out.pos, true
	}
	if e.outAns.pos != e.publishedAns {
		e.outAns.publish()
		e.publishedAns, rung = e.outAns.pos, true
	}
	if rung {
		e.peerBell.ring()
	}
	var v uint32
	if e.txWork.Load() != 0 && !e.failed.Load() {
		v = 1
	}
	if e.myBlocked.Load() != v {
		e.myBlocked.Store(v)
	}
}
