package collectives

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRegistryIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, ci := range Collectives() {
		require.True(t, ci.Coll.Valid(), "%s", ci.Name)
		require.Equal(t, ci.Coll, collTable[ci.Coll].Coll, "table entry %s is at the wrong index", ci.Name)
		require.False(t, seen[ci.Name], "collective %q listed twice", ci.Name)
		seen[ci.Name] = true
		c, err := CollByName(ci.Name)
		require.NoError(t, err)
		require.Equal(t, ci.Coll, c)
		algos := Algos(ci.Coll)
		require.NotEmpty(t, algos, "%s has no algorithm", ci.Name)
		names := map[string]bool{}
		for _, a := range algos {
			require.False(t, names[a.Name], "%s/%s listed twice", ci.Name, a.Name)
			names[a.Name] = true
			require.NotNil(t, a.Schedule, "%s/%s has no schedule", ci.Name, a.Name)
			require.NotEmpty(t, a.Doc, "%s/%s has no documentation", ci.Name, a.Name)
			if len(algos) > 1 {
				require.True(t, a.Cost != nil || a.Price != nil, "%s/%s competes with other algorithms but has no cost", ci.Name, a.Name)
			}
			if a.Reduced != nil {
				require.True(t, ci.Reducing, "%s/%s reduces but %s does not", ci.Name, a.Name, ci.Name)
			}
			// The schedule names itself as the table does.
			s := a.Build(0, 4, &Args{Count: 8, ElemSize: 4, Root: 0, Peer: 1, Src: 1, RecvCount: 8,
				SendCounts: []int{1, 2, 3, 4}, SendDispls: []int{0, 1, 3, 6}, RecvCounts: []int{1, 2, 3, 4}, RecvDispls: []int{0, 1, 3, 6}})
			require.Equal(t, a.Name, s.Name, "%s/%s builds a schedule named %q", ci.Name, a.Name, s.Name)
		}
	}
	require.Len(t, seen, int(numColls)-1)
}

func TestCollByNameNamesTheOneSpelling(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"bcast", `"broadcast"`},
		{"reduce_scatter", `"reduce-scatter"`},
		{"reducescatter", `"reduce-scatter"`},
		{"AllReduce", `"allreduce"`},
		{"all_to_all", `"alltoall"`},
		{"nonesuch", "have allreduce, broadcast"},
	} {
		_, err := CollByName(tc.in)
		require.Error(t, err, tc.in)
		require.Contains(t, err.Error(), tc.want, tc.in)
	}
}

func TestParseAlgoSpec(t *testing.T) {
	m, err := ParseAlgoSpec(" allreduce:tree, broadcast:pipeline ")
	require.NoError(t, err)
	require.Equal(t, "tree", m[CollAllreduce].Name)
	require.Equal(t, "pipeline", m[CollBroadcast].Name)
	m, err = ParseAlgoSpec("")
	require.NoError(t, err)
	require.Empty(t, m)
	for _, tc := range []struct{ spec, want string }{
		{"allreduce", "not collective:algorithm"},
		{"bcast:binomial", `did you mean "broadcast"`},
		{"allreduce:nonesuch", `allreduce has no algorithm "nonesuch" (have hier-leader, hier-ring, rabenseifner, recursive-doubling, ring, tree)`},
		// Two algorithms for one collective: before, the last won silently.
		{"allreduce:ring,allreduce:tree", `item "allreduce:tree": allreduce is given ring already: one algorithm per collective`},
	} {
		_, err := ParseAlgoSpec(tc.spec)
		require.Error(t, err, tc.spec)
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestPricedBytes(t *testing.T) {
	require.Equal(t, 400, CollAllreduce.PricedBytes(4, 100, 4))
	require.Equal(t, 1600, CollAllgather.PricedBytes(4, 100, 4), "allgather is priced at the gathered buffer")
	require.Equal(t, 1600, CollGather.PricedBytes(4, 100, 4))
	require.Equal(t, 400, CollReduce.PricedBytes(4, 100, 4))
}

// An algorithm added to the table is selectable, priced, parsed and
// documented with nothing else to change.
func TestAddingAnAlgorithmIsOneEntry(t *testing.T) {
	saved := algoTable
	t.Cleanup(func() { algoTable = saved })
	algoTable = append(append([]Algo(nil), saved...), Algo{
		Coll: CollAllreduce, Name: "test-free", Schedule: plain(RingAllreduce),
		Cost: func(p int, n float64) (int, float64) { return 0, 0 },
		Doc:  "a test algorithm that costs nothing",
	})
	a, prices, err := Select(CollAllreduce, 1<<20, Topology{Size: 8}, Model{Links: [NumLinkClasses]LinkCost{{Alpha: 1e-6, Beta: 1e-9}}}, nil)
	require.NoError(t, err)
	require.Equal(t, "test-free", a.Name, "the cheapest algorithm is chosen")
	require.Len(t, prices, 5, "every allreduce algorithm is priced")
	m, err := ParseAlgoSpec("allreduce:test-free")
	require.NoError(t, err)
	require.Equal(t, "test-free", m[CollAllreduce].Name)
	require.Contains(t, AlgorithmTable(), "| allreduce | test-free | a test algorithm that costs nothing |")
	require.Contains(t, Algorithms("allreduce"), "test-free")
}

func TestAlgorithmTableListsEveryAlgorithm(t *testing.T) {
	doc := AlgorithmTable()
	for i := range algoTable {
		a := &algoTable[i]
		require.True(t, strings.Contains(doc, "| "+a.Coll.String()+" | "+a.Name+" |"), "%s/%s missing", a.Coll, a.Name)
	}
}

var update = flag.Bool("update", false, "rewrite the README's algorithm table from the registry")

// The README's algorithm table is the registry's (AlgorithmTable).
func TestREADMEAlgorithmTable(t *testing.T) {
	const path = "../README.md"
	const begin, end = "<!-- algorithms:begin -->\n", "<!-- algorithms:end -->"
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	require.True(t, i >= 0 && j > i, "README.md has no %q ... %q section", begin, end)
	want := AlgorithmTable()
	if got := doc[i+len(begin) : j]; got != want {
		if *update {
			require.NoError(t, os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644))
			return
		}
		t.Errorf("README.md's algorithm table is not the registry's; run go test ./collectives -run TestREADMEAlgorithmTable -update\ngot:\n%s\nwant:\n%s", got, want)
	}
}

func TestRankList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{[]int{3}, "rank 3"},
		{[]int{1, 2, 3}, "ranks 1-3"},
		{[]int{0, 2, 3, 5}, "ranks 0, 2-3, 5"},
		{[]int{1, 3}, "ranks 1, 3"},
	} {
		if got := RankList(tc.in); got != tc.want {
			t.Errorf("RankList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
