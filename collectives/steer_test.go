package collectives

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// fakeSteer stands for a transport that steers writes (transport.Steerer)
// over the in-memory one, which places every write into its slot: Unsteer
// "places" the slot's bytes into the armed buffer then and poisons the
// slot. So a run that copies out of a steered slot as well, or arms a slot
// for another chunk than the one that lands there, ends with wrong data.
type fakeSteer struct {
	t       *testing.T
	staging []byte
	imm     *uint32 // the immediate of the call that runs
	armed   map[int]fakeArm
	placed  int
}

type fakeArm struct {
	off int
	dst []byte
}

func (f *fakeSteer) Steer(i int, r transport.Region, off int, imm uint32, dst []byte) bool {
	if _, ok := f.armed[i]; ok {
		f.t.Errorf("slot %d armed twice", i)
		return false
	}
	if imm != *f.imm {
		f.t.Errorf("slot %d armed with immediate %#x, the call's is %#x", i, imm, *f.imm)
	}
	f.armed[i] = fakeArm{off, dst}
	return true
}

func (f *fakeSteer) Unsteer(i int) bool {
	a, ok := f.armed[i]
	if !ok {
		f.t.Errorf("slot %d disarmed, not armed", i)
		return false
	}
	delete(f.armed, i)
	slot := f.staging[a.off : a.off+len(a.dst)]
	copy(a.dst, slot)
	for j := range slot {
		slot[j] = 0xee
	}
	f.placed++
	return true
}

// placedAll counts the chunks the fakes placed, and fails the test for any
// entry left armed after the runs.
func placedAll(t *testing.T, fakes []*fakeSteer) int {
	t.Helper()
	placed := 0
	for _, f := range fakes {
		placed += f.placed
		if len(f.armed) > 0 {
			t.Errorf("%d entries left armed", len(f.armed))
		}
	}
	return placed
}

// steerRanks makes size executors over the in-memory transport whose links
// steer through a fakeSteer each.
func steerRanks(t *testing.T, size, nslots, slotSize int, imm *uint32) ([]*Executor, []transport.Device, []*fakeSteer) {
	var full atomic.Int64
	ex, devs := memRanks(t, size, 1024, nslots, slotSize, &full)
	var fakes []*fakeSteer
	for _, e := range ex {
		for _, l := range e.Links {
			if l == nil {
				continue
			}
			f := &fakeSteer{t: t, staging: l.Staging.Bytes(), imm: imm, armed: map[int]fakeArm{}}
			l.steer, l.steered = f, make([]bool, nslots)
			fakes = append(fakes, f)
		}
	}
	return ex, devs, fakes
}

// TestExecutorSteersReceives: the chunks of plain receives of at least
// steerMin bytes are steered into their destination and not copied out of
// their slots; reductions are not steered; results are exact, call after
// call.
func TestExecutorSteersReceives(t *testing.T) {
	const size, nslots, slot = 4, 4, steerMin
	for _, tc := range []struct {
		name   string
		count  int // float32 elements
		mk     func(r int, count int) Schedule
		input  func(r, count int) int // bytes of BufInput (0: none)
		steers bool
	}{
		{"pairwise all-to-all", 3 * slot / 4, func(r, count int) Schedule { return PairwiseAlltoall(r, size, count, 4) },
			func(r, count int) int { return size * count * 4 }, true},
		{"pipeline broadcast", 5 * slot / 4, func(r, count int) Schedule { return PipelineBroadcast(r, size, 1, count, 4) }, nil, true},
		{"ring allreduce", 4 * slot, func(r, count int) Schedule { return RingAllreduce(r, size, count, 4) }, nil, true},
		{"small all-to-all", slot / 16, func(r, count int) Schedule { return PairwiseAlltoall(r, size, count, 4) },
			func(r, count int) int { return size * count * 4 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var imm uint32
			ex, devs, fakes := steerRanks(t, size, nslots, slot, &imm)
			for seq := uint32(1); seq <= 3; seq++ {
				calls := make([]*Call, size)
				want := make([][]byte, size)
				for r := range size {
					sch := tc.mk(r, tc.count)
					p, err := Compile(sch, slot)
					if err != nil {
						t.Fatal(err)
					}
					c := &Call{Plan: p, Type: Float32, Op: Sum, Seq: seq, Coll: tc.name, Count: tc.count, Root: -1}
					dataLen, in := tc.count*4, []byte(nil)
					if tc.input != nil {
						dataLen = tc.input(r, tc.count)
						in = fill(dataLen, r, seq)
						c.Bufs[BufInput] = Target{Region: register(t, devs[r], in)}
					}
					data := make([]byte, dataLen)
					if tc.input == nil {
						data = fill(dataLen, r, seq)
					}
					c.Bufs[BufData] = Target{Region: register(t, devs[r], data)}
					if s := sch.ScratchBytes; s > 0 {
						c.Bufs[BufScratch] = Target{Region: register(t, devs[r], make([]byte, s))}
					}
					calls[r] = c
					imm = c.imm()
				}
				for r := range size {
					want[r] = expected(tc.name, r, size, tc.count, seq)
				}
				if err := runAll(ex, calls, 10*time.Second); err != nil {
					t.Fatal(err)
				}
				for r := range size {
					if got := calls[r].Bufs[BufData].Region.Bytes(); !bytes.Equal(got, want[r]) {
						t.Fatalf("call %d, rank %d: wrong result", seq, r)
					}
				}
			}
			placed := placedAll(t, fakes)
			if tc.steers && placed == 0 {
				t.Error("no chunk was steered")
			}
			if !tc.steers && placed > 0 {
				t.Errorf("%d chunks below steerMin steered", placed)
			}
		})
	}
}

