package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/goccl/goccl/collectives"
)

// Stall diagnosis. A collective that sees no completion for a while is not
// necessarily broken: a peer may be slow. But some deadlocks carry no data
// at all, so the data path cannot see them: ranks that disagree on a
// broadcast's root so that nobody sends, or a rank that waits for its peer
// in a collective that the peer already left. So a stalled run compares
// its call with those of the ranks it waits on, at 1, 2, 4, 8... stall
// steps (a second, or half the stall timeout if that is shorter): each
// rank answers questions about its state through the bootstrap store (a
// goroutine of each communicator does, whether or not the rank is in a
// collective), and a difference of calls is an error at once (where
// ranks crowd the processors, once the run has been stalled for
// passedAfter: their answers lag). A rank that
// merely runs slowly answers with the call it is in, or none: that fails
// nobody. When the stall timeout ends a run, the rank follows the chain of
// ranks that wait on one another and blames the first that does not answer
// (a stopped or hung process) or that is not in the collective at all.

// errPoke is the cause with which the stall watchdog ends a run's context
// to make it compare its call with its peers'.
var errPoke = errors.New("stall check")

// stallError is the cause of a run ended by the stall timeout.
type stallError struct{ d time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("no progress for %v (GOCCL_STALL_TIMEOUT): a peer or link stopped without an error", e.d)
}

// initStallError is the cause of one of Init's measuring calls ended just
// before Init's deadline (tune): a rank stopped or hung there is found by
// asking every rank (silentPeer), not as "not every rank joined".
type initStallError struct{ d time.Duration }

func (e *initStallError) Error() string {
	return fmt.Sprintf("Init's measurement of the transport did not end within %v (GOCCL_INIT_TIMEOUT)", e.d)
}

// silentPeer is the lowest rank that does not answer this rank's question
// (stopped, hung or unreachable), -1 if every rank answers or there is no
// store to ask through. A rank that failed and closed answers no more:
// its report names the rank it found at the root, which is taken instead
// (ranks whose Init timeouts end together fail at once, and one that
// asked a moment later blamed the lowest of them, alive and right:
// TestInitNamesAStoppedRank under load). Ranks silent at the first
// question are asked once more, and their reports read again.
func (c *Comm) silentPeer() int {
	kv := kvOf(c.rdv)
	if kv == nil {
		return -1
	}
	var silent []int
	for r := range c.size {
		if r != c.rank {
			silent = append(silent, r)
		}
	}
	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), queryWait)
		answers := c.query(ctx, kv, silent)
		cancel()
		reps := c.readReports(kv, silent, queryWait)
		var still []int
		for _, r := range silent {
			if _, ok := answers[r]; ok {
				continue
			}
			if rep, ok := reps[r]; ok && rep.cause != "" {
				if rep.root >= 0 && rep.root < c.size && rep.root != c.rank && rep.root != r {
					return rep.root
				}
				continue // failed for a cause of its own: its notice says it
			}
			still = append(still, r)
		}
		if len(still) == 0 || round == 1 {
			if len(still) == 0 {
				return -1
			}
			return still[0]
		}
		silent = still
	}
	return -1
}

// timeoutError is the cause of a run ended by the communicator timeout.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("collective exceeded the communicator timeout %v (GOCCL_TIMEOUT)", e.d)
}

const (
	// queryWait bounds one round of questions to other ranks.
	queryWait = 300 * time.Millisecond
	// settleWait is how long a rank whose link broke waits for the other
	// events of the failure before it decides whom to blame.
	settleWait = 100 * time.Millisecond
	// blameWait bounds the search for the rank at the root of a stall.
	blameWait = 700 * time.Millisecond
)

// poke is the context runs go on under: the stall watchdog ends it (with
// errPoke) to make a stalled run look around, and the run replaces it.
type poke struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// renewPoke replaces the context runs go on under with a new child of
// the communicator's life.
func (c *Comm) renewPoke() *poke { return c.newPoke(c.life) }

