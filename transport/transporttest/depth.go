package transporttest

import (
	"errors"
	"math"
	"testing"

	"github.com/goccl/goccl/transport"
)

// testQueueDepth checks the completion queue's depth rule (see
// transport.CompletionQueue): every posted request holds one entry from
// post until its completion is taken out; a post beyond the depth is
// refused with ErrQueueFull, posts nothing and leaves the endpoint usable;
// OpRemoteError holds no entry and is never dropped.
func testQueueDepth(t *testing.T, f Factory) {
	t.Run("BadDepth", func(t *testing.T) { testBadDepth(t, f) })
	t.Run("EveryOpRefused", func(t *testing.T) { testFullRefusesEveryOp(t, f) })
	t.Run("HeldUntilTaken", func(t *testing.T) { testHeldUntilTaken(t, f) })
	t.Run("SharedByEndpoints", func(t *testing.T) { testDepthShared(t, f) })
	t.Run("RemoteErrorNotCounted", func(t *testing.T) { testRemoteErrorNotCounted(t, f) })
}

// ExpectQueueFull fails the test unless err says the completion queue is
// full: it wraps ErrQueueFull and not ErrInvalid.
func ExpectQueueFull(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, transport.ErrQueueFull) || errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("%s on a full completion queue: %v; want an error wrapping ErrQueueFull and not ErrInvalid", what, err)
	}
}

func testBadDepth(t *testing.T, f Factory) {
	dev := f(t)
	t.Cleanup(func() { dev.Close() })
	for _, d := range []int{0, -1} {
		q, err := dev.NewCompletionQueue(d)
		if !errors.Is(err, transport.ErrInvalid) {
			if q != nil {
				q.Close()
			}
			t.Fatalf("NewCompletionQueue(%d): %v; want ErrInvalid", d, err)
		}
	}
	// Beyond what a device supports: refused with ErrNotSupported, or a
	// working queue (never a silently smaller one, which the other subtests
	// would catch at their own depths).
	q, err := dev.NewCompletionQueue(math.MaxInt32)
	switch {
	case err == nil:
		q.Close()
	case !errors.Is(err, transport.ErrNotSupported) || errors.Is(err, transport.ErrInvalid):
		t.Fatalf("NewCompletionQueue(MaxInt32): %v; want success or an error wrapping ErrNotSupported", err)
	default:
		t.Logf("as expected: %v", err)
	}
}

// depthPair is a connected pair whose side A has a completion queue of the
// given depth (side B's has CQDepth).
func depthPair(t *testing.T, f Factory, depth int) *Pair {
	t.Helper()
	p := &Pair{}
	p.DevA = f(t)
	t.Cleanup(func() { p.DevA.Close() })
	p.DevB = f(t)
	t.Cleanup(func() { p.DevB.Close() })
	p.CQA = NewCQDepth(t, p.DevA, depth)
	p.CQB = NewCQ(t, p.DevB)
	p.A = NewEndpoint(t, p.DevA, p.CQA)
	p.B = NewEndpoint(t, p.DevB, p.CQB)
	ConnectPair(t, p.A, p.B)
	return p
}

// testFullRefusesEveryOp fills A's queue with receives that nothing
// completes; every kind of post is then refused, sends nothing and touches
// nothing; once a completion is taken out, A posts again.
func testFullRefusesEveryOp(t *testing.T, f Factory) {
	const depth = 4
	p := depthPair(t, f, depth)
	bufA := Pattern(256, 3)
	win := make([]byte, 256)
	fillByte(win, 0x5c)
	ra := Register(t, p.DevA, bufA, transport.AccessAll)
	rw := Register(t, p.DevB, win, transport.AccessAll)
	for i := range depth {
		if err := p.A.PostRecv(uint64(i), ra, 0, 64); err != nil {
			t.Fatalf("post recv %d of %d: %v", i, depth, err)
		}
	}
	// B waits for a message; a send or write-with-immediate refused on A
	// must not reach it.
	if err := p.B.PostRecv(100, rw, 128, 64); err != nil {
		t.Fatalf("B: post recv: %v", err)
	}
	imm := uint32(7)
	ExpectQueueFull(t, "post send", p.A.PostSend(10, ra, 0, 8))
	ExpectQueueFull(t, "post recv", p.A.PostRecv(11, ra, 0, 8))
	ExpectQueueFull(t, "post write", p.A.PostWrite(12, ra, 0, 8, rw.Remote(), 0, nil))
	ExpectQueueFull(t, "post write-with-immediate", p.A.PostWrite(13, ra, 0, 8, rw.Remote(), 0, &imm))
	ExpectQueueFull(t, "post read", p.A.PostRead(14, ra, 64, 8, rw.Remote(), 0))
	ExpectQuiet(t, p.CQB, quiet)
	ExpectEmpty(t, p.CQA)
	expectAll(t, "B's window after refused posts", win, 0x5c)

	// B's message completes A's first receive; the completion holds its
	// entry until taken out.
	rb := Register(t, p.DevB, Pattern(64, 4), 0)
	if err := p.B.PostSend(101, rb, 0, 16); err != nil {
		t.Fatalf("B: post send: %v", err)
	}
	ExpectOK(t, WaitOne(t, p.CQB, ShortTimeout), transport.OpSend, 101, 16)
	ExpectQueueFull(t, "post send before the completion is taken out", p.A.PostSend(15, ra, 0, 8))
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpRecv, 0, 16)
	// One entry is free: A's endpoint works again, for exactly one post.
	if err := p.A.PostSend(16, ra, 0, 8); err != nil {
		t.Fatalf("post send after taking a completion out: %v", err)
	}
	ExpectQueueFull(t, "second post with one entry free", p.A.PostSend(17, ra, 0, 8))
	ExpectOK(t, WaitOne(t, p.CQB, ShortTimeout), transport.OpRecv, 100, 8)
	ExpectBytes(t, "message after the queue had room again", win[128:136], bufA[:8])
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpSend, 16, 8)
}

