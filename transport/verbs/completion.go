package verbs

// Completions of an endpoint and its error state: mapping ibv work
// completions to the contract's Completion and sentinels, and the events the
// control plane reports (a refused access, a closed or lost peer).

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// complete converts one adapter completion of this endpoint and appends it
// (preceded by an OpRemoteError when it reveals one) to out. The caller
// holds cq.mu.
func (ep *endpoint) complete(out []transport.Completion, w *ibv.WC) []transport.Completion {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	// A remote error the control plane reported goes before the
	// completions it caused.
	out = ep.appendRemoteErrorLocked(out)
	r, ok := ep.pending[w.WRID]
	if !ok {
		return out
	}
	delete(ep.pending, w.WRID)
	if r.op == transport.OpRecv {
		ep.recvs--
	} else {
		ep.sends--
	}
	c := transport.Completion{ID: r.id, Op: r.op, Endpoint: ep, Bytes: r.n}
	switch w.Status {
	case ibv.WCSuccess:
		if r.op == transport.OpRecv {
			c.Bytes, c.HasImm, c.Imm = int(w.ByteLen), w.HasImm, w.Imm
		}
		return append(out, c)
	case ibv.WCWRFlushErr:
		c.Bytes = 0
		if ep.cause == nil {
			// The adapter moved the queue pair to the error state without
			// failing one of our requests: as the target of an RC
			// connection it refused a request of the peer (an access with a
			// wrong key, out of bounds or without the right). Report it
			// once, as the contract's OpRemoteError.
			ep.cause = fmt.Errorf("verbs %s qpn %d: the adapter refused a request from the peer and moved the queue pair to the error state: %w",
				ep.dev.name, ep.qpn, transport.ErrRemoteAccess)
			ep.remoteErr = ep.cause
			out = ep.appendRemoteErrorLocked(out)
		}
		c.Err = fmt.Errorf("verbs: %s %d: %w: %w", r.op, r.id, transport.ErrFlushed, ep.cause)
		return append(out, c)
	}
	c.Bytes = 0
	if r.op == transport.OpRecv && w.Status == ibv.WCRemAccessErr {
		// The receive was consumed by a write-with-immediate that this
		// side's adapter refused (rxe completes it with the responder's
		// status): the target of a refused access.
		if ep.cause == nil {
			ep.cause = fmt.Errorf("verbs %s qpn %d: the adapter refused a request from the peer (%s): %w",
				ep.dev.name, ep.qpn, ibv.StatusString(w.Status), transport.ErrRemoteAccess)
			ep.remoteErr = ep.cause
			out = ep.appendRemoteErrorLocked(out)
		}
		c.Err = fmt.Errorf("verbs: %s %d: %w: %w", r.op, r.id, transport.ErrFlushed, ep.cause)
		ep.qp.SetError()
		return append(out, c)
	}
	c.Err = ep.statusError(r, w)
	if ep.cause == nil {
		ep.cause = c.Err
		if errors.Is(c.Err, transport.ErrRemoteAccess) {
			// The target learns of it even without a receive posted.
			ep.ctl.send(ctlRefused, w.Status)
		}
	}
	// Fail what is still pending now rather than after the adapter's own
	// error handling (a no-op if it already did).
	ep.qp.SetError()
	return append(out, c)
}