// runCtx is the context to start the executor with, given the call's: the
// stall clock ran while the plan was compiled (plans are compiled with
// the communicator's life context, which pokes do not end), which is this
// rank's own work and no stall of its peers; it restarts, and a poke
// that came meanwhile is dropped.
func (c *Comm) runCtx(ctx context.Context) context.Context {
	if c.stallElapsed.Load() == 0 {
		return ctx
	}
	c.armStall()
	if ctx.Err() != nil && c.life.Err() == nil {
		return c.renewPoke().ctx
	}
	return ctx
}

// clockBase and mono give a cheap monotonic clock in nanoseconds.
var clockBase = time.Now()

func mono() int64 { return int64(time.Since(clockBase)) }

// stallTick runs when the stall timer fires: with no timed call running
// the clock stops (the next call arms it); if completions arrived within
// the last step it waits for the rest of a step from the last one, else
// the run has been stalled for as long as it saw none.
func (c *Comm) stallTick() {
	c.stallArmed.Store(false)
	if !c.timedRunning() {
		c.stallElapsed.Store(0)
		return
	}
	if !c.stallArmed.CompareAndSwap(false, true) {
		return // the call that runs now armed it
	}
	idle := time.Duration(mono() - c.lastProgress.Load())
	if idle < c.stallStep {
		c.stallElapsed.Store(0)
		c.stallDog.Reset(c.stallStep - idle)
		return
	}
	c.stallElapsed.Store(int64(idle))
	left := c.opts.StallTimeout - idle
	if left <= 0 && c.tuning.Load() {
		// The measurement at New: a rank it waits for may still be
		// joining (512 ranks on 2 cores reached it up to a minute
		// apart), so Init's deadline (Options.InitTimeout), the
		// caller's context and Options.Timeout bound it, not the stall
		// timeout.
		c.stallDog.Reset(c.stallStep)
		return
	}
	if left <= 0 {
		c.stallArmed.Store(false)
		c.lifeCancel(&stallError{d: c.opts.StallTimeout})
		return
	}
	c.stallDog.Reset(min(c.stallStep, left))
	// Poke at 1, 2, 4, 8... steps.
	if steps := int64(idle / c.stallStep); steps&(steps-1) == 0 {
		c.poke.Load().cancel(errPoke)
	}
}

// watchdogTick runs when the watchdog fires: with no timed call running
// it stops (the next call arms it); else it ends the communicator's life
// if the call has run for Options.Timeout, or waits for the rest.
func (c *Comm) watchdogTick() {
	c.dogArmed.Store(false)
	if !c.timedRunning() || !c.dogArmed.CompareAndSwap(false, true) {
		return
	}
	limit := c.callTimeout()
	left := limit - time.Duration(mono()-int64(c.started.Load()))
	if left <= 0 {
		c.dogArmed.Store(false)
		c.lifeCancel(&timeoutError{d: limit})
		return
	}
	c.watchdog.Reset(left)
}

// armClocks arms the watchdog and the stall clock for the timed call
// that started (timedNo, started, lastProgress set, then callNo), each
// unless it is pending: then it fires when it was set to and looks at
// this call (watchdogTick, stallTick).
func (c *Comm) armClocks() {
	if !c.dogArmed.Load() && c.dogArmed.CompareAndSwap(false, true) {
		c.watchdog.Reset(c.callTimeout())
	}
	c.armStallClock()
}

// callTimeout bounds a collective: Options.Timeout, except in the
// measurement at New, whose calls (up to 1 MiB, on links set up as they
// go) are the library's own, not the ones the user's bound is meant for:
// GOCCL_TIMEOUT=20ms failed Init on this VM, "rank 0 is at the root of a
// stall", where the user's 4 MiB allreduce would have told the truth. They
// get the stall timeout if that is longer.
func (c *Comm) callTimeout() time.Duration {
	if c.tuning.Load() {
		return max(c.opts.Timeout, c.opts.StallTimeout)
	}
	return c.opts.Timeout
}

