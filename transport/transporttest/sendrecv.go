package transporttest

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// testSendRecvOrder sends many messages of varying length and checks that
// the receives complete in posting order, each with the message of the same
// rank, and that the sends complete in order.
func testSendRecvOrder(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const count, slot = 1000, 256
	src := Pattern(count*slot, 1)
	dst := make([]byte, count*slot)
	rs := Register(t, p.DevA, src, 0)
	rd := Register(t, p.DevB, dst, transport.AccessLocalWrite)
	size := func(i int) int { return 8 + (i*37)%(slot-8) }
	for i := range count {
		// Each message starts with its index, so a reordering is visible
		// even where patterns would match.
		binary.LittleEndian.PutUint64(src[i*slot:], uint64(i))
	}
	for i := range count {
		if err := p.B.PostRecv(uint64(i), rd, i*slot, slot); err != nil {
			t.Fatalf("post recv %d: %v", i, err)
		}
	}
	for i := range count {
		if err := p.A.PostSend(uint64(i), rs, i*slot, size(i)); err != nil {
			t.Fatalf("post send %d: %v", i, err)
		}
	}
	recvs := WaitN(t, p.CQB, count, ShortTimeout)
	sends := WaitN(t, p.CQA, count, ShortTimeout)
	for i := range count {
		ExpectOK(t, recvs[i], transport.OpRecv, uint64(i), size(i))
		if recvs[i].HasImm || recvs[i].Endpoint != p.B {
			t.Fatalf("recv %d: HasImm=%v, endpoint %v (want B's)", i, recvs[i].HasImm, recvs[i].Endpoint)
		}
		ExpectOK(t, sends[i], transport.OpSend, uint64(i), size(i))
		if sends[i].Endpoint != p.A {
			t.Fatalf("send %d: completion names endpoint %v, want A's", i, sends[i].Endpoint)
		}
		ExpectBytes(t, fmt.Sprintf("message %d", i), dst[i*slot:i*slot+size(i)], src[i*slot:i*slot+size(i)])
	}
}

