package comm

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// stallWatch is the stall diagnosis's state (stall.go, answer.go): the
// stall clock of the running call, the context it runs under (poke), and
// what the responder goroutine answers other ranks about this one.
//
// The stall clock: stallDog fires stallTick every stallStep (fixed at New)
// that a running collective sees no completion; whichever goroutine runs
// a request (one at a time, see callQueue) arms it when it is not pending
// (armClocks), and stallTick resets it on the timer's goroutine while a
// timed call runs, or leaves it, stallArmed false, when none does.
// timedNo (atomic) is the callNo of the last call run under the clocks
// (not the shared-memory board's), started (atomic, mono()) when it began:
// the clocks fire at most once a step (the watchdog once a timeout) across
// calls and look at the call running then, where a Reset and a Stop of
// each per call cost ~80 ns apiece and a clock read. lastProgress (atomic,
// mono()) is when the running call last saw completions or started,
// written by the run (progressed, the executor's OnProgress);
// stallElapsed (atomic) is the time without progress at the timer's last
// tick, 0 when not stalled. poke (atomic) is the context runs go on under:
// stallTick cancels it to make a stalled run look around, and the run
// replaces it (newPoke).
//
// The responder's view: callNo (atomic) counts runs started plus runs
// finished, odd while one runs; seqNow (atomic) is the worker's seq. The
// run writes both; the responder reads them. diagMu guards snap, the
// stalled run's state, and snapCall, the callNo when it was taken: the
// run records them (recordSnap), the responder reads them (stalledSnap).
// respCancel and respDone stop the responder and tell it has returned;
// set at New before it starts, used by teardown.
type stallWatch struct {
	stallDog  *time.Timer
	stallStep time.Duration
	// passedAfter: how long a run must have been stalled before a peer
	// that went on to a later collective counts as a disagreement (see
	// Comm.passed); set once the ranks' hosts are known.
	passedAfter time.Duration
	poke        atomic.Pointer[poke]
	// recvWaits: a Recv runs in the executor and yields to Sends queued
	// behind it (hoist.go): submit pokes it (errHoist) when one is.
	recvWaits    atomic.Bool
	relookArmed  atomic.Bool // a re-look at the queue is due (relookLater)
	relooks      int         // re-looks in a row for the waiting Recv (its goroutine's)
	stallElapsed atomic.Int64
	lastProgress atomic.Int64
	// boardStalledOn mirrors the board's bWaitOn of this rank (the rank plus
	// one that a board wait without progress for stallMark waits for, 0
	// if none), for the responders of the communicators of its family
	// (elsewhere), which must not read the board's memory: it goes with
	// its communicator's Close.
	boardStalledOn atomic.Int32
	stallArmed     atomic.Bool
	timedNo        atomic.Uint64
	started        atomic.Uint64

	callNo   atomic.Uint64
	seqNow   atomic.Uint32
	diagMu   sync.Mutex
	snap     rankState
	snapCall uint64
	snapAt   int64 // mono() when snap was taken

	respCancel context.CancelFunc
	respDone   chan struct{}
}

// startStall sets the stall step and the timer that calls tick; the
// timer starts disarmed (armClocks arms it).
func (s *stallWatch) startStall(step time.Duration, tick func()) {
	s.stallStep = step
	s.passedAfter = step
	s.stallDog = time.AfterFunc(time.Hour, tick)
	s.stallDog.Stop()
}

// newPoke makes a new context for runs to go on under, a child of parent
// (the communicator's life), and returns it.
func (s *stallWatch) newPoke(parent context.Context) *poke {
	ctx, cancel := context.WithCancelCause(parent)
	p := &poke{ctx: ctx, cancel: cancel}
	s.poke.Store(p)
	return p
}

// callCtx is the context a run goes on under.
func (s *stallWatch) callCtx() context.Context { return s.poke.Load().ctx }

// armStall restarts the stall clock of the running call: it counts from
// now (the timer, if pending, looks at that time when it fires).
func (s *stallWatch) armStall() {
	s.lastProgress.Store(mono())
	s.stallElapsed.Store(0)
	s.armStallClock()
}

// armStallClock arms the stall clock unless it is pending.
func (s *stallWatch) armStallClock() {
	if !s.stallArmed.Load() && s.stallArmed.CompareAndSwap(false, true) {
		s.stallDog.Reset(s.stallStep)
	}
}

// timedRunning reports whether a call run under the clocks runs now.
func (s *stallWatch) timedRunning() bool {
	n := s.callNo.Load()
	return n&1 == 1 && n == s.timedNo.Load()
}

// progressed notes that completions arrived (the executor's OnProgress):
// the stall clock counts from now. Restarting the timer itself on every
// completion cost a timer-heap update per message on the small-message
// path; the timer looks at this time when it fires.
func (s *stallWatch) progressed() { s.lastProgress.Store(mono()) }

// recordSnap records st as the state of the stalled run now running, for
// the ranks that ask.
func (s *stallWatch) recordSnap(st rankState) {
	s.diagMu.Lock()
	s.snap, s.snapCall, s.snapAt = st, s.callNo.Load(), mono()
	s.diagMu.Unlock()
}

// stalledSnap returns the recorded state of the stalled run number n (a
// callNo), if the running call is stalled and the snapshot is of it, and
// no completion came after it was taken: stallElapsed stays set until the
// stall timer's next tick, a step or (many ranks per processor) seconds
// after the run moved on, and the ranks the snapshot says it waits on may
// have delivered since (512 ranks on 2 cores: a rank ahead took a rank
// behind, which had taken its data since, for a sequence mismatch).
func (s *stallWatch) stalledSnap(n uint64) (rankState, bool) {
	if s.stallElapsed.Load() == 0 {
		return rankState{}, false
	}
	s.diagMu.Lock()
	defer s.diagMu.Unlock()
	if s.snapCall == n && s.lastProgress.Load() <= s.snapAt {
		return s.snap, true
	}
	return rankState{}, false
}

// stopResponder stops the responder goroutine, if one runs, and waits
// until it has returned.
func (s *stallWatch) stopResponder() {
	if s.respCancel != nil {
		s.respCancel()
		<-s.respDone
	}
}
