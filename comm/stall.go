package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// collective), and a difference of calls is an error at once. A rank that
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

func (c *Comm) renewPoke() *poke {
	ctx, cancel := context.WithCancelCause(c.life)
	p := &poke{ctx: ctx, cancel: cancel}
	c.poke.Store(p)
	return p
}

// callCtx is the context a run goes on under.
func (c *Comm) callCtx() context.Context { return c.poke.Load().ctx }

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

// armStall restarts the stall clock: at the start of a run and whenever
// completions arrive.
func (c *Comm) armStall() {
	c.stallElapsed.Store(0)
	c.stallArmed.Store(int64(c.stallStep))
	c.stallDog.Reset(c.stallStep)
}

// stallTick runs when a run has seen no completion for another step.
func (c *Comm) stallTick() {
	elapsed := time.Duration(c.stallElapsed.Add(c.stallArmed.Load()))
	left := c.opts.StallTimeout - elapsed
	if left <= 0 {
		c.lifeCancel(&stallError{d: c.opts.StallTimeout})
		return
	}
	next := min(c.stallStep, left)
	c.stallArmed.Store(int64(next))
	c.stallDog.Reset(next)
	// Poke at 1, 2, 4, 8... steps.
	if steps := int64(elapsed / c.stallStep); steps&(steps-1) == 0 {
		c.poke.Load().cancel(errPoke)
	}
}

// lookWait bounds one look-around of a stalled run.
const lookWait = 500 * time.Millisecond

// onStall is the executor's Stalled hook: see the top of this file.
func (c *Comm) onStall(ctx context.Context, call *collectives.Call) (context.Context, error) {
	if context.Cause(ctx) != errPoke {
		return nil, nil // the run's end: let it fail
	}
	if c.life.Err() != nil {
		return c.life, nil // ended meanwhile: the next wait fails with the cause
	}
	next := c.renewPoke()
	if c.stallElapsed.Load() == 0 {
		return next.ctx, nil // a late poke: the run moved on since
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
	for _, w := range st.waiting {
		if a, ok := answers[w]; ok {
			if err := c.compare(st, w, a); err != nil {
				return nil, err
			}
		}
	}
	return next.ctx, nil
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
}

func (d *disagreement) Error() string {
	return fmt.Sprintf("rank %d is in %s and rank %d in %s, and they wait on each other", d.Peer, d.PeerCall, d.Rank, d.Call)
}

// compare finds a difference between this rank's stalled call and the
// state of rank w, which it waits on.
func (c *Comm) compare(st rankState, w int, a rankState) error {
	if !a.running || !a.stalled || a.failed || st.p2p || a.p2p {
		return nil
	}
	d := &disagreement{Rank: c.rank, Peer: w, Call: st.call, Seq: st.seq, PeerCall: a.call, PeerSeq: a.seq, PeerFP: a.fp, OwnFP: st.fp}
	switch {
	case a.seq == st.seq && a.fp != st.fp:
		return d // the same collective number, a different call
	case a.seq != st.seq && slices.Contains(a.waiting, c.rank):
		return d // different collective numbers, waiting on each other
	}
	return nil
}

// rankState is what a rank answers about itself.
type rankState struct {
	seq     uint32 // collectives started
	running bool   // in a call
	failed  bool   // the communicator failed; root is the rank it blamed
	root    int
	stalled bool   // the call below has had no progress for a while
	call    string // e.g. "broadcast(float32, 8, root=1) #5"
	fp      uint16
	p2p     bool
	waiting []int // the ranks the stalled call waits on
}

func (s rankState) encode() []byte {
	w := make([]string, len(s.waiting))
	for i, r := range s.waiting {
		w[i] = strconv.Itoa(r)
	}
	return fmt.Appendf(nil, "%d %t %t %d %t %t %d\n%s\n%s", s.seq, s.running, s.stalled, s.fp, s.p2p, s.failed, s.root, strings.Join(w, ","), s.call)
}

func decodeState(b []byte) (rankState, bool) {
	var s rankState
	parts := strings.SplitN(string(b), "\n", 3)
	if len(parts) != 3 {
		return s, false
	}
	f := strings.Fields(parts[0])
	if len(f) != 7 {
		return s, false
	}
	seq, err1 := strconv.ParseUint(f[0], 10, 32)
	run, err2 := strconv.ParseBool(f[1])
	stalled, err3 := strconv.ParseBool(f[2])
	fp, err4 := strconv.ParseUint(f[3], 10, 16)
	p2p, err5 := strconv.ParseBool(f[4])
	failed, err6 := strconv.ParseBool(f[5])
	root, err7 := strconv.Atoi(f[6])
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return s, false
	}
	s = rankState{seq: uint32(seq), running: run, stalled: stalled, fp: uint16(fp), p2p: p2p, failed: failed, root: root, call: parts[2]}
	if parts[1] != "" {
		for _, x := range strings.Split(parts[1], ",") {
			r, err := strconv.Atoi(x)
			if err != nil || r < 0 {
				return rankState{}, false
			}
			s.waiting = append(s.waiting, r)
		}
	}
	return s, true
}

