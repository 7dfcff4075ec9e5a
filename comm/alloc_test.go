package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strings"
	"testing"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// TestStaleAllocNoFault writes through slices from Alloc after Free and
// after Close (issue 11 item 12: that killed the process with a fault).
// Nothing may fault; a later Alloc gets zeroed memory. Over shared memory,
// where Alloc makes a shared segment, it faulted until Free kept the
// addresses mapped (the test ran over the in-memory transport only).
func TestStaleAllocNoFault(t *testing.T) {
	for _, kind := range []string{"mem", "shm", "tcp"} {
		t.Run(kind, func(t *testing.T) { staleAllocNoFault(t, kind) })
	}
}

func staleAllocNoFault(t *testing.T, kind string) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // a fault fails the test instead of killing it
	var kept []float64
	runRanksOn(t, kind, 2, testOpts, func(c *Comm) (err error) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true)) // per goroutine
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("rank %d: using a freed slice faulted: %v", c.Rank(), p)
			}
		}()
		buf, err := Alloc[float64](c, 1<<16)
		if err != nil {
			return err
		}
		if err := Allreduce(context.Background(), c, buf, buf, Sum); err != nil {
			return err
		}
		if err := Free(c, buf); err != nil {
			return err
		}
		buf[0], buf[len(buf)-1] = 1, 2 // stale writes
		// The ranks are goroutines of one process, whose freed shm
		// ranges any of them may get again: every stale write before any
		// Alloc (rank 0 got rank 1's range while rank 1 still wrote to
		// it, under -race).
		if err := c.Barrier(context.Background()); err != nil {
			return err
		}
		again, err := Alloc[float64](c, 1<<16)
		if err != nil {
			return err
		}
		if again[0] != 0 || again[len(again)-1] != 0 {
			t.Errorf("rank %d: Alloc after Free is not zeroed", c.Rank())
		}
		if c.Rank() == 0 {
			kept = again // released by Close
		}
		return nil
	})
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("using an Alloc'd slice after Close faulted: %v", p)
			}
		}()
		kept[0] = 3
	}()
}

// TestFreeNamesItself: Free of something that is not a live buffer from
// Alloc (freed already, a subslice, a plain slice) says "free", not
// "deregister", which the caller never called.
func TestFreeNamesItself(t *testing.T) {
	runRanks(t, 2, testOpts, func(c *Comm) error {
		b, err := Alloc[float32](c, 1000)
		if err != nil {
			return err
		}
		if err := Free(c, b); err != nil {
			return err
		}
		for name, bad := range map[string][]float32{"freed already": b, "a subslice": b[10:], "a plain slice": make([]float32, 5)} {
			if err := Free(c, bad); err == nil || !strings.Contains(err.Error(), "free ") || strings.Contains(err.Error(), "deregister") {
				return fmt.Errorf("Free of %s: %v, want an error naming free", name, err)
			}
		}
		return nil
	})
}

// TestFreeAfterCloseSaysClose frees and deregisters buffers after Close,
// which released them: the errors say so (ErrClosed), where they said the
// buffer from Alloc was "freed already, or a subslice".
func TestFreeAfterCloseSaysClose(t *testing.T) {
	runRanks(t, 2, testOpts, func(c *Comm) error {
		b, err := Alloc[float32](c, 1000)
		if err != nil {
			return err
		}
		plain := make([]float32, 100)
		if err := Register(c, plain); err != nil {
			return err
		}
		if err := c.Close(); err != nil {
			return err
		}
		if err := Free(c, b); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "free ") || !strings.Contains(err.Error(), "Close freed every buffer from Alloc") {
			return fmt.Errorf("Free after Close: %v, want ErrClosed saying Close freed it", err)
		}
		if err := Deregister(c, plain); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "deregister ") || !strings.Contains(err.Error(), "Close deregistered") {
			return fmt.Errorf("Deregister after Close: %v, want ErrClosed saying Close deregistered it", err)
		}
		return nil
	})
}

