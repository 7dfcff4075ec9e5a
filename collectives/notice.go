package collectives

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goccl/goccl/transport"
)

// Failure notices. A rank that fails a collective tells every peer why
// before it closes its connections: a zero-length write whose immediate
// (a credit's type with bit 29 set) says what went wrong and which rank is
// at the root of it. A peer that
// receives one fails its own call at once, naming that rank, without
// asking anyone (the bootstrap store may have died with its host); a
// connection that goes down without a notice means that the peer itself
// died, or that the link between the two broke. Closing a communicator
// sends a notice too (NoticeClosed, with the number of collectives the
// rank finished), which peers take as an error only if their call still
// needs the rank: a rank that called fewer collectives than the others.

// NoticeReason says why a rank broke its connections.
type NoticeReason uint8

const (
	// NoticeLost: Rank died or lost its connections (nobody heard from
	// it); Rank equal to the sender: the sender lost every connection.
	NoticeLost NoticeReason = iota + 1
	// NoticeMismatch: Rank called a different collective than the rank
	// that found the mismatch (or a different number of collectives).
	NoticeMismatch
	// NoticeBadArgs: Rank refused its own arguments to the call.
	NoticeBadArgs
	// NoticeStall: Rank is alive but makes no progress (stopped, hung, or
	// it has not called the collective the others wait in).
	NoticeStall
	// NoticeAborted: Rank aborted its communicator.
	NoticeAborted
	// NoticeFailed: Rank failed for a cause of its own (a cancelled
	// context, a timeout, a local error).
	NoticeFailed
	// NoticeClosed: the sender closed the communicator after Seq
	// collectives; not a failure unless a peer's call still needs it.
	NoticeClosed
	numNoticeReasons
)

