package verbs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// Queue pair timing. The local ACK timeout is 4.096us * 2^qpTimeout (67 ms);
// after qpRetry retransmissions a request fails with "transport retry
// counter exceeded" (a dead peer or link is detected in about half a
// second). qpRetry must stay below 7: rxe retries forever at 7. rnrRetry 7
// retries forever when the peer has no receive posted: the contract lets a
// message wait for a receive.
const (
	qpTimeout = 14
	qpRetry   = 6
	rnrRetry  = 7
	// maxInline is the inline data size asked of the device for the data
	// queue pairs: small sends and writes are copied into the work request.
	maxInline = 64
	// byeTimeout bounds how long Close waits for the peer to acknowledge
	// the goodbye; flushTimeout how long it waits for the adapter to flush
	// pending requests into the completion queue.
	byeTimeout   = 500 * time.Millisecond
	flushTimeout = 200 * time.Millisecond
)

type epState int

const (
	epNew epState = iota
	epConnected
	epClosed
)

// request is a posted work request awaiting its completion.
type request struct {
	id uint64
	op transport.Op
	n  int
}

// endpoint is one side of a connection: an RC data queue pair whose
// completions go to the endpoint's completion queue, and a small RC control
// queue pair (ctl.go) that carries "goodbye" and "your access was refused"
// to the peer, which verbs itself does not tell it.
type endpoint struct {
	dev *Device
	cq  *cq
	qp  ibv.QP
	qpn uint32
	psn uint32
	ctl *ctlConn

	mu    sync.Mutex
	state epState
	cause error // first error; in the error state every post is refused with it
	// remoteErr is set when this side refused a request of the peer; it is
	// reported once as OpRemoteError (remoteDone), before the flushes.
	remoteErr  error
	remoteDone bool
	pending    map[uint64]request
	nextWR     uint64
	depth      int // of each of the send and receive queues
	sends      int // requests in flight on the send queue
	recvs      int // on the receive queue
	peer       address
	mtu        int
}

var _ transport.Endpoint = (*endpoint)(nil)

func randPSN() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:]) & 0xffffff
}

// NewEndpoint creates an unconnected endpoint whose completions go to cq (a
// completion queue of this device).
func (d *Device) NewEndpoint(cqi transport.CompletionQueue) (transport.Endpoint, error) {
	q, ok := cqi.(*cq)
	if !ok || q.dev != d {
		return nil, fmt.Errorf("verbs: new endpoint: completion queue of another device: %w", transport.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("verbs: new endpoint: %s: %w", d.name, transport.ErrClosed)
	}
	depth := d.depth
	if depth == 0 {
		// The contract bounds requests in flight only by the completion
		// queue: let one endpoint use all of it.
		depth = int(q.depth)
		if d.dattr.MaxQPWR > 0 && depth > d.dattr.MaxQPWR {
			depth = d.dattr.MaxQPWR
		}
	}
	qp, err := d.pd.NewQP(q.hw, depth, depth, maxInline)
	if err != nil {
		return nil, fmt.Errorf("verbs: new endpoint on %s: %w", d.name, err)
	}
	if err := qp.Init(d.port, ibv.AccessRemoteWrite|ibv.AccessRemoteRead); err != nil {
		qp.Close()
		return nil, fmt.Errorf("verbs: new endpoint on %s: %w", d.name, err)
	}
	ep := &endpoint{
		dev:     d,
		cq:      q,
		qp:      qp,
		qpn:     qp.Num(),
		psn:     randPSN(),
		depth:   depth,
		pending: make(map[uint64]request),
	}
	ep.ctl, err = d.ctl.newConn(ep)
	if err != nil {
		qp.Close()
		return nil, fmt.Errorf("verbs: new endpoint on %s: control queue pair: %w", d.name, err)
	}
	q.mu.Lock()
	if q.closing || q.broken != nil {
		broken := q.broken
		q.mu.Unlock()
		ep.ctl.close()
		qp.Close()
		if broken != nil {
			return nil, fmt.Errorf("verbs: new endpoint: %w", broken)
		}
		return nil, fmt.Errorf("verbs: new endpoint: completion queue: %w", transport.ErrClosed)
	}
	q.eps[ep.qpn] = ep
	q.mu.Unlock()
	d.eps[ep] = struct{}{}
	return ep, nil
}

// LocalAddress is the blob the peer passes to Connect (address.go).
func (ep *endpoint) LocalAddress() []byte {
	d := ep.dev
	return address{
		LinkLayer: uint8(d.pattr.LinkLayer),
		MTU:       d.pattr.ActiveMTU,
		QPN:       ep.qpn,
		PSN:       ep.psn,
		CtlQPN:    ep.ctl.qpn,
		CtlPSN:    ep.ctl.psn,
		LID:       d.pattr.LID,
		GID:       d.gid.GID,
	}.encode()
}

// Connect brings both queue pairs to RTR and RTS towards the peer that
// published remote. The path MTU is the smaller of the two ports' active
// MTUs. It does not wait for the peer: once it returns, requests may be
// posted; they are retried by the adapter until the peer's side is up too
// (sends and writes with immediate until the peer posts a receive).
func (ep *endpoint) Connect(ctx context.Context, remote []byte) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("verbs: connect: %w", err)
	}
	peer, err := decodeAddress(remote)
	if err != nil {
		return fmt.Errorf("verbs: connect: %w", err)
	}
	d := ep.dev
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch {
	case ep.state == epClosed:
		return fmt.Errorf("verbs: connect: endpoint: %w", transport.ErrClosed)
	case ep.state == epConnected:
		return fmt.Errorf("verbs: connect: endpoint already connected: %w", transport.ErrInvalid)
	case ep.cause != nil:
		return fmt.Errorf("verbs: connect: %w", ep.cause)
	case int(peer.LinkLayer) != d.pattr.LinkLayer:
		return fmt.Errorf("verbs: connect: peer link layer %d, local %d: %w", peer.LinkLayer, d.pattr.LinkLayer, transport.ErrInvalid)
	}
	mtu := pathMTU(d.pattr.ActiveMTU, peer.MTU)
	rtr := ibv.RTRAttr{
		Port:      d.port,
		DGID:      peer.GID,
		SGIDIndex: d.gid.Index,
		DLID:      peer.LID,
		Global:    d.pattr.LinkLayer == ibv.LinkLayerEthernet,
		MTU:       mtu,
		MaxRdAtom: d.rdAtm,
	}
	rts := ibv.RTSAttr{Timeout: qpTimeout, RetryCnt: qpRetry, RNRRetry: rnrRetry, MaxRdAtom: d.rdAtm}
	fail := func(err error) error {
		return fmt.Errorf("verbs: connect %s qpn %d -> peer qpn %d (GID %s): %w: %w", d.name, ep.qpn, peer.QPN, peer.GID, err, transport.ErrLink)
	}
	rtr.DestQPN, rtr.RQPSN, rts.SQPSN = peer.QPN, peer.PSN, ep.psn
	if err := ep.qp.RTR(rtr); err != nil {
		return fail(err)
	}
	if err := ep.qp.RTS(rts); err != nil {
		return fail(err)
	}
	rtr.DestQPN, rtr.RQPSN, rts.SQPSN = peer.CtlQPN, peer.CtlPSN, ep.ctl.psn
	rts.RNRRetry = 0 // the control queue always has receives posted
	if err := ep.ctl.qp.RTR(rtr); err != nil {
		return fail(err)
	}
	if err := ep.ctl.qp.RTS(rts); err != nil {
		return fail(err)
	}
	ep.state, ep.peer, ep.mtu = epConnected, peer, mtu
	ep.ctl.connected()
	d.logf("verbs: %s port %d qpn %d -> peer qpn %d GID %s LID %d: path MTU %d (local active %d, peer active %d)",
		d.name, d.port, ep.qpn, peer.QPN, peer.GID, peer.LID, mtu, d.pattr.ActiveMTU, peer.MTU)
	return nil
}