// stopClocks stops both clocks (Close: a pending one would keep the
// communicator reachable until it fired).
func (c *Comm) stopClocks() {
	c.watchdog.Stop()
	c.stallDog.Stop()
}

// lookWait bounds one look-around of a stalled run.
const lookWait = 500 * time.Millisecond

// onStall is the executor's Stalled hook: see the top of this file.
func (c *Comm) onStall(ctx context.Context, call *collectives.Call) (context.Context, error) {
	cause := context.Cause(ctx)
	if cause != errPoke && cause != errHoist {
		return nil, nil // the run's end: let it fail
	}
	if c.life.Err() != nil {
		return c.life, nil // ended meanwhile: the next wait fails with the cause
	}
	next := c.renewPoke()
	if c.recvWaits.Load() && c.linkHoistable(c.waitingRecv) {
		// Sends queued behind this Recv go first (hoist.go).
		return next.ctx, collectives.ErrYield
	}
	if cause == errHoist {
		return next.ctx, nil
	}
	if c.stallElapsed.Load() == 0 || c.tuning.Load() {
		// A late poke: the run moved on since. Or the measurement at New,
		// whose calls share their numbers with the first calls of ranks
		// that finished it: nothing to compare.
		return next.ctx, nil
	}
	st := c.snapshot(call)
	kv := kvOf(c.rdv)
	// The look-around holds up the run's completions: not so close to the
	// stall timeout that it could make the run miss it.
	left := c.opts.StallTimeout - time.Duration(c.stallElapsed.Load())
	if kv == nil || len(st.waiting) == 0 || left < lookWait+200*time.Millisecond {
		return next.ctx, nil
	}
	lctx, cancel := context.WithTimeout(c.life, lookWait)
	defer cancel()
	qctx, qcancel := context.WithTimeout(lctx, queryWait)
	answers := c.query(qctx, kv, st.waiting)
	qcancel()
	var again []int
	for _, w := range st.waiting {
		if a, ok := answers[w]; ok && a.running && !a.stalled && !a.failed {
			again = append(again, w) // probably about to look around too
		}
	}
	if len(again) > 0 {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-lctx.Done():
		}
		for w, a := range c.query(lctx, kv, again) {
			answers[w] = a
		}
	}
	var silent []int
	for _, w := range st.waiting {
		a, ok := answers[w]
		if !ok {
			silent = append(silent, w)
			continue
		}
		if err := c.compare(st, w, a); err != nil {
			return nil, err
		}
		if err := c.passed(st, w, a); err != nil {
			return nil, err
		}
	}
	if len(silent) > 0 {
		// A rank that answers no more may have failed on finding this
		// rank in another call before it could tell this rank (its link
		// set-up's grace ended first): its report says so, at once
		// rather than at this rank's timeout.
		for w, rep := range c.readReports(kv, silent, silentLook) {
			if d := c.mismatchReported(st, w, rep); d != nil {
				return nil, d
			}
		}
	}
	if err := c.p2pCycle(lctx, kv, st, answers); err != nil {
		return nil, err
	}
	return next.ctx, nil
}