// TestFreeOnClosedSubNamesTheOwner frees and deregisters, on a closed
// sub-communicator, buffers that are live on its parent: Close of the sub
// released none of them, so the errors name the communicator that holds
// them (not ErrClosed, "Close freed every buffer"), and freeing them there
// still works.
func TestFreeOnClosedSubNamesTheOwner(t *testing.T) {
	runRanks(t, 2, testOpts, func(c *Comm) error {
		d, err := c.Dup(context.Background())
		if err != nil {
			return err
		}
		if err := d.Close(); err != nil {
			return err
		}
		b, err := Alloc[float32](c, 1000)
		if err != nil {
			return err
		}
		plain := make([]float32, 100)
		if err := Register(c, plain); err != nil {
			return err
		}
		if err := Free(d, b); err == nil || errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "from Alloc of communicator") {
			return fmt.Errorf("Free on a closed Dup of the parent's buffer: %v, want an error naming the parent", err)
		}
		if err := Deregister(d, plain); err == nil || errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "registered by Register on communicator") {
			return fmt.Errorf("Deregister on a closed Dup of the parent's buffer: %v, want an error naming the parent", err)
		}
		if err := Free(c, b); err != nil {
			return fmt.Errorf("Free on the parent: %w", err)
		}
		return Deregister(c, plain)
	})
}

// TestFreeRefusesABufferInUse frees and deregisters buffers that
// asynchronous calls still use (queued behind a running call, or running
// while the peer is late), and those of a started Persistent: each is
// refused with an error naming the call, nothing is released, the calls
// finish with the right results, and once their requests are waited for
// the buffers are released. Before, Free and Deregister released them
// silently, and the calls went on in memory a later Alloc could hand out.
func TestFreeRefusesABufferInUse(t *testing.T) {
	for _, kind := range commtest.Kinds {
		t.Run(kind, func(t *testing.T) {
			// Rank 1 joins each group of calls once rank 0 has tried to
			// release its buffers: until then rank 0's calls cannot finish.
			tried := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
			runRanksOn(t, kind, 2, testOpts, func(c *Comm) error { return freeInUse(c, tried) })
		})
	}
}

func freeInUse(c *Comm, tried [2]chan struct{}) error {
	ctx := context.Background()
	late := c.Rank() == 1
	release := func(i int) { // rank 0's, once
		select {
		case <-tried[i]:
		default:
			close(tried[i])
		}
	}
	if !late {
		defer release(0) // also if rank 0 fails early: rank 1 never waits for good
		defer release(1)
	}
	// refused checks that err refuses to release a buffer kind uses.
	refused := func(what string, err error, kind string) error {
		if err == nil || !strings.Contains(err.Error(), kind+" (") || !strings.Contains(err.Error(), "still uses the buffer") {
			return fmt.Errorf("%s of a buffer %s uses: got %v, want a refusal naming %s", what, kind, err, kind)
		}
		return nil
	}
	a, err := Alloc[float64](c, 1<<14)
	if err != nil {
		return err
	}
	b, err := Alloc[int32](c, 100)
	if err != nil {
		return err
	}
	plain := make([]float32, 1000)
	if err := Register(c, plain); err != nil {
		return err
	}
	for i := range a {
		a[i] = float64(c.Rank() + 1)
	}
	for i := range b {
		b[i] = int32(c.Rank()*10 + i)
	}
	if late {
		<-tried[0]
	}
	r1 := AllreduceAsync(c, a, a, Sum)
	r2 := BroadcastAsync(c, b, 0) // queued behind r1
	r3 := AllreduceAsync(c, plain, plain, Max)
	if !late {
		err := refused("free", Free(c, a), "allreduce")
		if err == nil {
			err = refused("free", Free(c, b), "broadcast")
		}
		if err == nil {
			err = refused("deregister", Deregister(c, plain), "allreduce")
		}
		release(0)
		if err != nil {
			return err
		}
	}
	for i, r := range []*Request{r1, r2, r3} {
		if err := r.Wait(ctx); err != nil {
			return fmt.Errorf("call %d: %w", i+1, err)
		}
	}
	if a[len(a)-1] != 3 || b[7] != 7 {
		return fmt.Errorf("results: allreduce %v (want 3), broadcast %v (want 7)", a[len(a)-1], b[7])
	}
	// A started Persistent holds its buffers until its Wait.
	p, err := AllreduceInit(c, a, a, Sum)
	if err != nil {
		return err
	}
	if late {
		<-tried[1]
	}
	if err := p.Start(); err != nil {
		return err
	}
	if !late {
		err := refused("free", Free(c, a), "allreduce")
		release(1)
		if err != nil {
			return err
		}
	}
	if err := p.Wait(ctx); err != nil {
		return err
	}
	if a[0] != 6 {
		return fmt.Errorf("persistent allreduce: %v, want 6", a[0])
	}
	if err := Free(c, a); err != nil {
		return fmt.Errorf("free after wait: %w", err)
	}
	if err := Free(c, b); err != nil {
		return fmt.Errorf("free after wait: %w", err)
	}
	if err := Deregister(c, plain); err != nil {
		return fmt.Errorf("deregister after wait: %w", err)
	}
	return nil
}

