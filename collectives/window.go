package collectives

import (
	"errors"
	"fmt"
	"slices"

	"github.com/goccl/goccl/transport"
)

// Windowed runs. An all-to-all talks to every peer; in a large job it must
// not connect, hold staging for and post to all of them at once. A plan
// whose schedule numbers its peers by round (Schedule.Rounds) therefore
// runs, on an executor with a Window of w peers in a job of more than w+1
// ranks, through batches of rounds: w/2 rounds, at most w peers, at a time
// (MPICH's medium-message all-to-all posts its requests in batches of
// MPIR_CVAR_ALLTOALL_THROTTLE peers likewise).
//
//  1. Admit the next batch: link its peers that have no link yet
//     (Executor.Connect: a communicator sets the pairs up through its
//     store; both ranks of a pair meet in the same round, hence in the
//     same batch), then post and consume their chunks as usual. Peers of
//     later batches are not touched: their chunks wait.
//  2. A peer whose chunks are all done is done. If its link is transient
//     (made for this window, Link.Transient), this rank tells the peer so
//     with a bye (a zero-length write, after every credit it owes the
//     peer), and releases the link (Executor.Release: closes the endpoint,
//     frees the staging) once the peer's bye has arrived and its own bye
//     is placed at the peer (its write completed): each bye follows
//     everything its rank sent on the link, so then neither side needs
//     the link any more. (Closing earlier could drop what this side posted
//     last: a transport may still hold it.) A link that goes down after
//     this rank is done with it is released as well, if the run needs
//     nothing more from it (checkDown): the peer closed first, having
//     both byes.
//  3. Once every peer of the batch is done and every transient link of it
//     released, admit the next batch. The run completes when the last
//     batch's links are released.
//
// A rank blocked in step 1 (waiting for its new peers to reach the same
// batch) owes nothing to the peers of earlier batches: it finished with
// them and flushed its byes before it blocked. So every rank reaches every
// batch (by induction over the batches), and no pair waits on another.
//
// Links outside a batch that already existed (a ring's neighbours, a
// tree's parent) are used, not released. Completions of a released link's
// endpoint that come later (flushed receive tokens, acknowledgements) are
// recognised by their endpoint and dropped (see stale).

// Peer states of a windowed run.
const (
	winIdle = iota // not admitted yet
	winLive        // admitted, chunks to do
	winDone        // chunks done (transient link: bye not posted yet)
	winBye         // bye posted, waiting for the peer's
	winGone        // released, or done with a link that stays
)

// byeFlag marks a credit-type immediate as a bye (see above); notices use
// bit 29 and credits the low 16 bits.
const byeFlag = 1 << 28

// window is the state of a windowed run.
type window struct {
	on       bool
	per      int32   // rounds per batch
	next     int     // the plan's byRound[:next] are admitted
	open     int     // admitted peers not done
	retiring int     // transient links admitted and not released
	left     []int32 // per peer: chunks not done
	state    []uint8 // per peer
	queued   []bool  // per peer: in todo
	todo     []int   // peers whose bye or release may be due
	spare    []int   // the other todo buffer
	missing  []int   // scratch: peers of a batch without a link
	// retired: some link was released, so completions of its endpoint
	// may still come (not reset between runs).
	retired bool
}

