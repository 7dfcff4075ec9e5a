package shm

import (
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestAnswerNotBehindMessage: a staged read is answered while a message of
// the answering side waits in its ring for a receive the reader has not
// posted yet (the reader posts it only after its read completed). Answers
// travel in their own ring, as an RC responder answers reads while its own
// requests wait on receiver-not-ready.
func TestAnswerNotBehindMessage(t *testing.T) {
	o := testOptions(t)
	o.noSelf, o.DisableCMA = true, true
	p := inProcessPair(t, o, o)
	src := transporttest.Pattern(4096, 4)
	ra := transporttest.Register(t, p.DevA, src, transport.AccessAll)
	dst := make([]byte, 4096)
	rb := transporttest.Register(t, p.DevB, dst, transport.AccessAll)
	if err := p.A.PostSend(1, ra, 0, 64); err != nil {
		t.Fatal(err)
	}
	if err := p.B.PostRead(2, rb, 0, 4096, ra.Remote(), 0); err != nil {
		t.Fatal(err)
	}
	// Drive A from another goroutine, as its caller would.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		cs := make([]transport.Completion, 4)
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.CQA.Poll(cs[:0])
		}
	}()
	transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQB, transporttest.ShortTimeout), transport.OpRead, 2, 4096)
	transporttest.ExpectBytes(t, "read", dst, src)
	if err := p.B.PostRecv(3, rb, 0, 64); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQB, transporttest.ShortTimeout), transport.OpRecv, 3, 64)
}