// PathMTU is the negotiated path MTU in bytes (0 before Connect).
func (ep *endpoint) PathMTU() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.mtu
}

// post registers a request and hands it to the adapter with do, under the
// endpoint's lock so that requests reach the queue pair in post order.
func (ep *endpoint) post(op transport.Op, id uint64, n int, do func(wrid uint64) error) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	switch {
	case ep.state == epNew:
		return fmt.Errorf("verbs: post %s: endpoint not connected: %w", op, transport.ErrInvalid)
	case ep.cause != nil:
		return fmt.Errorf("verbs: post %s: %w", op, ep.cause)
	case ep.state == epClosed:
		return fmt.Errorf("verbs: post %s: endpoint: %w", op, transport.ErrClosed)
	}
	// The queue pair's own queues hold ep.depth requests each (at most the
	// completion queue's depth): beyond that the post must wait for
	// completions, as beyond the completion queue's depth.
	if op == transport.OpRecv {
		if ep.recvs >= ep.depth {
			return fmt.Errorf("verbs: post recv: receive queue of qpn %d full (%d in flight, queue depth %d, see verbs.Config.QueueDepth): %w", ep.qpn, ep.recvs, ep.depth, transport.ErrQueueFull)
		}
	} else if ep.sends >= ep.depth {
		return fmt.Errorf("verbs: post %s: send queue of qpn %d full (%d in flight, queue depth %d, see verbs.Config.QueueDepth): %w", op, ep.qpn, ep.sends, ep.depth, transport.ErrQueueFull)
	}
	if err := ep.cq.reserve(); err != nil {
		return fmt.Errorf("verbs: post %s on %s qpn %d: %w", op, ep.dev.name, ep.qpn, err)
	}
	wrid := ep.nextWR
	ep.nextWR++
	if err := do(wrid); err != nil {
		ep.cq.unreserve()
		return fmt.Errorf("verbs: post %s on %s qpn %d: %w: %w", op, ep.dev.name, ep.qpn, err, transport.ErrLink)
	}
	ep.pending[wrid] = request{id: id, op: op, n: n}
	if op == transport.OpRecv {
		ep.recvs++
	} else {
		ep.sends++
	}
	return nil
}