// statusError maps a failed work completion to the contract's sentinels and
// names the ibv_wc_status.
func (ep *endpoint) statusError(r request, w *ibv.WC) error {
	var sentinel error
	switch w.Status {
	case ibv.WCRemAccessErr:
		sentinel = transport.ErrRemoteAccess
	case ibv.WCLocLenErr:
		sentinel = transport.ErrLength
	case ibv.WCLocQPOpErr:
		// rxe reports a receive too short for the message this way
		// (hardware says local length error).
		if r.op == transport.OpRecv {
			sentinel = transport.ErrLength
		} else {
			sentinel = transport.ErrInvalid
		}
	case ibv.WCRemInvReqErr, ibv.WCRemOpErr:
		// For a send: the message did not fit the peer's receive
		// (hardware reports remote invalid request, rxe remote operation
		// error). For a write or read: a request the target refused.
		if r.op == transport.OpSend {
			sentinel = transport.ErrLength
		} else {
			sentinel = transport.ErrRemoteAccess
		}
	case ibv.WCLocProtErr, ibv.WCLocAccessErr:
		sentinel = transport.ErrInvalid
	case ibv.WCRetryExcErr, ibv.WCRNRRetryExcErr:
		return fmt.Errorf("verbs: %s %d on %s qpn %d -> peer qpn %d: %s (wc status %d, vendor error %#x): peer unreachable: %w: %w",
			r.op, r.id, ep.dev.name, ep.qpn, ep.peer.QPN, ibv.StatusString(w.Status), w.Status, w.VendorErr, transport.ErrLink, transport.ErrPeerClosed)
	default:
		sentinel = transport.ErrLink
	}
	return fmt.Errorf("verbs: %s %d on %s qpn %d -> peer qpn %d: %s (wc status %d, vendor error %#x): %w",
		r.op, r.id, ep.dev.name, ep.qpn, ep.peer.QPN, ibv.StatusString(w.Status), w.Status, w.VendorErr, sentinel)
}

// failAll moves the endpoint into the error state with cause and appends a
// completion for every request still pending, in posting order: the
// adapter's completion queue failed and may have lost them. The caller
// holds cq.mu.
func (ep *endpoint) failAll(out []transport.Completion, cause error) []transport.Completion {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.cause == nil {
		ep.cause = cause
	}
	ep.qp.SetError()
	for _, wrid := range slices.Sorted(maps.Keys(ep.pending)) {
		r := ep.pending[wrid]
		out = append(out, transport.Completion{ID: r.id, Op: r.op, Endpoint: ep,
			Err: fmt.Errorf("verbs: %s %d: %w: %w", r.op, r.id, transport.ErrFlushed, ep.cause)})
	}
	clear(ep.pending)
	ep.sends, ep.recvs = 0, 0
	return out
}

// peerRefused is called by the control plane when the peer reports that
// this side's adapter refused one of its accesses.
func (ep *endpoint) peerRefused(status uint32) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.cause != nil || ep.state == epClosed {
		return
	}
	ep.cause = fmt.Errorf("verbs %s qpn %d: a request from the peer was refused (%s at the peer): %w",
		ep.dev.name, ep.qpn, ibv.StatusString(status), transport.ErrRemoteAccess)
	ep.remoteErr = ep.cause
	// A marker: the completion queue asks takeRemoteError, so that the
	// report comes once, before any request it flushes.
	ep.cq.addSynthetic(transport.Completion{Op: transport.OpRemoteError, Endpoint: ep})
	ep.qp.SetError()
}

// appendRemoteErrorLocked appends the OpRemoteError completion if one is
// due and not yet reported. The caller holds ep.mu.
func (ep *endpoint) appendRemoteErrorLocked(out []transport.Completion) []transport.Completion {
	if ep.remoteErr == nil || ep.remoteDone {
		return out
	}
	ep.remoteDone = true
	return append(out, transport.Completion{Op: transport.OpRemoteError, Err: ep.remoteErr, Endpoint: ep})
}

// takeRemoteError appends the OpRemoteError completion if it is still due.
func (ep *endpoint) takeRemoteError(out []transport.Completion) []transport.Completion {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.appendRemoteErrorLocked(out)
}

// peerLost is called by the control plane when a keepalive to the peer
// failed: the peer died without closing, or the link is down.
func (ep *endpoint) peerLost(status uint32) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.cause != nil || ep.state == epClosed {
		return
	}
	ep.cause = fmt.Errorf("verbs %s qpn %d -> peer qpn %d: keepalive failed (%s): peer unreachable: %w: %w",
		ep.dev.name, ep.qpn, ep.peer.QPN, ibv.StatusString(status), transport.ErrLink, transport.ErrPeerClosed)
	ep.qp.SetError()
}

// peerClosed is called by the control plane when the peer said goodbye.
func (ep *endpoint) peerClosed() {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.cause != nil || ep.state == epClosed {
		return
	}
	ep.cause = fmt.Errorf("verbs %s qpn %d: %w", ep.dev.name, ep.qpn, transport.ErrPeerClosed)
	ep.qp.SetError()
}
