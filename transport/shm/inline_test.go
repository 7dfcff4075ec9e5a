package shm

import (
	"fmt"
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestInline: sends and writes of at most MaxInline bytes may reuse their
// buffer as soon as the post returns, also when they have to wait (here
// behind messages that fill the ring while the peer posts no receive).
func TestInline(t *testing.T) {
	for _, staged := range []bool{false, true} {
		t.Run(fmt.Sprintf("staged=%v", staged), func(t *testing.T) {
			o := testOptions(t)
			o.RingSize = 64 << 10
			o.noSelf, o.DisableCMA = staged, staged
			p := inProcessPair(t, o, o)
			if got := p.DevA.(transport.Inliner).MaxInline(); got != maxInline {
				t.Fatalf("MaxInline %d", got)
			}
			const msgs, n = 40, maxInline // 160 KiB of messages: more than the ring
			src := make([]byte, n)
			rs := transporttest.Register(t, p.DevA, src, 0)
			dst := make([]byte, msgs*n)
			rd := transporttest.Register(t, p.DevB, dst, transport.AccessAll)
			win := make([]byte, n)
			rw := transporttest.Register(t, p.DevB, win, transport.AccessAll)
			for i := range msgs {
				transporttest.Fill(src, uint64(i))
				if err := p.A.PostSend(uint64(i), rs, 0, n); err != nil {
					t.Fatal(err)
				}
			}
			transporttest.Fill(src, 1000)
			imm := uint32(7)
			if err := p.A.PostWrite(1000, rs, 0, n, rw.Remote(), 0, &imm); err != nil {
				t.Fatal(err)
			}
			if p.A.(*endpoint).txWork.Load() == 0 {
				t.Fatalf("nothing is waiting: the test does not test what it should")
			}
			clear(src) // the caller reuses its buffer
			for i := range msgs + 1 {
				if err := p.B.PostRecv(uint64(i), rd, min(i, msgs-1)*n, n); err != nil {
					t.Fatal(err)
				}
			}
			transporttest.WaitN(t, p.CQB, msgs+1, transporttest.ShortTimeout)
			transporttest.WaitN(t, p.CQA, msgs+1, transporttest.ShortTimeout)
			want := make([]byte, n)
			for i := range msgs {
				transporttest.Fill(want, uint64(i))
				transporttest.ExpectBytes(t, fmt.Sprintf("message %d", i), dst[i*n:(i+1)*n], want)
			}
			transporttest.Fill(want, 1000)
			transporttest.ExpectBytes(t, "written", win, want)
		})
	}
}
