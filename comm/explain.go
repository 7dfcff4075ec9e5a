package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
)

// When a collective fails on a rank, the rank decides which rank is at the
// root of the failure (itself, the peer whose data did not match, the
// peer that vanished without a word, the stalled rank at the end of a
// chain of waits), tells every peer over the data links (a failure notice,
// see collectives/notice.go), closes its connections, and publishes a
// short report in the bootstrap store. A rank that gets a notice fails at
// once and names the rank the notice names, so every survivor blames the
// same rank, also when the store died with its host; the reports add the
// details (each rank's call, the argument a rank refused) when the store
// is there.

// keyValue is the part of the bootstrap store a communicator uses for
// reports and questions.
type keyValue interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

func kvOf(r Rendezvous) keyValue {
	switch v := r.(type) {
	case keyValue:
		return v
	case interface{ Client() *bootstrap.Client }:
		return v.Client()
	}
	return nil
}

const (
	// notifyWait bounds the wait for the notices to reach the peers.
	notifyWait = 300 * time.Millisecond
	// reportWait bounds the wait for other ranks' reports.
	reportWait = 500 * time.Millisecond
)

// fault is a failure as this rank understands it.
type fault struct {
	reason collectives.NoticeReason
	root   int    // the rank at the root of the failure
	peer   int    // mismatch: the other rank of the pair (the root's counterpart); else -1
	via    int    // the rank whose notice reported it; -1 if found here
	call   string // this rank's call and number ("" if none)
	seq    uint32
	// earlier: the failure is about an earlier collective than this
	// rank's call, which this rank completed: its side is prev (its call
	// of that number, "" if not known)
	earlier bool
	prev    string
	about   uint32 // the number of the collective the failure is about
	epoch   uint32 // the Epoch of the call it is about (notices carry it)
	other   string // mismatch: the root's call, if this rank knows it
	detail  string // what this rank found, for its report
	cause   error  // the error the run failed with
}

// failed is the error a user sees: the headline names the rank at the
// root of the failure; it wraps the error the run failed with.
type failed struct {
	headline string
	cause    error
}

func (e *failed) Error() string { return "comm: " + e.headline + ": " + e.cause.Error() }
func (e *failed) Unwrap() error { return e.cause }

// fail handles a run of call that failed with err: it finds the rank at
// the root of the failure, tells every peer, breaks the links, publishes
// this rank's report and returns the error the user sees.
func (c *Comm) fail(err error, call *collectives.Call) error {
	f := c.classify(err, call)
	state := uint32(boardFailed)
	if f.reason == collectives.NoticeMismatch {
		state = boardMismatched // the ranks waiting on the board say so
	}
	c.board.markRoot(state, f.root)
	if f.root != c.rank || f.reason != collectives.NoticeFailed {
		c.failRoot.Store(int64(f.root))
	} else {
		c.failRoot.Store(-1) // failed, without a conclusion about the root
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyWait)
	var skip []int
	if f.reason == collectives.NoticeStall {
		skip = append(skip, f.root) // stopped: it would not take the notice
	}
	c.exec.Notify(ctx, collectives.Notice{Reason: f.reason, Rank: f.root, Seq: uint16(f.epoch)}, skip...)
	cancel()
	c.breakLinks()
	kv := kvOf(c.rdv)
	if kv != nil {
		detail := f.detail
		if detail == "" {
			detail = err.Error()
		}
		// The call the failure is about: this rank's of that number.
		call, seq := f.call, f.seq
		if f.earlier {
			call, seq = f.prev, f.about
		}
		c.publish(kv, report{reason: f.reason, root: f.root, peer: f.peer, seq: seq, call: call, other: f.other, cause: detail})
	}
	return &failed{headline: c.headline(kv, f), cause: f.cause}
}

