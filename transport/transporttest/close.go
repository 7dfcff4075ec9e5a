package transporttest

import (
	"testing"

	"github.com/goccl/goccl/transport"
)

// testPeerClosed closes B (its endpoint, or its whole device) while A has
// receives and reads pending: A's pending requests complete, the receives
// with ErrPeerClosed or ErrLink, and later posts on A are refused.
func testPeerClosed(t *testing.T, f Factory) {
	for _, how := range []string{"Endpoint", "Device"} {
		t.Run(how, func(t *testing.T) {
			p := NewPair(t, f)
			const reads, n = 16, 256 << 10
			remote := Pattern(reads*n, 40)
			local := make([]byte, reads*n)
			rr := Register(t, p.DevB, remote, transport.AccessRemoteRead)
			rl := Register(t, p.DevA, local, transport.AccessLocalWrite)
			for i := range 4 {
				if err := p.A.PostRecv(uint64(100+i), rl, i*64, 64); err != nil {
					t.Fatalf("post recv: %v", err)
				}
			}
			for i := range reads {
				if err := p.A.PostRead(uint64(i), rl, i*n, n, rr.Remote(), uint64(i*n)); err != nil {
					t.Fatalf("post read: %v", err)
				}
			}
			var err error
			if how == "Endpoint" {
				err = p.B.Close()
			} else {
				err = p.DevB.Close()
			}
			if err != nil {
				t.Fatalf("close B's %s: %v", how, err)
			}
			cs := ByID(t, WaitN(t, p.CQA, 4+reads, ShortTimeout))
			for i := range 4 {
				c := cs[uint64(100+i)]
				if c.Op != transport.OpRecv || !anyOf(c.Err, transport.ErrPeerClosed, transport.ErrLink) {
					t.Fatalf("pending recv after the peer closed: %s; want an error wrapping ErrPeerClosed or ErrLink", describe(c))
				}
			}
			// A read may have completed before the close; one that did not
			// fails with the peer's cause.
			for i := range reads {
				c := cs[uint64(i)]
				if c.Op != transport.OpRead {
					t.Fatalf("read %d: completion %s", i, describe(c))
				}
				if c.Err == nil {
					ExpectOK(t, c, transport.OpRead, uint64(i), n)
					ExpectBytes(t, "read completed before the close", local[i*n:(i+1)*n], remote[i*n:(i+1)*n])
				} else if !anyOf(c.Err, transport.ErrPeerClosed, transport.ErrLink) {
					t.Fatalf("read %d: %s; want success or an error wrapping ErrPeerClosed or ErrLink", i, describe(c))
				}
			}
			expectRefused(t, "A", p.DevA, p.A, transport.ErrPeerClosed, transport.ErrLink)
			ExpectQuiet(t, p.CQA, quiet)
		})
	}
}

// testLocalClose closes A's endpoint with receives pending on both sides:
// A's complete with ErrClosed, B's with ErrPeerClosed or ErrLink, and later
// posts are refused on both sides with those causes.
func testLocalClose(t *testing.T, f Factory) {
	p := NewPair(t, f)
	ra := Register(t, p.DevA, make([]byte, 256), transport.AccessLocalWrite)
	rb := Register(t, p.DevB, make([]byte, 256), transport.AccessLocalWrite)
	for i := range 4 {
		if err := p.A.PostRecv(uint64(100+i), ra, i*64, 64); err != nil {
			t.Fatalf("post recv on A: %v", err)
		}
	}
	for i := range 3 {
		if err := p.B.PostRecv(uint64(200+i), rb, i*64, 64); err != nil {
			t.Fatalf("post recv on B: %v", err)
		}
	}
	if err := p.A.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for i, c := range WaitN(t, p.CQA, 4, ShortTimeout) {
		ExpectErr(t, c, transport.OpRecv, uint64(100+i), transport.ErrClosed)
	}
	for i, c := range WaitN(t, p.CQB, 3, ShortTimeout) {
		if c.Op != transport.OpRecv || c.ID != uint64(200+i) || !anyOf(c.Err, transport.ErrPeerClosed, transport.ErrLink) {
			t.Fatalf("B's pending recv %d: %s; want an error wrapping ErrPeerClosed or ErrLink", i, describe(c))
		}
	}
	expectRefused(t, "A", p.DevA, p.A, transport.ErrClosed)
	expectRefused(t, "B", p.DevB, p.B, transport.ErrPeerClosed, transport.ErrLink)
	ExpectQuiet(t, p.CQA, quiet)
	ExpectEmpty(t, p.CQB)
}