// testMixedRecvConsumers interleaves sends and writes-with-immediate: both
// consume receives in arrival order.
func testMixedRecvConsumers(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const count, slot = 300, 64
	src := Pattern(count*slot, 2)
	dst := make([]byte, count*slot)
	win := make([]byte, count*slot)
	rs := Register(t, p.DevA, src, 0)
	rd := Register(t, p.DevB, dst, transport.AccessLocalWrite)
	rw := Register(t, p.DevB, win, transport.AccessRemoteWrite)
	isImm := func(i int) bool { return i%3 == 1 }
	for i := range count {
		if err := p.B.PostRecv(uint64(i), rd, i*slot, slot); err != nil {
			t.Fatalf("post recv %d: %v", i, err)
		}
	}
	for i := range count {
		var err error
		if isImm(i) {
			imm := uint32(0xA0000000 + i)
			err = p.A.PostWrite(uint64(i), rs, i*slot, slot, rw.Remote(), uint64(i*slot), &imm)
		} else {
			err = p.A.PostSend(uint64(i), rs, i*slot, slot)
		}
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	recvs := WaitN(t, p.CQB, count, ShortTimeout)
	local := ByID(t, WaitN(t, p.CQA, count, ShortTimeout))
	for i := range count {
		c := recvs[i]
		ExpectOK(t, c, transport.OpRecv, uint64(i), slot)
		if isImm(i) {
			if !c.HasImm || c.Imm != uint32(0xA0000000+i) {
				t.Fatalf("recv %d: %s; want the immediate %#x", i, describe(c), 0xA0000000+i)
			}
			ExpectOK(t, local[uint64(i)], transport.OpWrite, uint64(i), slot)
			ExpectBytes(t, fmt.Sprintf("write %d", i), win[i*slot:(i+1)*slot], src[i*slot:(i+1)*slot])
			expectAll(t, fmt.Sprintf("recv buffer %d of a write-with-immediate", i), dst[i*slot:(i+1)*slot], 0)
		} else {
			if c.HasImm {
				t.Fatalf("recv %d: %s; completed by a send, want no immediate", i, describe(c))
			}
			ExpectOK(t, local[uint64(i)], transport.OpSend, uint64(i), slot)
			ExpectBytes(t, fmt.Sprintf("message %d", i), dst[i*slot:(i+1)*slot], src[i*slot:(i+1)*slot])
		}
	}
}

// testRecvPostedLate sends before the receiver posts its receives: the
// messages wait and complete the receives once posted, in order.
func testRecvPostedLate(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const count, n = 8, 1000
	src := Pattern(count*n, 3)
	dst := make([]byte, count*n)
	rs := Register(t, p.DevA, src, 0)
	rd := Register(t, p.DevB, dst, transport.AccessLocalWrite)
	for i := range count {
		if err := p.A.PostSend(uint64(i), rs, i*n, n); err != nil {
			t.Fatalf("post send %d: %v", i, err)
		}
	}
	// Let the messages reach B (a backend may also hold them at A).
	ExpectQuiet(t, p.CQB, quiet)
	for i := range count {
		if err := p.B.PostRecv(uint64(100+i), rd, i*n, n); err != nil {
			t.Fatalf("post recv %d: %v", i, err)
		}
		if i == count/2 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	recvs := WaitN(t, p.CQB, count, ShortTimeout)
	sends := WaitN(t, p.CQA, count, ShortTimeout)
	for i := range count {
		ExpectOK(t, recvs[i], transport.OpRecv, uint64(100+i), n)
		ExpectOK(t, sends[i], transport.OpSend, uint64(i), n)
	}
	ExpectBytes(t, "received messages", dst, src)
}

// testRecvTooShort sends a message longer than the posted receive: both
// sides get ErrLength and both endpoints enter the error state.
func testRecvTooShort(t *testing.T, f Factory) {
	p := NewPair(t, f)
	src := Pattern(100, 4)
	dst := make([]byte, 100)
	rs := Register(t, p.DevA, src, transport.AccessLocalWrite)
	rd := Register(t, p.DevB, dst, transport.AccessLocalWrite)
	if err := p.B.PostRecv(7, rd, 0, 10); err != nil {
		t.Fatalf("post recv: %v", err)
	}
	if err := p.A.PostSend(1, rs, 0, 100); err != nil {
		t.Fatalf("post send: %v", err)
	}
	ExpectErr(t, WaitOne(t, p.CQB, ShortTimeout), transport.OpRecv, 7, transport.ErrLength)
	ExpectErr(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpSend, 1, transport.ErrLength)
	expectAll(t, "bytes past the short receive", dst[10:], 0)
	expectPostsRefused(t, p, transport.ErrLength)
}

// expectPostsRefused checks that both endpoints of p are in the error state:
// every kind of post is refused with an error wrapping one of causes, and
// produces no completion.
func expectPostsRefused(t *testing.T, p *Pair, causes ...error) {
	t.Helper()
	expectRefused(t, "A", p.DevA, p.A, causes...)
	expectRefused(t, "B", p.DevB, p.B, causes...)
	ExpectQuiet(t, p.CQA, quiet/5)
	ExpectEmpty(t, p.CQB)
}

// expectRefused checks that every kind of post on ep is refused with an
// error wrapping one of causes.
func expectRefused(t *testing.T, side string, dev transport.Device, ep transport.Endpoint, causes ...error) {
	t.Helper()
	r := Register(t, dev, make([]byte, 64), transport.AccessLocalWrite)
	// A descriptor of the local region is as good as any: the post must be
	// refused before it is looked at.
	rr := r.Remote()
	posts := []struct {
		kind string
		err  error
	}{
		{"send", ep.PostSend(900, r, 0, 8)},
		{"recv", ep.PostRecv(901, r, 0, 8)},
		{"write", ep.PostWrite(902, r, 0, 8, rr, 0, nil)},
		{"read", ep.PostRead(903, r, 0, 8, rr, 0)},
	}
	for _, p := range posts {
		if p.err == nil || !anyOf(p.err, causes...) {
			t.Errorf("side %s in the error state: post %s returned %v, want an error wrapping one of %v", side, p.kind, p.err, causes)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// testZeroByte checks zero-byte send, write, write-with-immediate and read.
func testZeroByte(t *testing.T, f Factory) {
	p := NewPair(t, f)
	a := make([]byte, 64)
	b := make([]byte, 64)
	fillByte(a, 0xAA)
	fillByte(b, 0xBB)
	ra := Register(t, p.DevA, a, transport.AccessAll)
	rb := Register(t, p.DevB, b, transport.AccessAll)
	if err := p.B.PostRecv(10, rb, 0, 0); err != nil {
		t.Fatalf("post recv 0 bytes: %v", err)
	}
	if err := p.B.PostRecv(11, rb, 8, 16); err != nil {
		t.Fatalf("post recv 16 bytes: %v", err)
	}
	if err := p.A.PostSend(1, ra, 0, 0); err != nil {
		t.Fatalf("post send 0 bytes: %v", err)
	}
	if err := p.A.PostSend(2, ra, 64, 0); err != nil {
		t.Fatalf("post send 0 bytes at the end of the region: %v", err)
	}
	if err := p.A.PostWrite(3, ra, 0, 0, rb.Remote(), 5, nil); err != nil {
		t.Fatalf("post write 0 bytes: %v", err)
	}
	if err := p.A.PostRead(4, ra, 0, 0, rb.Remote(), 64); err != nil {
		t.Fatalf("post read 0 bytes: %v", err)
	}
	if err := p.B.PostRecv(12, rb, 0, 0); err != nil {
		t.Fatalf("post recv 0 bytes: %v", err)
	}
	imm := uint32(0xfeedf00d)
	if err := p.A.PostWrite(5, ra, 0, 0, rb.Remote(), 0, &imm); err != nil {
		t.Fatalf("post write-with-immediate 0 bytes: %v", err)
	}
	recvs := WaitN(t, p.CQB, 3, ShortTimeout)
	ExpectOK(t, recvs[0], transport.OpRecv, 10, 0)
	ExpectOK(t, recvs[1], transport.OpRecv, 11, 0)
	ExpectOK(t, recvs[2], transport.OpRecv, 12, 0)
	if recvs[0].HasImm || recvs[1].HasImm || !recvs[2].HasImm || recvs[2].Imm != imm {
		t.Fatalf("immediates wrong:\n%s", Describe(recvs))
	}
	local := ByID(t, WaitN(t, p.CQA, 5, ShortTimeout))
	ExpectOK(t, local[1], transport.OpSend, 1, 0)
	ExpectOK(t, local[2], transport.OpSend, 2, 0)
	ExpectOK(t, local[3], transport.OpWrite, 3, 0)
	ExpectOK(t, local[4], transport.OpRead, 4, 0)
	ExpectOK(t, local[5], transport.OpWrite, 5, 0)
	expectAll(t, "A's buffer", a, 0xAA)
	expectAll(t, "B's buffer", b, 0xBB)
}
