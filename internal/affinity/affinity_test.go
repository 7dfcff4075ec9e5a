package affinity

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBlocks(t *testing.T) {
	cpus := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		mode  string
		cpus  []int
		n     int
		want  [][]int
		fails bool
	}{
		{mode: "auto", cpus: cpus, n: 2, want: [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}},
		{mode: "auto", cpus: cpus, n: 3, want: [][]int{{0, 1}, {2, 3}, {4, 5}}},
		{mode: "core", cpus: cpus, n: 8, want: [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}},
		{mode: "auto", cpus: []int{2, 5}, n: 2, want: [][]int{{2}, {5}}},
		{mode: "auto", cpus: cpus, n: 9, want: [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {0}}},
		{mode: "auto", cpus: []int{2, 5}, n: 5, want: [][]int{{2}, {5}, {2}, {5}, {2}}},
		{mode: "core", cpus: cpus, n: 9, fails: true},
		{mode: "none", cpus: cpus, n: 2, want: nil},
	} {
		got, err := Blocks(tc.mode, tc.cpus, tc.n)
		if tc.fails {
			require.Error(t, err, "%s with %d ranks on %d CPUs", tc.mode, tc.n, len(tc.cpus))
			require.Contains(t, err.Error(), "--bind-to none")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%s with %d ranks on %v", tc.mode, tc.n, tc.cpus)
	}
}