func invalid(op transport.Op, err error) error {
	return fmt.Errorf("verbs: post %s: %w", op, err)
}

func rkey(r transport.RemoteRegion) uint32 {
	if r.Key>>32 != 0 {
		return 0 // no verbs key has more than 32 bits; 0 is refused
	}
	return uint32(r.Key)
}

// PostSend sends r.Bytes()[off:off+n] as one message. It does not block.
func (ep *endpoint) PostSend(id uint64, r transport.Region, off, n int) error {
	reg, err := ep.dev.localRegion(r, off, n, false)
	if err != nil {
		return invalid(transport.OpSend, err)
	}
	return ep.post(transport.OpSend, id, n, func(wrid uint64) error {
		return ep.qp.PostSend(ibv.SendWR{WRID: wrid, Op: ibv.OpSend, Addr: reg.addr(off), Len: n, LKey: reg.e.lkey(),
			Inline: n <= ep.qp.MaxInline()})
	})
}

// PostRecv posts a receive into r.Bytes()[off:off+n]. It does not block.
func (ep *endpoint) PostRecv(id uint64, r transport.Region, off, n int) error {
	reg, err := ep.dev.localRegion(r, off, n, true)
	if err != nil {
		return invalid(transport.OpRecv, err)
	}
	return ep.post(transport.OpRecv, id, n, func(wrid uint64) error {
		return ep.qp.PostRecv(wrid, reg.addr(off), n, reg.e.lkey())
	})
}

// PostWrite writes local.Bytes()[off:off+n] to the peer's region at roff,
// with an immediate if imm is non-nil. The peer's adapter checks the key,
// bounds and access. It does not block.
func (ep *endpoint) PostWrite(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	reg, err := ep.dev.localRegion(local, off, n, false)
	if err != nil {
		return invalid(transport.OpWrite, err)
	}
	wr := ibv.SendWR{Op: ibv.OpWrite, Addr: reg.addr(off), Len: n, LKey: reg.e.lkey(),
		RemoteAddr: remote.Addr + roff, RKey: rkey(remote), Inline: n <= ep.qp.MaxInline()}
	if imm != nil {
		wr.Op, wr.Imm = ibv.OpWriteImm, *imm
	}
	return ep.post(transport.OpWrite, id, n, func(wrid uint64) error {
		wr.WRID = wrid
		return ep.qp.PostSend(wr)
	})
}

// PostRead reads n bytes of the peer's region at roff into
// local.Bytes()[off:off+n]. It does not block.
func (ep *endpoint) PostRead(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64) error {
	reg, err := ep.dev.localRegion(local, off, n, true)
	if err != nil {
		return invalid(transport.OpRead, err)
	}
	return ep.post(transport.OpRead, id, n, func(wrid uint64) error {
		return ep.qp.PostSend(ibv.SendWR{WRID: wrid, Op: ibv.OpRead, Addr: reg.addr(off), Len: n, LKey: reg.e.lkey(),
			RemoteAddr: remote.Addr + roff, RKey: rkey(remote)})
	})
}

// Close disconnects: the peer is told (its pending requests fail with
// ErrPeerClosed), pending requests here complete with errors wrapping
// ErrFlushed and ErrClosed on the completion queue, if it is still open,
// and the queue pairs are destroyed. It waits at most about
// byeTimeout+flushTimeout.
func (ep *endpoint) Close() error {
	ep.mu.Lock()
	if ep.state == epClosed {
		ep.mu.Unlock()
		return nil
	}
	connected := ep.state == epConnected
	ep.state = epClosed
	peerGone := ep.cause != nil && errors.Is(ep.cause, transport.ErrPeerClosed)
	if ep.cause == nil {
		ep.cause = fmt.Errorf("verbs %s qpn %d: endpoint closed: %w", ep.dev.name, ep.qpn, transport.ErrClosed)
	}
	ep.mu.Unlock()

	if connected && !peerGone {
		ep.ctl.bye(byeTimeout)
	}
	ep.qp.SetError()
	deadline := time.Now().Add(flushTimeout)
	for {
		ep.cq.drain()
		ep.mu.Lock()
		left := len(ep.pending)
		ep.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	q := ep.cq
	q.mu.Lock()
	delete(q.eps, ep.qpn)
	q.mu.Unlock()
	err := ep.qp.Close()
	ep.ctl.close()

	// What the adapter did not flush in time is completed here.
	ep.mu.Lock()
	var left []transport.Completion
	for _, wrid := range slices.Sorted(maps.Keys(ep.pending)) {
		r := ep.pending[wrid]
		left = append(left, transport.Completion{ID: r.id, Op: r.op, Endpoint: ep,
			Err: fmt.Errorf("verbs: %s %d: %w: %w", r.op, r.id, transport.ErrFlushed, ep.cause)})
	}
	ep.pending = nil
	ep.mu.Unlock()
	if len(left) > 0 {
		q.addSynthetic(left...)
	}
	ep.dev.forgetEndpoint(ep)
	if err != nil {
		return fmt.Errorf("verbs: close endpoint: %w", err)
	}
	return nil
}