// p2pCycle finds point-to-point calls that cannot meet around a cycle of
// three or more ranks (compareP2P finds a pair): this rank stalled in a
// receive (or a send) from the rank it waits on, which is stalled in a
// receive from the next, and so on back to this rank, each alive, past
// passedAfter, with nothing unpolled or being linked. None of them can
// reach the call its predecessor waits for (calls run one at a time, in
// order): MPI's ring of an Irecv from the left before a Send to the right
// on every rank. Before, such a ring waited until the stall timeout (a
// minute by default), which named the cycle then; a pair of ranks was
// found after the stall step. answers holds what the ranks this rank
// waits on answered; the others of the cycle are asked here.
func (c *Comm) p2pCycle(ctx context.Context, kv keyValue, st rankState, answers map[int]rankState) error {
	dir := p2pDirection(st.call)
	if !st.p2p || dir == "" || len(st.waiting) != 1 || time.Duration(c.stallElapsed.Load()) < c.passedAfter || c.stale() {
		return nil
	}
	cycle := []int{c.rank}
	calls := []string{st.call}
	for w := st.waiting[0]; len(cycle) <= c.size; {
		if w == c.rank {
			if len(cycle) < 3 {
				return nil // a pair: compareP2P's
			}
			return &cannotMeetCycle{Ranks: cycle, Calls: calls, Dir: dir}
		}
		if slices.Contains(cycle, w) {
			return nil // a cycle that this rank only leads to: its ranks find it
		}
		a, ok := answers[w]
		if !ok {
			got := c.query(ctx, kv, []int{w})
			if a, ok = got[w]; !ok {
				return nil
			}
			answers[w] = a
		}
		if !a.running || a.failed || !a.stalled || !a.p2p || a.unpolled || a.linking || len(a.waiting) != 1 || p2pDirection(a.call) != dir {
			return nil
		}
		cycle, calls = append(cycle, w), append(calls, a.call)
		w = a.waiting[0]
	}
	return nil
}

// cannotMeetCycle is p2pCycle's finding: Ranks[i] waits in Calls[i] for
// Ranks[i+1], the last for the first.
type cannotMeetCycle struct {
	Ranks []int
	Calls []string
	Dir   string
}

func (e *cannotMeetCycle) Error() string {
	var b strings.Builder
	sorted := slices.Sorted(slices.Values(e.Ranks))
	fmt.Fprintf(&b, "%s are alive and wait on one another in point-to-point calls that cannot meet: ", collectives.RankList(sorted))
	for i, r := range e.Ranks {
		if i > 0 {
			b.WriteString(", which ")
		} else {
			fmt.Fprintf(&b, "rank %d ", r)
		}
		fmt.Fprintf(&b, "waits in %s for rank %d", e.Calls[i], e.Ranks[(i+1)%len(e.Ranks)])
	}
	what := "receives that each wait for a rank that receives too"
	if e.Dir == "send" {
		what = "sends that each wait for a rank that sends too"
	}
	fmt.Fprintf(&b, " (%s; calls run one at a time, in order: SendRecv exchanges, or sends queued before the receives)", what)
	return b.String()
}

// passed finds the disagreement of a peer that this rank, stalled in its
// call, waits on, and that has started a later collective: had their
// calls agreed, the peer could not have completed this one without this
// rank (its half of a link, data this rank sends it, or data it sends:
// posted before it went on, here long ago). The usual cause is a rooted
// call that a rank which only sent completed once sent (Call.Eager),
// taking another rank for the root. Only after a stall (a second without
// progress): a peer's last data or link set-up may be a moment behind.
func (c *Comm) passed(st rankState, w int, a rankState) error {
	if !a.running || a.failed || st.p2p || a.p2p || a.seq <= st.seq {
		return nil
	}
	if a.settled < st.seq || c.stale() {
		// What it sent in this call may still be on its way (an inline
		// send is done once the transport took it), or be among the
		// completions this rank has not taken yet: not known to be lost.
		return nil
	}
	if time.Duration(c.stallElapsed.Load()) < c.passedAfter {
		return nil // nor, in a crowd, its link set-up (passedAfter)
	}
	return &disagreement{Rank: c.rank, Peer: w, Call: st.call, Seq: st.seq, PeerCall: a.call, PeerSeq: a.seq, PeerFP: a.fp, OwnFP: st.fp, Passed: true}
}

// mismatchReported returns the disagreement that rank w's report rep
// states with this rank (own: its state in the call that waits on w): w
// found this rank in another call (as a link set-up looks: lazy.go) and
// failed before it could tell this rank over their link. nil otherwise.
func (c *Comm) mismatchReported(own rankState, w int, rep report) *disagreement {
	if rep.reason != collectives.NoticeMismatch || rep.root != c.rank || rep.call == "" || rep.cause == "" {
		return nil
	}
	return &disagreement{Rank: c.rank, Peer: w, Call: own.call, Seq: own.seq, PeerCall: rep.call, PeerSeq: rep.seq, Found: rep.cause}
}

