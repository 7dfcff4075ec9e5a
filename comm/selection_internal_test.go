package comm

import (
	"testing"

	"github.com/goccl/goccl/collectives"
	"github.com/stretchr/testify/require"
)

// A call's own algorithm wins over GOCCL_ALGO's, which wins over none;
// collectives GOCCL_ALGO does not name are left to the cost model.
func TestSelectionForced(t *testing.T) {
	forced, err := parseAlgorithms("allreduce:tree")
	require.NoError(t, err)
	s := newSelection(forced)
	require.Equal(t, "tree", s.forcedFor(collAllreduce, ""))
	require.Equal(t, "ring", s.forcedFor(collAllreduce, "ring"), "the call's own choice wins")
	require.Empty(t, s.forcedFor(collBroadcast, ""))
	require.Equal(t, "pipeline", s.forcedFor(collBroadcast, "pipeline"))
	var none selection // no GOCCL_ALGO
	require.Empty(t, none.forcedFor(collAllreduce, ""))
}

// Choices are cached per collective and size, forgotten on demand, and
// the cache starts over once full rather than growing.
func TestSelectionChoiceCache(t *testing.T) {
	s := newSelection(nil)
	_, ok := s.cachedChoice(collAllreduce, 8)
	require.False(t, ok)
	s.rememberChoice(collAllreduce, 8, "ring")
	name, ok := s.cachedChoice(collAllreduce, 8)
	require.True(t, ok)
	require.Equal(t, "ring", name)
	_, ok = s.cachedChoice(collAllreduce, 16)
	require.False(t, ok, "another size")
	_, ok = s.cachedChoice(collBroadcast, 8)
	require.False(t, ok, "another collective")

	// The last two looked up come without the map, in either order.
	s.rememberChoice(collBroadcast, 8, "binomial")
	clear(s.choices)
	for range 3 {
		name, ok = s.cachedChoice(collAllreduce, 8)
		require.True(t, ok)
		require.Equal(t, "ring", name)
		name, ok = s.cachedChoice(collBroadcast, 8)
		require.True(t, ok)
		require.Equal(t, "binomial", name)
	}
	s.rememberChoice(collAllreduce, 8, "ring")

	s.forgetChoices()
	_, ok = s.cachedChoice(collAllreduce, 8)
	require.False(t, ok, "forgotten")
	_, ok = s.cachedChoice(collBroadcast, 8)
	require.False(t, ok, "forgotten, the recent ones too")

	for n := range maxChoices {
		s.rememberChoice(collAllreduce, n, "ring")
	}
	require.Len(t, s.choices, maxChoices)
	s.rememberChoice(collBroadcast, 1, "tree")
	require.Len(t, s.choices, 1, "a full cache starts over")
	name, ok = s.cachedChoice(collBroadcast, 1)
	require.True(t, ok)
	require.Equal(t, "tree", name)
}

// The model prices every link with the flat α and β until per-class
// costs were measured, then with those.
func TestSelectionModel(t *testing.T) {
	s := newSelection(nil)
	s.alpha, s.beta, s.gamma = 20e-6, 1e-9, 2e-10
	m := s.modelFor(1 << 16)
	require.Equal(t, 1<<16, m.ChunkBytes)
	require.Equal(t, 2e-10, m.Gamma)
	require.Equal(t, collectives.LinkCost{Alpha: 20e-6, Beta: 1e-9}, m.Links[collectives.LinkLocal])

	s.linkCost[collectives.LinkNet] = collectives.LinkCost{Alpha: 30e-6, Beta: 2e-9}
	s.linkCost[collectives.LinkLocal] = collectives.LinkCost{Alpha: 1e-6, Beta: 1e-10}
	m = s.modelFor(1 << 16)
	require.Equal(t, s.linkCost, m.Links)
}

// priceAll picks what the selector picks, reuses its scratch for the
// prices, and caches nothing itself.
func TestSelectionPriceAll(t *testing.T) {
	s := newSelection(nil)
	s.alpha, s.beta, s.gamma = 20e-6, 1e-9, 2e-10
	topo := collectives.Topology{Size: 8, Hosts: 1}
	for _, nbytes := range []int{8, 1 << 20} {
		want, _, err := collectives.Select(collAllreduce, nbytes, topo, s.modelFor(1<<16), nil)
		require.NoError(t, err)
		a, prices, err := s.priceAll(collAllreduce, nbytes, topo, s.modelFor(1<<16))
		require.NoError(t, err)
		require.Equal(t, want.Name, a.Name)
		require.NotEmpty(t, prices, "allreduce has several algorithms")
		require.Equal(t, cap(prices), cap(s.prices), "the prices live in the scratch")
		require.Empty(t, s.choices)
	}
}