// setRounds checks a schedule's rounds (see Schedule.Rounds) against the
// plan's peers and dependencies (deps of chunk i at deps[depAt[i]:
// depAt[i+1]]) and keeps them.
func (p *Plan) setRounds(rounds []int32, deps, depAt []int32) error {
	if len(rounds) != p.Size {
		return fmt.Errorf("%d rounds for %d ranks", len(rounds), p.Size)
	}
	count := make(map[int32]int)
	for _, peer := range p.peers {
		r := rounds[peer]
		if r < -1 {
			return fmt.Errorf("peer %d in round %d", peer, r)
		}
		if r >= 0 {
			if count[r]++; count[r] > 2 {
				return fmt.Errorf("more than two peers in round %d", r)
			}
		}
	}
	roundOf := func(i int32) int32 {
		if pr := p.chunks[i].peer; pr >= 0 {
			return rounds[pr]
		}
		return -1
	}
	for i := range p.chunks {
		for _, x := range deps[depAt[i]:depAt[i+1]] {
			if roundOf(x) > roundOf(int32(i)) {
				return fmt.Errorf("a step with rank %d (round %d) waits for one with rank %d (round %d)",
					p.chunks[i].peer, roundOf(int32(i)), p.chunks[x].peer, roundOf(x))
			}
		}
	}
	p.round = slices.Clone(rounds)
	for _, peer := range p.peers {
		if p.round[peer] >= 0 {
			p.byRound = append(p.byRound, peer)
		}
	}
	slices.SortStableFunc(p.byRound, func(a, b int) int { return int(p.round[a] - p.round[b]) })
	return nil
}

// Round is the round in which the plan exchanges with peer (see
// Schedule.Rounds); -1 for a plan without rounds or a peer outside them.
func (p *Plan) Round(peer int) int {
	if p.round == nil || peer < 0 || peer >= len(p.round) {
		return -1
	}
	return int(p.round[peer])
}

// Windowed reports whether a run of p on an executor whose Window is w
// goes through the window: the plan numbers its peers by round and the
// job has more than w peers. It depends on the job, not on this rank's
// peers, so that the two ranks of every pair agree.
func (p *Plan) Windowed(w int) bool { return w > 0 && p.round != nil && p.Size-1 > w }

// gated reports whether a run on an executor with window w links peer
// only when it admits peer's batch.
func (p *Plan) gated(peer, w int) bool { return p.Windowed(w) && p.round[peer] >= 0 }

func (w *window) reset(e *Executor, p *Plan) {
	w.on = p.Windowed(e.Window)
	if !w.on {
		return
	}
	w.per = int32(max(1, e.Window/2))
	w.next, w.open, w.retiring = 0, 0, 0
	w.todo = w.todo[:0]
	if len(w.state) != e.Size {
		w.left = make([]int32, e.Size)
		w.state = make([]uint8, e.Size)
		w.queued = make([]bool, e.Size)
	}
	for _, peer := range p.peers {
		w.left[peer] = int32(len(p.sends[peer]) + len(p.recvs[peer]))
		w.state[peer], w.queued[peer] = winLive, false
		if p.round[peer] >= 0 {
			w.state[peer] = winIdle
		}
	}
}

// admitted reports whether a windowed run may touch peer's chunks.
func (w *window) admitted(peer int) bool { return w.state[peer] != winIdle }

// chunkDone counts a finished chunk with peer.
func (w *window) chunkDone(p *Plan, peer int) {
	if p.round[peer] < 0 {
		return
	}
	if w.left[peer]--; w.left[peer] == 0 {
		w.state[peer] = winDone
		w.open--
		w.note(peer)
	}
}

// note queues peer for advance, if its bye or release may now be due.
func (w *window) note(peer int) {
	if w.on && !w.queued[peer] && (w.state[peer] == winDone || w.state[peer] == winBye) {
		w.queued[peer] = true
		w.todo = append(w.todo, peer)
	}
}

// stale reports whether comp belongs to an endpoint of a released link.
func (e *Executor) stale(comp *transport.Completion) bool {
	if !e.win.retired || comp.Endpoint == nil {
		return false
	}
	peer := idPeer(comp.ID)
	if peer >= len(e.Links) {
		return false
	}
	l := e.Links[peer]
	return l == nil || l.EP != comp.Endpoint
}

