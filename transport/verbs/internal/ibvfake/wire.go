package ibvfake

import (
	"unsafe"

	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// bytesAt is the memory at addr: a registered region (pinned by the
// transport, or outside the Go heap) that the fake reads and writes as the
// adapter would.
func bytesAt(addr uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&addr))), n)
}

// localLocked checks a local sge against the region its lkey names: in the
// queue pair's protection domain, inside its bounds, with local write if
// write. It returns the memory or false.
func (q *qp) localLocked(addr uintptr, n int, lkey uint32, write bool) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	m := q.f().mrs[lkey]
	if m == nil || m.pd != q.pd || addr < m.addr || addr-m.addr > uintptr(m.n) || uintptr(n) > uintptr(m.n)-(addr-m.addr) {
		return nil, false
	}
	if write && m.access&ibv.AccessLocalWrite == 0 {
		return nil, false
	}
	return bytesAt(addr, n), true
}

// remoteLocked checks a remote access at the target queue pair: its right
// (the queue pair's and the region's), the key in its protection domain,
// the bounds. Zero-length accesses check no key.
func (t *qp) remoteLocked(raddr uint64, n int, rkey uint32, right ibv.Access) ([]byte, bool) {
	if t.access&right == 0 {
		return nil, false
	}
	if n == 0 {
		return nil, true
	}
	m := t.f().mrs[rkey]
	if m == nil || m.pd != t.pd || m.access&right == 0 {
		return nil, false
	}
	base := uint64(m.addr)
	if raddr < base || raddr-base > uint64(m.n) || uint64(n) > uint64(m.n)-(raddr-base) {
		return nil, false
	}
	return bytesAt(uintptr(raddr), n), true
}

// popFront removes the first element, keeping the slice's storage (a fake
// that allocated per request would hide the transport's allocations).
func popFront[T any](s []T) []T {
	n := copy(s, s[1:])
	clear(s[n:])
	return s[:n]
}

// pumpLocked executes posted requests, in order per queue pair, until none
// can make progress (a send waiting for a receive, a peer not yet ready).
func (f *Fabric) pumpLocked() {
	if f.held {
		return
	}
	for progress := true; progress; {
		progress = false
		for _, q := range f.qps {
			for len(q.sq) > 0 && q.state == qpsRTS && !q.destroyed {
				if !q.stepLocked() {
					break
				}
				progress = true
			}
		}
	}
}

// stepLocked executes the head of q's send queue; false if it must wait.
func (q *qp) stepLocked() bool {
	f := q.f()
	w := &q.sq[0]
	op := sendOpcode(w.Op)
	fail := func(status uint32) bool {
		wrid := w.WRID
		q.sq = popFront(q.sq)
		q.completeLocked(wrid, status, op, 0)
		q.failLocked()
		return true
	}
	done := func(n int) bool {
		wrid := w.WRID
		q.sq = popFront(q.sq)
		q.completeLocked(wrid, ibv.WCSuccess, op, n)
		return true
	}
	t := f.qps[q.rtr.DestQPN]
	switch {
	case t == nil || t.state == qpsErr || t.pd.ctx.dev.dead || !t.pd.ctx.dev.hasGID(q.rtr.DGID):
		// Nobody answers: the adapter retries, then gives up.
		return fail(ibv.WCRetryExcErr)
	case t.state < qpsRTR:
		return false // not connected yet: the adapter retries meanwhile
	case t.rtr.DestQPN != q.num || t.rtr.RQPSN != q.rts.SQPSN:
		return fail(ibv.WCRetryExcErr) // the peer drops our packets
	}
	var src []byte
	if w.Op != ibv.OpRead {
		if w.isInline {
			src = w.inline[:w.Len]
		} else {
			var ok bool
			if src, ok = q.localLocked(w.Addr, w.Len, w.LKey, false); !ok {
				return fail(ibv.WCLocProtErr)
			}
		}
	}
	switch w.Op {
	case ibv.OpSend:
		if len(t.rq) == 0 {
			return false // RNR: retried until the peer posts a receive
		}
		r := t.rq[0]
		if w.Len > r.n {
			t.rq = popFront(t.rq)
			t.completeLocked(r.wrid, ibv.WCLocLenErr, ibv.WCOpRecv, 0)
			t.failLocked()
			return fail(ibv.WCRemInvReqErr)
		}
		dst, ok := t.localLocked(r.addr, w.Len, r.lkey, true)
		if !ok {
			t.rq = popFront(t.rq)
			t.completeLocked(r.wrid, ibv.WCLocProtErr, ibv.WCOpRecv, 0)
			t.failLocked()
			return fail(ibv.WCRemOpErr)
		}
		copy(dst, src)
		t.rq = popFront(t.rq)
		t.completeLocked(r.wrid, ibv.WCSuccess, ibv.WCOpRecv, w.Len)
		return done(w.Len)
	case ibv.OpWrite, ibv.OpWriteImm:
		dst, ok := t.remoteLocked(w.RemoteAddr, w.Len, w.RKey, ibv.AccessRemoteWrite)
		if !ok {
			if w.Op == ibv.OpWriteImm && len(t.rq) > 0 {
				// rxe completes the receive the refused write consumed
				// with the responder's status.
				r := t.rq[0]
				t.rq = popFront(t.rq)
				t.completeLocked(r.wrid, ibv.WCRemAccessErr, ibv.WCOpRecv, 0)
			}
			t.failLocked()
			return fail(ibv.WCRemAccessErr)
		}
		if w.Op == ibv.OpWriteImm && len(t.rq) == 0 {
			return false // RNR
		}
		copy(dst, src)
		if w.Op == ibv.OpWriteImm {
			r := t.rq[0]
			t.rq = popFront(t.rq)
			t.cq.pushLocked(ibv.WC{WRID: r.wrid, Status: ibv.WCSuccess, Opcode: ibv.WCOpRecvRDMAWithImm,
				ByteLen: uint32(w.Len), Imm: w.Imm, HasImm: true, QPNum: t.num})
		}
		return done(w.Len)
	default: // ibv.OpRead
		from, ok := t.remoteLocked(w.RemoteAddr, w.Len, w.RKey, ibv.AccessRemoteRead)
		if !ok {
			t.failLocked()
			return fail(ibv.WCRemAccessErr)
		}
		dst, ok := q.localLocked(w.Addr, w.Len, w.LKey, true)
		if !ok {
			return fail(ibv.WCLocProtErr)
		}
		copy(dst, from)
		return done(w.Len)
	}
}