// Misuse that panicked or misreported: a zero Persistent started (a nil
// dereference), and an Alloc whose byte count overflows ("alloc
// -9223372036854775808 bytes").
func TestZeroPersistentAndHugeAlloc(t *testing.T) {
	var p Persistent
	if err := p.Start(); err == nil || !strings.Contains(err.Error(), "not made by") {
		t.Errorf("Start of a zero Persistent: %v", err)
	}
	if err := p.Wait(context.Background()); err != nil {
		t.Errorf("Wait of a zero Persistent (never started): %v", err)
	}
	runRanks(t, 1, testOpts, func(c *Comm) error {
		if _, err := Alloc[float64](c, 1<<60); err == nil || !strings.Contains(err.Error(), "1152921504606846976 elements of 8 bytes") {
			return fmt.Errorf("Alloc of 2^60 float64: %v", err)
		}
		return nil
	})
}

// TestFreeRefusesABufferASubCommunicatorUses: Free on a communicator
// refuses a buffer that a call of a communicator split from it (Dup here)
// still uses, and the other way round. Before, it freed it, the next Alloc
// handed out the same memory, and the sub-communicator's call wrote its
// result into it.
func TestFreeRefusesABufferASubCommunicatorUses(t *testing.T) {
	for _, kind := range commtest.Kinds {
		t.Run(kind, func(t *testing.T) {
			tried := make(chan struct{})
			runRanksOn(t, kind, 2, testOpts, func(c *Comm) error {
				ctx := context.Background()
				sub, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer sub.Close()
				a, err := Alloc[float32](c, 1000)
				if err != nil {
					return err
				}
				b, err := Alloc[float32](sub, 1000)
				if err != nil {
					return err
				}
				for i := range a {
					a[i], b[i] = 1, 2
				}
				if c.Rank() == 1 {
					<-tried // rank 0's calls cannot finish before
				}
				ra := AllreduceAsync(sub, a, a, Sum) // the parent's buffer on the child
				rb := AllreduceAsync(c, b, b, Sum)   // and the other way
				if c.Rank() == 0 {
					errA, errB := Free(c, a), Free(sub, b)
					close(tried)
					if errA == nil || !strings.Contains(errA.Error(), "still uses the buffer") {
						return fmt.Errorf("Free on the parent of a buffer the child's allreduce uses: %v", errA)
					}
					if errB == nil || !strings.Contains(errB.Error(), "still uses the buffer") {
						return fmt.Errorf("Free on the child of a buffer the parent's allreduce uses: %v", errB)
					}
				}
				if err := WaitAll(ctx, ra, rb); err != nil {
					return err
				}
				if a[0] != 2 || a[999] != 2 || b[0] != 4 || b[999] != 4 {
					return fmt.Errorf("results %v %v %v %v, want 2 2 4 4", a[0], a[999], b[0], b[999])
				}
				if err := Free(c, a); err != nil {
					return fmt.Errorf("Free once the request is waited for: %w", err)
				}
				return Free(sub, b)
			})
		})
	}
}

