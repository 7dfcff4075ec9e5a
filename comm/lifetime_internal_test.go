package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A new lifetime is alive, has no failure, and its watchdog is disarmed;
// armed, the watchdog ends the life with a timeout naming the
// communicator's timeout, and that first cause stays: a later Abort or
// Close does not replace it.
func TestLifetimeWatchdogFirstCauseWins(t *testing.T) {
	var l lifetime
	l.startLife(42*time.Millisecond, nil)
	defer l.lifeCancel(nil)
	_, failed := l.failedRoot()
	require.False(t, failed)
	require.NoError(t, l.life.Err())
	require.False(t, l.watchdog.Stop(), "the watchdog starts disarmed")

	l.watchdog.Reset(time.Millisecond)
	select {
	case <-l.life.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the armed watchdog did not end the life")
	}
	var te *timeoutError
	require.ErrorAs(t, context.Cause(l.life), &te)
	require.Equal(t, 42*time.Millisecond, te.d)

	l.lifeCancel(ErrAborted)
	l.lifeCancel(ErrClosed)
	require.ErrorAs(t, context.Cause(l.life), &te, "the first cause stays")
	require.False(t, errors.Is(context.Cause(l.life), ErrAborted))
}

// A cancel ends the life with its cause, the watchdog disarmed.
func TestLifetimeCancelCause(t *testing.T) {
	var l lifetime
	l.startLife(time.Millisecond, nil)
	cause := errors.New("peer vanished")
	l.lifeCancel(cause)
	require.ErrorIs(t, context.Cause(l.life), cause)
}

// failedRoot reports the rank stored in failRoot, -1 included (failed
// without a conclusion), and nothing before a failure.
func TestLifetimeFailedRoot(t *testing.T) {
	var l lifetime
	l.startLife(time.Second, nil)
	defer l.lifeCancel(nil)
	for _, root := range []int{3, 0, -1} {
		l.failRoot.Store(int64(root))
		got, failed := l.failedRoot()
		require.True(t, failed)
		require.Equal(t, root, got)
	}
	l.failRoot.Store(noRoot)
	_, failed := l.failedRoot()
	require.False(t, failed)
}
