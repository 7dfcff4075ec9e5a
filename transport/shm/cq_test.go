package shm

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestQueueCapacity: a queue of depth n holds n posted requests; the next
// post is refused with ErrQueueFull until a completion is taken; a remote
// error completion takes no entry.
func TestQueueCapacity(t *testing.T) {
	const depth = 4
	newPair := func(t *testing.T) (*Device, *Device, transport.CompletionQueue, transport.CompletionQueue, transport.Endpoint, transport.Endpoint) {
		da, db := newTestDevice(t, testOptions(t)), newTestDevice(t, testOptions(t))
		t.Cleanup(func() { da.Close(); db.Close() })
		qa, err := da.NewCompletionQueue(depth)
		if err != nil {
			t.Fatal(err)
		}
		qb := transporttest.NewCQ(t, db)
		a := transporttest.NewEndpoint(t, da, qa)
		b := transporttest.NewEndpoint(t, db, qb)
		transporttest.ConnectPair(t, a, b)
		return da, db, qa, qb, a, b
	}
	t.Run("Posts", func(t *testing.T) {
		da, db, qa, _, a, _ := newPair(t)
		r := transporttest.Register(t, da, make([]byte, 64), transport.AccessAll)
		rb := transporttest.Register(t, db, make([]byte, 64), transport.AccessAll)
		// Receives that nothing completes, and a write that completes at once:
		// each holds its entry until taken.
		for i := range depth - 1 {
			if err := a.PostRecv(uint64(i), r, 0, 8); err != nil {
				t.Fatalf("post %d of %d: %v", i, depth, err)
			}
		}
		if err := a.PostWrite(10, r, 0, 8, rb.Remote(), 0, nil); err != nil {
			t.Fatalf("post %d of %d: %v", depth, depth, err)
		}
		for _, post := range []func() error{
			func() error { return a.PostRecv(20, r, 0, 8) },
			func() error { return a.PostSend(21, r, 0, 8) },
			func() error { return a.PostWrite(22, r, 0, 8, rb.Remote(), 0, nil) },
			func() error { return a.PostRead(23, r, 0, 8, rb.Remote(), 0) },
		} {
			if err := post(); !errors.Is(err, transport.ErrQueueFull) {
				t.Fatalf("post beyond depth %d: %v; want ErrQueueFull", depth, err)
			}
		}
		transporttest.ExpectOK(t, transporttest.WaitOne(t, qa, transporttest.ShortTimeout), transport.OpWrite, 10, 8)
		if err := a.PostWrite(11, r, 0, 8, rb.Remote(), 0, nil); err != nil {
			t.Fatalf("post after a completion was taken: %v", err)
		}
		if err := a.PostWrite(12, r, 0, 8, rb.Remote(), 0, nil); !errors.Is(err, transport.ErrQueueFull) {
			t.Fatalf("post beyond depth again: %v; want ErrQueueFull", err)
		}
	})
	t.Run("RemoteErrorTakesNoEntry", func(t *testing.T) {
		// B's queue has depth 4 here: the remote error of A's bad write
		// must not take an entry of it.
		da, db, qa, qb, a, b := newPair(t)
		_ = qb
		ra := transporttest.Register(t, da, make([]byte, 64), transport.AccessAll)
		rb := transporttest.Register(t, db, make([]byte, 64), transport.AccessAll)
		// Swap roles: A (depth 4) is the target.
		for i := range depth {
			if err := a.PostRecv(uint64(i), ra, 0, 8); err != nil {
				t.Fatal(err)
			}
		}
		bad := ra.Remote()
		bad.Key ^= 1 << 40
		if err := b.PostWrite(1, rb, 0, 8, bad, 0, nil); err != nil {
			t.Fatal(err)
		}
		cs := transporttest.WaitN(t, qa, depth+1, transporttest.ShortTimeout)
		remote := 0
		for _, c := range cs {
			if c.Op == transport.OpRemoteError {
				remote++
			}
		}
		if remote != 1 {
			t.Fatalf("completions on the target:\n%s", transporttest.Describe(cs))
		}
		q := qa.(*cq)
		held := q.reserved.Load()
		if held != 0 {
			t.Fatalf("after taking every completion the queue counts %d entries held; the remote error must not count", held)
		}
	})
}

// TestConcurrentPolls: goroutines polling one queue at once take every
// completion exactly once.
func TestConcurrentPolls(t *testing.T) {
	da, db := newTestDevice(t, testOptions(t)), newTestDevice(t, testOptions(t))
	defer da.Close()
	defer db.Close()
	qa := transporttest.NewCQ(t, da)
	qb := transporttest.NewCQ(t, db)
	const eps, writes = 3, 300
	ra := transporttest.Register(t, da, make([]byte, 64), transport.AccessAll)
	rb := transporttest.Register(t, db, make([]byte, 64), transport.AccessAll)
	var as []transport.Endpoint
	for range eps {
		a := transporttest.NewEndpoint(t, da, qa)
		b := transporttest.NewEndpoint(t, db, qb)
		transporttest.ConnectPair(t, a, b)
		as = append(as, a)
	}
	got := make(chan uint64, eps*writes)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			cs := make([]transport.Completion, 4)
			for deadline := time.Now().Add(transporttest.ShortTimeout); time.Now().Before(deadline) && len(got) < cap(got); {
				for _, c := range cs[:qa.Poll(cs)] {
					got <- c.ID
				}
			}
		})
	}
	for i := range writes {
		for k, a := range as {
			if err := a.PostWrite(uint64(k*writes+i), ra, 0, 8, rb.Remote(), 0, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	close(got)
	seen := map[uint64]bool{}
	for id := range got {
		if seen[id] {
			t.Fatalf("completion %d taken twice", id)
		}
		seen[id] = true
	}
	if len(seen) != eps*writes {
		t.Fatalf("took %d completions of %d", len(seen), eps*writes)
	}
}