// silentLook bounds a stall look's read of the reports of the ranks it
// waits on that did not answer (a stopped or dead rank has none).
const silentLook = 20 * time.Millisecond

// passedAfter is how long a run of one of local ranks on a host of cpus
// processors must have been stalled (step: the stall step) before a peer
// that went on to a later collective counts as a disagreement (passed). A
// peer completes a call once its last messages are posted, not delivered
// (an inline send is done when the transport took it; a link it dialled
// is up on its side before this rank's set-up has seen it), and with
// many more ranks than processors the goroutine or process that delivers
// them may not run for seconds: 512 ranks on 2 cores in one process over
// the in-memory transport took a correct count-0 all-to-all, whose
// dissemination message was still queued at its sender's endpoint, for a
// mismatch after the first second (1 run in 2). So the wait grows with the
// ranks per processor: one step up to 4 per processor, as before (the
// tests of disagreements run there), then a step for every 4 more (512
// ranks on 2 cores: 64 s, past the default stall timeout, whose error
// then ends the run instead, naming the rank at its root).
func passedAfter(step time.Duration, local, cpus int) time.Duration {
	per := 4 * max(1, cpus)
	return step * time.Duration(max(1, (local+per-1)/per))
}

// disagreement is what the stall diagnosis found: this rank and Peer wait
// on each other in different calls.
type disagreement struct {
	Rank, Peer    int
	Call          string
	Seq           uint32
	PeerCall      string
	PeerSeq       uint32
	PeerFP, OwnFP uint16
	// Passed: the peer went on to a later collective (see passed).
	Passed bool
	// Found: what the peer reported when it found the ranks' calls differ
	// and failed (its report: it answers no more), PeerCall its call.
	Found string
}

func (d *disagreement) Error() string {
	if d.Found != "" {
		return fmt.Sprintf("collective mismatch: rank %d, in %s, found that it and rank %d called different collectives while rank %d waits on it in %s: %s",
			d.Peer, d.PeerCall, d.Rank, d.Rank, d.Call, d.Found)
	}
	if d.Passed {
		next := d.PeerCall // known only if the peer is stalled there
		if next == "" {
			next = fmt.Sprintf("collective #%d", d.PeerSeq)
		}
		return fmt.Sprintf("collective mismatch: rank %d went on to %s while rank %d waits on it in %s: rank %d completed collective #%d without what this call needs from it (a rooted call with another root, another collective, or other counts)",
			d.Peer, next, d.Rank, d.Call, d.Peer, d.Seq)
	}
	if d.PeerCall == "" {
		return fmt.Sprintf("rank %d is in a different call #%d (fingerprint %#04x) while rank %d waits on it in %s (fingerprint %#04x)", d.Peer, d.PeerSeq, d.PeerFP, d.Rank, d.Call, d.OwnFP)
	}
	return fmt.Sprintf("rank %d is stalled in %s while rank %d waits on it in %s", d.Peer, d.PeerCall, d.Rank, d.Call)
}

