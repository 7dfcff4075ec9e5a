package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// fullCounter wraps an endpoint and counts the posts its completion queue
// refused as full.
type fullCounter struct {
	transport.Endpoint
	n *atomic.Int64
}

func (f fullCounter) count(err error) error {
	if errors.Is(err, transport.ErrQueueFull) {
		f.n.Add(1)
	}
	return err
}

func (f fullCounter) PostRecv(id uint64, r transport.Region, off, n int) error {
	return f.count(f.Endpoint.PostRecv(id, r, off, n))
}

func (f fullCounter) PostWrite(id uint64, r transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	return f.count(f.Endpoint.PostWrite(id, r, off, n, remote, roff, imm))
}

// memRanks connects size executors over the in-memory transport, each with
// one completion queue of the given depth, nslots staging slots of
// slotSize bytes per link. Posts refused as full are counted in full.
func memRanks(t *testing.T, size, depth, nslots, slotSize int, full *atomic.Int64) ([]*Executor, []transport.Device) {
	t.Helper()
	net := mem.NewNetwork(mem.Options{})
	devs := make([]transport.Device, size)
	cqs := make([]transport.CompletionQueue, size)
	eps := make([][]transport.Endpoint, size)
	staging := make([][]transport.Region, size)
	for r := range size {
		devs[r] = net.NewDevice()
		t.Cleanup(func() { devs[r].Close() })
		var err error
		if cqs[r], err = devs[r].NewCompletionQueue(depth); err != nil {
			t.Fatal(err)
		}
		eps[r] = make([]transport.Endpoint, size)
		staging[r] = make([]transport.Region, size)
		for p := range size {
			if p == r {
				continue
			}
			if eps[r][p], err = devs[r].NewEndpoint(cqs[r]); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, StagingSize(nslots, slotSize))
			if staging[r][p], err = devs[r].Register(buf, transport.AccessLocalWrite|transport.AccessRemoteWrite); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, size*size)
	for r := range size {
		for p := range size {
			if p == r {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- eps[r][p].Connect(ctx, eps[p][r].LocalAddress())
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ex := make([]*Executor, size)
	for r := range size {
		links := make([]*Link, size)
		for p := range size {
			if p == r {
				continue
			}
			l, err := NewLink(p, fullCounter{eps[r][p], full}, staging[r][p], staging[p][r].Remote(), nslots)
			if err != nil {
				t.Fatal(err)
			}
			links[p] = l
		}
		ex[r] = &Executor{Rank: r, Size: size, Links: links, CQ: cqs[r], NSlots: nslots, SlotSize: slotSize}
	}
	return ex, devs
}

// ringAllreduce runs a float32 sum ring allreduce of count elements on
// every executor at once and checks the result.
func ringAllreduce(t *testing.T, ex []*Executor, devs []transport.Device, count, chunk int, seq uint32) {
	t.Helper()
	size := len(ex)
	data := make([][]byte, size)
	for r := range size {
		data[r] = make([]byte, 4*count)
		for i := range count {
			binary.LittleEndian.PutUint32(data[r][4*i:], math.Float32bits(float32(r+1)*float32(i%5+1)))
		}
	}
	runOwn(t, ex, devs, data, func(r int) *Call {
		p, err := Compile(RingAllreduce(r, size, count, 4), chunk)
		if err != nil {
			t.Fatal(err)
		}
		return &Call{Plan: p, Type: Float32, Op: Sum, Seq: seq, Coll: "allreduce", Count: count, Root: -1}
	})
	sum := float32(size * (size + 1) / 2)
	for r := range size {
		for i := range count {
			got := math.Float32frombits(binary.LittleEndian.Uint32(data[r][4*i:]))
			if want := sum * float32(i%5+1); got != want {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, got, want)
			}
		}
	}
}

// runOwn runs on every executor at once (runAll) the call mk makes for
// its rank, with data[r] (registered on devs[r]) as its BufData, and fails
// t if any rank fails.
func runOwn(t *testing.T, ex []*Executor, devs []transport.Device, data [][]byte, mk func(r int) *Call) {
	t.Helper()
	calls := make([]*Call, len(ex))
	for r := range ex {
		calls[r] = mk(r)
		calls[r].Bufs[BufData] = Target{Region: register(t, devs[r], data[r])}
	}
	if err := runAll(ex, calls, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestExecutorQueueFull: with a completion queue too small for the writes
// a link keeps in flight, the transport refuses posts with ErrQueueFull;
// the executor takes completions out and posts again, and the collectives
// finish with the right result. Sized by CQEntriesPerLink, no post is
// refused.
func TestExecutorQueueFull(t *testing.T) {
	const size, nslots, slot = 3, 4, 64
	links := size - 1
	tokens := links * TokensPerLink(nslots)
	for _, tc := range []struct {
		name      string
		depth     int
		wantFulls bool
	}{
		{"Sized", links * CQEntriesPerLink(nslots), false},
		{"TwoSpare", tokens + 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var full atomic.Int64
			ex, devs := memRanks(t, size, tc.depth, nslots, slot, &full)
			for i := range 5 {
				ringAllreduce(t, ex, devs, 1000+i*97, slot, uint32(i+1))
			}
			t.Logf("completion queue of %d entries (%d held by receive tokens): %d posts refused as full", tc.depth, tokens, full.Load())
			if got := full.Load() > 0; got != tc.wantFulls {
				t.Fatalf("%d posts refused as full; want refusals: %v", full.Load(), tc.wantFulls)
			}
		})
	}
}
