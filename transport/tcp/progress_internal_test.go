package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestSpinPolicy pins how SpinTime and Oversubscribed set a Wait's spin.
func TestSpinPolicy(t *testing.T) {
	for _, c := range []struct {
		o           Options
		budget      time.Duration
		yieldsAfter time.Duration
	}{
		{Options{}, defaultSpinTime, time.Hour},
		{Options{SpinTime: -1}, 0, time.Hour},
		{Options{SpinTime: time.Millisecond}, time.Millisecond, time.Hour},
		{Options{Oversubscribed: true}, oversubscribedSpinTime, defaultYieldTime},
		{Options{Oversubscribed: true, SpinTime: time.Millisecond}, time.Millisecond, defaultYieldTime},
	} {
		s := newSpinPolicy(&c.o)
		if s.budget != c.budget || s.yieldAfter != c.yieldsAfter {
			t.Errorf("%+v: budget %v yield after %v, want %v and %v", c.o, s.budget, s.yieldAfter, c.budget, c.yieldsAfter)
		}
	}
}

// TestProgressAfterCallerLeaves: a Wait that polled its sockets made the
// background loop stand aside; once the caller stops polling, the lazy
// timer hands the sockets back, and the peer's writes are placed and
// acknowledged although nobody on this side polls again.
func TestProgressAfterCallerLeaves(t *testing.T) {
	p := pairWith(t, nil)
	src := transporttest.Register(t, p.DevA, transporttest.Pattern(1<<20, 3), 0)
	dst := transporttest.Register(t, p.DevB, make([]byte, 1<<20), transport.AccessAll)
	tok := transporttest.Register(t, p.DevB, make([]byte, 8), transport.AccessLocalWrite)
	// B waits for a message while it arrives: its Wait polls B's socket
	// and the background loop lets go of it.
	if err := p.B.PostRecv(1, tok, 0, 8); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		p.A.PostSend(2, src, 0, 8)
	}()
	transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQB, 5*time.Second), transport.OpRecv, 1, 8)
	transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQA, 5*time.Second), transport.OpSend, 2, 8)
	if l := p.B.(*endpoint).ctl(); l.bgRead.Load() {
		t.Log("the background loop did not stand aside (its first wake-up came after B's Wait)")
	}
	// B never polls again; A's writes must complete all the same.
	start := time.Now()
	for i := range 8 {
		if err := p.A.PostWrite(uint64(10+i), src, 0, 1<<20, dst.Remote(), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	cs := transporttest.WaitN(t, p.CQA, 8, 5*time.Second)
	for i, c := range cs {
		transporttest.ExpectOK(t, c, transport.OpWrite, uint64(10+i), 1<<20)
	}
	transporttest.ExpectBytes(t, "target", dst.Bytes(), src.Bytes())
	if d := time.Since(start); d > time.Second {
		t.Errorf("writes to a side that stopped polling took %v", d)
	}
}

// TestSleepingWaitWakes: a Wait that sleeps at once (no spin) in poll(2)
// wakes for a message that arrives later, and for Close.
func TestSleepingWaitWakes(t *testing.T) {
	p := pairWith(t, func(o *Options) { o.SpinTime = -1 })
	src := transporttest.Register(t, p.DevA, make([]byte, 8), 0)
	dst := transporttest.Register(t, p.DevB, make([]byte, 8), transport.AccessLocalWrite)
	if err := p.B.PostRecv(1, dst, 0, 8); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		p.A.PostSend(2, src, 0, 8)
	}()
	start := time.Now()
	transporttest.ExpectOK(t, transporttest.WaitOne(t, p.CQB, 5*time.Second), transport.OpRecv, 1, 8)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the sleeping Wait took %v to see a message sent after 50 ms", d)
	}
	errc := make(chan error, 1)
	go func() {
		var out [1]transport.Completion
		_, err := p.CQB.Wait(context.Background(), out[:])
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // asleep by now
	p.CQB.Close()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Wait on a closed queue returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the sleeping Wait")
	}
}

