package transporttest

import (
	"errors"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// testQuietWrite: a quiet write (transport.QuietWriter), eager or lazy,
// places its bytes and its immediate at the target as PostWrite does, and
// completes nothing on the initiator once placed; it holds a queue entry
// only while in flight, so more of them one after another than the
// initiator's queue holds all post; one the target refuses completes with
// its error.
func testQuietWrite(t *testing.T, f Factory) {
	const depth = 4
	p := depthPair(t, f, depth)
	qa := p.A.(transport.QuietWriter)
	want := Pattern(64, 9)
	src := Register(t, p.DevA, want, 0)
	win := make([]byte, 64)
	dst := Register(t, p.DevB, win, transport.AccessAll)
	const n = 4 * depth
	for i := range n {
		if err := p.B.PostRecv(uint64(100+i), dst, 0, 0); err != nil {
			t.Fatalf("B: post recv %d: %v", i, err)
		}
	}
	var none [8]transport.Completion
	for i := range n {
		imm := uint32(1000 + i)
		lazy := i%2 == 1
		// The entries of the writes before it come back once their
		// acknowledgements are read, which polling the queue does.
		deadline := time.Now().Add(ShortTimeout)
		for {
			err := qa.PostWriteQuiet(uint64(i), src, 2*i, 2, dst.Remote(), uint64(2*i), &imm, lazy)
			if err == nil {
				break
			}
			if !errors.Is(err, transport.ErrQueueFull) || time.Now().After(deadline) {
				t.Fatalf("A: quiet write %d (depth %d): %v", i, depth, err)
			}
			if k := p.CQA.Poll(none[:]); k > 0 {
				t.Fatalf("A: quiet write %d: completions on the initiator:\n%s", i, Describe(none[:k]))
			}
			time.Sleep(100 * time.Microsecond)
		}
		c := WaitOne(t, p.CQB, ShortTimeout)
		ExpectOK(t, c, transport.OpRecv, uint64(100+i), 2)
		if !c.HasImm || c.Imm != imm {
			t.Fatalf("B: receive %s; want immediate %d", describe(c), imm)
		}
	}
	ExpectBytes(t, "target window", win[:2*n], want[:2*n])
	// A plain write after them completes, alone.
	if err := p.A.PostWrite(77, src, 0, 8, dst.Remote(), 0, nil); err != nil {
		t.Fatalf("A: write: %v", err)
	}
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpWrite, 77, 8)
	ExpectQuiet(t, p.CQA, 50*time.Millisecond)

	// Refused (no remote write access): it completes, with the error.
	ro := Register(t, p.DevB, make([]byte, 64), transport.AccessLocalWrite|transport.AccessRemoteRead)
	imm := uint32(1)
	if err := qa.PostWriteQuiet(88, src, 0, 8, ro.Remote(), 0, &imm, false); err != nil {
		t.Fatalf("A: quiet write to a read-only window: %v", err)
	}
	ExpectErr(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpWrite, 88, transport.ErrRemoteAccess)
}
