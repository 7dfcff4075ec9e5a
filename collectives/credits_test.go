package collectives

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/goccl/goccl/transport"
)

// lazyCounter is an endpoint with PostWriteLazy (transport.LazyWriter) that
// counts its writes: lazy ones, and the others.
type lazyCounter struct {
	transport.Endpoint
	lazy, now *atomic.Int64
}

func (c lazyCounter) PostWrite(id uint64, r transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	c.now.Add(1)
	return c.Endpoint.PostWrite(id, r, off, n, remote, roff, imm)
}

func (c lazyCounter) PostWriteLazy(id uint64, r transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	c.lazy.Add(1)
	return c.Endpoint.PostWrite(id, r, off, n, remote, roff, imm)
}

// quietCounter is lazyCounter with PostWriteQuiet (transport.QuietWriter):
// it counts the quiet writes, lazy and not, and (in plain) any write
// posted otherwise.
type quietCounter struct {
	lazyCounter
	plain *atomic.Int64
}

func (c quietCounter) PostWrite(id uint64, r transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	c.plain.Add(1)
	return c.Endpoint.PostWrite(id, r, off, n, remote, roff, imm)
}

func (c quietCounter) PostWriteLazy(id uint64, r transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	return c.PostWrite(id, r, off, n, remote, roff, imm)
}

// PostWriteQuiet counts as lazyCounter counts the writes it is asked for.
func (c quietCounter) PostWriteQuiet(id uint64, r transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32, lazy bool) error {
	if lazy {
		return c.lazyCounter.PostWriteLazy(id, r, off, n, remote, roff, imm)
	}
	return c.lazyCounter.PostWrite(id, r, off, n, remote, roff, imm)
}

// TestBroadcastLeafBatchesCredits: a broadcast's leaf, which sends its root
// nothing, returns the credits of small chunks lazily, every creditBatch-th
// in a row written at once (batchCredit); with Confirm (StrictChecks) or
// with too few slots to spare, every credit is written at once. The
// results are checked on every call. Where the endpoint has
// PostWriteQuiet, every credit goes through it, lazy or not.
func TestBroadcastLeafBatchesCredits(t *testing.T) {
	const calls, count = 40, 3
	for _, tc := range []struct {
		name      string
		nslots    int
		confirm   bool
		wantLazy  int64
		wantWrite int64
	}{
		{"Eager", 8, false, calls - calls/creditBatch, calls / creditBatch},
		{"Confirm", 8, true, 0, calls},
		{"TwoSlots", 2, false, 0, calls},
	} {
		for _, quiet := range []bool{false, true} {
			name := tc.name
			if quiet {
				name += "/Quiet"
			}
			t.Run(name, func(t *testing.T) {
				var full, lazy, now, plain atomic.Int64
				ex, devs := memRanks(t, 2, 64, tc.nslots, 64, &full)
				for r, e := range ex {
					e.Inline = 64
					l := e.Links[1-r]
					lc := lazyCounter{Endpoint: l.EP, lazy: new(atomic.Int64), now: new(atomic.Int64)}
					if r == 1 { // the leaf's writes are its credits
						lc.lazy, lc.now = &lazy, &now
					}
					l.EP, l.lazy, l.quiet = lc, lc, nil
					if quiet {
						qc := quietCounter{lazyCounter: lc, plain: new(atomic.Int64)}
						if r == 1 {
							qc.plain = &plain
						}
						l.EP, l.lazy, l.quiet = qc, qc, qc
					}
				}
				for i := range calls {
					broadcastOnce(t, ex, devs, count, uint32(i+1), tc.confirm)
				}
				if lazy.Load() != tc.wantLazy || now.Load() != tc.wantWrite || plain.Load() != 0 {
					t.Fatalf("the leaf's credits for %d broadcasts: %d lazy, %d written at once, %d not quiet; want %d and %d, 0",
						calls, lazy.Load(), now.Load(), plain.Load(), tc.wantLazy, tc.wantWrite)
				}
			})
		}
	}
}

// broadcastOnce runs a linear float32 broadcast of count elements from
// rank 0 on every executor at once and checks the result.
func broadcastOnce(t *testing.T, ex []*Executor, devs []transport.Device, count int, seq uint32, confirm bool) {
	t.Helper()
	size := len(ex)
	data := make([][]byte, size)
	for r := range size {
		data[r] = fill(4*count, r, seq)
	}
	runOwn(t, ex, devs, data, func(r int) *Call {
		p, err := Compile(LinearBroadcast(r, size, 0, count, 4), 64)
		if err != nil {
			t.Fatal(err)
		}
		return &Call{Plan: p, Type: Float32, Seq: seq, Coll: "broadcast", Count: count, Root: 0, Eager: !confirm, Confirm: confirm}
	})
	want := fill(4*count, 0, seq)
	for r := range size {
		if !bytes.Equal(data[r], want) {
			t.Fatalf("call %d: rank %d holds % x, want % x", seq, r, data[r], want)
		}
	}
}
