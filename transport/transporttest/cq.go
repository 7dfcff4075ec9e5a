package transporttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// testCompletionQueue checks Poll, Wait and Close.
func testCompletionQueue(t *testing.T, f Factory) {
	t.Run("PollNeverBlocks", func(t *testing.T) {
		p := NewPair(t, f)
		var out [4]transport.Completion
		start := time.Now()
		for range 1000 {
			if n := p.CQA.Poll(out[:]); n != 0 {
				t.Fatalf("Poll on an idle queue returned %d", n)
			}
		}
		if n := p.CQA.Poll(nil); n != 0 {
			t.Fatalf("Poll(nil) returned %d", n)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("1000 Polls of an empty queue took %v", d)
		}
	})
	t.Run("PollBounded", func(t *testing.T) {
		p := NewPair(t, f)
		r := Register(t, p.DevA, make([]byte, 64), transport.AccessAll)
		rb := Register(t, p.DevB, make([]byte, 64), transport.AccessAll)
		const count = 10
		for i := range count {
			if err := p.A.PostWrite(uint64(i), r, 0, 8, rb.Remote(), 0, nil); err != nil {
				t.Fatalf("post write: %v", err)
			}
		}
		var out [3]transport.Completion
		deadline := time.Now().Add(ShortTimeout)
		got := 0
		for got < count {
			n := p.CQA.Poll(out[:])
			if n < 0 || n > len(out) {
				t.Fatalf("Poll into 3 slots returned %d", n)
			}
			for _, c := range out[:n] {
				ExpectOK(t, c, transport.OpWrite, uint64(got), 8)
				got++
			}
			if time.Now().After(deadline) {
				t.Fatalf("polled %d of %d completions in %v", got, count, ShortTimeout)
			}
			if n == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	})
	t.Run("WaitCanceled", func(t *testing.T) {
		p := NewPair(t, f)
		var out [4]transport.Completion
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		n, err := p.CQA.Wait(ctx, out[:])
		if n != 0 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait with a canceled context: %d, %v; want 0, context.Canceled", n, err)
		}
		// The clock starts before the context's: a goroutine preempted
		// between the two (11 ms under -race on a loaded CI machine)
		// made a Wait that returned at its deadline look early.
		start := time.Now()
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		n, err = p.CQA.Wait(ctx, out[:])
		if n != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past the deadline: %d, %v; want 0, context.DeadlineExceeded", n, err)
		}
		if d := time.Since(start); d < 25*time.Millisecond || d > ShortTimeout {
			t.Fatalf("Wait with a 30ms deadline returned after %v", d)
		}
	})
	t.Run("WaitWakes", func(t *testing.T) {
		p := NewPair(t, f)
		r := Register(t, p.DevA, make([]byte, 64), transport.AccessAll)
		rb := Register(t, p.DevB, make([]byte, 64), transport.AccessAll)
		posted := make(chan error, 1)
		go func() {
			time.Sleep(20 * time.Millisecond)
			posted <- p.A.PostWrite(9, r, 0, 8, rb.Remote(), 0, nil)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), ShortTimeout)
		defer cancel()
		var out [4]transport.Completion
		n, err := p.CQA.Wait(ctx, out[:])
		if perr := <-posted; perr != nil {
			t.Fatalf("post write: %v", perr)
		}
		if err != nil || n != 1 {
			t.Fatalf("Wait: %d, %v; want the write's completion", n, err)
		}
		ExpectOK(t, out[0], transport.OpWrite, 9, 8)
	})
	t.Run("CloseWakesWaiters", func(t *testing.T) {
		p := NewPair(t, f)
		const waiters = 3
		errs := make(chan error, waiters)
		for range waiters {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*ShortTimeout)
				defer cancel()
				var out [4]transport.Completion
				_, err := p.CQA.Wait(ctx, out[:])
				errs <- err
			}()
		}
		time.Sleep(20 * time.Millisecond)
		if err := p.CQA.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		timeout := time.After(ShortTimeout)
		for range waiters {
			select {
			case err := <-errs:
				if !errors.Is(err, transport.ErrClosed) {
					t.Fatalf("Wait woken by Close returned %v, want ErrClosed", err)
				}
			case <-timeout:
				t.Fatalf("Close did not wake the waiters within %v", ShortTimeout)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), ShortTimeout)
		defer cancel()
		var out [4]transport.Completion
		if _, err := p.CQA.Wait(ctx, out[:]); !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Wait after Close returned %v, want ErrClosed", err)
		}
		if n := p.CQA.Poll(out[:]); n != 0 {
			t.Fatalf("Poll after Close returned %d", n)
		}
	})
	t.Run("DeviceCloseClosesQueue", func(t *testing.T) {
		p := NewPair(t, f)
		errs := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*ShortTimeout)
			defer cancel()
			var out [4]transport.Completion
			_, err := p.CQB.Wait(ctx, out[:])
			errs <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := p.DevB.Close(); err != nil {
			t.Fatalf("close device: %v", err)
		}
		select {
		case err := <-errs:
			if !errors.Is(err, transport.ErrClosed) {
				t.Fatalf("Wait on a queue of a closed device returned %v, want ErrClosed", err)
			}
		case <-time.After(ShortTimeout):
			t.Fatalf("closing the device did not wake the queue's waiter within %v", ShortTimeout)
		}
	})
}

// testReadyWithoutPoll checks transport.Readier, where the queues have it
// (Run adds it then).
func testReadyWithoutPoll(t *testing.T, f Factory) {
	// A message for a posted receive has arrived: Ready says so
	// before anything polls the receiver's queue (the stall
	// diagnosis asks it about a rank whose poller has not run), and
	// no longer once the completion is taken.
	p := NewPair(t, f)
	rq := p.CQB.(transport.Readier)
	ra := Register(t, p.DevA, make([]byte, 64), transport.AccessAll)
	rb := Register(t, p.DevB, make([]byte, 64), transport.AccessAll)
	if rq.Ready() {
		t.Fatal("Ready on an idle queue")
	}
	if err := p.B.PostRecv(1, rb, 0, 64); err != nil {
		t.Fatalf("post recv: %v", err)
	}
	if err := p.A.PostSend(2, ra, 0, 8); err != nil {
		t.Fatalf("post send: %v", err)
	}
	ExpectOK(t, WaitOne(t, p.CQA, ShortTimeout), transport.OpSend, 2, 8)
	deadline := time.Now().Add(ShortTimeout)
	for !rq.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("the send completed at the sender, and %v later the receiver's queue, not polled, is not Ready", ShortTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	ExpectOK(t, WaitOne(t, p.CQB, ShortTimeout), transport.OpRecv, 1, 8)
	if rq.Ready() {
		t.Fatal("Ready after the only completion was taken")
	}
}
