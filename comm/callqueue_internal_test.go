package comm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The queue hands requests out oldest first, counts them pending, and
// coalesces wake-ups: however many pushes, the worker finds one wake-up
// waiting, and none once it has taken it.
func TestCallQueueFIFOAndWake(t *testing.T) {
	q := newCallQueue()
	reqs := []*Request{{root: 0}, {root: 1}, {root: 2}}
	for _, r := range reqs {
		q.pushLocked(r)
		q.signal()
	}
	require.EqualValues(t, 3, q.pending.Load())
	require.Len(t, q.wake, 1, "wake-ups coalesce")
	q.awaitWork() // the pending wake-up: returns at once
	require.Len(t, q.wake, 0)

	for i, want := range reqs {
		r := q.dequeueLocked()
		require.Same(t, want, r, "request %d out of order", i)
		require.Nil(t, r.next, "a dequeued request is unlinked")
	}
	require.Nil(t, q.dequeueLocked())
	require.Nil(t, q.qtail, "an emptied queue has no tail")

	// A push after the queue emptied starts a new list.
	r := &Request{}
	q.pushLocked(r)
	require.Same(t, r, q.dequeueLocked())
}

// takeAllLocked empties the queue and returns its requests in order, still
// pending; the queue then takes new ones normally.
func TestCallQueueTakeAll(t *testing.T) {
	q := newCallQueue()
	a, b := &Request{}, &Request{}
	q.pushLocked(a)
	q.pushLocked(b)
	got := q.takeAllLocked()
	require.Same(t, a, got)
	require.Same(t, b, got.next)
	require.Nil(t, got.next.next)
	require.Nil(t, q.dequeueLocked())
	require.EqualValues(t, 2, q.pending.Load(), "taken requests stay pending until finished")
	c := &Request{}
	q.pushLocked(c)
	require.Same(t, c, q.dequeueLocked())
}

// shutdown wakes a worker waiting for work and waits for it to return.
func TestCallQueueShutdownWakesWorker(t *testing.T) {
	q := newCallQueue()
	returned := make(chan struct{})
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		q.awaitWork()
		close(returned)
	}()
	done := make(chan struct{})
	go func() { q.shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not return")
	}
	select {
	case <-returned:
	default:
		t.Fatal("shutdown returned before the worker did")
	}
}

// An inline run excludes every other run: a second claim fails while it
// goes on, and a request queued meanwhile waits in the worker
// (awaitInline) until the inline run ends, which wakes it.
func TestCallQueueInlineExcludesQueued(t *testing.T) {
	q := newCallQueue()
	require.True(t, q.beginInline(), "an idle queue runs a blocking call inline")
	require.False(t, q.beginInline(), "a second inline run while one goes on")
	q.pushLocked(&Request{}) // queued during the inline run
	ran := make(chan struct{})
	go func() {
		q.awaitInline()
		close(ran)
	}()
	select {
	case <-ran:
		t.Fatal("the queued request ran during the inline run")
	case <-time.After(50 * time.Millisecond):
	}
	q.endInline()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the end of the inline run did not wake the worker")
	}
	require.EqualValues(t, 1, q.pending.Load(), "the queued request stays pending")
	require.False(t, q.beginInline(), "no inline run while a request is queued")
	q.pending.Add(-1) // the worker finished it
	require.True(t, q.beginInline())
	q.endInline()
	require.Zero(t, q.pending.Load())
}

// A closed or broken communicator runs nothing inline, and the failed
// claim leaves nothing pending.
func TestCallQueueInlineRefusedByGate(t *testing.T) {
	for _, bit := range []uint32{gateClosed, gateBroken} {
		q := newCallQueue()
		q.gate.Or(bit)
		require.False(t, q.beginInline(), "gate %b", bit)
		require.Zero(t, q.pending.Load(), "gate %b", bit)
	}
}

// shutdown returns only once a call running inline has ended.
func TestCallQueueShutdownWaitsForInline(t *testing.T) {
	q := newCallQueue()
	require.True(t, q.beginInline())
	q.gate.Or(gateClosed)
	done := make(chan struct{})
	go func() { q.shutdown(); close(done) }()
	select {
	case <-done:
		t.Fatal("shutdown returned during an inline run")
	case <-time.After(50 * time.Millisecond):
	}
	q.endInline()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not return after the inline run ended")
	}
}
