package transporttest

import (
	"math"
	"testing"

	"github.com/goccl/goccl/transport"
)

// accessCase is one remote access the target must refuse.
type accessCase struct {
	name   string
	op     transport.Op // OpWrite or OpRead
	imm    bool
	access transport.Access // of the target region
	revoke bool             // deregister the target region first
	// foreign addresses a region of the initiator's own device instead.
	foreign bool
	key     func(uint64) uint64
	roff    uint64
	n       int
}

// target is the size of the region the refused accesses aim at.
const target = 4096

func wrongKey(k uint64) uint64 { return k ^ (1<<63 | 0x5bd1e995) }

var accessCases = []accessCase{
	{name: "Write/WrongKey", op: transport.OpWrite, access: transport.AccessAll, key: wrongKey, n: 64},
	{name: "Write/ForeignKey", op: transport.OpWrite, access: transport.AccessAll, foreign: true, n: 64},
	{name: "Write/PastEnd", op: transport.OpWrite, access: transport.AccessAll, roff: target - 99, n: 100},
	{name: "Write/LongerThanRegion", op: transport.OpWrite, access: transport.AccessAll, n: target + 1},
	{name: "Write/OffsetPastEnd", op: transport.OpWrite, access: transport.AccessAll, roff: target + 1000, n: 1},
	{name: "Write/OffsetOverflow", op: transport.OpWrite, access: transport.AccessAll, roff: math.MaxUint64, n: 16},
	{name: "Write/OffsetWraps", op: transport.OpWrite, access: transport.AccessAll, roff: math.MaxUint64 - 7, n: 16},
	{name: "Write/Revoked", op: transport.OpWrite, access: transport.AccessAll, revoke: true, n: 64},
	{name: "Write/NoRemoteWrite", op: transport.OpWrite, access: transport.AccessLocalWrite | transport.AccessRemoteRead, n: 64},
	{name: "WriteImm/WrongKey", op: transport.OpWrite, imm: true, access: transport.AccessAll, key: wrongKey, n: 64},
	{name: "WriteImm/PastEnd", op: transport.OpWrite, imm: true, access: transport.AccessAll, roff: target, n: 1},
	{name: "WriteImm/NoRemoteWrite", op: transport.OpWrite, imm: true, access: transport.AccessLocalWrite | transport.AccessRemoteRead, n: 64},
	{name: "Read/WrongKey", op: transport.OpRead, access: transport.AccessAll, key: wrongKey, n: 64},
	{name: "Read/PastEnd", op: transport.OpRead, access: transport.AccessAll, roff: target - 10, n: 11},
	{name: "Read/OffsetOverflow", op: transport.OpRead, access: transport.AccessAll, roff: math.MaxUint64, n: 16},
	{name: "Read/OffsetWraps", op: transport.OpRead, access: transport.AccessAll, roff: math.MaxUint64 - 7, n: 16},
	{name: "Read/Revoked", op: transport.OpRead, access: transport.AccessAll, revoke: true, n: 64},
	{name: "Read/NoRemoteRead", op: transport.OpRead, access: transport.AccessLocalWrite | transport.AccessRemoteWrite, n: 64},
}

// testRemoteAccessErrors runs every refused access: the initiator's request
// fails with ErrRemoteAccess, the target reports OpRemoteError, no memory is
// touched, pending requests on both sides are flushed and later posts on
// both sides are refused.
func testRemoteAccessErrors(t *testing.T, f Factory) {
	for _, tc := range accessCases {
		t.Run(tc.name, func(t *testing.T) { testRemoteAccessError(t, f, tc) })
	}
}

func testRemoteAccessError(t *testing.T, f Factory, tc accessCase) {
	p := NewPair(t, f)
	local := make([]byte, 2*target)
	fillByte(local, 0xA7)
	win := make([]byte, target)
	fillByte(win, 0xB7)
	spare := make([]byte, 64)
	rl := Register(t, p.DevA, local, transport.AccessLocalWrite)
	rw := Register(t, p.DevB, win, tc.access)
	rsA := Register(t, p.DevA, spare[:32], transport.AccessAll)
	rsB := Register(t, p.DevB, spare[32:], transport.AccessLocalWrite)
	remote := rw.Remote()
	if tc.key != nil {
		remote.Key = tc.key(remote.Key)
	}
	if tc.foreign {
		remote = rsA.Remote()
	}
	if tc.revoke {
		if err := p.DevB.Deregister(rw); err != nil {
			t.Fatalf("deregister: %v", err)
		}
	}
	// A pending request on each side, flushed by the error.
	if err := p.A.PostRecv(100, rsA, 0, 32); err != nil {
		t.Fatalf("post recv on A: %v", err)
	}
	if err := p.B.PostRecv(200, rsB, 0, 32); err != nil {
		t.Fatalf("post recv on B: %v", err)
	}
	var err error
	switch {
	case tc.op == transport.OpRead:
		err = p.A.PostRead(1, rl, 0, tc.n, remote, tc.roff)
	case tc.imm:
		imm := uint32(77)
		err = p.A.PostWrite(1, rl, 0, tc.n, remote, tc.roff, &imm)
	default:
		err = p.A.PostWrite(1, rl, 0, tc.n, remote, tc.roff, nil)
	}
	if err != nil {
		t.Fatalf("post %v: %v (the initiator cannot know the remote access is bad)", tc.op, err)
	}
	a := ByID(t, WaitN(t, p.CQA, 2, ShortTimeout))
	ExpectErr(t, a[1], tc.op, 1, transport.ErrRemoteAccess)
	ExpectErr(t, a[100], transport.OpRecv, 100, transport.ErrFlushed, transport.ErrRemoteAccess)
	b := ByID(t, WaitN(t, p.CQB, 2, ShortTimeout))
	ExpectErr(t, b[0], transport.OpRemoteError, 0, transport.ErrRemoteAccess)
	if b[0].Endpoint != p.B {
		t.Fatalf("remote error completion names endpoint %v, want B's", b[0].Endpoint)
	}
	ExpectErr(t, b[200], transport.OpRecv, 200, transport.ErrFlushed, transport.ErrRemoteAccess)
	expectAll(t, "target region", win, 0xB7)
	expectAll(t, "initiator's buffer", local, 0xA7)
	expectAll(t, "flushed receive buffers", spare, 0)
	expectPostsRefused(t, p, transport.ErrRemoteAccess)
}

