package collectives

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// pollCounter counts the polls of a completion queue.
type pollCounter struct {
	transport.CompletionQueue
	n int
}

func (p *pollCounter) Poll(out []transport.Completion) int {
	p.n++
	return p.CompletionQueue.Poll(out)
}

// TestExecutorBatchesSmallCopies: local copies of a few bytes are made in
// a row, not one per poll of the links (Bruck's all-to-all makes 6 per
// call on 2 ranks, 12 on 4: a poll each cost 1.4 us here), while copies
// of more than copyBatch bytes still leave a poll between them.
func TestExecutorBatchesSmallCopies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		copyBytes int
		maxPolls  int // rank 0's polls in one run, at most
		minPolls  int
	}{
		{"Small", 8, 8, 0},
		{"Large", copyBatch, 1 << 30, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size, copies, msg = 2, 32, 8
			var full atomic.Int64
			ex, devs := memRanks(t, size, 64, 4, 64<<10, &full)
			counters := make([]*pollCounter, size)
			calls := make([]*Call, size)
			for r := range size {
				counters[r] = &pollCounter{CompletionQueue: ex[r].CQ}
				ex[r].CQ = counters[r]
				s := Schedule{Name: "copies+exchange", Rank: r, Size: size, ScratchBytes: copies * tc.copyBytes}
				for i := range copies {
					s.copyStep(BufInput, 0, BufScratch, i*tc.copyBytes, tc.copyBytes)
				}
				s.add(Send, 1-r, BufInput, 0, msg)
				s.add(Recv, 1-r, BufData, 0, msg)
				p, err := Compile(s, 64<<10)
				if err != nil {
					t.Fatal(err)
				}
				c := &Call{Plan: p, Seq: 1, Coll: "copies", Root: -1}
				for _, b := range []struct {
					buf Buf
					n   int
				}{{BufInput, tc.copyBytes}, {BufData, msg}, {BufScratch, copies * tc.copyBytes}} {
					reg, err := devs[r].Register(bytes.Repeat([]byte{byte(r + 1)}, b.n), transport.AccessAll)
					if err != nil {
						t.Fatal(err)
					}
					c.Bufs[b.buf] = Target{Region: reg}
				}
				calls[r] = c
			}
			var wg sync.WaitGroup
			errs := make([]error, size)
			for r := range size {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					errs[r] = ex[r].Run(ctx, calls[r])
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r := range size {
				if got := calls[r].Bufs[BufData].Region.Bytes()[0]; got != byte(2-r) {
					t.Fatalf("rank %d received %d, want %d", r, got, 2-r)
				}
			}
			if n := counters[0].n; n > tc.maxPolls || n < tc.minPolls {
				t.Errorf("%d copies of %d bytes and one exchange: %d polls, want %d to %d", copies, tc.copyBytes, n, tc.minPolls, tc.maxPolls)
			}
		})
	}
}