// compare finds a difference between this rank's stalled call and the
// state of rank w, which it waits on.
func (c *Comm) compare(st rankState, w int, a rankState) error {
	if !a.running || a.failed {
		return nil
	}
	if st.p2p || a.p2p {
		return c.compareP2P(st, w, a)
	}
	d := &disagreement{Rank: c.rank, Peer: w, Call: st.call, Seq: st.seq, PeerCall: a.call, PeerSeq: a.seq, PeerFP: a.fp, OwnFP: st.fp}
	switch {
	case a.seq == st.seq && a.fp != 0 && a.fp != st.fp:
		// The same collective number, a different call (a rank that is
		// not stalled answers with its call's fingerprint once its plan
		// is made).
		return d
	case a.stalled && a.seq != st.seq && slices.Contains(a.waiting, c.rank):
		// Different collective numbers, waiting on each other: unless the
		// one ahead may still have a message of the other's call on its
		// way (see passed), which the one behind waits for.
		// Nor if the one behind has completions it has not taken: what
		// it waits for may be among them (see unpolled). Nor before
		// passedAfter, as for passed: with many ranks per processor what
		// a rank answers lags what its transport did by seconds (512
		// ranks on 2 cores: a tree's parent and child, two binomial
		// reduces apart, each found the other stalled waiting on it), and
		// a link set-up the one ahead has up on its side may not be seen
		// yet by the one behind (see passed). When this rank is the one
		// ahead and has the link the one behind sets up, not at all: the
		// pair set it up together (lazy.go), in the call the one behind
		// is in (512 ranks on 2 cores: set-ups of a tree's links took
		// minutes).
		if time.Duration(c.stallElapsed.Load()) < c.passedAfter {
			return nil
		}
		if a.seq > st.seq && (a.settled < st.seq || c.stale()) ||
			a.seq < st.seq && (c.settled() < a.seq || a.unpolled || a.linking && c.linked(w)) {
			return nil
		}
		return d
	}
	return nil
}

// compareP2P finds point-to-point calls that cannot meet: this rank and
// rank w, which it waits on, each stalled in a receive from the other (or
// each in a send to the other past what its staging holds). Calls run one
// at a time, in order, so neither reaches the call the other waits for:
// before, they waited until the stall timeout and then took the link
// between them for stalled. A send facing a receive is the pair that
// should meet: left to the stall timeout (a link that lost their data).
// Only once both are stalled, past passedAfter, with nothing unpolled on
// either side (what one waits for may be among it).
func (c *Comm) compareP2P(st rankState, w int, a rankState) error {
	if !st.p2p || !a.p2p || !a.stalled || !slices.Contains(st.waiting, w) || !slices.Contains(a.waiting, c.rank) ||
		time.Duration(c.stallElapsed.Load()) < c.passedAfter || a.unpolled || a.linking || c.stale() {
		return nil
	}
	dir := p2pDirection(st.call)
	if dir == "" || dir != p2pDirection(a.call) {
		return nil
	}
	return &cannotMeet{Rank: c.rank, Peer: w, Call: st.call, PeerCall: a.call, Dir: dir}
}

// p2pDirection is "send" or "recv" for a point-to-point call's name
// (callName), "" for others (a sendrecv).
func p2pDirection(call string) string {
	for _, d := range []string{"send", "recv"} {
		if strings.HasPrefix(call, d+"(") {
			return d
		}
	}
	return ""
}

// cannotMeet is compareP2P's finding.
type cannotMeet struct {
	Rank, Peer     int
	Call, PeerCall string
	Dir            string
}

func (e *cannotMeet) Error() string {
	what := "receives that each wait for the other's send"
	if e.Dir == "send" {
		what = "sends that each wait for the other to receive"
	}
	return fmt.Sprintf("point-to-point calls that cannot meet: rank %d waits in %s for rank %d, which waits in %s for rank %d (%s; calls run one at a time, in order: SendRecv exchanges)",
		e.Rank, e.Call, e.Peer, e.PeerCall, e.Rank, what)
}

// linked reports whether this rank has a link to peer (on the goroutine
// that runs the calls).
func (c *Comm) linked(peer int) bool { return peer >= 0 && peer < len(c.links) && c.links[peer] != nil }

// waitingOn lists the ranks call waits on: while this rank sets up links,
// the peers whose set-up it waits for (lazy.go); else those the executor
// names.
func (c *Comm) waitingOn(call *collectives.Call) []int {
	if len(c.connecting) > 0 {
		return slices.Clone(c.connecting)
	}
	return c.exec.Waiting(call)
}

// noRoot is failRoot while the communicator has not failed.
const noRoot = -2

