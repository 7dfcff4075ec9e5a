package collectives

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestQuickSendPollsForCredit: a quick send whose peer's slots are all
// taken polls for the credit the peer returns, within its polls, instead
// of leaving the call to a Run. It gave up at once: a broadcast's root
// timed back to back over TCP (2 ranks, 8 slots) took the general way for
// one call in four, each costing a Run's fixed work besides the wait.
func TestQuickSendPollsForCredit(t *testing.T) {
	const n = 8
	ex, call := p2pPair(t)
	msg := func(i int) []byte { return bytes.Repeat([]byte{byte(i + 1)}, n) }
	// A first exchange the general way (a Run sets up the per-run state).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ex[0].Run(ctx, call(0, Send, msg(0), 1)) }()
	first := make([]byte, n)
	if err := ex[1].Run(ctx, call(1, Recv, first, 1)); err != nil {
		t.Fatalf("rank 1's first receive: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("rank 0's first send: %v", err)
	}
	// Rank 0 fills rank 1's slots the quick way (the first message's
	// credit may still be on its way: polls).
	sends := 0
	for i := range ex[0].NSlots {
		ok, err := ex[0].QuickSend(call(0, Send, msg(1+i), 1), 1, 1<<20)
		if err != nil || !ok {
			t.Fatalf("quick send %d of %d: %v %v, want true", i, ex[0].NSlots, ok, err)
		}
		sends++
	}
	// No credit left, no polls: the call is left to a Run.
	last := call(0, Send, msg(1+sends), 1)
	if ok, err := ex[0].QuickSend(last, 1, 0); ok || err != nil {
		t.Fatalf("a quick send without a credit or polls: %v %v, want false", ok, err)
	}
	// Rank 1 takes one; its credit comes back within rank 0's polls.
	got := make([][]byte, 0, sends+1)
	take := func() {
		t.Helper()
		out := make([]byte, n)
		ok, err := ex[1].QuickRecv(call(1, Recv, out, 1), 0, out, 1<<20)
		if err != nil || !ok {
			t.Fatalf("rank 1's quick receive %d: %v %v, want true", len(got), ok, err)
		}
		got = append(got, out)
	}
	take()
	if ok, err := ex[0].QuickSend(last, 1, 1<<20); err != nil || !ok {
		t.Fatalf("a quick send whose credit comes back within its polls: %v %v, want true", ok, err)
	}
	sends++
	for len(got) < sends {
		take()
	}
	for i, b := range got {
		if !bytes.Equal(b, msg(1+i)) {
			t.Fatalf("message %d: got %v, want %v", i, b, msg(1+i))
		}
	}
	for r, e := range ex {
		if e.Err() != nil {
			t.Fatalf("rank %d's executor failed: %v", r, e.Err())
		}
	}
}

// p2pPair links two executors as a communicator's (connectedPair: 2
// slots of 64 bytes; permanent links, sends of up to 64 bytes done at
// post as over a transport that copies them) and returns them with a
// maker of point-to-point calls: rank r's send or receive (k) of buf with
// tag, buf registered for the test.
func p2pPair(t *testing.T) ([]*Executor, func(r int, k Kind, buf []byte, tag uint32) *Call) {
	sb, ex := connectedPair(t)
	for r, e := range ex {
		e.Inline = 64
		e.Links[1-r].Transient = false
	}
	return ex, func(r int, k Kind, buf []byte, tag uint32) *Call {
		return p2pCall(t, sb.devs[r], r, k, buf, tag)
	}
}

// p2pCall is rank r's point-to-point call of kind k (Send or Recv) with
// tag, of buf (registered on dev), with the other of two ranks.
func p2pCall(t *testing.T, dev transport.Device, r int, k Kind, buf []byte, tag uint32) *Call {
	t.Helper()
	p, err := Compile(Schedule{Rank: r, Size: 2, Steps: []Step{{Kind: k, Peer: 1 - r, Buf: BufData, Len: len(buf)}}}, 64)
	if err != nil {
		t.Fatal(err)
	}
	c := &Call{Plan: p, Seq: tag, P2P: true, Coll: k.String(), Count: len(buf), Root: -1}
	reg, err := dev.Register(buf, transport.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Deregister(reg) })
	c.Bufs[BufData] = Target{Region: reg}
	return c
}
