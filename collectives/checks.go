package collectives

import (
	"context"
	"fmt"
	"time"
)

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
//     design and have no root (alltoallv) wait for the credits of every
//     chunk, whose lengths only the receiver checks; rooted ones (gatherv,
//     scatterv) are proven as gather and scatter are.
//     In a call with Confirm set (rooted collectives on trees and chains:
//     broadcast, reduce, gather, scatter), a rank keeps the credit of the
//     last chunk from a peer that only sends to it until its own run is
//     complete: a sender then completes only once its whole subtree has,
//     so a reduce or gather completes on no rank unless every rank agreed,
//     and a broadcast or scatter root only once every rank received. (A
//     broadcast leaf that received what its call expects completes; it
//     cannot know of a disagreement elsewhere without another round.)
//     In an Eager call (comm's default; never with Confirm), a rank that
//     only sends to a peer does not wait for that proof: it completes once
//     its sends are done, as MPI's eager sends do. The peer still checks
//     what arrives, and a disagreement reaches this rank later: the
//     peer's failure notice fails this rank's next run, data of this call
//     that the peer sent and this rank's next run does not expect fails
//     it on arrival (an earlier call's sequence number), and at close
//     Confirm waits for the credits of such sends (a peer that closes
//     without taking them disagreed). A rooted call of three or more ranks
//     then has no barrier either: a rank whose part of the tree agrees
//     completes, and learns of a disagreement elsewhere in a later call
//     (or at close: PeerFailed).
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
	for k := range l.arrived {
		if l.arrP2P[(l.recvSlot+k)%e.NSlots] {
			pos-- // a point-to-point message before it, set aside when reached (stray.go)
		}
	}
	if len(recvs) > 0 {
		pos += e.recvHead[l.Peer]
	}
	cur := uint16(c.Seq & seqMask)
	surplus := pos >= len(recvs)
	switch {
	case !surplus && seq == cur && fp == c.fingerprint():
		return nil
	case surplus && seq != cur && !seqBefore(seq, cur):
		return nil // data of a later call, waiting for it
	}
	// Data of this call that this rank does not expect, or of an earlier
	// call that this rank left without taking it (two ranks that each
	// thought they were a broadcast's root, each done once it had sent).
	return &MismatchError{Call: c.Desc(), Seq: c.Seq, Algo: c.Plan.Name, Rank: e.Rank, Peer: l.Peer,
		PeerSeq: seq, PeerFingerprint: fp, Fingerprint: c.fingerprint(), Surplus: surplus && seq == cur && fp == c.fingerprint()}
}

