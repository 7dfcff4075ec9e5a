package ibvfake

import (
	"fmt"
	"syscall"

	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

type qpState int

const (
	qpsReset qpState = iota
	qpsInit
	qpsRTR
	qpsRTS
	qpsErr
)

func (s qpState) String() string {
	return [...]string{"RESET", "INIT", "RTR", "RTS", "ERR"}[s]
}

// maxInline bounds DeviceConfig.MaxInline: the payload of an inline send is
// copied into its work request.
const maxInline = 1024

// sendWR is a posted send-queue request; inline holds the payload copied at
// post time when isInline.
type sendWR struct {
	ibv.SendWR
	isInline bool
	inline   [maxInline]byte
}

type recvWR struct {
	wrid uint64
	addr uintptr
	n    int
	lkey uint32
}

// qp is an RC queue pair.
type qp struct {
	pd        *pd
	cq        *cq
	num       uint32
	state     qpState
	access    ibv.Access
	maxSend   int
	maxRecv   int
	maxInline int
	rtr       ibv.RTRAttr
	rts       ibv.RTSAttr
	sq        []sendWR
	rq        []recvWR
	destroyed bool
}

func (p *pd) NewQP(c ibv.CQ, maxSend, maxRecv, maxInline int) (ibv.QP, error) {
	f := p.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := p.ctx.checkLocked("ibv_create_qp"); err != nil {
		return nil, err
	}
	if err := f.injected("NewQP"); err != nil {
		return nil, err
	}
	q, ok := c.(*cq)
	cfg := p.ctx.dev.cfg
	switch {
	case !ok || q.closed || q.ctx.dev != p.ctx.dev:
		return nil, fmt.Errorf("ibv_create_qp: completion queue of another device or destroyed: %w", syscall.EINVAL)
	case maxSend < 1 || maxRecv < 1 || maxSend > cfg.MaxQPWR || maxRecv > cfg.MaxQPWR:
		return nil, fmt.Errorf("ibv_create_qp: %d send and %d receive requests (device max %d): %w", maxSend, maxRecv, cfg.MaxQPWR, syscall.EINVAL)
	case maxInline > cfg.MaxInline:
		return nil, fmt.Errorf("ibv_create_qp: inline %d (device max %d): %w", maxInline, cfg.MaxInline, syscall.EINVAL)
	}
	f.nextQPN++
	x := &qp{pd: p, cq: q, num: f.nextQPN, maxSend: maxSend, maxRecv: maxRecv, maxInline: maxInline}
	f.qps[x.num] = x
	p.qps++
	q.qps++
	return x, nil
}

func (q *qp) f() *Fabric { return q.pd.f() }

func (q *qp) Num() uint32    { return q.num }
func (q *qp) MaxInline() int { return q.maxInline }

// modify moves the queue pair from one of from to to.
func (q *qp) modify(call string, to qpState, from ...qpState) error {
	if q.destroyed || q.pd.ctx.dev.dead {
		return fmt.Errorf("%s: queue pair %d destroyed: %w", call, q.num, syscall.EINVAL)
	}
	for _, s := range from {
		if q.state == s {
			q.state = to
			return nil
		}
	}
	return fmt.Errorf("%s: queue pair %d is in %v: %w", call, q.num, q.state, syscall.EINVAL)
}

func (q *qp) Init(port int, access ibv.Access) error {
	f := q.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if port != 1 {
		return fmt.Errorf("ibv_modify_qp(INIT): port %d: %w", port, syscall.EINVAL)
	}
	if err := q.modify("ibv_modify_qp(INIT)", qpsInit, qpsReset); err != nil {
		return err
	}
	q.access = access
	return nil
}

func (q *qp) RTR(a ibv.RTRAttr) error {
	f := q.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg := q.pd.ctx.dev.cfg
	if a.Port != 1 || a.MTU < 256 || a.MTU > cfg.ActiveMTU || ibv.MTUEnum(a.MTU) == 0 || a.DestQPN == 0 ||
		(cfg.LinkLayer == ibv.LinkLayerEthernet && !a.Global) {
		return fmt.Errorf("ibv_modify_qp(RTR): %+v (port active MTU %d): %w", a, cfg.ActiveMTU, syscall.EINVAL)
	}
	if err := q.modify("ibv_modify_qp(RTR)", qpsRTR, qpsInit); err != nil {
		return err
	}
	q.rtr = a
	f.pumpLocked() // a peer's sends may have waited for this side
	return nil
}

func (q *qp) RTS(a ibv.RTSAttr) error {
	f := q.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := q.modify("ibv_modify_qp(RTS)", qpsRTS, qpsRTR); err != nil {
		return err
	}
	q.rts = a
	f.pumpLocked()
	return nil
}

func (q *qp) SetError() error {
	f := q.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed {
		return fmt.Errorf("ibv_modify_qp(ERR): queue pair %d destroyed: %w", q.num, syscall.EINVAL)
	}
	q.failLocked()
	return nil
}

// failLocked moves the queue pair to the error state and flushes every
// posted request, sends first, in order.
func (q *qp) failLocked() {
	q.state = qpsErr
	for _, w := range q.sq {
		q.completeLocked(w.WRID, ibv.WCWRFlushErr, sendOpcode(w.Op), 0)
	}
	for _, r := range q.rq {
		q.completeLocked(r.wrid, ibv.WCWRFlushErr, ibv.WCOpRecv, 0)
	}
	q.sq, q.rq = nil, nil
}

// completeLocked puts a completion of this queue pair on its queue.
func (q *qp) completeLocked(wrid uint64, status, opcode uint32, n int) {
	q.cq.pushLocked(ibv.WC{WRID: wrid, Status: status, Opcode: opcode, ByteLen: uint32(n), QPNum: q.num})
}

func sendOpcode(op ibv.SendOp) uint32 {
	switch op {
	case ibv.OpWrite, ibv.OpWriteImm:
		return ibv.WCOpRDMAWrite
	case ibv.OpRead:
		return ibv.WCOpRDMARead
	}
	return ibv.WCOpSend
}

func (q *qp) PostSend(wr ibv.SendWR) error {
	f := q.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.injected("PostSend"); err != nil {
		return err
	}
	switch {
	case q.destroyed || q.pd.ctx.dev.dead:
		return fmt.Errorf("ibv_post_send: queue pair %d destroyed: %w", q.num, syscall.EINVAL)
	case q.state == qpsErr:
		// Accepted and flushed at once, as an adapter does.
		q.completeLocked(wr.WRID, ibv.WCWRFlushErr, sendOpcode(wr.Op), 0)
		return nil
	case q.state != qpsRTS:
		return fmt.Errorf("ibv_post_send: queue pair %d is in %v: %w", q.num, q.state, syscall.EINVAL)
	case len(q.sq) >= q.maxSend:
		return fmt.Errorf("ibv_post_send: send queue of %d full: %w", q.maxSend, syscall.ENOMEM)
	case wr.Inline && wr.Len > q.maxInline:
		return fmt.Errorf("ibv_post_send: inline %d bytes, granted %d: %w", wr.Len, q.maxInline, syscall.EINVAL)
	case wr.Len < 0 || wr.Op < ibv.OpSend || wr.Op > ibv.OpRead || (wr.Inline && wr.Op == ibv.OpRead):
		return fmt.Errorf("ibv_post_send: %+v: %w", wr, syscall.EINVAL)
	}
	q.sq = append(q.sq, sendWR{SendWR: wr})
	if wr.Inline && wr.Len > 0 {
		// The payload is copied now: the caller may reuse its buffer, and
		// the lkey is not checked (as with IBV_SEND_INLINE).
		w := &q.sq[len(q.sq)-1]
		w.isInline = true
		copy(w.inline[:], bytesAt(wr.Addr, wr.Len))
	}
	f.pumpLocked()
	return nil
}

func (q *qp) PostRecv(wrid uint64, addr uintptr, n int, lkey uint32) error {
	f := q.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.injected("PostRecv"); err != nil {
		return err
	}
	switch {
	case q.destroyed || q.pd.ctx.dev.dead:
		return fmt.Errorf("ibv_post_recv: queue pair %d destroyed: %w", q.num, syscall.EINVAL)
	case q.state == qpsErr:
		q.completeLocked(wrid, ibv.WCWRFlushErr, ibv.WCOpRecv, 0)
		return nil
	case q.state == qpsReset:
		return fmt.Errorf("ibv_post_recv: queue pair %d is in RESET: %w", q.num, syscall.EINVAL)
	case len(q.rq) >= q.maxRecv:
		return fmt.Errorf("ibv_post_recv: receive queue of %d full: %w", q.maxRecv, syscall.ENOMEM)
	case n < 0:
		return fmt.Errorf("ibv_post_recv: length %d: %w", n, syscall.EINVAL)
	}
	q.rq = append(q.rq, recvWR{wrid: wrid, addr: addr, n: n, lkey: lkey})
	f.pumpLocked()
	return nil
}

// Close destroys the queue pair. Requests still posted vanish without a
// completion (completions already queued stay); a peer's later requests
// fail with IBV_WC_RETRY_EXC_ERR.
func (q *qp) Close() error {
	f := q.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.destroyed && !q.pd.ctx.dev.dead {
		return fmt.Errorf("ibv_destroy_qp: queue pair %d already destroyed: %w", q.num, syscall.EINVAL)
	}
	if !q.destroyed {
		q.destroyed = true
		delete(f.qps, q.num)
	}
	if q.cq != nil {
		q.pd.qps--
		q.cq.qps--
		q.cq = nil
	}
	q.sq, q.rq = nil, nil
	f.pumpLocked()
	return nil
}