// testLocalInvalid checks that local misuse is refused at post time with
// ErrInvalid, with no completion and no traffic, and leaves the endpoint
// usable.
func testLocalInvalid(t *testing.T, f Factory) {
	p := NewPair(t, f)
	buf := Pattern(1024, 30)
	ra := Register(t, p.DevA, buf, transport.AccessAll)
	rnw := Register(t, p.DevA, make([]byte, 1024), transport.AccessRemoteRead|transport.AccessRemoteWrite)
	dead, err := p.DevA.Register(make([]byte, 1024), transport.AccessAll)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if err := p.DevA.Deregister(dead); err != nil {
		t.Fatalf("deregister: %v", err)
	}
	foreign := Register(t, p.DevB, make([]byte, 1024), transport.AccessAll)
	dst := make([]byte, 1024)
	rb := Register(t, p.DevB, dst, transport.AccessAll)
	rr := rb.Remote()
	unconnected := NewEndpoint(t, p.DevA, p.CQA)

	posts := []struct {
		name string
		err  error
	}{
		{"send past end", p.A.PostSend(1, ra, 1000, 25)},
		{"send offset past end", p.A.PostSend(2, ra, 1025, 0)},
		{"send negative offset", p.A.PostSend(3, ra, -1, 10)},
		{"send negative length", p.A.PostSend(4, ra, 0, -1)},
		{"send length overflow", p.A.PostSend(5, ra, 1, math.MaxInt)},
		{"send nil region", p.A.PostSend(6, nil, 0, 8)},
		{"send deregistered region", p.A.PostSend(7, dead, 0, 8)},
		{"send region of another device", p.A.PostSend(8, foreign, 0, 8)},
		{"recv past end", p.A.PostRecv(9, ra, 512, 513)},
		{"recv without local write", p.A.PostRecv(10, rnw, 0, 10)},
		{"recv negative length", p.A.PostRecv(11, ra, 0, -5)},
		{"write past end", p.A.PostWrite(12, ra, 1000, 100, rr, 0, nil)},
		{"write negative offset", p.A.PostWrite(13, ra, -5, 10, rr, 0, nil)},
		{"write-imm past end", p.A.PostWrite(14, ra, 1020, 8, rr, 0, new(uint32(1)))},
		{"read past end", p.A.PostRead(15, ra, 1020, 8, rr, 0)},
		{"read into region without local write", p.A.PostRead(16, rnw, 0, 8, rr, 0)},
		{"read into deregistered region", p.A.PostRead(17, dead, 0, 8, rr, 0)},
		{"send on unconnected endpoint", unconnected.PostSend(18, ra, 0, 8)},
		{"recv on unconnected endpoint", unconnected.PostRecv(19, ra, 0, 8)},
		{"write on unconnected endpoint", unconnected.PostWrite(20, ra, 0, 8, rr, 0, nil)},
		{"read on unconnected endpoint", unconnected.PostRead(21, ra, 0, 8, rr, 0)},
	}
	for _, p := range posts {
		if !anyOf(p.err, transport.ErrInvalid) {
			t.Errorf("%s: post returned %v, want an error wrapping ErrInvalid", p.name, p.err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// Nothing was sent: the next receive on B takes the next valid message.
	if err := p.B.PostRecv(70, rb, 0, 1024); err != nil {
		t.Fatalf("post recv: %v", err)
	}
	if err := p.A.PostSend(50, ra, 100, 16); err != nil {
		t.Fatalf("valid send after refused posts: %v", err)
	}
	ExpectOK(t, WaitOne(t, p.CQB, ShortTimeout), transport.OpRecv, 70, 16)
	ExpectBytes(t, "message after refused posts", dst[:16], buf[100:116])
	expectAll(t, "rest of the receive buffer", dst[16:], 0)
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpSend, 50, 16)
	ExpectQuiet(t, p.CQA, quiet)
	ExpectEmpty(t, p.CQB)
}
