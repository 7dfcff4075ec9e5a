package comm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRankList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{[]int{3}, "rank 3"},
		{[]int{1, 2, 3}, "ranks 1-3"},
		{[]int{0, 2, 3, 5}, "ranks 0, 2-3, 5"},
	} {
		require.Equal(t, tc.want, rankList(tc.in))
	}
}
