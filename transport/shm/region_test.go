package shm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// inProcessPair connects two devices of this process with options for each.
func inProcessPair(t *testing.T, oa, ob Options) *transporttest.Pair {
	t.Helper()
	n := 0
	return transporttest.NewPair(t, func(t testing.TB) transport.Device {
		n++
		if n == 1 {
			return newTestDevice(t, oa)
		}
		return newTestDevice(t, ob)
	})
}

// TestAllocShared: a region in Alloc'd memory is mapped by the peer, whose
// writes and reads are direct copies, also where the peer is another
// device of this process that maps the segment as another process would.
func TestAllocShared(t *testing.T) {
	o := testOptions(t)
	o.noSelf, o.DisableCMA = true, true
	p := inProcessPair(t, o, o)
	const n = 1 << 20
	mem, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := p.DevB.Register(mem, transport.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	if !rb.(*region).Shared() {
		t.Fatalf("a region in Alloc'd memory is not shared")
	}
	src := transporttest.Pattern(n, 3)
	ra := transporttest.Register(t, p.DevA, src, transport.AccessAll)
	back := make([]byte, n)
	rback := transporttest.Register(t, p.DevA, back, transport.AccessAll)
	if err := p.A.PostWrite(1, ra, 0, n, rb.Remote(), 0, nil); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQA, transporttest.ShortTimeout), transport.OpWrite, 1, n)
	transporttest.ExpectBytes(t, "written into the shared region", mem, src)
	if err := p.A.PostRead(2, rback, 0, n, rb.Remote(), 0); err != nil {
		t.Fatal(err)
	}
	transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQA, transporttest.ShortTimeout), transport.OpRead, 2, n)
	transporttest.ExpectBytes(t, "read from the shared region", back, src)
	if got := p.A.(*endpoint).paths[pathDirect].Load(); got != 2 {
		t.Fatalf("paths %v; want the write and the read direct", pathCounts(p.A.(*endpoint)))
	}
	if err := Free(mem); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("free of registered memory: %v; want ErrInvalid", err)
	}
	if err := p.DevB.Deregister(rb); err != nil {
		t.Fatal(err)
	}
	if err := Free(mem); err != nil {
		t.Fatalf("free after deregister: %v", err)
	}
	if err := Free(src); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("free of memory Alloc did not make: %v; want ErrInvalid", err)
	}
}

// TestRevokeRace: the initiator keeps writing large blocks into the target
// region while the target deregisters it. After Deregister returns no byte
// of the region may change: a copy that had started finished before, and
// none starts after.
func TestRevokeRace(t *testing.T) {
	modes := []struct {
		name  string
		alloc bool
		opts  func(*Options)
	}{
		{"Mapped", true, func(o *Options) { o.noSelf, o.DisableCMA = true, true }},
		{"CMA", false, func(o *Options) { o.noSelf = true }},
		{"InProcess", false, func(*Options) {}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			for round := range 5 {
				revokeRound(t, m.alloc, m.opts, time.Duration(round)*300*time.Microsecond)
			}
		})
	}
}

func revokeRound(t *testing.T, alloc bool, opts func(*Options), delay time.Duration) {
	o := testOptions(t)
	opts(&o)
	p := inProcessPair(t, o, o)
	const n = 8 << 20
	var mem []byte
	if alloc {
		var err error
		if mem, err = Alloc(n); err != nil {
			t.Fatal(err)
		}
		defer Free(mem)
	} else {
		mem = make([]byte, n)
	}
	rb, err := p.DevB.Register(mem, transport.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	src := transporttest.Pattern(n, 9)
	ra := transporttest.Register(t, p.DevA, src, 0)
	var wg sync.WaitGroup
	started := make(chan struct{})
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs := make([]transport.Completion, 8)
		for i := uint64(0); ; i++ {
			if err := p.A.PostWrite(i, ra, 0, n, rb.Remote(), 0, nil); err != nil {
				return // the endpoint failed: the key was refused
			}
			if i == 0 {
				close(started)
			}
			if _, err := p.CQA.Wait(ctx, cs[:1]); err != nil || cs[0].Err != nil {
				return
			}
		}
	})
	<-started
	time.Sleep(delay)
	if err := p.DevB.Deregister(rb); err != nil {
		t.Fatal(err)
	}
	clear(mem)
	wg.Wait()
	time.Sleep(5 * time.Millisecond)
	for i, c := range mem {
		if c != 0 {
			t.Fatalf("byte %d of the region changed to %#x after Deregister returned", i, c)
		}
	}
}

// TestFreeKeepsTheAddressesMapped: memory Free releases stays mapped, to
// anonymous zeros, as transport.Free keeps its memory: a write through a
// stale slice does not fault (it crashed the process with SIGSEGV: Free
// unmapped it), and a later Alloc of the same size maps its new segment
// over the range, zeroed, shared as ever.
func TestFreeKeepsTheAddressesMapped(t *testing.T) {
	const n = 3 << 16
	mem, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	mem[7] = 9
	if err := Free(mem); err != nil {
		t.Fatal(err)
	}
	mem[7] = 5 // the stale slice: no fault
	if mem[7] != 5 {
		t.Fatalf("the stale slice reads %d after a write of 5", mem[7])
	}
	again, err := Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer Free(again)
	if &again[0] != &mem[0] {
		t.Logf("the new segment is elsewhere (%p, the old at %p)", &again[0], &mem[0])
	}
	for i, b := range again {
		if b != 0 {
			t.Fatalf("Alloc after Free: byte %d is %d, want zeroed memory", i, b)
		}
	}
	if _, ok := LookupSegment(again); !ok {
		t.Fatal("the new memory is not a segment of Alloc's")
	}
	if _, ok := LookupSegment(mem); ok && &again[0] != &mem[0] {
		t.Fatal("the freed memory is still taken for a segment")
	}
}