// advance sends the byes and releases the links that are due, then admits
// the next batch once the current one is over. It reports whether it
// admitted one (its peers then have chunks to post).
func (e *Executor) advance(c *Call) (bool, error) {
	w := &e.win
	if len(w.todo) > 0 {
		todo := w.todo
		w.todo = w.spare[:0] // retire may queue a peer again
		for _, peer := range todo {
			w.queued[peer] = false
		}
		for _, peer := range todo {
			if err := e.retire(c, peer); err != nil {
				return false, err
			}
		}
		w.spare = todo[:0]
	}
	p := c.Plan
	if w.open > 0 || w.retiring > 0 || w.next == len(p.byRound) {
		return false, nil
	}
	// The next batch: the peers of the next w.per rounds that have any.
	batch := p.round[p.byRound[w.next]] / w.per
	end := w.next
	for end < len(p.byRound) && p.round[p.byRound[end]]/w.per == batch {
		end++
	}
	peers := p.byRound[w.next:end]
	w.missing = w.missing[:0]
	for _, peer := range peers {
		if e.Links[peer] == nil {
			w.missing = append(w.missing, peer)
		}
	}
	if len(w.missing) > 0 {
		if e.Connect == nil {
			return false, fmt.Errorf("%s: rank %d has no link to rank %d", c.Desc(), e.Rank, w.missing[0])
		}
		// What this rank posted goes out before it waits for its new
		// peers: the byes and credits of the batch before, which those
		// peers' ranks may wait for.
		if err := e.flush(c); err != nil {
			return false, err
		}
		if err := e.Connect(c, w.missing); err != nil {
			return false, err
		}
	}
	w.next = end
	for _, peer := range peers {
		l := e.Links[peer]
		if l == nil {
			return false, fmt.Errorf("%s: rank %d has no link to rank %d", c.Desc(), e.Rank, peer)
		}
		e.sent0[peer] = l.sent
		l.unplaced = 0
		w.state[peer] = winLive
		w.open++
		if l.Transient {
			w.retiring++
		}
		if err := e.checkDown(c, peer); err != nil {
			return false, err
		}
		e.markDirty(peer)
	}
	return true, nil
}

// retire posts the bye to a done peer whose link is transient and releases
// the link once the peer's has come (or the link went down and the run
// needs nothing more from it). A done peer whose link stays is finished.
func (e *Executor) retire(c *Call, peer int) error {
	w, l := &e.win, e.Links[peer]
	if l == nil {
		return nil
	}
	if !l.Transient {
		w.state[peer] = winGone
		return nil
	}
	if w.state[peer] == winDone && l.owedCredits == 0 && !l.deferred {
		if l.down == nil {
			l.imm = immCredit | byeFlag
			err := l.EP.PostWrite(makeID(idBye, peer, 0), l.Staging, 0, 0, l.Remote, 0, &l.imm)
			if errors.Is(err, transport.ErrQueueFull) {
				e.stall(peer)
				w.note(peer) // again after the next poll
				return nil
			}
			e.unflushed = true // the peer waits for it
		}
		w.state[peer] = winBye
	}
	if w.state[peer] != winBye || ((!l.byeIn || !l.byeDone) && l.down == nil) {
		return nil
	}
	if err := e.checkDown(c, peer); err != nil {
		return err
	}
	e.inflight -= l.inline // their acknowledgements are dropped (stale)
	e.settle()
	w.state[peer] = winGone
	w.retiring--
	w.retired = true
	if e.Release != nil {
		e.Release(peer)
	} else {
		l.EP.Close()
	}
	e.Links[peer] = nil
	return nil
}

// flush polls the completion queue once if data or credits were posted
// since the last poll (transports may write posts at the next poll) and
// handles what it brings.
func (e *Executor) flush(c *Call) error {
	if !e.unflushed {
		return nil
	}
	e.unflushed = false
	n := e.CQ.Poll(e.comps)
	if n > 0 {
		e.progressed()
	}
	for i := range n {
		if err := e.handle(c, &e.comps[i]); err != nil {
			return err
		}
	}
	e.unstall()
	return nil
}
