package comm

import (
	"context"
	"sync/atomic"
	"time"
)

// lifetime is how a communicator ends: the life context that every
// collective runs under, the watchdog of Options.Timeout, and what is
// known of the failure once there is one.
//
// life is cancelled, with the cause, by Abort, by the watchdog when a
// collective outlives Options.Timeout, by the stall timer, when a
// caller's context ends during its collective, by a failed board wait,
// and by Close (ErrClosed); the first cause stays. Any goroutine may read
// it or cancel it. watchdog is armed by whichever goroutine runs a
// request (one at a time, see callQueue) when it is not pending, and
// fires on a timer goroutine (Comm.watchdogTick). aborted is set by Abort
// under the communicator's mu and read by Close and the failure reports.
// failRoot (atomic) is the rank a failure was blamed on, noRoot before:
// the running call writes it when it fails, the responder goroutine reads
// it (answer.go).
type lifetime struct {
	life       context.Context
	lifeCancel context.CancelCauseFunc
	watchdog   *time.Timer
	// dogArmed: the watchdog is pending (see Comm.armClocks).
	dogArmed atomic.Bool
	aborted  atomic.Bool
	failRoot atomic.Int64
	caller   callerWatch
}

// startLife starts the communicator's life and its watchdog, which
// starts disarmed. Armed with watchdog.Reset, it calls tick (a
// communicator's: Comm.watchdogTick, which looks at the call running
// then); with tick nil it ends the life with a *timeoutError naming
// timeout.
func (l *lifetime) startLife(timeout time.Duration, tick func()) {
	l.life, l.lifeCancel = context.WithCancelCause(context.Background())
	l.failRoot.Store(noRoot)
	if tick == nil {
		tick = func() { l.lifeCancel(&timeoutError{d: timeout}) }
	}
	l.watchdog = time.AfterFunc(time.Hour, tick)
	l.watchdog.Stop()
}

// failedRoot returns the rank a failure was blamed on (-1: failed without
// a conclusion) and whether the communicator failed at all.
func (l *lifetime) failedRoot() (int, bool) {
	r := l.failRoot.Load()
	return int(r), r != noRoot
}

// callerWatch ends the communicator's life when the context of the call
// that runs is cancelled, without a registration per call: a
// context.AfterFunc costs two allocations and ~230 ns, and a program
// usually passes the same context (its main one, often a signal.
// NotifyContext) to every call. The registration is made for a context the
// first time a call runs under it and kept while the calls keep using it;
// its callback acts only while a call under that context runs (running),
// so a context cancelled between calls breaks nothing (the next call under
// it fails before it starts, see Comm.run). Owned by whichever goroutine
// runs requests; stopped by Close.
type callerWatch struct {
	// done is the watched context's Done channel: the registration's
	// key (contexts that share it end together, and channels always
	// compare, where a Context value of a non-comparable type would
	// panic in ==).
	done <-chan struct{}
	stop func() bool
	gen  uint32 // the registration's number
	// running: while a call runs, its registration's number (high 32
	// bits) and its kind plus one; 0 between calls. A callback acts only
	// if the running call is under its own context: the callback of a
	// context replaced since may run late (it runs on a goroutine of its
	// own, after the next call under another context began).
	running atomic.Uint64
	// onEnd is what the callback calls: set once, at New (a method value
	// made per call would be an allocation per call).
	onEnd func(kind collKind, cause error)
}

// watch arranges for onEnd to be called if ctx ends while a call runs
// under it, and marks kind as running; unwatch marks its end. The caller
// has checked ctx.Err() after watch returned: a cancellation before that
// check is the caller's to handle, one after it finds running set.
func (w *callerWatch) watch(ctx context.Context, kind collKind) {
	if done := ctx.Done(); w.done != done {
		w.unregister()
		w.gen++
		w.done = done
		gen := w.gen
		w.stop = context.AfterFunc(ctx, func() {
			if v := w.running.Load(); v != 0 && uint32(v>>32) == gen {
				w.onEnd(collKind(uint32(v)-1), context.Cause(ctx))
			}
		})
	}
	w.running.Store(uint64(w.gen)<<32 | uint64(kind) + 1)
}

func (w *callerWatch) unwatch() { w.running.Store(0) }

// unregister drops the registration (at Close, or for another context).
func (w *callerWatch) unregister() {
	if w.stop != nil {
		w.stop()
	}
	w.done, w.stop = nil, nil
}