// TestPersistentAfterCloseSaysClosed starts persistent collectives after
// their communicator was closed: on a buffer from Alloc (which Close
// released) as on a plain one, the start fails with ErrClosed, as any call
// after Close, and not as a refusal saying the caller freed the buffer
// and should prepare it again.
func TestPersistentAfterCloseSaysClosed(t *testing.T) {
	runRanks(t, 2, testOpts, func(c *Comm) error {
		ctx := context.Background()
		d, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		reg, err := Alloc[int32](d, 4)
		if err != nil {
			return err
		}
		plain := make([]int32, 4)
		pr, err := BroadcastInit(d, reg, 0)
		if err != nil {
			return err
		}
		pp, err := AllreduceInit(d, nil, plain, Sum)
		if err != nil {
			return err
		}
		for _, p := range []*Persistent{pr, pp} {
			if err := p.Start(); err != nil {
				return err
			}
			if err := p.Wait(ctx); err != nil {
				return err
			}
		}
		if err := d.Close(); err != nil {
			return err
		}
		for i, p := range []*Persistent{pr, pp} {
			if err := p.Start(); err != nil {
				return err
			}
			err := p.Wait(ctx)
			if !errors.Is(err, ErrClosed) || strings.Contains(err.Error(), "freed since") {
				return fmt.Errorf("persistent %d started after Close: %v, want ErrClosed", i, err)
			}
		}
		// Prepared after Close: refused at once, naming the call.
		if p, err := AllreduceInit(d, nil, plain, Sum); !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "allreduce init") || p != nil {
			return fmt.Errorf("AllreduceInit after Close: %v, %v, want ErrClosed naming allreduce init", p, err)
		}
		if _, err := BarrierInit(d); !errors.Is(err, ErrClosed) {
			return fmt.Errorf("BarrierInit after Close: %v, want ErrClosed", err)
		}
		return nil
	})
}

// TestPersistentRefusesAFreedBuffer: a Persistent prepared on a buffer
// from Alloc that was freed since (Free refuses only while a start runs)
// refuses the start as a call with bad arguments is refused (its Wait says
// the buffer was freed, and the communicator breaks on every rank),
// instead of running on memory a later Alloc may have handed out: before,
// Start and Wait returned nil and overwrote that later buffer (a helper's
// hunt; every run, shm and TCP). A parent's Alloc'd buffer used on a
// sub-communicator counts too; rank 1 alone refusing, rank 0 learns it.
func TestPersistentRefusesAFreedBuffer(t *testing.T) {
	for _, kind := range []string{"mem", "shm"} {
		t.Run(kind, func(t *testing.T) {
			runRanksOn(t, kind, 2, testOpts, func(c *Comm) error {
				ctx := context.Background()
				// A parent's buffer on a sub-communicator, freed on rank 1.
				sub, err := c.Split(ctx, 0, c.Rank())
				if err != nil {
					return err
				}
				defer sub.Close()
				pb, err := Alloc[float32](c, 64)
				if err != nil {
					return err
				}
				q, err := AllreduceInit(sub, nil, pb, Sum)
				if err != nil {
					return err
				}
				if err := q.Start(); err != nil {
					return err
				}
				if err := q.Wait(ctx); err != nil {
					return err
				}
				if c.Rank() == 1 {
					if err := Free(c, pb); err != nil {
						return err
					}
				}
				if err := q.Start(); err != nil {
					return err
				}
				err = q.Wait(ctx)
				if c.Rank() == 1 && (err == nil || !strings.Contains(err.Error(), "freed since the Persistent was prepared")) {
					return fmt.Errorf("start on a freed parent buffer: %v, want a refusal", err)
				}
				if c.Rank() == 0 && (err == nil || !strings.Contains(err.Error(), "rank 1")) {
					return fmt.Errorf("rank 0's start beside rank 1's refusal: %v, want an error naming rank 1", err)
				}
				// On the communicator itself, both ranks freeing.
				b, err := Alloc[float32](c, 4096)
				if err != nil {
					return err
				}
				p, err := AllreduceInit(c, nil, b, Sum)
				if err != nil {
					return err
				}
				for i := range b {
					b[i] = 1
				}
				if err := p.Start(); err != nil {
					return err
				}
				if err := p.Wait(ctx); err != nil {
					return err
				}
				if b[0] != 2 {
					return fmt.Errorf("allreduce: %v, want 2", b[0])
				}
				if err := Free(c, b); err != nil {
					return fmt.Errorf("free of a buffer no start uses: %w", err)
				}
				other, err := Alloc[float32](c, 4096)
				if err != nil {
					return err
				}
				for i := range other {
					other[i] = 42
				}
				if err := p.Start(); err != nil {
					return err
				}
				if err := p.Wait(ctx); err == nil || !strings.Contains(err.Error(), "freed since the Persistent was prepared") {
					return fmt.Errorf("start on a freed buffer: %v (the later buffer holds %v, was 42), want a refusal", err, other[0])
				}
				if other[0] != 42 {
					return fmt.Errorf("the later buffer holds %v, was 42", other[0])
				}
				if err := c.Barrier(ctx); err == nil {
					return errors.New("a barrier after the refusal: nil, want the communicator broken")
				}
				return nil
			})
		})
	}
}

