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
// it or cancel it. watchdog is armed and stopped by whichever goroutine
// runs a request (one at a time, see callQueue) and fires on a timer
// goroutine. aborted is set by Abort under the communicator's mu and read
// by Close and the failure reports. failRoot (atomic) is the rank a
// failure was blamed on, noRoot before: the running call writes it when
// it fails, the responder goroutine reads it (answer.go).
type lifetime struct {
	life       context.Context
	lifeCancel context.CancelCauseFunc
	watchdog   *time.Timer
	aborted    atomic.Bool
	failRoot   atomic.Int64
}

// startLife starts the communicator's life; the watchdog, armed with
// watchdog.Reset, ends it with a *timeoutError naming timeout. The
// watchdog starts disarmed.
func (l *lifetime) startLife(timeout time.Duration) {
	l.life, l.lifeCancel = context.WithCancelCause(context.Background())
	l.failRoot.Store(noRoot)
	l.watchdog = time.AfterFunc(time.Hour, func() {
		l.lifeCancel(&timeoutError{d: timeout})
	})
	l.watchdog.Stop()
}

// failedRoot returns the rank a failure was blamed on (-1: failed without
// a conclusion) and whether the communicator failed at all.
func (l *lifetime) failedRoot() (int, bool) {
	r := l.failRoot.Load()
	return int(r), r != noRoot
}
