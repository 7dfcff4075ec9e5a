package collectives

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/goccl/goccl/transport"
)

// bytesRegion is memory for a call that touches no link.
type bytesRegion []byte

func (r bytesRegion) Bytes() []byte                  { return r }
func (r bytesRegion) Remote() transport.RemoteRegion { return transport.RemoteRegion{} }
func (r bytesRegion) Access() transport.Access       { return transport.AccessLocalWrite }

// TestExecutorCopySteps runs a one-rank plan of Copy steps, each reading
// what the one before wrote, cut into chunks smaller than a step: the
// executor must run each chunk after the chunks it depends on, and, run
// again with the same plan, allocate nothing.
func TestExecutorCopySteps(t *testing.T) {
	const n = 10
	s := Schedule{Name: "copies", Rank: 0, Size: 1, ScratchBytes: 3 * n}
	s.copyStep(BufInput, 0, BufScratch, 0, n)      // scratch[0,n) = input
	s.copyStep(BufScratch, 0, BufScratch, 2*n, n)  // scratch[2n,3n) = input
	s.copyStep(BufScratch, 2*n+3, BufData, 0, n-3) // data[0,n-3) = input[3:]
	s.copyStep(BufScratch, 2*n, BufData, n-3, 3)   // data[n-3,n) = input[:3]
	p, err := Compile(s, 4)
	if err != nil {
		t.Fatal(err)
	}
	input := []byte("0123456789")
	data, scratch := make([]byte, n), make([]byte, 3*n)
	call := Call{Plan: p, Coll: "copies", Root: -1}
	call.Bufs[BufInput] = Target{Region: bytesRegion(input)}
	call.Bufs[BufData] = Target{Region: bytesRegion(data)}
	call.Bufs[BufScratch] = Target{Region: bytesRegion(scratch)}
	e := &Executor{Rank: 0, Size: 1, SlotSize: 4}
	ctx := context.Background()
	if err := e.Run(ctx, &call); err != nil {
		t.Fatal(err)
	}
	if want := []byte("3456789012"); !bytes.Equal(data, want) {
		t.Fatalf("data %q, want %q", data, want)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := e.Run(ctx, &call); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run", allocs)
	}

	call.Bufs[BufScratch] = Target{}
	if err := e.Run(ctx, &call); err == nil || !strings.Contains(err.Error(), "local copy") {
		t.Errorf("a copy to a buffer the call lacks: %v", err)
	}
}
