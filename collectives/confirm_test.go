package collectives

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestConfirmPeerGoneWithoutPendingRequests: a broadcast root's proof is
// owed by a peer whose connection is gone, and this rank has no request
// left on that link whose flush would say so (the completions were taken
// before Close, as a failed run takes them). Notify, which finds the
// connection gone when it posts, records it, and Confirm fails at once
// naming the peer: it waited for its whole context (the stall timeout at
// Close: a job whose rank died after Split took 60 s to close).
func TestConfirmPeerGoneWithoutPendingRequests(t *testing.T) {
	const nslots, slot, count = 4, 64, 8
	ex, devs := memRanks(t, 2, 64, nslots, slot, nil)
	p, err := Compile(LinearBroadcast(0, 2, 0, count, 4), slot)
	if err != nil {
		t.Fatal(err)
	}
	data := fill(4*count, 0, 1)
	call := &Call{Plan: p, Type: Float32, Seq: 1, Coll: "broadcast", Count: count, Root: 0, Eager: true}
	call.Bufs[BufData] = Target{Region: register(t, devs[0], data)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ex[0].Run(ctx, call); err != nil { // done once sent: rank 1 never takes it
		t.Fatal(err)
	}
	devs[1].Close() // rank 1 is gone
	// The flushes of rank 0's requests on the link are taken elsewhere.
	comps := make([]transport.Completion, 64)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		ex[0].CQ.Poll(comps)
		time.Sleep(time.Millisecond)
	}
	nctx, ncancel := context.WithTimeout(ctx, time.Second)
	ex[0].Notify(nctx, Notice{Reason: NoticeClosed, Rank: 0, Seq: 1})
	ncancel()
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
	defer ccancel()
	start := time.Now()
	err = ex[0].Confirm(cctx)
	took := time.Since(start)
	t.Logf("Confirm after %v: %v", took, err)
	if err == nil || !strings.Contains(err.Error(), "the connection to rank 1 was lost") {
		t.Fatalf("Confirm: %v, want the connection to rank 1 lost", err)
	}
	if took > time.Second {
		t.Fatalf("Confirm took %v", took)
	}
}
