package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// armStall restarts the clock: not stalled, progress now, and the timer
// calls the tick after a step.
func TestStallWatchArm(t *testing.T) {
	var s stallWatch
	ticked := make(chan struct{}, 1)
	s.startStall(time.Millisecond, func() { ticked <- struct{}{} })
	defer s.stallDog.Stop()
	s.stallElapsed.Store(int64(time.Second)) // stalled in the run before
	before := mono()
	s.armStall()
	require.Zero(t, s.stallElapsed.Load())
	require.GreaterOrEqual(t, s.lastProgress.Load(), before)
	select {
	case <-ticked:
	case <-time.After(10 * time.Second):
		t.Fatal("the armed stall timer did not tick")
	}
	at := s.lastProgress.Load()
	time.Sleep(time.Millisecond)
	s.progressed()
	require.Greater(t, s.lastProgress.Load(), at)
}

// The run's context is the latest poke's: a poke ends it without ending
// the life, a new poke replaces it, and the life's end ends it.
func TestStallWatchPoke(t *testing.T) {
	var s stallWatch
	life, end := context.WithCancelCause(context.Background())
	p := s.newPoke(life)
	require.Equal(t, p.ctx, s.callCtx())
	s.poke.Load().cancel(errPoke)
	require.ErrorIs(t, context.Cause(s.callCtx()), errPoke)
	require.NoError(t, life.Err())

	q := s.newPoke(life)
	require.NotEqual(t, p.ctx, q.ctx)
	require.Equal(t, q.ctx, s.callCtx())
	require.NoError(t, s.callCtx().Err())
	cause := errors.New("aborted")
	end(cause)
	require.ErrorIs(t, context.Cause(s.callCtx()), cause)
}

// The responder answers with the snapshot only while the run it was taken
// in is stalled: not once the clock restarted, not for a later run.
func TestStallWatchSnapshot(t *testing.T) {
	var s stallWatch
	s.callNo.Store(3) // run #2 running
	st := rankState{seq: 2, running: true, stalled: true, call: "allreduce #2", waiting: []int{1}}
	s.recordSnap(st)
	_, ok := s.stalledSnap(3)
	require.False(t, ok, "not stalled: no snapshot")

	s.stallElapsed.Store(int64(time.Second))
	got, ok := s.stalledSnap(3)
	require.True(t, ok)
	require.Equal(t, st, got)
	_, ok = s.stalledSnap(5)
	require.False(t, ok, "a snapshot of an earlier run")
}

// A snapshot taken before the run's last completion is out of date: what
// it says the run waits on may have arrived since. The responder answers
// as for a running call until the next look-around records a new one.
func TestStallWatchSnapshotBeforeProgress(t *testing.T) {
	var s stallWatch
	s.callNo.Store(3)
	s.lastProgress.Store(mono())
	s.stallElapsed.Store(int64(time.Second))
	time.Sleep(time.Millisecond)
	st := rankState{seq: 2, running: true, stalled: true, call: "reduce #2", waiting: []int{1, 4}}
	s.recordSnap(st)
	got, ok := s.stalledSnap(3)
	require.True(t, ok)
	require.Equal(t, st, got)

	time.Sleep(time.Millisecond)
	s.progressed() // rank 1's data, say; stallElapsed is still set
	_, ok = s.stalledSnap(3)
	require.False(t, ok, "a snapshot older than the run's last completion")

	time.Sleep(time.Millisecond)
	s.recordSnap(rankState{seq: 2, running: true, stalled: true, call: "reduce #2", waiting: []int{4}})
	got, ok = s.stalledSnap(3)
	require.True(t, ok)
	require.Equal(t, []int{4}, got.waiting)
}

// Two ranks stalled in different collectives, each waiting on the other,
// are a disagreement only once the run has been stalled for passedAfter,
// as for a peer that went on (passed): with many ranks per processor what
// a rank answers lags what its transport did by seconds (512 ranks on 2
// cores: a binomial reduce's parent, stalled two calls behind its child,
// and the child found each other stalled waiting on the other, and both
// declared a sequence mismatch in a correct program).
func TestCompareWaitsPassedAfter(t *testing.T) {
	c := &Comm{rank: 7}
	c.passedAfter = 64 * time.Second
	own := rankState{seq: 61, running: true, stalled: true, call: "reduce(float32, 7, min, root=511) #61", waiting: []int{9}}
	peer := rankState{seq: 63, running: true, stalled: true, call: "reduce(float32, 7, max, root=511) #63", waiting: []int{7}, settled: 63}
	c.stallElapsed.Store(int64(2 * time.Second))
	require.NoError(t, c.compare(own, 9, peer), "stalled 2 s of the 64 s a crowded host gets")
	c.stallElapsed.Store(int64(65 * time.Second))
	err := c.compare(own, 9, peer)
	var d *disagreement
	require.ErrorAs(t, err, &d)
	require.Equal(t, 9, d.Peer)

	// Not crowded: passedAfter is a step, the first look-around's.
	c.passedAfter = time.Second
	c.stallElapsed.Store(int64(time.Second))
	require.ErrorAs(t, c.compare(own, 9, peer), &d)
}