// noticed handles a notice from l's peer: a failure notice fails the run;
// a closed notice is kept for checkDown.
func (e *Executor) noticed(c *Call, l *Link, imm uint32) error {
	n, ok := decodeNotice(imm, l.Peer, e.Size)
	if !ok {
		return fmt.Errorf("%s %s (%s): rank %d <- %d: bad notice %#x", c.Desc(), c.Num(), c.Plan.Name, e.Rank, l.Peer, imm)
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
	return &NoticeError{Call: fmt.Sprintf("%s %s (%s)", c.Desc(), c.Num(), c.Plan.Name), Rank: e.Rank, Peer: peer, Notice: n}
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

// seqBefore reports whether sequence number a (mod 2^14) comes before b:
// a peer is never more than a few calls (its slots) ahead or behind, so
// the nearer way round the circle is the true one.
func seqBefore(a, b uint16) bool {
	d := (b - a) & seqMask
	return d != 0 && d < SeqMod/2
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
	if c.creditsProve() || (c.Confirm && len(p.recvs[peer]) == 0) {
		return l.credited >= l.sent
	}
	if c.Eager && len(p.recvs[peer]) == 0 {
		return true // the proof comes later (noteUnconfirmed, Confirm)
	}
	return e.recvHead[peer] > 0 || l.credited > e.sent0[peer]
}

// creditsProve reports whether c's sends are proven only by the credits of
// every chunk: a call whose counts differ across ranks by design and that
// has no root (alltoallv). A rooted one (gatherv, scatterv) is proven as
// gather and scatter are: its receivers check every length, and in an
// Eager run a rank that only sends completes once its sends are done.
func (c *Call) creditsProve() bool { return c.VarCount && c.Root < 0 }

// noteUnconfirmed records, when an Eager run or a point-to-point call
// completes, the peers it only sent to without proof yet that they took
// what it sent: their link's proveAt is the credit count that proves it.
// A point-to-point call's proof is not waited for by the call (a Send
// completes before its Recv is called, as MPI's eager sends do), only by
// Confirm at close: a receiver that closes without taking a message
// dropped it, and the sender says so instead of returning nil.
func (e *Executor) noteUnconfirmed(c *Call) {
	if !c.P2P && (!c.Eager || c.creditsProve()) {
		return
	}
	p := c.Plan
	for _, peer := range p.peers {
		l := e.Links[peer]
		if l == nil || len(p.sends[peer]) == 0 || len(p.recvs[peer]) > 0 || l.credited >= l.sent {
			continue
		}
		if l.proveAt <= l.credited {
			l.proveSeq, l.proveP2P = c.Seq, c.P2P
			if c.P2P { // what errors name it by; no allocation
				l.proveCall = Call{Coll: c.Coll, Type: c.Type, Named: c.Named, Count: c.Count, Root: -1, Seq: c.Seq, P2P: true}
			}
		}
		l.proveAt = l.sent
	}
}

// Confirm waits until every peer that Eager runs only sent to has taken
// what they sent (its credits came back), so that a disagreement that no
// later call revealed is not lost at close. It fails if such a peer
// closed the communicator, failed or went away before taking it, or when
// ctx ends first. Called at close, once this rank's own closing notices
// are placed (a peer waiting here for this rank's notice learns of the
// disagreement from it).
func (e *Executor) Confirm(ctx context.Context) error {
	start := time.Now()
	for {
		var waiting *Link
		gone := false // a waiting link's posts fail (Notify): its connection is gone
		for _, l := range e.Links {
			if l == nil || l.proveAt <= l.credited {
				continue
			}
			if l.down == nil && l.postErr != nil && time.Since(start) >= postErrSettle {
				// What the peer sent before it went (its credits, its
				// closing notice) has had the time to be taken.
				l.down = l.postErr
			}
			if err := e.unconfirmed(l, ""); err != nil {
				return err
			}
			waiting = l
			gone = gone || l.postErr != nil
		}
		if waiting == nil {
			return nil
		}
		if ctx.Err() != nil {
			return e.unconfirmed(waiting, fmt.Sprintf("not taken within the stall timeout (%v)", context.Cause(ctx)))
		}
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if gone {
			pctx, cancel = context.WithTimeout(ctx, postErrSettle)
		}
		ok := e.pollAftermath(pctx)
		cancel()
		if !ok {
			return e.unconfirmed(waiting, "the completion queue failed")
		}
	}
}

// postErrSettle is how long Confirm takes completions for a link whose
// posts fail before it counts the link down (see Link.postErr).
const postErrSettle = 200 * time.Millisecond

// PeerFailed returns, at close, the failure notice of a peer that failed
// in a collective this rank also made (number seq or before), if any: a
// rank whose part of an Eager call agreed may have completed it, and the
// next, before the ranks that found the disagreement told it.
func (e *Executor) PeerFailed(seq uint32) error {
	for peer, l := range e.Links {
		if l == nil || l.notice == 0 {
			continue
		}
		n, ok := decodeNotice(l.notice, peer, e.Size)
		if !ok || n.Reason == NoticeClosed || noticeAfter(n.Seq, Epoch(seq, false)) {
			continue
		}
		return &NoticeError{Call: fmt.Sprintf("the collectives before close (%d made)", seq), Rank: e.Rank, Peer: peer, Notice: n}
	}
	return nil
}

// unconfirmed is the error of a link whose Eager sends are not proven:
// why is given, or found in the link's state (nil while it may still come).
// A peer that closed without taking them, or failed with a mismatch,
// disagreed.
func (e *Executor) unconfirmed(l *Link, why string) error {
	what := ""
	switch {
	case why != "":
	case l.notice != 0 && l.proveP2P:
		n, _ := decodeNotice(l.notice, l.Peer, e.Size)
		if n.Reason == NoticeClosed {
			return fmt.Errorf("rank %d's %s %s sent rank %d a message that rank %d never received: rank %d closed the communicator without receiving it (a Send without its Recv)",
				e.Rank, l.proveCall.Desc(), l.proveCall.Num(), l.Peer, l.Peer, l.Peer)
		}
		why = fmt.Sprintf("rank %d failed before receiving it (its notice: %s, rank %d)", l.Peer, n.Reason, n.Rank)
	case l.notice != 0:
		n, _ := decodeNotice(l.notice, l.Peer, e.Size)
		if n.Reason == NoticeClosed {
			what = "collective mismatch: "
			why = fmt.Sprintf("rank %d closed the communicator (after %d collectives, mod %d) without taking it: the ranks disagreed on a rooted call's root or count, or on the number of collectives", l.Peer, n.Seq, SeqMod)
		} else {
			if n.Reason == NoticeMismatch {
				what = "collective mismatch: "
			}
			why = fmt.Sprintf("rank %d failed before taking it (its notice: %s, rank %d)", l.Peer, n.Reason, n.Rank)
		}
	case l.down != nil:
		why = fmt.Sprintf("the connection to rank %d was lost before it took it: %v", l.Peer, l.down)
	default:
		return nil
	}
	if l.proveP2P {
		return fmt.Errorf("rank %d's %s %s sent rank %d a message that rank %d never received: %s", e.Rank, l.proveCall.Desc(), l.proveCall.Num(), l.Peer, l.Peer, why)
	}
	return fmt.Errorf("%srank %d's collective #%d sent rank %d data that rank %d never took: %s", what, e.Rank, l.proveSeq, l.Peer, l.Peer, why)
}

// deferCredit reports whether consuming the next chunk from peer must keep
// its credit until this run completes: in a Confirm call, the last chunk
// from a peer that only sends to this rank.
func (e *Executor) deferCredit(c *Call, peer int) bool {
	p := c.Plan
	return c.Confirm && len(p.sends[peer]) == 0 && e.recvHead[peer]+1 == len(p.recvs[peer])
}

// lazyCredit reports whether the credit of the chunk of n bytes just
// consumed from l's peer may wait to leave with this rank's next message to
// the peer (transport.LazyWriter), instead of costing a message of its own:
// when the peer needs it neither as proof nor to send on. That is when
//   - this run sends to the peer too, so the peer's proof that this rank
//     is in the call is that data (and the peer cannot complete before it
//     arrives, being a receiver of it);
//   - the chunk is the last this run expects from the peer (the peer's
//     window of slots is not what holds this run back) and small (at most
//     Inline: a large transfer's credits are its pace);
//   - the call is not one whose credits are proof by design: Confirm
//     calls, calls whose counts differ across ranks (alltoallv: the
//     credits of every chunk are waited for), point-to-point calls.
//
// Symmetric exchanges qualify: recursive doubling, the pairwise
// all-to-all, the recursive-doubling barrier. The transport sends a lazy
// credit anyway once its callers have nothing else to do, so a peer that
// does need it waits a few polls at most.
func (e *Executor) lazyCredit(c *Call, l *Link, n int) bool {
	p := c.Plan
	return l.lazy != nil && n <= e.Inline && !c.Confirm && !c.VarCount && !c.P2P &&
		len(p.sends[l.Peer]) > 0 && e.recvHead[l.Peer]+1 == len(p.recvs[l.Peer])
}

// batchCredit reports whether the credit of the chunk of n bytes just
// consumed from l's peer may wait as lazy output too (see lazyCredit),
// though this run sends the peer nothing it could ride with: a rooted
// call's receiver (a broadcast's or scatter's leaf) of its last chunk from
// the peer, small (at most Inline). Such a credit rides with this rank's
// next message to the peer (the barrier after each broadcast of OSU's
// loop, say) or leaves once this rank's polls find nothing to do; so that
// a root that runs ahead of it back to back does not use up its slots and
// wait, every creditBatch-th such credit in a row is written at once,
// taking the lazy ones before it along in the same system call. Over TCP
// a credit written at once costs the receiver a write(2) of several
// microseconds per call, and where ranks share processors the root's
// processor pays it too.
func (e *Executor) batchCredit(c *Call, l *Link, n int) bool {
	p := c.Plan
	if l.lazy == nil || n > e.Inline || c.Root < 0 || !c.Eager || c.Confirm || c.VarCount || c.P2P ||
		len(p.sends[l.Peer]) > 0 || e.recvHead[l.Peer]+1 != len(p.recvs[l.Peer]) {
		return false
	}
	l.batched++
	return l.batched < min(creditBatch, e.NSlots/2)
}

// creditBatch bounds the credits batchCredit returns in one write.
const creditBatch = 4

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
		_ = l.postCredit(false)
		e.unflushed = true // the peer waits for it
	}
}