// snapshot records the state of the stalled run for the ranks that ask.
func (c *Comm) snapshot(call *collectives.Call) rankState {
	st := rankState{seq: c.seq, running: true, stalled: true, call: c.callName(call),
		fp: call.Fingerprint(), p2p: call.P2P, waiting: c.exec.Waiting(call)}
	c.diagMu.Lock()
	c.snap, c.snapCall = st, c.callNo.Load()
	c.diagMu.Unlock()
	return st
}

// stateNow is this rank's answer.
func (c *Comm) stateNow() rankState {
	n := c.callNo.Load()
	st := rankState{seq: c.seqNow.Load(), running: n%2 == 1, root: -1}
	if r := c.failRoot.Load(); r != noRoot {
		st.failed, st.root = true, int(r)
		return st
	}
	if !st.running || c.stallElapsed.Load() == 0 {
		return st
	}
	c.diagMu.Lock()
	defer c.diagMu.Unlock()
	if c.snapCall == n {
		return c.snap
	}
	return st
}

// callName names a call with its number, e.g. "allreduce(float32, 8, sum)
// #3" or, point to point, "send(float32, 8) tag 5 after collective #3".
func (c *Comm) callName(call *collectives.Call) string {
	if call.P2P {
		return fmt.Sprintf("%s tag %d after collective #%d", call.Desc(), call.Seq, c.seq)
	}
	return fmt.Sprintf("%s #%d", call.Desc(), call.Seq)
}

// The question protocol, per rank r, in the store under diagKey(r, ...):
// the rank's responder sets "next" to k and waits for "q/k"; a rank that
// asks reads k, sets "q/k" and reads "a/k", which the responder sets to its
// state before it moves on to k+1. Concurrent askers share an answer.

func (c *Comm) diagKey(rank int, what string) string {
	return "goccl/" + c.id + "/diag/" + strconv.Itoa(rank) + "/" + what
}

// respond answers questions about this rank until ctx ends.
func (c *Comm) respond(ctx context.Context, kv keyValue) {
	defer close(c.respDone)
	for k := 1; ctx.Err() == nil; k++ {
		n := strconv.Itoa(k)
		if kv.Set(ctx, c.diagKey(c.rank, "next"), []byte(n)) != nil {
			return
		}
		if _, err := kv.Get(ctx, c.diagKey(c.rank, "q/"+n)); err != nil {
			return
		}
		if kv.Set(ctx, c.diagKey(c.rank, "a/"+n), c.stateNow().encode()) != nil {
			return
		}
	}
}

// query asks the ranks for their state, concurrently, until ctx ends; a
// rank that does not answer in time is missing from the result.
func (c *Comm) query(ctx context.Context, kv keyValue, ranks []int) map[int]rankState {
	var mu sync.Mutex
	out := map[int]rankState{}
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := kv.Get(ctx, c.diagKey(r, "next"))
			if err != nil {
				return
			}
			if kv.Set(ctx, c.diagKey(r, "q/"+string(k)), []byte{1}) != nil {
				return
			}
			v, err := kv.Get(ctx, c.diagKey(r, "a/"+string(k)))
			if err != nil {
				return
			}
			if s, ok := decodeState(v); ok {
				mu.Lock()
				out[r] = s
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
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
	frontier := c.exec.Waiting(call)
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
	own := rankState{seq: c.seq, call: c.callName(call), fp: call.Fingerprint(), p2p: call.P2P, waiting: frontier}
	states := map[int]rankState{c.rank: own}
	var cycle []int
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
				return w, fmt.Sprintf("rank %d does not answer (stopped, hung or unreachable)", w), nil
			case a.failed && a.root >= 0:
				return a.root, fmt.Sprintf("rank %d failed and found rank %d at the root", w, a.root), nil
			case a.failed:
				continue // failed without a conclusion: its notice tells the rest
			case !a.running:
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
	// Two ranks that wait on each other, both alive: the link between them.
	for x, sx := range states {
		for _, y := range sx.waiting {
			if sy, ok := states[y]; ok && x < y && slices.Contains(sy.waiting, x) {
				return -1, fmt.Sprintf("ranks %d and %d are alive and wait on each other: the link between them is stalled", x, y), nil
			}
		}
	}
	return -1, fmt.Sprintf("ranks %v answer and wait on one another: the links between them are stalled", cycle), nil
}