// blameStall finds the rank at the root of a stall that ended call: it
// follows the ranks that wait on one another, from the ones this rank
// waits on, to the first that does not answer (stopped, hung or
// unreachable), is in no collective, or is not stalled; a rank stalled in
// a different call is a mismatch (returned as an error). It returns -1 if
// every rank answers and waits on another.
func (c *Comm) blameStall(call *collectives.Call) (int, string, error) {
	frontier := c.waitingOn(call)
	if len(frontier) == 0 {
		return -1, "this rank waits on nobody", nil
	}
	kv := kvOf(c.rdv)
	if kv == nil {
		return -1, "", nil
	}
	c.snapshot(call) // for the ranks that follow the chain through this one
	ctx, cancel := context.WithTimeout(context.Background(), blameWait)
	defer cancel()
	seen := map[int]bool{c.rank: true}
	own := rankState{seq: c.seq, call: c.callName(call), fp: call.Fingerprint(), p2p: call.P2P, waiting: frontier, linking: len(c.connecting) > 0}
	states := map[int]rankState{c.rank: own}
	var cycle, failedPeers []int
	for len(frontier) > 0 {
		qctx, qcancel := context.WithTimeout(ctx, queryWait)
		answers := c.query(qctx, kv, frontier)
		qcancel()
		var next []int
		for _, w := range frontier {
			seen[w] = true
			a, ok := answers[w]
			switch {
			case !ok:
				// A rank that failed and closed answers no more, but its
				// report says why (a rank that gave up its call while it
				// dialled this one, which waited for the connection).
				if rep, ok := c.readReports(kv, []int{w}, queryWait)[w]; ok && rep.cause != "" {
					if d := c.mismatchReported(own, w, rep); d != nil {
						return -1, "", d // a mismatch, not a stall with this rank at its root
					}
					if rep.root >= 0 && rep.root < c.size && rep.root != w {
						return rep.root, fmt.Sprintf("rank %d failed and found rank %d at the root: %s", w, rep.root, rep.cause), nil
					}
					return w, fmt.Sprintf("rank %d failed and left: %s", w, rep.cause), nil
				}
				return w, fmt.Sprintf("rank %d does not answer (stopped, hung or unreachable)", w), nil
			case a.failed && a.root >= 0:
				return a.root, fmt.Sprintf("rank %d failed and found rank %d at the root", w, a.root), nil
			case a.failed:
				// Failed without a conclusion about a root: it may have
				// found the cycle this rank is part of, and its notice
				// tells the rest (see failedPeer).
				failedPeers = append(failedPeers, w)
				continue
			case !a.running:
				if a.elseCall != "" {
					return w, c.busyElsewhere(w, a), nil
				}
				return w, fmt.Sprintf("rank %d is alive but in no collective: it made %d collectives and has not called #%d", w, a.seq, c.seq), nil
			case !a.stalled:
				return w, fmt.Sprintf("rank %d is alive and running collective #%d but has not served this rank's %s", w, a.seq, c.callName(call)), nil
			}
			if err := c.compare(own, w, a); err != nil {
				return -1, "", err
			}
			cycle = append(cycle, w)
			states[w] = a
			for _, v := range a.waiting {
				if !seen[v] && !slices.Contains(next, v) {
					next = append(next, v)
				}
			}
		}
		frontier = next
	}
	if len(failedPeers) > 0 {
		slices.Sort(failedPeers)
		if why, ok := c.failedPeer(kv, failedPeers); !ok || why != "" {
			return -1, why, nil
		}
		if len(cycle) == 0 {
			return -1, fmt.Sprintf("%s, which this rank waits on, failed", collectives.RankList(failedPeers)), nil
		}
	}
	// Ranks that wait on one another, all alive: point-to-point calls
	// that cannot meet (each receives from a rank that receives too, or
	// sends to one that sends), or else the links between them.
	cycle = append(cycle, c.rank)
	slices.Sort(cycle)
	meet := cannotMeetAll(states)
	for x, sx := range states {
		for _, y := range sx.waiting {
			if sy, ok := states[y]; ok && x < y && slices.Contains(sy.waiting, x) {
				if meet != "" {
					return -1, fmt.Sprintf("ranks %d and %d are alive and wait on each other in point-to-point calls that cannot meet (%s; calls run one at a time, in order: SendRecv exchanges)", x, y, meet), nil
				}
				return -1, fmt.Sprintf("ranks %d and %d are alive and wait on each other: the link between them is stalled", x, y), nil
			}
		}
	}
	if meet != "" {
		return -1, fmt.Sprintf("%s are alive and wait on one another in point-to-point calls that cannot meet (%s; calls run one at a time, in order: SendRecv exchanges)", collectives.RankList(cycle), meet), nil
	}
	return -1, fmt.Sprintf("%s answer and wait on one another: the links between them are stalled", collectives.RankList(cycle)), nil
}

