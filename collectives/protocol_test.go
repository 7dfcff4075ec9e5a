package collectives

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestExecutorProtocolErrors: a peer that breaks the link protocol (a
// message without an immediate, an immediate of no known type, more
// credits than slots, a block of the wrong length, more blocks than the
// call takes, a block of an earlier call) fails the receiving rank's call at once with an error that names
// both ranks and what was wrong, instead of corrupting its buffer or
// waiting. Rank 1 here is a raw endpoint the test drives.
func TestExecutorProtocolErrors(t *testing.T) {
	const nslots, slot = 4, 64
	recv8 := Schedule{Name: "recv", Rank: 0, Size: 2, Steps: []Step{{Kind: Recv, Peer: 1, Buf: BufData, Len: 8}}}
	call := func(p *Plan) *Call {
		return &Call{Plan: p, Type: Float32, Op: Sum, Seq: 7, Coll: "test", Count: 2, Root: -1}
	}
	for _, c := range []struct {
		name  string
		rogue func(l *Link, imm uint32) error // rank 1's side of the link to rank 0
		want  string
		// placed: rank 1's writes that must have reached rank 0 before
		// its call runs (else the call may end on the first block and
		// leave the second to the next call).
		placed int
	}{
		{"no immediate", func(l *Link, _ uint32) error {
			return l.EP.PostSend(1, l.Staging, 0, 0) // into a receive token
		}, "rank 0 <- 1: unexpected message without immediate", 0},
		{"unknown immediate type", func(l *Link, _ uint32) error {
			zero := uint32(5)
			return l.EP.PostWrite(1, l.Staging, 0, 8, l.Remote, 0, &zero)
		}, "rank 0 <- 1: bad immediate 0x5", 0},
		{"credits beyond slots", func(l *Link, _ uint32) error {
			imm := uint32(immCredit | (nslots + 1))
			return l.EP.PostWrite(1, l.Staging, 0, 0, l.Remote, 0, &imm)
		}, "rank 0 <- 1: peer returned more credits than slots", 0},
		{"wrong length", func(l *Link, imm uint32) error {
			return l.EP.PostWrite(1, l.Staging, 0, 4, l.Remote, 0, &imm)
		}, "rank 0 <- 1: received 4 bytes where this rank expects 8", 0},
		{"more blocks than the call takes", func(l *Link, imm uint32) error {
			for i := range 2 {
				if err := l.EP.PostWrite(uint64(i), l.Staging, 0, 8, l.Remote, uint64(i*slot), &imm); err != nil {
					return err
				}
			}
			return nil
		}, "rank 1 sent rank 0 more data in test(float32, 2, sum) #7 (recv) than rank 0 expects", 2},
		// A block of an earlier call that this rank never took: data of
		// a rank that completed the call once sent (Call.Eager), taking
		// itself for a root. Not the next call's data, which waits.
		{"a block of an earlier call", func(l *Link, imm uint32) error {
			if err := l.EP.PostWrite(0, l.Staging, 0, 8, l.Remote, 0, &imm); err != nil {
				return err
			}
			earlier := dataImm(6, uint16(imm))
			return l.EP.PostWrite(1, l.Staging, 0, 8, l.Remote, slot, &earlier)
		}, "rank 1 sent data of its collective #6 (mod 16384) to rank 0, which is in test(float32, 2, sum) #7", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			var full atomic.Int64
			ex, devs := memRanks(t, 2, 64, nslots, slot, &full)
			p, err := Compile(recv8, slot)
			if err != nil {
				t.Fatal(err)
			}
			cl := call(p)
			reg, err := devs[0].Register(make([]byte, 8), transport.AccessAll)
			if err != nil {
				t.Fatal(err)
			}
			cl.Bufs[BufData] = Target{Region: reg}
			// The immediate rank 0 expects for this call's blocks.
			imm := call(p).imm()
			if err := c.rogue(ex[1].Links[0], imm); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			out := make([]transport.Completion, 4)
			for got := 0; got < c.placed; {
				n, err := ex[1].CQ.Wait(ctx, out)
				if err != nil {
					t.Fatalf("rank 1's writes: %v", err)
				}
				got += n
			}
			err = ex[0].Run(ctx, cl)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want an error containing %q", err, c.want)
			}
			if ctx.Err() != nil {
				t.Fatalf("the error came only at the deadline: %v", err)
			}
		})
	}
}
