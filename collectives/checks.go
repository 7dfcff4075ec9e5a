package collectives

import "fmt"

// What a run checks beyond its schedule, so that ranks that disagree fail
// in the call where they disagree, not later or by timeout:
//
//   - Each data chunk is checked when it arrives, not only when it is
//     consumed: a chunk that this call will consume must carry this call's
//     sequence number and fingerprint; a chunk beyond what this call
//     expects from the peer must not carry this call's sequence number
//     (two ranks that each think they are a broadcast's root send to each
//     other, and neither expects anything).
//   - A rank's sends are checked only by their receivers. A run that sent
//     to a peer therefore waits, before it completes, for proof that the
//     peer is in the same call: a chunk received from the peer in this
//     call (whose fingerprint this rank checked), or a credit for a chunk
//     sent in this call (returned only after the peer checked it). Most
//     algorithms have that proof long before they end; a broadcast root
//     or a reduce leaf waits about one round trip for it. Point-to-point
//     sends do not wait (a Send completes before its Recv is called, as
//     MPI's eager sends do). Calls whose counts differ across ranks by
//     design (alltoallv) wait for the credits of every chunk, whose
//     lengths only the receiver checks.
//     In a call with Confirm set (rooted collectives on trees and chains:
//     broadcast, reduce, gather, scatter), a rank keeps the credit of the
//     last chunk from a peer that only sends to it until its own run is
//     complete: a sender then completes only once its whole subtree has,
//     so a reduce or gather completes on no rank unless every rank agreed,
//     and a broadcast or scatter root only once every rank received. (A
//     broadcast leaf that received what its call expects completes; it
//     cannot know of a disagreement elsewhere without another round.)
//   - A peer's failure notice (notice.go) fails the run at once; one about
//     a collective this rank has not reached yet fails the next run.

// checkArrival checks a data chunk from l's peer as it arrives, before it
// is counted in l.arrived. Point-to-point messages (p2p, or any in a
// point-to-point call) are checked when consumed (checkTag): a later
// Send's tag may be anything.
func (e *Executor) checkArrival(c *Call, l *Link, seq, fp uint16, p2p bool) error {
	if c.P2P || p2p {
		return nil
	}
	recvs := c.Plan.recvs[l.Peer]
	pos := l.arrived // the chunk's place among this run's receives from the peer
	if len(recvs) > 0 {
		pos += e.recvHead[l.Peer]
	}
	cur := uint16(c.Seq & seqMask)
	surplus := pos >= len(recvs)
	switch {
	case !surplus && seq == cur && fp == c.fingerprint():
		return nil
	case surplus && seq != cur:
		return nil // data of a later call, waiting for it
	}
	return &MismatchError{Call: c.Desc(), Seq: c.Seq, Algo: c.Plan.Name, Rank: e.Rank, Peer: l.Peer,
		PeerSeq: seq, PeerFingerprint: fp, Fingerprint: c.fingerprint(), Surplus: surplus && fp == c.fingerprint()}
}

// noticed handles a notice from l's peer: a failure notice fails the run;
// a closed notice is kept for checkDown.
func (e *Executor) noticed(c *Call, l *Link, imm uint32) error {
	n, ok := decodeNotice(imm, l.Peer, e.Size)
	if !ok {
		return fmt.Errorf("%s #%d (%s): rank %d <- %d: bad notice %#x", c.Desc(), c.Seq, c.Plan.Name, e.Rank, l.Peer, imm)
	}
	if l.notice == 0 {
		l.notice = imm
	}
	if n.Reason == NoticeClosed {
		return nil
	}
	if noticeAfter(n.Seq, c.epoch()) {
		e.noticeLater = true // the peer failed a later collective: finish this one
		return nil
	}
	return e.noticeError(c, l.Peer, n)
}

func (e *Executor) noticeError(c *Call, peer int, n Notice) error {
	return &NoticeError{Call: fmt.Sprintf("%s #%d (%s)", c.Desc(), c.Seq, c.Plan.Name), Rank: e.Rank, Peer: peer, Notice: n}
}

// laterNotice returns the error of a failure notice kept from an earlier
// run, if any: it fails this run before it starts.
func (e *Executor) laterNotice(c *Call) error {
	if !e.noticeLater {
		return nil
	}
	for peer, l := range e.Links {
		if l == nil || l.notice == 0 {
			continue
		}
		if n, ok := decodeNotice(l.notice, peer, e.Size); ok && n.Reason != NoticeClosed {
			return e.noticeError(c, peer, n)
		}
	}
	return nil
}

// epoch is c's Epoch.
func (c *Call) epoch() uint32 {
	if c.P2P {
		return Epoch(c.CollSeq, true)
	}
	return Epoch(c.Seq, false)
}

// confirmed reports whether every peer this run sent to is known to be in
// the same call (see above).
func (e *Executor) confirmed(c *Call) bool {
	if c.P2P {
		return true
	}
	if e.win.on && e.win.retiring > 0 {
		return false // a windowed run's byes (window.go)
	}
	for _, peer := range c.Plan.peers {
		if !e.confirmedPeer(c, peer) {
			return false
		}
	}
	return true
}

func (e *Executor) confirmedPeer(c *Call, peer int) bool {
	p := c.Plan
	if c.P2P || len(p.sends[peer]) == 0 {
		return true
	}
	l := e.Links[peer]
	if l == nil {
		return true // released: both ranks were done with it (window.go)
	}
	if c.VarCount || (c.Confirm && len(p.recvs[peer]) == 0) {
		return l.credited >= l.sent
	}
	return e.recvHead[peer] > 0 || l.credited > e.sent0[peer]
}

// deferCredit reports whether consuming the next chunk from peer must keep
// its credit until this run completes: in a Confirm call, the last chunk
// from a peer that only sends to this rank.
func (e *Executor) deferCredit(c *Call, peer int) bool {
	p := c.Plan
	return c.Confirm && len(p.sends[peer]) == 0 && e.recvHead[peer]+1 == len(p.recvs[peer])
}

// releaseCredits returns the credits deferCredit kept, once the run is
// complete.
func (e *Executor) releaseCredits(c *Call) {
	if !c.Confirm {
		return
	}
	for _, peer := range c.Plan.peers {
		l := e.Links[peer]
		if l == nil || !l.deferred {
			continue
		}
		l.deferred = false
		l.imm = creditImm(1)
		// A failed post means the connection is gone: the peer learns it.
		_ = l.EP.PostWrite(makeID(idCredit, peer, 0), l.Staging, 0, 0, l.Remote, 0, &l.imm)
		e.unflushed = true // the peer waits for it
	}
}