func (r NoticeReason) String() string {
	switch r {
	case NoticeLost:
		return "lost"
	case NoticeMismatch:
		return "mismatch"
	case NoticeBadArgs:
		return "bad arguments"
	case NoticeStall:
		return "stall"
	case NoticeAborted:
		return "aborted"
	case NoticeFailed:
		return "failed"
	case NoticeClosed:
		return "closed"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Notice is what a failure notice says.
type Notice struct {
	Reason NoticeReason
	// Rank is the rank at the root of the failure (for NoticeClosed, the
	// sender).
	Rank int
	// Seq is, for a failure, the Epoch of the sender's failed call, mod
	// NoticeSeqMod: a peer still in an earlier call finishes it and fails
	// the next. For NoticeClosed, it is the number of collectives the
	// sender made, mod 2^14.
	Seq uint16
}

// Epoch orders a communicator's calls for failure notices: 2n for
// collective #n, 2n+1 for a point-to-point call made after collective #n
// (and before #n+1).
func Epoch(seq uint32, p2p bool) uint32 {
	if p2p {
		return 2*seq + 1
	}
	return 2 * seq
}

// Notice immediate: the credit type (2 bits), the notice flag (bit 29), 3
// bits of reason, 10 bits of Seq and 16 bits of rank; for NoticeClosed,
// 14 bits of Seq where the others have Seq and rank.
const (
	noticeFlag        = 1 << 29
	noticeReasonShift = 26
	noticeRankBits    = 16
	noticeSeqBits     = 10
	noticeSeqMask     = 1<<noticeSeqBits - 1
	// NoticeSeqMod is the number of distinct Seq values of a failure notice.
	NoticeSeqMod = 1 << noticeSeqBits
)

func (n Notice) imm() uint32 {
	v := uint32(n.Rank)&(1<<noticeRankBits-1) | (uint32(n.Seq)&noticeSeqMask)<<noticeRankBits
	if n.Reason == NoticeClosed {
		v = uint32(n.Seq) & seqMask
	}
	return immCredit | noticeFlag | uint32(n.Reason)<<noticeReasonShift | v
}

// noticeAfter reports whether a notice's epoch n (mod NoticeSeqMod) is
// later than cur: the peer failed in a call this rank has not reached.
func noticeAfter(n uint16, cur uint32) bool {
	d := (uint32(n) - cur) & noticeSeqMask
	return d != 0 && d < 1<<(noticeSeqBits-1)
}

// decodeNotice reads a notice immediate that sender sent in a job of size
// ranks; ok is false if it is malformed.
func decodeNotice(imm uint32, sender, size int) (n Notice, ok bool) {
	if imm&immType != immCredit || imm&noticeFlag == 0 {
		return Notice{}, false
	}
	r := NoticeReason(imm >> noticeReasonShift & 7)
	v := imm & (1<<noticeReasonShift - 1)
	switch {
	case r == 0 || r >= numNoticeReasons:
		return Notice{}, false
	case r == NoticeClosed:
		if v > seqMask {
			return Notice{}, false
		}
		return Notice{Reason: r, Rank: sender, Seq: uint16(v)}, true
	}
	rank := int(v & (1<<noticeRankBits - 1))
	if rank >= size {
		return Notice{}, false
	}
	return Notice{Reason: r, Rank: rank, Seq: uint16(v >> noticeRankBits)}, true
}

// NoticeError is a call failed by a peer's notice: the peer broke its
// connections because of Notice.
type NoticeError struct {
	Call   string // this rank's call, e.g. "allreduce(float32, 8, sum) #3 (ring)"
	Rank   int    // this rank
	Peer   int    // the rank that sent the notice
	Notice Notice
}

func (e *NoticeError) Error() string {
	n := e.Notice
	var what string
	switch n.Reason {
	case NoticeLost:
		if n.Rank == e.Peer {
			what = fmt.Sprintf("rank %d lost its connection to every peer", n.Rank)
		} else {
			what = fmt.Sprintf("rank %d failed or lost its connection", n.Rank)
		}
	case NoticeMismatch:
		what = fmt.Sprintf("collective mismatch with rank %d", n.Rank)
	case NoticeBadArgs:
		what = fmt.Sprintf("rank %d refused its arguments", n.Rank)
	case NoticeStall:
		what = fmt.Sprintf("rank %d makes no progress (stopped, hung, or not in the collective)", n.Rank)
	case NoticeAborted:
		what = fmt.Sprintf("rank %d aborted", n.Rank)
	case NoticeFailed:
		what = fmt.Sprintf("rank %d failed", n.Rank)
	case NoticeClosed:
		what = fmt.Sprintf("rank %d closed the communicator", n.Rank)
	}
	return fmt.Sprintf("%s: rank %d: rank %d broke its connections: %s", e.Call, e.Rank, e.Peer, what)
}

// ClosedError is a call that still needs a peer that closed the
// communicator after PeerSeq collectives: when PeerSeq is below this call's
// number, the peer called fewer collectives than this rank.
type ClosedError struct {
	Call    string // this rank's call with its number
	Seq     uint32 // this call's number
	Rank    int
	Peer    int
	PeerSeq uint16 // mod 2^14
}

// PeerCount is the number of collectives the peer made, taken to be at
// most this call's number.
func (e *ClosedError) PeerCount() uint32 {
	return e.Seq - (e.Seq-uint32(e.PeerSeq))&seqMask
}

func (e *ClosedError) Error() string {
	if e.PeerSeq != uint16(e.Seq&seqMask) {
		return fmt.Sprintf("sequence mismatch: rank %d closed the communicator after %d collectives while rank %d is in %s, which needs it: the ranks called different numbers of collectives",
			e.Peer, e.PeerCount(), e.Rank, e.Call)
	}
	return fmt.Sprintf("rank %d closed the communicator while rank %d is in %s, which still needs it", e.Peer, e.Rank, e.Call)
}

// SeqMod is the number of distinct sequence numbers the immediate carries.
const SeqMod = 1 << seqBits

// Waiting returns the peers that run c (running or failed) still waits
// on: those with sends or receives to do, or whose checking of this
// rank's sends is not yet confirmed.
func (e *Executor) Waiting(c *Call) []int {
	var out []int
	p := c.Plan
	if p == nil || len(e.sendHead) != e.Size {
		return nil
	}
	for _, peer := range p.peers {
		l := e.Links[peer]
		if l == nil {
			continue
		}
		if e.sendHead[peer] < len(p.sends[peer]) || e.recvHead[peer] < len(p.recvs[peer]) || l.unplaced > 0 || !e.confirmedPeer(c, peer) {
			out = append(out, peer)
		}
	}
	return out
}

// PeerState says what is known of the link to peer: whether it went down,
// and the notice the peer sent, if any.
func (e *Executor) PeerState(peer int) (down bool, n Notice, noticed bool) {
	if peer < 0 || peer >= len(e.Links) || e.Links[peer] == nil {
		return false, Notice{}, false
	}
	l := e.Links[peer]
	if l.notice != 0 {
		n, noticed = decodeNotice(l.notice, peer, e.Size)
	}
	return l.down != nil, n, noticed
}

// Absorb takes every completion already queued, without waiting,
// recording which links went down and the notices peers sent. It may be
// called on a failed executor.
func (e *Executor) Absorb() {
	for {
		n := e.CQ.Poll(e.compBuf())
		if n == 0 {
			return
		}
		e.record(n)
	}
}

// Settle polls the completion queue of a failed executor for d (or until
// ctx ends), recording which links go down and the notices peers send:
// the events of a failure arrive close together, and the rank that sees
// all of them blames better than the one that sees the first.
func (e *Executor) Settle(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for ctx.Err() == nil {
		if !e.pollAftermath(ctx) {
			return
		}
	}
}

// Notify sends n to every peer whose link is up, except the ranks in skip,
// and waits until the notices are placed at the peers (or ctx ends), so
// that closing the connections afterwards loses none of them. Meanwhile it
// records links that go down and notices that peers send. It may be
// called on a failed executor; nothing else may use it concurrently.
func (e *Executor) Notify(ctx context.Context, n Notice, skip ...int) {
	pending := 0
	e.noticeOut = n.imm()
	for peer, l := range e.Links {
		if l == nil || l.down != nil || slices.Contains(skip, peer) {
			continue
		}
		err := l.EP.PostWrite(makeID(idNotice, peer, 0), l.Staging, 0, 0, l.Remote, 0, &e.noticeOut)
		for tries := 0; errors.Is(err, transport.ErrQueueFull) && tries < 100 && ctx.Err() == nil; tries++ {
			e.Absorb() // make room in the completion queue
			err = l.EP.PostWrite(makeID(idNotice, peer, 0), l.Staging, 0, 0, l.Remote, 0, &e.noticeOut)
		}
		if err != nil {
			if !errors.Is(err, transport.ErrQueueFull) {
				// The connection is gone: Confirm, which waits for the
				// peer's credits, must not wait for it past what is
				// queued already (a peer that died with a credit it held
				// back for later, no request of this rank pending to be
				// flushed: Close waited out the stall timeout).
				l.postErr = err
			}
			continue // the connection is gone (or the queue stays full)
		}
		pending++
	}
	e.noticesPending = pending
	for e.noticesPending > 0 && ctx.Err() == nil {
		if !e.pollAftermath(ctx) {
			return
		}
	}
}

// pollAftermath waits for completions after a failure and records what
// they say about the links; it returns false if the queue is closed.
func (e *Executor) pollAftermath(ctx context.Context) bool {
	n, err := e.CQ.Wait(ctx, e.compBuf())
	if err != nil {
		return ctx.Err() != nil
	}
	e.record(n)
	return true
}

// record notes what the first n completions of e.comps say about the
// links, after a failure.
func (e *Executor) record(n int) {
	for i := range n {
		e.recordOne(&e.comps[i])
	}
}

// recordOne notes what one completion says about its link: down, a
// notice, credits returned (Confirm counts them). Data that arrives is
// not taken: no run wants it any more.
func (e *Executor) recordOne(comp *transport.Completion) {
	peer := idPeer(comp.ID)
	if comp.Op == transport.OpRemoteError || peer >= len(e.Links) || e.Links[peer] == nil || e.stale(comp) {
		return
	}
	l := e.Links[peer]
	kind := comp.ID & idKind
	if kind == idNotice {
		e.noticesPending--
	}
	if comp.Err != nil {
		if l.down == nil {
			l.down = comp.Err
		}
		return
	}
	if kind != idToken {
		return
	}
	_ = l.EP.PostRecv(comp.ID, l.Staging, 0, 0)
	if comp.HasImm && comp.Imm&immType == immP2P && !l.strayP2P {
		// A point-to-point message that no run will receive (Unreceived).
		l.strayP2P, l.strayTag = true, comp.Imm&MaxTag
	}
	if !comp.HasImm || comp.Imm&immType != immCredit {
		return
	}
	switch {
	case comp.Imm&noticeFlag != 0:
		if l.notice == 0 {
			l.notice = comp.Imm
		}
	case comp.Imm&byeFlag == 0:
		l.credit(comp.Imm)
	}
}

// RankList writes ranks (sorted) as "rank 3" or "ranks 1-3, 5", for
// errors and logs.
func RankList(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j == i {
			fmt.Fprintf(&b, "%d", ranks[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", ranks[i], ranks[j])
		}
		i = j + 1
	}
	if len(ranks) == 1 {
		return "rank " + b.String()
	}
	return "ranks " + b.String()
}

// Unreceived names, at close, a point-to-point message a peer sent this
// rank that no receive took: the oldest waiting in a link's slots, or one
// that arrived after the last run (Confirm and Drain note them). A Send
// of a message that fits the slots completes before its Recv is called,
// so nothing else says that its data was dropped; its sender's Confirm
// says it too, once this rank's closing notice reaches it.
func (e *Executor) Unreceived() error {
	if n := e.CQ.Poll(e.compBuf()); n > 0 {
		e.record(n)
	}
	for peer, l := range e.Links {
		if l == nil {
			continue
		}
		tag, ok := l.strayTag, l.strayP2P
		if len(l.strays) > 0 {
			tag, ok = l.strays[0].tag, true // the oldest
		} else if slot := l.recvSlot; l.arrived > 0 && l.arrP2P[slot] {
			tag, ok = (uint32(l.arrSeq[slot])<<16|uint32(l.arrFP[slot]))&MaxTag, true
		}
		if ok {
			return fmt.Errorf("rank %d sent this rank a message with tag %d that it never received (a Send without its Recv)", peer, tag)
		}
	}
	return nil
}