// TestLazyWrite: a lazy write (PostWriteLazy, the executor's credits) is
// not written by its post nor by a caller's poll that finds work; it
// leaves with the next frame to the peer, in the same writev, or once
// lazyPasses polls in a row found nothing; and, with nobody polling, by
// the lazy timer.
func TestLazyWrite(t *testing.T) {
	p := pairWith(t, nil)
	a := p.A.(*endpoint)
	src := transporttest.Register(t, p.DevA, transporttest.Pattern(64, 5), 0)
	dst := transporttest.Register(t, p.DevB, make([]byte, 64), transport.AccessAll)
	for i := range 4 {
		if err := p.B.PostRecv(uint64(100+i), dst, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The accepting side's lane may come a moment after Connect returns.
	var l *lane
	for end := time.Now().Add(5 * time.Second); l == nil && time.Now().Before(end); {
		if l = a.ctl(); l == nil {
			time.Sleep(time.Millisecond)
		}
	}
	if l == nil {
		t.Fatal("A's connection has no lane after 5 s")
	}
	writes := func() int {
		l.txMu.Lock()
		defer l.txMu.Unlock()
		return l.tx.writes
	}
	expectImm := func(id uint64, imm uint32, n int) {
		t.Helper()
		c := transporttest.WaitOne(t, p.CQB, 5*time.Second)
		transporttest.ExpectOK(t, c, transport.OpRecv, id, n)
		if !c.HasImm || c.Imm != imm {
			t.Fatalf("receive %+v: want immediate %#x", c, imm)
		}
	}

	// Only a long idle period ends in the lazy timer's hand-off.
	a.cq.lazyNext.Store(int64(time.Hour))
	imm := uint32(1)
	if err := a.PostWriteLazy(1, src, 0, 0, dst.Remote(), 0, &imm); err != nil {
		t.Fatal(err)
	}
	if !l.txWant.Load() || l.txNow.Load() || writes() != 0 {
		t.Fatalf("after a lazy post: want %v, now %v, %d writes; want it held", l.txWant.Load(), l.txNow.Load(), writes())
	}
	a.cq.empty.Store(0)
	a.cq.drive()
	if writes() != 0 {
		t.Fatal("a poll after one that moved bytes wrote the lazy frame")
	}
	passes := 1
	for ; writes() == 0 && passes < 10000; passes++ {
		a.cq.drive()
	}
	if writes() != 1 || passes <= lazyPasses {
		t.Fatalf("lazy frame written after %d empty polls (%d writes); want one write after more than %d", passes, writes(), lazyPasses)
	}
	expectImm(100, 1, 0)

	// With the next frame: one writev carries both.
	before := writes()
	imm = 2
	if err := a.PostWriteLazy(2, src, 0, 0, dst.Remote(), 0, &imm); err != nil {
		t.Fatal(err)
	}
	imm = 3
	if err := a.PostWrite(3, src, 0, 8, dst.Remote(), 0, &imm); err != nil {
		t.Fatal(err)
	}
	expectImm(101, 2, 0)
	expectImm(102, 3, 8)
	if w := writes() - before; w != 1 {
		t.Errorf("a lazy frame and the write after it took %d writev calls; want 1", w)
	}

	// Nobody polls A: the lazy timer writes it.
	a.cq.lazyNext.Store(int64(lazyPeriod))
	a.cq.timer.Reset(lazyPeriod)
	imm = 4
	if err := a.PostWriteLazy(4, src, 0, 0, dst.Remote(), 0, &imm); err != nil {
		t.Fatal(err)
	}
	expectImm(103, 4, 0)
	cs := transporttest.WaitN(t, p.CQA, 4, 5*time.Second)
	for i, c := range cs {
		transporttest.ExpectOK(t, c, transport.OpWrite, uint64(i+1), []int{0, 0, 8, 0}[i])
	}
}
