package collectives

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestStaleAckBeyondPlan: the acknowledgement of an inline data write from
// a run 256 runs back carries this run's 8-bit epoch. It confirms the
// earlier run's write whatever this run's plan is: it once named its own
// chunk index, which indexed past a shorter plan's chunks and crashed a
// rank (panic: index out of range) in a validation run on 3 December.
func TestStaleAckBeyondPlan(t *testing.T) {
	e := &Executor{Links: []*Link{{}, {}}, epoch: 7, released: []bool{false, false}}
	e.inflight, e.Links[1].inline = 1, 1
	c := &Call{Plan: &Plan{}}
	comp := &transport.Completion{ID: withEpoch(makeID(idData, 1, inlineChunk), 7)}
	if err := e.handle(c, comp); err != nil {
		t.Fatal(err)
	}
	if e.inflight != 0 || e.Links[1].inline != 0 {
		t.Fatalf("a stale acknowledgement leaves inflight %d, the link's inline %d; want 0, 0", e.inflight, e.Links[1].inline)
	}
	// A completion of a write no run waits for (a chunk this plan does
	// not have) changes nothing.
	comp = &transport.Completion{ID: withEpoch(makeID(idData, 1, 2), 7)}
	if err := e.handle(c, comp); err != nil {
		t.Fatal(err)
	}
	if e.inflight != 0 || e.Links[1].inline != 0 || e.done != 0 {
		t.Fatalf("a completion no run waits for: inflight %d, the link's inline %d, done %d; want 0, 0, 0", e.inflight, e.Links[1].inline, e.done)
	}
}

// TestLateAckFinishesNoChunk: a peer may hold back the acknowledgement of
// an inline send for hundreds of runs (over TCP it waits to leave with
// the peer's next frame to this rank, and a rank that only receives from
// a broadcast's root back to back sends it none). When it came 256 runs
// later, whose 8-bit epoch matched its run's, its id's chunk index named
// a chunk of the running plan: the chunk was taken as done. A receive
// then completed without its data, and the next call failed on "rank 0
// sent data of its collective #N" (or, the chunk done already, the run
// waited for ever with one chunk too many done): 4 ranks on 2 cores over
// TCP, osu bcast --back-to-back, about one run in 300. Here rank 1 sends
// once (inline), its acknowledgement held back; rank 0 then sends it 256
// messages, and the acknowledgement comes back at the start of the
// receive whose epoch is the send's, before that message is sent.
func TestLateAckFinishesNoChunk(t *testing.T) {
	const n = 8
	ex, call := p2pPair(t)
	h := &holdCQ{CompletionQueue: ex[1].CQ, hold: true, injected: make(chan struct{})}
	ex[1].CQ = h
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msg := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, n) }
	exchange := func(from, to, i int, before func()) []byte {
		t.Helper()
		got := make([]byte, n)
		done := make(chan error, 1)
		go func() { done <- ex[to].Run(ctx, call(to, Recv, got, 2)) }()
		if before != nil {
			before()
		}
		if err := ex[from].Run(ctx, call(from, Send, msg(i), 2)); err != nil {
			t.Fatalf("exchange %d: rank %d's send: %v", i, from, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("exchange %d: rank %d's receive: %v", i, to, err)
		}
		return got
	}
	// Rank 1's inline send, the run whose epoch comes round again.
	exchange(1, 0, 1, nil)
	first := ex[1].epoch
	for i := 2; ex[1].epoch != first-1; i++ {
		if got := exchange(0, 1, i, nil); !bytes.Equal(got, msg(i)) {
			t.Fatalf("message %d: got %v, want %v", i, got, msg(i))
		}
	}
	if h.heldCount() != 1 {
		t.Fatalf("the acknowledgement of rank 1's send was not held back (%d held)", h.heldCount())
	}
	// The next receive runs in the send's epoch; the acknowledgement comes
	// at its first poll, and rank 0 sends only then.
	h.mu.Lock()
	h.release = true
	h.mu.Unlock()
	got := exchange(0, 1, 300, func() {
		select {
		case <-h.injected:
		case <-time.After(10 * time.Second):
			t.Fatal("the held acknowledgement was never taken")
		}
	})
	if ex[1].epoch != first {
		t.Fatalf("the last receive ran in epoch %d, want the send's %d", ex[1].epoch, first)
	}
	if !bytes.Equal(got, msg(300%256)) {
		t.Fatalf("the receive whose epoch the late acknowledgement matched got %v, want %v: it completed without its message", got, msg(300%256))
	}
	if ex[1].inflight != 0 || ex[1].Links[0].inline != 0 {
		t.Fatalf("after the acknowledgement: inflight %d, the link's inline %d; want 0, 0", ex[1].inflight, ex[1].Links[0].inline)
	}
	// One more exchange each way: nothing is left over in the slots.
	if got := exchange(0, 1, 7, nil); !bytes.Equal(got, msg(7)) {
		t.Fatalf("the exchange after: got %v, want %v", got, msg(7))
	}
	if got := exchange(1, 0, 9, nil); !bytes.Equal(got, msg(9)) {
		t.Fatalf("the exchange back: got %v, want %v", got, msg(9))
	}
	for r, e := range ex {
		if e.Err() != nil {
			t.Fatalf("rank %d's executor failed: %v", r, e.Err())
		}
	}
}

// holdCQ passes its queue's completions on, but holds the first completion
// of a data write back (hold) until release is set: it then comes first,
// at the next Poll or Wait.
type holdCQ struct {
	transport.CompletionQueue
	mu       sync.Mutex
	hold     bool
	release  bool
	held     []transport.Completion
	injected chan struct{} // closed once the held completion was given out
}

func (h *holdCQ) heldCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// give moves the held completions into out if released.
func (h *holdCQ) give(out []transport.Completion) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.release || len(h.held) == 0 || len(out) < len(h.held) {
		return 0
	}
	n := copy(out, h.held)
	h.held = nil
	close(h.injected)
	return n
}

// filter takes out of comps the completion to hold, if any.
func (h *holdCQ) filter(comps []transport.Completion) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := 0
	for _, c := range comps {
		if h.hold && c.ID&idKind == idData && c.Err == nil {
			h.hold = false
			h.held = append(h.held, c)
			continue
		}
		comps[k] = c
		k++
	}
	return k
}

func (h *holdCQ) Poll(out []transport.Completion) int {
	if n := h.give(out); n > 0 {
		return n
	}
	return h.filter(out[:h.CompletionQueue.Poll(out)])
}

func (h *holdCQ) Wait(ctx context.Context, out []transport.Completion) (int, error) {
	for {
		if n := h.give(out); n > 0 {
			return n, nil
		}
		n, err := h.CompletionQueue.Wait(ctx, out)
		if err != nil {
			return 0, err
		}
		if n = h.filter(out[:n]); n > 0 {
			return n, nil
		}
	}
}