// classify finds the rank at the root of err.
func (c *Comm) classify(err error, call *collectives.Call) fault {
	p2p := call != nil && call.P2P
	f := fault{root: c.rank, peer: -1, via: -1, seq: c.seq, about: c.seq, epoch: collectives.Epoch(c.seq, p2p), cause: err, reason: collectives.NoticeFailed}
	if call != nil {
		f.call = c.callName(call)
	}
	var (
		ne *collectives.NoticeError
		ce *collectives.ClosedError
		mm *collectives.MismatchError
		dd *disagreement
		pe *collectives.PeerError
		se *stallError
		te *timeoutError
		ie *initStallError
	)
	switch {
	case errors.As(err, &ne):
		c.adopt(&f, ne.Notice, ne.Peer, call.P2P)
	case errors.As(err, &ie):
		f.detail = ie.Error()
		if w := c.silentPeer(); w >= 0 {
			f.reason, f.root = collectives.NoticeStall, w
			f.detail = fmt.Sprintf("rank %d does not answer (stopped, hung or unreachable): %v", w, ie)
		}
	case errors.As(err, &ce):
		f.reason, f.root, f.peer = collectives.NoticeMismatch, ce.Peer, ce.Peer
		f.other = fmt.Sprintf("Close after its collective #%d", ce.PeerCount())
		f.detail = ce.Error()
	case errors.As(err, &dd):
		f.reason, f.root, f.peer, f.other = collectives.NoticeMismatch, dd.Peer, dd.Peer, dd.PeerCall
	case errors.As(err, &mm):
		f.reason, f.root, f.peer, f.other = collectives.NoticeMismatch, mm.Peer, mm.Peer, mm.PeerCall
		if !call.P2P && uint32(mm.PeerSeq) == (c.seq-1)%collectives.SeqMod {
			// Data of the previous collective, which this rank completed
			// without it: the peer's call of that number differs.
			f.earlier, f.prev, f.about, f.epoch = true, c.prevName(), c.seq-1, collectives.Epoch(c.seq-1, false)
		}
	case errors.As(err, &pe):
		c.blameLost(&f, pe.Peer, call != nil && call.P2P)
	case errors.As(err, &se) || errors.As(err, &te):
		if call == nil || call.Plan == nil {
			// Ended before it ran (its plan compiled, its links set up):
			// it waits on nobody yet, and the cause says why it ended.
			if te != nil {
				f.detail = te.Error()
			}
			break
		}
		root, why, derr := c.blameStall(call)
		// Another rank may have concluded meanwhile (and its notice shows
		// that it is alive, whatever the search found): take its word.
		c.exec.Absorb()
		if n, via, ok := c.noticeFrom(); ok {
			c.adopt(&f, n, via, call.P2P)
			break
		}
		if errors.As(derr, &dd) {
			f.reason, f.root, f.peer, f.other = collectives.NoticeMismatch, dd.Peer, dd.Peer, dd.PeerCall
			f.cause = fmt.Errorf("%w; %w", derr, err)
			break
		}
		if derr != nil { // calls that cannot meet (compareP2P)
			f.detail = derr.Error()
			break
		}
		f.detail = why
		if root >= 0 {
			f.reason, f.root = collectives.NoticeStall, root
		}
	case c.aborted.Load():
		f.reason = collectives.NoticeAborted
	case errors.Is(err, bootstrap.ErrStoreLost):
		// The store went away: with it, as a rule, the rank that hosted
		// it (rank 0 under torchrun), whose links this rank may not have
		// yet (it was setting them up).
		if h := c.rankOfWorld(c.held.storeHost); h >= 0 && h != c.rank {
			f.reason, f.root = collectives.NoticeLost, h
			f.detail = fmt.Sprintf("the bootstrap store, which rank %d hosted, is gone: %v", h, err)
		}
	}
	return f
}

// rankOfWorld is this communicator's rank of world rank w, -1 if w is not
// a member (or w < 0).
func (c *Comm) rankOfWorld(w int) int {
	if w < 0 {
		return -1
	}
	if c.world == nil {
		if w < c.size {
			return w
		}
		return -1
	}
	return slices.Index(c.world, w)
}

