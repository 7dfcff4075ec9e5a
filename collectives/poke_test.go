package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// TestPokeKeepsCompletions: a run whose context ends (the communicator's
// stall watchdog pokes it) while it polls the links between local copies
// must still handle the completions that poll took. It dropped them: the
// Stalled hook gave a new context and the run went on without them, so a
// chunk that had arrived was never consumed and its receive token never
// reposted. Both ranks then waited for ever (128 ranks on 2 cores, where
// runs last long enough to be poked, hung in a bruck all-to-all or a
// gather about once in three runs of the full check).
func TestPokeKeepsCompletions(t *testing.T) {
	const size, count = 2, 64
	sb, ex := newSwitchboard(t, size, 2, 64)
	var wg sync.WaitGroup
	errs := make([]error, size)
	for r, e := range ex {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = sb.connect(e, []int{1 - r}) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: connect: %v", r, err)
		}
	}
	// Rank 1 runs first: its chunks and credits wait in rank 0's queue
	// when rank 0 starts with a context that has already ended.
	done := make(chan error, 1)
	go func() { done <- runBruck(ex[1], sb, count, context.Background()) }()
	time.Sleep(200 * time.Millisecond)
	poked, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("poke"))
	pokes := 0
	ex[0].Stalled = func(ctx context.Context, c *Call) (context.Context, error) {
		if pokes++; pokes > 1 {
			return nil, fmt.Errorf("stalled after the poke: the completions the poked poll took were dropped")
		}
		next, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		t.Cleanup(cancel)
		return next, nil
	}
	if err := runBruck(ex[0], sb, count, poked); err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("rank 1: %v", err)
	}
	if pokes != 1 {
		t.Fatalf("the Stalled hook ran %d times, want once (the test did not poke the run while copies were waiting)", pokes)
	}
}

// runBruck runs a bruck all-to-all of count uint32 per block on e under
// ctx and checks what arrives (see runAlltoall).
func runBruck(e *Executor, sb *switchboard, count int, ctx context.Context) error {
	n, r, dev := e.Size, e.Rank, sb.devs[e.Rank]
	s := BruckAlltoall(r, n, count, 4)
	p, err := Compile(s, e.SlotSize)
	if err != nil {
		return err
	}
	in, out := make([]byte, n*count*4), make([]byte, n*count*4)
	for j := range n {
		for i := range count {
			binary.LittleEndian.PutUint32(in[(j*count+i)*4:], uint32(r*1e6+j*1e3+i))
		}
	}
	c := &Call{Plan: p, Type: Uint32, Seq: 1, Coll: "alltoall", Count: count, Root: -1}
	bufs := map[Buf][]byte{BufData: out, BufInput: in}
	if s.ScratchBytes > 0 {
		bufs[BufScratch] = make([]byte, s.ScratchBytes)
	}
	for b, buf := range bufs {
		reg, err := dev.Register(buf, transport.AccessLocalWrite)
		if err != nil {
			return err
		}
		defer dev.Deregister(reg)
		c.Bufs[b] = Target{Region: reg}
	}
	if err := e.Run(ctx, c); err != nil {
		return err
	}
	for j := range n {
		for i := range count {
			if got, want := binary.LittleEndian.Uint32(out[(j*count+i)*4:]), uint32(j*1e6+r*1e3+i); got != want {
				return fmt.Errorf("block %d element %d: %d, want %d", j, i, got, want)
			}
		}
	}
	return nil
}
