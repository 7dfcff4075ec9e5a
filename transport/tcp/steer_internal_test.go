package tcp

import (
	"bytes"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestSteer: a write-with-immediate that matches an armed entry (region,
// offset, length, immediate) is placed into the entry's buffer and not
// into its target; any other goes to its target; a disarmed entry steers
// nothing.
func TestSteer(t *testing.T) {
	const n, off, imm = 40 << 10, 8 << 10, uint32(0x4000_1234)
	for _, tc := range []struct {
		name    string
		arm     func(e *endpoint, staging transport.Region, dst []byte) bool
		steered bool
	}{
		{"match", func(e *endpoint, s transport.Region, dst []byte) bool {
			return e.Steer(5, s, off, imm, dst)
		}, true},
		{"other immediate", func(e *endpoint, s transport.Region, dst []byte) bool {
			return e.Steer(5, s, off, imm+1, dst)
		}, false},
		{"other length", func(e *endpoint, s transport.Region, dst []byte) bool {
			return e.Steer(5, s, off, imm, dst[:n-1])
		}, false},
		{"other offset", func(e *endpoint, s transport.Region, dst []byte) bool {
			return e.Steer(5, s, off+1, imm, dst)
		}, false},
		{"disarmed", func(e *endpoint, s transport.Region, dst []byte) bool {
			if !e.Steer(5, s, off, imm, dst) {
				return false
			}
			return !e.Unsteer(5)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pairWith(t, nil)
			src := transporttest.Register(t, p.DevA, transporttest.Pattern(n, 3), 0)
			staging := transporttest.Register(t, p.DevB, make([]byte, 64<<10), transport.AccessAll)
			user := make([]byte, 64<<10)
			userReg := transporttest.Register(t, p.DevB, user, transport.AccessLocalWrite)
			dst := userReg.Bytes()[4<<10 : 4<<10+n]
			b := p.B.(*endpoint)
			if !tc.arm(b, staging, dst) {
				t.Fatal("arming refused")
			}
			if err := p.B.PostRecv(9, staging, 0, 0); err != nil {
				t.Fatal(err)
			}
			v := imm
			if err := p.A.PostWrite(1, src, 0, n, staging.Remote(), off, &v); err != nil {
				t.Fatal(err)
			}
			c := transporttest.WaitOne(t, p.CQB, 5*time.Second)
			transporttest.ExpectOK(t, c, transport.OpRecv, 9, n)
			if !c.HasImm || c.Imm != imm {
				t.Fatalf("receive %+v: want immediate %#x", c, imm)
			}
			transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQA, 5*time.Second), transport.OpWrite, 1, n)
			if got := b.Unsteer(5); got != tc.steered {
				t.Fatalf("Unsteer = %v, want %v", got, tc.steered)
			}
			target := staging.Bytes()[off : off+n]
			if tc.steered {
				transporttest.ExpectBytes(t, "steered buffer", dst, src.Bytes())
				if !bytes.Equal(target, make([]byte, n)) {
					t.Error("the target region was written too")
				}
			} else {
				transporttest.ExpectBytes(t, "target", target, src.Bytes())
				if !bytes.Equal(user, make([]byte, len(user))) {
					t.Error("the buffer of an entry that matches nothing was written")
				}
			}
			if b.steering.Load() != 0 {
				t.Errorf("%d entries armed after Unsteer", b.steering.Load())
			}
			pingPong(t, p)
		})
	}
}

// TestSteerRefused: Steer arms nothing it cannot honour.
func TestSteerRefused(t *testing.T) {
	p := pairWith(t, nil)
	staging := transporttest.Register(t, p.DevB, make([]byte, 64<<10), transport.AccessAll)
	other := transporttest.Register(t, p.DevA, make([]byte, 64<<10), transport.AccessAll)
	dst := make([]byte, 1024)
	b := p.B.(*endpoint)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"index below 0", b.Steer(-1, staging, 0, 1, dst)},
		{"index beyond MaxSteer", b.Steer(transport.MaxSteer, staging, 0, 1, dst)},
		{"region of another device", b.Steer(0, other, 0, 1, dst)},
		{"out of bounds", b.Steer(0, staging, 64<<10-1023, 1, dst)},
		{"negative offset", b.Steer(0, staging, -1, 1, dst)},
		{"empty buffer", b.Steer(0, staging, 0, 1, nil)},
	} {
		if tc.ok {
			t.Errorf("%s: armed", tc.name)
		}
	}
	if !b.Steer(0, staging, 0, 1, dst) {
		t.Fatal("a valid entry refused")
	}
	if b.Steer(0, staging, 1024, 1, dst) {
		t.Error("an armed entry armed again")
	}
	if b.Unsteer(0) || b.Unsteer(1) || b.Unsteer(-1) {
		t.Error("Unsteer of an entry nothing was placed into reported a placement")
	}
	if b.steering.Load() != 0 {
		t.Errorf("%d entries armed after Unsteer", b.steering.Load())
	}
}

// TestUnsteerWhilePlacing: Unsteer during the placement of a steered write
// sends the rest of the payload to the write's target, so that nothing is
// written into the buffer once Unsteer has returned.
func TestUnsteerWhilePlacing(t *testing.T) {
	p := pairWith(t, nil)
	staging := transporttest.Register(t, p.DevB, make([]byte, 64<<10), transport.AccessAll)
	b := p.B.(*endpoint)
	dst := make([]byte, 32<<10)
	if !b.Steer(3, staging, 4096, 7, dst) {
		t.Fatal("arming refused")
	}
	// The state a lane is in when a steered frame's payload is half read
	// (as begin leaves it, plus 100 bytes placed).
	l := connectedLane(t, b)
	r, _ := b.dev.localRegion(staging)
	h := header{typ: msgWrite, flags: flagImm, imm: 7, offset: 4096, length: uint64(len(dst))}
	l.rxMu.Lock()
	l.rx.expect(&h, tgtWrite, r.buf[4096:4096+len(dst)], nil)
	if i := b.steerTake(r, &h); i != 3 {
		l.rxMu.Unlock()
		t.Fatalf("steerTake = %d, want 3", i)
	}
	l.rx.dst, l.rx.steer, l.rx.got = dst, 3, 100
	l.rxMu.Unlock()

	if b.Unsteer(3) {
		t.Error("Unsteer during placement reported the write placed")
	}
	l.rxMu.Lock()
	gotDst, gotSteer := l.rx.dst, l.rx.steer
	l.rx.busy, l.rx.dst, l.rx.got = false, nil, 0 // as it was
	l.rxMu.Unlock()
	if gotSteer != -1 || len(gotDst) != len(dst) || &gotDst[0] != &r.buf[4096] {
		t.Errorf("after Unsteer the frame still goes to the steered buffer (steer %d)", gotSteer)
	}
	if b.Steer(3, staging, 0, 7, dst) != true || b.Unsteer(3) {
		t.Error("the entry is not free again after Unsteer")
	}
}