// TestExecutorUnsteersOnFailure: a run that fails disarms what it armed,
// so that nothing is placed into the caller's buffers after Run returns.
func TestExecutorUnsteersOnFailure(t *testing.T) {
	const size, nslots, slot = 2, 4, steerMin
	var imm uint32
	ex, devs, fakes := steerRanks(t, size, nslots, slot, &imm)
	count := 2 * slot / 4
	p, err := Compile(PairwiseAlltoall(0, size, count, 4), slot)
	if err != nil {
		t.Fatal(err)
	}
	c := &Call{Plan: p, Type: Float32, Seq: 1, Coll: "alltoall", Count: count, Root: -1}
	c.Bufs[BufInput] = Target{Region: register(t, devs[0], make([]byte, size*count*4))}
	c.Bufs[BufData] = Target{Region: register(t, devs[0], make([]byte, size*count*4))}
	imm = c.imm()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := ex[0].Run(ctx, c); err == nil {
		t.Fatal("a run whose peer never comes succeeded")
	}
	armed := 0
	for _, f := range fakes {
		armed += len(f.armed)
	}
	if armed > 0 {
		t.Errorf("%d entries left armed after the run failed", armed)
	}
	for _, l := range ex[0].Links {
		if l != nil && (l.steered[0] || l.steered[1]) {
			t.Error("the link still marks slots steered")
		}
	}
}

func register(t *testing.T, dev transport.Device, b []byte) transport.Region {
	t.Helper()
	reg, err := dev.Register(b, transport.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Deregister(reg) })
	return reg
}

// fill is rank r's input of call seq: float32 values r+1 + seq*(i%7).
func fill(n, r int, seq uint32) []byte {
	b := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		putF32(b[i:], float32(r+1)+float32(seq)*float32(i/4%7))
	}
	return b
}

func putF32(b []byte, v float32) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) }

func expected(name string, r, size, count int, seq uint32) []byte {
	switch name {
	case "pairwise all-to-all", "small all-to-all":
		out := make([]byte, size*count*4)
		for j := range size {
			in := fill(size*count*4, j, seq)
			copy(out[j*count*4:(j+1)*count*4], in[r*count*4:(r+1)*count*4])
		}
		return out
	case "pipeline broadcast":
		return fill(count*4, 1, seq)
	default: // ring allreduce
		out := make([]byte, count*4)
		for i := range count {
			var s float32
			for j := range size {
				s += float32(j+1) + float32(seq)*float32(i%7)
			}
			putF32(out[4*i:], s)
		}
		return out
	}
}

