package collectives

import (
	"testing"

	"github.com/goccl/goccl/transport"
)

// TestStaleAckBeyondPlan: the acknowledgement of an inline data write from
// a run 256 runs back carries this run's 8-bit epoch and may name a chunk
// this run's plan does not have. It counts as stale (the earlier run's
// write confirmed), not as this run's chunk: it indexed past the run's
// chunks and crashed a rank (panic: index out of range) in a validation
// run on 3 December.
func TestStaleAckBeyondPlan(t *testing.T) {
	e := &Executor{Links: []*Link{{}, {}}, epoch: 7, released: []bool{false, false}}
	e.inflight, e.Links[1].inline = 1, 1
	c := &Call{Plan: &Plan{}}
	comp := &transport.Completion{ID: withEpoch(makeID(idData, 1, 2), 7)}
	if err := e.handle(c, comp); err != nil {
		t.Fatal(err)
	}
	if e.inflight != 0 || e.Links[1].inline != 0 {
		t.Fatalf("a stale acknowledgement leaves inflight %d, the link's inline %d; want 0, 0", e.inflight, e.Links[1].inline)
	}
}