// testHeldUntilTaken: finished writes hold their entries until Poll or Wait
// hands their completions over, however long ago they finished.
func testHeldUntilTaken(t *testing.T, f Factory) {
	const depth = 4
	p := depthPair(t, f, depth)
	src := Pattern(64, 5)
	ra := Register(t, p.DevA, src, 0)
	rb := Register(t, p.DevB, make([]byte, 64), transport.AccessAll)
	id := uint64(0)
	post := func() error {
		err := p.A.PostWrite(id, ra, 0, 8, rb.Remote(), 0, nil)
		if err == nil {
			id++
		}
		return err
	}
	for range depth {
		if err := post(); err != nil {
			t.Fatalf("post write %d of %d: %v", id, depth, err)
		}
	}
	ExpectQueueFull(t, "write beyond the depth", post())
	got := WaitN(t, p.CQA, 2, ShortTimeout)
	for i, c := range got {
		ExpectOK(t, c, transport.OpWrite, uint64(i), 8)
	}
	for range 2 {
		if err := post(); err != nil {
			t.Fatalf("post write with %d entries taken out: %v", len(got), err)
		}
	}
	ExpectQueueFull(t, "write beyond the depth after refilling", post())
	for i, c := range WaitN(t, p.CQA, depth, ShortTimeout) {
		ExpectOK(t, c, transport.OpWrite, uint64(2+i), 8)
	}
	ExpectEmpty(t, p.CQA)
}

// testDepthShared: the depth bounds the requests of every endpoint of the
// queue together.
func testDepthShared(t *testing.T, f Factory) {
	const depth = 4
	devA, devB := f(t), f(t)
	t.Cleanup(func() { devA.Close() })
	t.Cleanup(func() { devB.Close() })
	qa, qb := NewCQDepth(t, devA, depth), NewCQ(t, devB)
	a1, a2 := NewEndpoint(t, devA, qa), NewEndpoint(t, devA, qa)
	b1, b2 := NewEndpoint(t, devB, qb), NewEndpoint(t, devB, qb)
	ConnectPair(t, a1, b1)
	ConnectPair(t, a2, b2)
	ra := Register(t, devA, make([]byte, 64), transport.AccessLocalWrite)
	for i := range depth / 2 {
		if err := a1.PostRecv(uint64(i), ra, 0, 8); err != nil {
			t.Fatalf("endpoint 1: post recv %d: %v", i, err)
		}
		if err := a2.PostRecv(uint64(10+i), ra, 8, 8); err != nil {
			t.Fatalf("endpoint 2: post recv %d: %v", i, err)
		}
	}
	ExpectQueueFull(t, "endpoint 1: post recv", a1.PostRecv(20, ra, 0, 8))
	ExpectQueueFull(t, "endpoint 2: post recv", a2.PostRecv(21, ra, 0, 8))
	// A message to endpoint 2 frees an entry that endpoint 1 may use.
	rb := Register(t, devB, Pattern(8, 6), 0)
	if err := b2.PostSend(30, rb, 0, 8); err != nil {
		t.Fatalf("B: post send: %v", err)
	}
	ExpectOK(t, WaitOne(t, qa, ShortTimeout), transport.OpRecv, 10, 8)
	if err := a1.PostRecv(22, ra, 0, 8); err != nil {
		t.Fatalf("endpoint 1: post recv after endpoint 2's completion was taken out: %v", err)
	}
	ExpectQueueFull(t, "endpoint 2: post recv", a2.PostRecv(23, ra, 0, 8))
}

// testRemoteErrorNotCounted: the target of a refused access, its queue full
// of receives, gets the OpRemoteError and every flushed receive: the report
// holds no entry and is not dropped.
func testRemoteErrorNotCounted(t *testing.T, f Factory) {
	const depth = 2
	p := &Pair{}
	p.DevA, p.DevB = f(t), f(t)
	t.Cleanup(func() { p.DevA.Close() })
	t.Cleanup(func() { p.DevB.Close() })
	p.CQA, p.CQB = NewCQ(t, p.DevA), NewCQDepth(t, p.DevB, depth)
	p.A, p.B = NewEndpoint(t, p.DevA, p.CQA), NewEndpoint(t, p.DevB, p.CQB)
	ConnectPair(t, p.A, p.B)
	win := make([]byte, 64)
	rw := Register(t, p.DevB, win, transport.AccessLocalWrite|transport.AccessRemoteRead)
	for i := range depth {
		if err := p.B.PostRecv(uint64(i), rw, 0, 8); err != nil {
			t.Fatalf("B: post recv %d: %v", i, err)
		}
	}
	ra := Register(t, p.DevA, Pattern(8, 7), 0)
	if err := p.A.PostWrite(50, ra, 0, 8, rw.Remote(), 0, nil); err != nil {
		t.Fatalf("A: post write: %v", err)
	}
	ExpectErr(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpWrite, 50, transport.ErrRemoteAccess)
	got := WaitN(t, p.CQB, depth+1, ShortTimeout)
	if got[0].Op != transport.OpRemoteError || got[0].ID != 0 || !errors.Is(got[0].Err, transport.ErrRemoteAccess) {
		t.Fatalf("target's first completion %s; want OpRemoteError wrapping ErrRemoteAccess", describe(got[0]))
	}
	for i, c := range got[1:] {
		ExpectErr(t, c, transport.OpRecv, uint64(i), transport.ErrFlushed, transport.ErrRemoteAccess)
	}
	ExpectEmpty(t, p.CQB)
}
