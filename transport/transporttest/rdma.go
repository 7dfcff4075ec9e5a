package transporttest

import (
	"testing"

	"github.com/goccl/goccl/transport"
)

// testWriteImm checks that a write-with-immediate places its data and
// completes the peer's posted receive with HasImm, Imm and Bytes, leaving
// the receive's buffer alone.
func testWriteImm(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const n = 4096
	src := Pattern(n, 5)
	win := make([]byte, 2*n)
	rbuf := make([]byte, 16)
	fillByte(rbuf, 0x5A)
	rs := Register(t, p.DevA, src, 0)
	rw := Register(t, p.DevB, win, transport.AccessRemoteWrite)
	rr := Register(t, p.DevB, rbuf, transport.AccessLocalWrite)
	if err := p.B.PostRecv(20, rr, 0, len(rbuf)); err != nil {
		t.Fatalf("post recv: %v", err)
	}
	imm := uint32(0xC0FFEE01)
	if err := p.A.PostWrite(1, rs, 0, n, rw.Remote(), n, &imm); err != nil {
		t.Fatalf("post write-with-immediate: %v", err)
	}
	c := WaitOne(t, p.CQB, ShortTimeout)
	ExpectOK(t, c, transport.OpRecv, 20, n)
	if !c.HasImm || c.Imm != imm || c.Endpoint != p.B {
		t.Fatalf("recv completion %s (endpoint %v): want HasImm, imm %#x, B's endpoint", describe(c), c.Endpoint, imm)
	}
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpWrite, 1, n)
	ExpectBytes(t, "written data", win[n:], src)
	expectAll(t, "window before the written range", win[:n], 0)
	expectAll(t, "receive buffer", rbuf, 0x5A)
}

// testWriteImmBeforeRecv writes with immediate before the peer posts a
// receive: the immediate waits for the receive.
func testWriteImmBeforeRecv(t *testing.T, f Factory) {
	p := NewPair(t, f)
	src := Pattern(512, 6)
	win := make([]byte, 512)
	rs := Register(t, p.DevA, src, transport.AccessLocalWrite)
	rw := Register(t, p.DevB, win, transport.AccessRemoteWrite|transport.AccessLocalWrite)
	for i := range 4 {
		imm := uint32(i + 1)
		if err := p.A.PostWrite(uint64(i), rs, i*128, 128, rw.Remote(), uint64(i*128), &imm); err != nil {
			t.Fatalf("post write-with-immediate %d: %v", i, err)
		}
	}
	ExpectQuiet(t, p.CQB, quiet)
	for i := range 4 {
		if err := p.B.PostRecv(uint64(40+i), rw, 0, 0); err != nil {
			t.Fatalf("post recv %d: %v", i, err)
		}
	}
	recvs := WaitN(t, p.CQB, 4, ShortTimeout)
	for i, c := range recvs {
		ExpectOK(t, c, transport.OpRecv, uint64(40+i), 128)
		if !c.HasImm || c.Imm != uint32(i+1) {
			t.Fatalf("recv %d: %s; want immediate %d", i, describe(c), i+1)
		}
	}
	for i, c := range WaitN(t, p.CQA, 4, ShortTimeout) {
		ExpectOK(t, c, transport.OpWrite, uint64(i), 128)
	}
	ExpectBytes(t, "written data", win, src)
}

// testWriteAtOffset writes a range into the middle of the peer's region.
func testWriteAtOffset(t *testing.T, f Factory) {
	p := NewPair(t, f)
	src := Pattern(8192, 7)
	win := make([]byte, 8192)
	fillByte(win, 0xEE)
	rs := Register(t, p.DevA, src, 0)
	rw := Register(t, p.DevB, win, transport.AccessRemoteWrite)
	const off, roff, n = 321, 4000, 1000
	if err := p.A.PostWrite(3, rs, off, n, rw.Remote(), roff, nil); err != nil {
		t.Fatalf("post write: %v", err)
	}
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpWrite, 3, n)
	ExpectBytes(t, "written range", win[roff:roff+n], src[off:off+n])
	expectAll(t, "before the written range", win[:roff], 0xEE)
	expectAll(t, "after the written range", win[roff+n:], 0xEE)
	ExpectEmpty(t, p.CQB)
}

