package comm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// Collectives are numbered from 1, and the summaries shift: the current
// one becomes the previous.
func TestCallStateNumbering(t *testing.T) {
	s := newCallState()
	a := callSummary{kind: collAllreduce, dt: collectives.Float32, op: Sum, count: 8, root: -1}
	b := callSummary{kind: collBroadcast, dt: collectives.Int8, count: 4, root: 1}
	require.EqualValues(t, 1, s.beginRequest(&Request{kind: a.kind, dt: a.dt, op: a.op, count: a.count, root: a.root}))
	require.Equal(t, a, s.cur)
	require.Zero(t, s.prev.kind)
	require.EqualValues(t, 2, s.beginRequest(&Request{kind: b.kind, dt: b.dt, count: b.count, root: b.root}))
	require.EqualValues(t, 2, s.seq)
	require.Equal(t, b, s.cur)
	require.Equal(t, a, s.prev)
}

// Plans are cached by key, and the cache starts over once full.
func TestCallStatePlanCache(t *testing.T) {
	s := newCallState()
	k := planKey{kind: collAllreduce, algo: "ring", count: 8, elemSize: 4, chunkSize: 1 << 16}
	_, ok := s.cachedPlan(k)
	require.False(t, ok)
	s.rememberPlan(k, planEntry{scratch: 64})
	e, ok := s.cachedPlan(k)
	require.True(t, ok)
	require.Equal(t, 64, e.scratch)
	other := k
	other.algo = "tree"
	_, ok = s.cachedPlan(other)
	require.False(t, ok, "another algorithm")

	// The last two looked up come without the map, whichever came last
	// (a call and the barrier after it); a third pushes out the older.
	s.rememberPlan(other, planEntry{scratch: 32})
	clear(s.plans)
	for range 3 {
		e, ok = s.cachedPlan(k)
		require.True(t, ok)
		require.Equal(t, 64, e.scratch)
		e, ok = s.cachedPlan(other)
		require.True(t, ok)
		require.Equal(t, 32, e.scratch)
	}
	third := k
	third.count = 16
	s.rememberPlan(third, planEntry{scratch: 16})
	clear(s.plans)
	_, ok = s.cachedPlan(k)
	require.False(t, ok, "pushed out by two newer plans")
	e, ok = s.cachedPlan(other)
	require.True(t, ok)
	require.Equal(t, 32, e.scratch)

	s = newCallState()
	for n := range maxPlans {
		k.count = n
		s.rememberPlan(k, planEntry{})
	}
	require.Len(t, s.plans, maxPlans)
	s.rememberPlan(other, planEntry{scratch: 1})
	require.Len(t, s.plans, 1, "a full cache starts over")
}

// Messages to oneself come back oldest first, as copies: the sender may
// reuse its buffer at once.
func TestCallStateSelfMessages(t *testing.T) {
	var s callState
	_, ok := s.oldestSelf()
	require.False(t, ok)
	buf := []byte{1, 2, 3}
	s.sendSelf(7, buf)
	buf[0] = 9
	s.sendSelf(8, buf)

	s.sendSelf(7, []byte{4})

	m, ok := s.oldestSelf()
	require.True(t, ok)
	require.Equal(t, 7, m.tag)
	require.Equal(t, []byte{1, 2, 3}, m.data, "kept as sent")
	// By tag, oldest first.
	require.Equal(t, -1, s.selfWithTag(9))
	i := s.selfWithTag(8)
	require.Equal(t, 1, i)
	require.Equal(t, []byte{9, 2, 3}, s.selfq[i].data)
	s.dropSelf(i)
	require.Equal(t, 0, s.selfWithTag(7))
	s.dropSelf(0)
	m, ok = s.oldestSelf()
	require.True(t, ok)
	require.Equal(t, 7, m.tag)
	require.Equal(t, []byte{4}, m.data)
	s.dropSelf(s.selfWithTag(7))
	_, ok = s.oldestSelf()
	require.False(t, ok)
}