// busyElsewhere says where rank w is, which this rank waits on and which is
// in no call of this communicator but in a, a call of another
// communicator of its family (rankState.elseCall): when that call waits
// on this rank's process, the two wait on each other, each in a call of
// a communicator the other has not called yet.
func (c *Comm) busyElsewhere(w int, a rankState) string {
	s := fmt.Sprintf("rank %d is alive but in no collective of this communicator (it made %d and has not called #%d): it is in %s", w, a.seq, c.seq, a.elseCall)
	if len(a.elseWaiting) == 0 {
		return s
	}
	s += ", which waits on world " + collectives.RankList(a.elseWaiting)
	if me := c.worldRank(c.rank); slices.Contains(a.elseWaiting, me) {
		s += fmt.Sprintf(" (this rank, world rank %d, waits in this call): the ranks called collectives of different communicators in different orders and wait on each other, a deadlock under MPI or NCCL too: call them in the same order on every rank, or from separate goroutines", me)
	}
	return s
}

// busyElsewhereNow asks rank w, which waits for no rank on the board,
// where it is: busyElsewhere's words if it is in a call of another
// communicator of its family and in none of this one, else "".
func (c *Comm) busyElsewhereNow(w int) string {
	kv := kvOf(c.rdv)
	if kv == nil || w == c.rank {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryWait)
	defer cancel()
	if a, ok := c.query(ctx, kv, []int{w})[w]; ok && !a.running && !a.failed && a.elseCall != "" {
		return c.busyElsewhere(w, a)
	}
	return ""
}

// failedPeer waits for the notice of a rank among peers, which this
// rank's stall search found failed without a conclusion about a root: a
// rank that found the cycle this one is in (ranks that wait on one another
// in receives) fails naming no root and tells its peers, but its state
// answers before its notice arrives, and the cycle without it is not the
// cycle (a ring of 3 receives was reported as "rank 2 are alive and wait
// on one another", 1 run in 40). It returns ok false once a notice came
// (the caller takes its word); else, after notifyWait, what the first
// peer's report says, "" if none has one.
func (c *Comm) failedPeer(kv keyValue, peers []int) (string, bool) {
	deadline := time.Now().Add(notifyWait)
	for {
		c.exec.Absorb()
		if _, _, ok := c.noticeFrom(); ok {
			return "", false
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	reps := c.readReports(kv, peers, queryWait)
	for _, w := range peers {
		if rep, ok := reps[w]; ok && rep.cause != "" {
			return fmt.Sprintf("rank %d, which this rank waits on, failed: %s", w, rep.cause), true
		}
	}
	return "", true
}

// cannotMeetAll says what the stalled calls of states have in common if
// they are all point-to-point calls of one direction ("receives that each
// wait for a rank that receives too"), "" otherwise.
func cannotMeetAll(states map[int]rankState) string {
	dir := ""
	for _, s := range states {
		d := p2pDirection(s.call)
		if !s.p2p || d == "" || dir != "" && d != dir {
			return ""
		}
		dir = d
	}
	if dir == "send" {
		return "sends that each wait for a rank that sends too"
	}
	return "receives that each wait for a rank that receives too"
}