// testReadAtOffset reads a range of the peer's region into the middle of a
// local region, and a whole region at offset 0.
func testReadAtOffset(t *testing.T, f Factory) {
	p := NewPair(t, f)
	remote := Pattern(8192, 8)
	local := make([]byte, 16384)
	fillByte(local, 0xEE)
	rr := Register(t, p.DevB, remote, transport.AccessRemoteRead)
	rl := Register(t, p.DevA, local, transport.AccessLocalWrite)
	const off, roff, n = 777, 123, 1000
	if err := p.A.PostRead(4, rl, off, n, rr.Remote(), roff); err != nil {
		t.Fatalf("post read: %v", err)
	}
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpRead, 4, n)
	ExpectBytes(t, "read range", local[off:off+n], remote[roff:roff+n])
	expectAll(t, "before the read range", local[:off], 0xEE)
	expectAll(t, "after the read range", local[off+n:], 0xEE)

	if err := p.A.PostRead(5, rl, 8192, 8192, rr.Remote(), 0); err != nil {
		t.Fatalf("post read of the whole region: %v", err)
	}
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpRead, 5, 8192)
	ExpectBytes(t, "whole region read", local[8192:], remote)
	ExpectEmpty(t, p.CQB)
}

// testWriteThenSendVisible checks the property collectives build on: when a
// message posted after a write completes a receive on the peer, the data of
// the write is already in place.
func testWriteThenSendVisible(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const rounds, n = 50, 64 << 10
	src := Pattern(rounds*n, 9)
	win := make([]byte, rounds*n)
	note := make([]byte, 8)
	rs := Register(t, p.DevA, src, 0)
	rw := Register(t, p.DevB, win, transport.AccessRemoteWrite)
	rn := Register(t, p.DevB, note, transport.AccessLocalWrite)
	for i := range rounds {
		if err := p.B.PostRecv(uint64(i), rn, 0, 0); err != nil {
			t.Fatalf("post recv: %v", err)
		}
	}
	for i := range rounds {
		if err := p.A.PostWrite(uint64(2*i), rs, i*n, n, rw.Remote(), uint64(i*n), nil); err != nil {
			t.Fatalf("post write: %v", err)
		}
		if err := p.A.PostSend(uint64(2*i+1), rs, 0, 0); err != nil {
			t.Fatalf("post send: %v", err)
		}
	}
	for i := range rounds {
		ExpectOK(t, WaitOne(t, p.CQB, ShortTimeout), transport.OpRecv, uint64(i), 0)
		ExpectBytes(t, "data written before the notification", win[i*n:(i+1)*n], src[i*n:(i+1)*n])
	}
	WaitN(t, p.CQA, 2*rounds, ShortTimeout)
}

// testWriteThenReadOrdered checks that a read posted after a write to the
// same place returns the written data.
func testWriteThenReadOrdered(t *testing.T, f Factory) {
	p := NewPair(t, f)
	const rounds, n = 50, 4096
	src := Pattern(rounds*n, 10)
	back := make([]byte, rounds*n)
	win := make([]byte, n)
	rs := Register(t, p.DevA, src, 0)
	rb := Register(t, p.DevA, back, transport.AccessLocalWrite)
	rw := Register(t, p.DevB, win, transport.AccessRemoteWrite|transport.AccessRemoteRead)
	for i := range rounds {
		if err := p.A.PostWrite(uint64(2*i), rs, i*n, n, rw.Remote(), 0, nil); err != nil {
			t.Fatalf("post write: %v", err)
		}
		if err := p.A.PostRead(uint64(2*i+1), rb, i*n, n, rw.Remote(), 0); err != nil {
			t.Fatalf("post read: %v", err)
		}
	}
	cs := ByID(t, WaitN(t, p.CQA, 2*rounds, ShortTimeout))
	for i := range rounds {
		ExpectOK(t, cs[uint64(2*i)], transport.OpWrite, uint64(2*i), n)
		ExpectOK(t, cs[uint64(2*i+1)], transport.OpRead, uint64(2*i+1), n)
	}
	ExpectBytes(t, "read after each write", back, src)
}