// TestSubCommunicatorBufferErrorsSayWhereTheyAre: Free, Deregister and
// Alloc errors of a sub-communicator end, as its calls' errors do, with
// where its ranks are in the world (before, "comm: rank 0: free ...: not
// a live buffer from Alloc" gave the child's rank alone; a helper's hunt).
func TestSubCommunicatorBufferErrorsSayWhereTheyAre(t *testing.T) {
	runRanksOn(t, "mem", 3, testOpts, func(c *Comm) error {
		ctx := context.Background()
		color := 0
		if c.Rank() == 0 {
			color = 1
		}
		sub, err := c.Split(ctx, color, -c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		plain := make([]float32, 4)
		for what, err := range map[string]error{
			"free":       Free(sub, plain),
			"deregister": Deregister(sub, plain),
		} {
			if err == nil || !strings.Contains(err.Error(), "[sub-communicator ") {
				return fmt.Errorf("%s of a plain slice on a sub-communicator: %v, want the world mapping", what, err)
			}
		}
		if _, err := Alloc[float64](sub, math.MaxInt/4); err == nil || !strings.Contains(err.Error(), "[sub-communicator ") {
			return fmt.Errorf("a huge alloc on a sub-communicator: %v, want the world mapping", err)
		}
		return nil
	})
}

// TestReleaseWithTheWrongCallSaysWhich: Free of a live buffer that
// Register registered, Deregister of one from Alloc, and Free on a parent
// of a buffer from its sub-communicator's Alloc (or the other way round)
// say what the buffer is and which call releases it. They said "not a
// live buffer from Alloc (freed already, or a subslice)" and "not a
// registered buffer" of buffers that were both.
func TestReleaseWithTheWrongCallSaysWhich(t *testing.T) {
	runRanksOn(t, "mem", 2, testOpts, func(c *Comm) error {
		sub, err := c.Dup(context.Background())
		if err != nil {
			return err
		}
		defer sub.Close()
		own, err := Alloc[float32](c, 8)
		if err != nil {
			return err
		}
		subs, err := Alloc[float32](sub, 8)
		if err != nil {
			return err
		}
		reg := make([]float32, 8)
		if err := Register(c, reg); err != nil {
			return err
		}
		for _, tc := range []struct {
			what string
			err  error
			want string
		}{
			{"Free of a registered buffer", Free(c, reg), "registered with Register: release it with Deregister"},
			{"Deregister of a buffer from Alloc", Deregister(c, own), "from Alloc: release it with Free"},
			{"Free on the parent of the sub-communicator's", Free(c, subs), "from Alloc of communicator world/split1/color0, not this one: release it there"},
			{"Free on the sub-communicator of the parent's", Free(sub, own), "from Alloc of communicator world, not this one"},
			{"Deregister on the sub-communicator of the parent's", Deregister(sub, reg), "registered by Register on communicator world, not this one"},
		} {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				return fmt.Errorf("%s: %v, want an error saying %q", tc.what, tc.err, tc.want)
			}
		}
		// Each is still live, and released by the right call.
		return errors.Join(Free(c, own), Free(sub, subs), Deregister(c, reg))
	})
}