func runAll(ex []*Executor, calls []*Call, timeout time.Duration) error {
	errs := make([]error, len(ex))
	var wg sync.WaitGroup
	for r := range ex {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			errs[r] = ex[r].Run(ctx, calls[r])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// TestExecutorSteersPointToPoint: a receive's chunks are steered too, each
// call arming only its own message's: messages with the same tag back to
// back, then another tag, land whole and in order.
func TestExecutorSteersPointToPoint(t *testing.T) {
	const size, nslots, slot = 2, 4, steerMin
	var imm uint32
	ex, devs, fakes := steerRanks(t, size, nslots, slot, &imm)
	const n = 5*slot/2 + 4 // three chunks, the last short
	for i, tag := range []uint32{7, 7, 9} {
		in := fill(n, 0, uint32(i+1))
		out := make([]byte, n)
		calls := steerP2PCalls(t, devs, slot, tag, in, out)
		imm = calls[1].imm()
		if err := runAll(ex, calls, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(calls[1].Bufs[BufData].Region.Bytes(), in) {
			t.Fatalf("message %d (tag %d): wrong data", i, tag)
		}
	}
	if placedAll(t, fakes) == 0 {
		t.Error("no chunk was steered")
	}
}

// TestYieldKeepsSteeredData: a receive that yields (ErrYield, so that
// the Sends queued behind it run first) after the transport placed a
// steered chunk into its buffer, before the run took the chunk's
// completion, takes the chunk from its slot when it runs again: the slot
// holds it too. Over TCP the chunk was lost there (the slot held the
// data of an earlier message): a 2-rank halo exchange of 4 MiB messages
// posted receives first read wrong data in about 2% of runs.
func TestYieldKeepsSteeredData(t *testing.T) {
	const size, nslots, slot = 2, 4, steerMin
	var imm uint32
	ex, devs, fakes := steerRanks(t, size, nslots, slot, &imm)
	const n = 5*slot/2 + 4 // three chunks, the last short (not steered)
	in, out := fill(n, 0, 1), make([]byte, n)
	calls := steerP2PCalls(t, devs, slot, 7, in, out)
	imm = calls[1].imm()
	yielded := false
	ex[1].Stalled = func(ctx context.Context, c *Call) (context.Context, error) {
		next, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		if yielded {
			return next, nil
		}
		yielded = true
		// The peer's message lands in the slots armed for it; the run
		// yields before it takes the completions.
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := ex[0].Run(sctx, calls[0]); err != nil {
			t.Errorf("rank 0's send: %v", err)
		}
		return next, ErrYield
	}
	poked, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("poke"))
	if err := ex[1].Run(poked, calls[1]); !errors.Is(err, ErrYield) {
		t.Fatalf("the receive, asked to yield: %v, want ErrYield", err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := ex[1].Run(ctx, calls[1]); err != nil {
		t.Fatalf("the receive run again: %v", err)
	}
	if i := firstDiff(out, in); i >= 0 {
		t.Fatalf("byte %d of %d: got %#x, want %#x", i, n, out[i], in[i])
	}
	if placedAll(t, fakes) == 0 {
		t.Error("no chunk was steered")
	}
}

// firstDiff is the index of the first byte where a and b differ, or -1.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// steerP2PCalls returns rank 0's Send of in and rank 1's Recv into out,
// with tag, in chunks of slot bytes, their buffers registered with devs.
func steerP2PCalls(t *testing.T, devs []transport.Device, slot int, tag uint32, in, out []byte) []*Call {
	t.Helper()
	n := len(in)
	send, err := Compile(Schedule{Rank: 0, Size: 2, Steps: []Step{{Kind: Send, Peer: 1, Buf: BufInput, Len: n}}}, slot)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := Compile(Schedule{Rank: 1, Size: 2, Steps: []Step{{Kind: Recv, Peer: 0, Buf: BufData, Len: n}}}, slot)
	if err != nil {
		t.Fatal(err)
	}
	calls := []*Call{
		{Plan: send, Seq: tag, P2P: true, Coll: "send", Count: n, Root: -1},
		{Plan: recv, Seq: tag, P2P: true, Coll: "recv", Count: n, Root: -1},
	}
	calls[0].Bufs[BufInput] = Target{Region: register(t, devs[0], in)}
	calls[0].Bufs[BufData] = Target{Region: register(t, devs[0], make([]byte, 1))}
	calls[1].Bufs[BufData] = Target{Region: register(t, devs[1], out)}
	return calls
}
