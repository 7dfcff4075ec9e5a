package comm

import (
	"context"
	"strings"
	"testing"

	"github.com/goccl/goccl/collectives"
	"github.com/stretchr/testify/require"
)

// TestMismatchHeadlineFindsTheOddCall is TestRootMismatch's scatter with
// roots {2,2,2,2,4} as it failed in a full run of comm's tests: rank 4
// found rank 3's data not matching its call and told everyone "mismatch,
// rank 3"; the verdict reached rank 3 relayed by rank 1, so rank 3 takes
// rank 1 as its counterpart, and the reports of rank 1 and of rank 0 (the
// first others it reads) carry only calls like rank 3's own. The headline
// must still find rank 4's call in rank 4's report and name both roots;
// it said "collective mismatch with rank 1 (reported by rank 1)".
func TestMismatchHeadlineFindsTheOddCall(t *testing.T) {
	c := &Comm{id: "t", rank: 3, size: 5}
	kv := NewLocalGroup(5).Member(3).(keyValue)
	ctx := context.Background()
	call := func(root int) string {
		return (&collectives.Call{Coll: "scatter", Type: TypeFloat32, Count: 10, Root: root}).Desc() + " #4"
	}
	for _, r := range []int{0, 1, 2} {
		rep := report{reason: collectives.NoticeMismatch, root: 3, peer: -1, seq: 4, call: call(2), cause: "relayed"}
		require.NoError(t, kv.Set(ctx, c.reportKey(r), rep.encode()))
	}
	rep4 := report{reason: collectives.NoticeMismatch, root: 3, peer: 3, seq: 4, call: call(4), other: "", cause: "fingerprint"}
	require.NoError(t, kv.Set(ctx, c.reportKey(4), rep4.encode()))
	f := fault{reason: collectives.NoticeMismatch, root: 1, peer: 1, via: 1, call: call(2), seq: 4, about: 4}
	h := c.mismatchHeadline(kv, f)
	require.Contains(t, h, "root=2", h)
	require.Contains(t, h, "root=4", h)
	require.True(t, strings.HasPrefix(h, "collective mismatch: rank 4 called"), h)
}

// TestHeadlineNamesNoReporterItHasNot: a headline names the rank that
// reported a failure only if there is one, other than the failed rank
// itself: it read "collective mismatch with rank 1 (reported by rank -1)"
// (two ranks that each refused the other's counts, both calls alike as
// this rank knew them) and "rank 1 failed (reported by rank 1)".
func TestHeadlineNamesNoReporterItHasNot(t *testing.T) {
	c := &Comm{id: "t", rank: 0, size: 2}
	kv := NewLocalGroup(2).Member(0).(keyValue)
	ctx := context.Background()
	call := (&collectives.Call{Coll: "allgatherv", Type: TypeFloat32, Count: 12}).Desc() + " #4"
	rep := report{reason: collectives.NoticeMismatch, root: 0, peer: 0, seq: 4, call: call, cause: "counts"}
	require.NoError(t, kv.Set(ctx, c.reportKey(1), rep.encode()))
	f := fault{reason: collectives.NoticeMismatch, root: 1, peer: 1, via: -1, call: call, seq: 4, about: 4}
	h := c.mismatchHeadline(kv, f)
	require.NotContains(t, h, "reported by", h)
	require.Contains(t, h, "rank 1", h)

	rep = report{reason: collectives.NoticeFailed, root: 1, peer: -1, seq: 4, call: call, cause: "its receive found the sizes differ"}
	require.NoError(t, kv.Set(ctx, c.reportKey(1), rep.encode()))
	h = c.headline(kv, fault{reason: collectives.NoticeFailed, root: 1, peer: -1, via: 1, seq: 4, about: 4})
	require.NotContains(t, h, "reported by", h)
	require.Contains(t, h, "its receive found the sizes differ", h)
}