// noticeFrom returns a failure notice some peer sent, if any: from the
// lowest rank.
func (c *Comm) noticeFrom() (collectives.Notice, int, bool) {
	for r := range c.size {
		if _, n, ok := c.exec.PeerState(r); ok && n.Reason != collectives.NoticeClosed {
			return n, r, true
		}
	}
	return collectives.Notice{}, -1, false
}

// adopt takes the cause of a failure from notice n, which rank via sent.
func (c *Comm) adopt(f *fault, n collectives.Notice, via int, p2p bool) {
	f.reason, f.root, f.via = n.Reason, n.Rank, via
	const mask = collectives.NoticeSeqMod - 1 // notices carry the epoch mod NoticeSeqMod
	mine := collectives.Epoch(c.seq, p2p)
	f.epoch = mine - (mine-uint32(n.Seq))&mask
	f.about = f.epoch / 2
	if !p2p && f.about != c.seq {
		f.earlier = true // a collective this rank completed
		if f.about == c.seq-1 {
			f.prev = c.prevName()
		}
	}
	if f.reason == collectives.NoticeMismatch {
		f.peer = via
		if f.root == c.rank {
			// The sender found this rank's call different from its own:
			// from here, the sender's differs.
			f.root = via
		}
	}
}

// blameLost decides whom to blame for the link to peer going down without
// a notice: a notice that came meanwhile from anyone names the root; a
// rank that lost every link is itself cut off; else the peer died or its
// link broke.
func (c *Comm) blameLost(f *fault, peer int, p2p bool) {
	c.exec.Absorb()
	if _, n, ok := c.exec.PeerState(peer); !ok || n.Reason == collectives.NoticeClosed {
		c.exec.Settle(context.Background(), settleWait)
	}
	f.reason, f.root = collectives.NoticeLost, peer
	order := []int{peer}
	for r := range c.size {
		if r != peer && r != c.rank {
			order = append(order, r)
		}
	}
	downs := 0
	for _, r := range order {
		down, n, ok := c.exec.PeerState(r)
		if ok && n.Reason != collectives.NoticeClosed {
			c.adopt(f, n, r, p2p)
			return
		}
		if down && !ok {
			downs++
		}
	}
	if c.size > 2 && downs == c.size-1 {
		f.root = c.rank
		f.detail = fmt.Sprintf("rank %d lost its connection to every peer", c.rank)
	}
	// The peer left having found this rank at the root of a stall (it was
	// stopped past the stall timeout and resumed after the others gave
	// up): this rank is, not the peer (it blamed a healthy rank that had
	// exited). Only a stall: a peer that lost its own links blames the
	// first it noticed, which may be this rank (a test that cut rank 2's
	// links: rank 3 took itself for the root). A published report is there
	// at once; a killed peer has none, and the look costs that error
	// lostLook.
	// Or it found this rank in another call while it set up their link,
	// and closed its side before it could tell this rank over it: a
	// mismatch (see disagreement.Found).
	if kv := kvOf(c.rdv); kv != nil {
		rep, ok := c.readReports(kv, []int{peer}, lostLook)[peer]
		if ok && rep.root == c.rank && rep.reason == collectives.NoticeStall {
			f.reason, f.root, f.via = rep.reason, c.rank, peer
			f.detail = fmt.Sprintf("rank %d gave up on this rank before it came back: %s", peer, rep.cause)
		} else if d := c.mismatchReported(rankState{call: f.call, seq: f.seq}, peer, rep); d != nil { // nil without a report
			f.reason, f.root, f.peer, f.other = collectives.NoticeMismatch, peer, peer, rep.call
			f.cause = fmt.Errorf("%w; %w", d, f.cause)
		}
	}
}

// lostLook bounds blameLost's look for the lost peer's report.
const lostLook = 20 * time.Millisecond
