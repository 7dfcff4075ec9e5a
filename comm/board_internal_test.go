package comm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// A call's description reads back from the header equal to what its rank
// wrote, whatever the count: the header keeps the low 32 bits of it, and a
// description compared field by field with the full count made every call
// of 2^32 elements or more (a direct call of 4 GiB of int8) a mismatch
// with itself. The reader's fields are the writer's, the root's sign
// included.
func TestBoardCallRoundTrip(t *testing.T) {
	b := &board{mem: make([]byte, boardSize(2)), n: 2, me: 1}
	for seq, k := range []boardCall{
		mkCall(collAllreduce, collectives.Float32, Sum, -1, 7),
		mkCall(collBroadcast, collectives.Int8, 0, 63, 1<<32+5),
		mkCall(collReduce, collectives.Float64, Max, 2, 1<<33-1),
		mkCall(collBarrier, 0, 0, -1, 0),
	} {
		b.writeLines(1, uint64(seq+1), k, nil)
		got := b.readCall(1, uint64(seq+1))
		require.Equal(t, k, got, "call %v", k)
		require.Equal(t, k.kind(), got.kind())
		require.Equal(t, k.root(), got.root())
	}
	k := mkCall(collBroadcast, collectives.Int8, 0, 63, 1<<32+5)
	require.Equal(t, collBroadcast, k.kind())
	require.Equal(t, collectives.Int8, k.dt())
	require.Equal(t, 63, k.root())
	require.EqualValues(t, 5, k.count(), "the low 32 bits of the count")
	require.Equal(t, -1, mkCall(collAllreduce, collectives.Float32, Sum, -1, 1).root())
	require.NotEqual(t, mkCall(collAllreduce, collectives.Float32, Sum, -1, 7), mkCall(collAllreduce, collectives.Float32, Max, -1, 7))
}

// A contribution of any length up to llCap reads back from its rank's
// lines whole and from any offset, the lines say it is there exactly when
// the call's are written, and the other parity's call stays readable
// while this one is.
func TestBoardLinesRoundTrip(t *testing.T) {
	b := &board{mem: make([]byte, boardSize(3)), n: 3, me: 2}
	src := make([]byte, llCap)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	k0 := mkCall(collAllgather, collectives.Int8, 0, -1, 5)
	b.writeLines(1, 4, k0, src[:5])
	for L := 0; L <= llCap; L++ {
		seq := uint64(5 + 2*L) // odd: the other parity than call 4's
		k := mkCall(collAllgather, collectives.Int8, 0, -1, L)
		lines := llLinesFor(L)
		require.False(t, b.ready(1, seq, lines), "L=%d: not written yet", L)
		b.writeLines(1, seq, k, src[:L])
		require.True(t, b.ready(1, seq, lines), "L=%d", L)
		require.False(t, b.ready(1, seq+2, lines), "L=%d: the next call of the parity", L)
		require.Equal(t, k, b.readCall(1, seq))
		require.Equal(t, seq, b.published(1))
		for _, off := range []int{0, 1, llHead - 1, llHead, llHead + llBody - 1, llHead + llBody, L / 2, L} {
			if off > L {
				continue
			}
			dst := make([]byte, L-off)
			b.take(1, seq, true, off, dst)
			require.Equal(t, src[off:L], dst, "L=%d off=%d", L, off)
		}
		dst := make([]byte, 5)
		b.take(1, 4, true, 0, dst)
		require.Equal(t, src[:5], dst, "L=%d: call 4's bytes", L)
	}
	require.Equal(t, 1, llLinesFor(0))
	require.Equal(t, 1, llLinesFor(llHead))
	require.Equal(t, 2, llLinesFor(llHead+1))
	require.Equal(t, llLines, llLinesFor(llCap))
	require.Equal(t, 1, llLinesFor(llCap+1), "in the slot")
}

// A rank whose process is gone while this one copies from its memory is
// blamed, unless it had failed first for another rank's failure and said
// so on the board: a survivor that exits on its error may be found gone
// before the rank that died (4 ranks under gorun, rank 3 killed: rank 0
// blamed rank 1 once in TestKillOneRank, examples/allreduce).
func TestGoneBlameFollowsTheReport(t *testing.T) {
	mem := make([]byte, boardSize(4))
	c := &Comm{board: &board{mem: mem, n: 4, me: 0}}
	root, err := c.goneBlame(1)
	require.Equal(t, 1, root)
	require.ErrorContains(t, err, "rank 1 failed: its process is gone")

	(&board{mem: mem, n: 4, me: 1}).markRoot(boardFailed, 3)
	root, err = c.goneBlame(1)
	require.Equal(t, 3, root)
	require.ErrorContains(t, err, "rank 3 failed (reported by rank 1")
}

// The ranks bound to one processor are each other's mates; unbound ranks
// (-1) have none, and are nobody's.
func TestBoardMatesOf(t *testing.T) {
	cpus := []int{0, 1, 0, 1, -1, -1}
	require.Equal(t, []int{2}, matesOf(0, cpus))
	require.Equal(t, []int{1}, matesOf(3, cpus))
	require.Empty(t, matesOf(4, cpus), "unbound")
	require.Empty(t, matesOf(0, []int{0, 1}), "a processor each")
	require.Equal(t, []int{0, 1, 3}, matesOf(2, []int{5, 5, 5, 5}))
}

// A crowded rank in a call where every rank waits for all keeps its
// processor while every mate has reached the word it waits for, for at
// most boardSpin; it yields as soon as a mate has not (that mate needs the
// processor), always in rooted calls and barriers, and always without
// mates.
func TestBoardHold(t *testing.T) {
	b := &board{mem: make([]byte, boardSize(4)), n: 4, me: 0, crowded: true, mates: []int{2}}
	const seq = 7
	k := mkCall(collAlltoall, collectives.Float32, 0, -1, 4)
	require.False(t, b.hold(k, bSeq, seq, 0), "mate 2 has not published")
	b.word(2, bSeq, seq).Store(seq)
	require.True(t, b.hold(k, bSeq, seq, 0), "mate 2 published, ranks 1 and 3 are elsewhere")
	require.False(t, b.hold(k, bSeq, seq, boardSpin), "held long enough")
	require.False(t, b.hold(k, bDone, seq, 0), "mate 2 has not raised bDone")
	b.word(2, bDone, seq).Store(seq)
	require.True(t, b.hold(k, bDone, seq, time.Microsecond))
	for _, kind := range []collKind{collAllreduce, collAllgather, collReduceScatter} {
		require.True(t, b.hold(mkCall(kind, collectives.Float32, Sum, -1, 4), bSeq, seq, 0), "%v", kind)
	}
	for _, kind := range []collKind{collBroadcast, collReduce, collGather, collScatter, collBarrier} {
		require.False(t, b.hold(mkCall(kind, collectives.Float32, Sum, 1, 4), bSeq, seq, 0), "%v", kind)
	}
	b.mates = nil
	require.False(t, b.hold(k, bSeq, seq, 0), "no mates: yield")
}
