package shm

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// failure names how the endpoint failed, for fail.
type failure struct {
	cause error
	// kind and seq name the request the failure is about (completed with
	// cause itself rather than flushed); kind 0 for none.
	kind uint8
	seq  uint64
	// recvFirst: the oldest receive completes with cause itself.
	recvFirst bool
	// remote, if set, is an OpRemoteError completion to report first.
	remote error
	// bye, if set, is sent to the peer.
	bye *frame
}

// fail moves the endpoint into the error state (the first cause wins):
// the peer is told (f.bye) and stops touching this side's memory, done
// requests complete as they finished and all others with ErrFlushed
// wrapping the cause, in post order per kind.
func (e *endpoint) fail(f failure) {
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return
	}
	e.err = f.cause
	e.failed.Store(true)
	if e.myOpen != nil {
		e.myOpen.Store(0)
	}
	if f.remote != nil {
		e.pushLocked(transport.Completion{Op: transport.OpRemoteError, Err: f.remote, Endpoint: e})
	}
	if f.kind != 0 {
		if p := e.fifoOf(f.kind).seq(f.seq); p != nil && p.state != stDone {
			p.state, p.err = stDone, f.cause
		}
	}
	for first := true; e.recvs.len() > 0; first = false {
		rv := e.recvs.pop()
		err := e.flushErr("recv", f.cause)
		if first && f.recvFirst {
			err = f.cause
		}
		e.pushLocked(transport.Completion{ID: rv.id, Op: transport.OpRecv, Err: err, Endpoint: e})
	}
	for _, kind := range []uint8{opSend, opWrite, opRead} {
		q := e.fifoOf(kind)
		for q.len() > 0 {
			p := q.pop()
			if p.inl != nil {
				e.inlFree = append(e.inlFree, p.inl)
			}
			c := transport.Completion{ID: p.id, Op: opOf(kind), Endpoint: e}
			if p.state == stDone {
				c.Err = p.err
				if c.Err == nil {
					c.Bytes = p.n
				}
			} else {
				c.Err = e.flushErr(opOf(kind).String(), f.cause)
			}
			e.pushLocked(c)
		}
	}
	e.txq.clear()
	e.answers.clear()
	e.noteTxWorkLocked()
	e.inflight.Store(0)
	e.staged.Store(0)
	e.rcvActive = false
	conn := e.conn
	e.mu.Unlock()
	if f.bye != nil && conn != nil {
		conn.SetWriteDeadline(time.Now().Add(e.dev.opts.HandshakeTimeout))
		writeFrame(conn, f.bye)
	}
}

func (e *endpoint) flushErr(op string, cause error) error {
	dir := "to"
	if op == "recv" {
		dir = "from"
	}
	return fmt.Errorf("shm: %s %s %s: %w: %w", op, dir, e.peerName, transport.ErrFlushed, cause)
}

// Close disconnects. Pending requests complete with an error wrapping
// ErrClosed; the peer's with ErrPeerClosed. Close blocks until the peer
// has finished any copy into or out of this side's memory it had started
// (bounded by Options.RevokeTimeout; it starts no new one) and this side's
// copies are done, then unmaps the peer's memory.
func (e *endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	peer := e.peerName
	e.mu.Unlock()
	e.fail(failure{cause: fmt.Errorf("shm: endpoint to %s closed: %w", peer, transport.ErrClosed), bye: &frame{typ: frameBye, status: byeClosed}})
	if e.live.Load() {
		e.waitPeerIdle(0) // the peer's copies into our memory are over
	}
	e.dev.forgetEndpoint(e) // no Deregister looks at our mappings after this
	e.live.Store(false)     // no progress starts touching them
	e.rxMu.Lock()           // and none is still doing so
	e.txMu.Lock()
	e.mu.Lock()
	conn := e.conn
	e.mu.Unlock()
	if conn != nil {
		conn.Close() // the peer sees the hang-up: we will not touch its memory again
	}
	e.txMu.Unlock()
	e.rxMu.Unlock()
	for drained := false; !drained; {
		select {
		case o := <-e.incoming:
			o.c.Close()
		default:
			drained = true
		}
	}
	e.reader.Wait()
	e.mu.Lock()
	e.unmapLocked()
	e.mu.Unlock()
	e.cq.removeEndpoint(e)
	if raceEnabled {
		raceClocks.Delete(e.token)
	}
	return nil
}

// unmapLocked releases every mapping of the endpoint. Called under mu
// once live is false: every use of a mapping checks live under mu, or
// under rxMu or txMu, which Close cycled after clearing live, except the
// lock-free looks of progress at the rings' indexes and flags: the two
// transmit segments are retired instead, replaced by zeros until the
// endpoint is unreachable.
func (e *endpoint) unmapLocked() {
	e.lastSegID, e.lastSeg = 0, nil
	e.segMu.Lock()
	for id, m := range e.segs {
		unix.Munmap(m)
		delete(e.segs, id)
	}
	e.segMu.Unlock()
	for _, m := range []*[]byte{&e.peerCtl, &e.peerTab} {
		if *m != nil {
			unix.Munmap(*m)
			*m = nil
		}
	}
	var retired [][]byte
	for _, m := range []*[]byte{&e.peerTx, &e.tx} {
		if *m != nil && retire(*m) {
			retired = append(retired, *m)
		}
		// A mapping that could not be retired stays: it is small and
		// safe; only its file's pages are kept.
	}
	if len(retired) > 0 {
		runtime.AddCleanup(e, func(ms [][]byte) {
			for _, m := range ms {
				unix.Munmap(m)
			}
		}, retired)
	}
	if e.txFD >= 0 {
		unix.Close(e.txFD)
		e.txFD = -1
	}
}

// retire replaces the mapping m by anonymous zeros over the same
// addresses: a reader that still looks at it finds empty rings instead of
// faulting, and the file's pages are released.
func retire(m []byte) bool {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(m)), uintptr(len(m)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	return err == nil
}

// waitPeerIdle waits until the peer is not copying into or out of this
// side's memory: for busy 0, any copy; else a copy of the region in slot
// busy-1. A peer that hung up is not waited for; one that overruns
// RevokeTimeout is cut off.
func (e *endpoint) waitPeerIdle(busy uint64) {
	if e.peerBusy == nil || e.peerGone.Load() {
		return
	}
	idle := func() bool {
		b := e.peerBusy.Load()
		if b == 0 || (busy != 0 && b != busy) {
			e.raceAcquire()
			return true
		}
		return false
	}
	if idle() {
		return
	}
	deadline := time.Now().Add(e.dev.opts.RevokeTimeout)
	for d := time.Microsecond; !idle(); d = min(2*d, time.Millisecond) {
		if e.peerGone.Load() {
			return
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("shm: %s: the peer did not finish a copy within %v: %w", e.peerName, e.dev.opts.RevokeTimeout, transport.ErrLink)
			e.dev.logf("%v; cutting it off", err)
			e.fail(failure{cause: err, bye: &frame{typ: frameBye, status: byeProtocol}})
			e.peerGone.Store(true)
			return
		}
		time.Sleep(d)
	}
}
