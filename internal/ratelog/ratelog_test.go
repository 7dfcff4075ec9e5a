package ratelog

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder collects summaries.
type recorder struct {
	mu  sync.Mutex
	got []Summary
}

func (r *recorder) report(s Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, s)
}

func (r *recorder) take() []Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.got
	r.got = nil
	return g
}

// allow calls Allow n times and returns how many were let through.
func allow(l *Limiter, key string, n int) int {
	ok := 0
	for range n {
		if l.Allow(key) {
			ok++
		}
	}
	return ok
}

// A flood of one key: Burst lines, then one summary per interval that
// counts the rest, for as long as the flood lasts; no new burst meanwhile.
func TestFloodIsSummarisedPerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		l := New(5, 10*time.Second, rec.report)
		defer l.Stop()

		equal(t, 5, allow(l, "10.0.0.7", 1248), "events let through in the first interval")
		time.Sleep(time.Second)
		equal(t, []Summary(nil), rec.take(), "a summary before the interval ended")
		time.Sleep(9 * time.Second)
		synctest.Wait()
		equal(t, []Summary{{Key: "10.0.0.7", Suppressed: 1243, Span: 10 * time.Second}}, rec.take())

		// Still flooding: every event is counted, none let through.
		for range 3 {
			equal(t, 0, allow(l, "10.0.0.7", 100))
			time.Sleep(10 * time.Second)
			synctest.Wait()
			equal(t, []Summary{{Key: "10.0.0.7", Suppressed: 100, Span: 10 * time.Second}}, rec.take())
		}
	})
}

// A key quiet for a whole interval starts afresh with a full burst.
func TestQuietKeyStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		l := New(3, 10*time.Second, rec.report)
		defer l.Stop()

		equal(t, 3, allow(l, "a", 4))
		time.Sleep(10 * time.Second) // reports the 1 refused event
		synctest.Wait()
		equal(t, []Summary{{Key: "a", Suppressed: 1, Span: 10 * time.Second}}, rec.take())
		time.Sleep(10 * time.Second) // a window with no event: "a" is forgotten
		synctest.Wait()
		equal(t, []Summary(nil), rec.take())
		equal(t, 3, allow(l, "a", 3), "burst after a quiet interval")

		// Fewer events than the burst: nothing refused, nothing reported.
		time.Sleep(time.Minute)
		synctest.Wait()
		equal(t, []Summary(nil), rec.take())
	})
}

// Keys have their own budgets and windows, and are reported in key order.
func TestKeysAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		l := New(2, 10*time.Second, rec.report)
		defer l.Stop()

		equal(t, 2, allow(l, "b", 10))
		equal(t, 2, allow(l, "a", 5))
		time.Sleep(4 * time.Second)
		equal(t, 2, allow(l, "c", 7)) // its window ends 4 s after the others'
		time.Sleep(6 * time.Second)
		synctest.Wait()
		equal(t, []Summary{{Key: "a", Suppressed: 3, Span: 10 * time.Second}, {Key: "b", Suppressed: 8, Span: 10 * time.Second}}, rec.take())
		time.Sleep(4 * time.Second)
		synctest.Wait()
		equal(t, []Summary{{Key: "c", Suppressed: 5, Span: 10 * time.Second}}, rec.take())
	})
}

// Beyond MaxKeys, new keys share the Others budget: memory stays bounded
// and the flood still shows up, counted.
func TestManyKeysShareOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		l := New(1, 10*time.Second, rec.report)
		defer l.Stop()

		let := 0
		for i := range 1000 {
			let += allow(l, fmt.Sprint("10.1.", i/256, ".", i%256), 1)
		}
		equal(t, MaxKeys+1, let, "one line per tracked key, one for Others")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		equal(t, []Summary{{Key: Others, Suppressed: 1000 - MaxKeys - 1, Span: 10 * time.Second}}, rec.take())
		l.mu.Lock()
		n := len(l.keys)
		l.mu.Unlock()
		if n > MaxKeys+1 {
			t.Errorf("%d keys tracked, want at most %d", n, MaxKeys+1)
		}
	})
}

// Stop reports what is counted at once; afterwards nothing is throttled
// and no report follows.
func TestStopFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		l := New(5, 10*time.Second, rec.report)
		allow(l, "x", 12)
		time.Sleep(3 * time.Second)
		l.Stop()
		equal(t, []Summary{{Key: "x", Suppressed: 7, Span: 3 * time.Second}}, rec.take())
		l.Stop()
		equal(t, 10, allow(l, "x", 10), "a stopped Limiter lets everything through")
		time.Sleep(time.Minute)
		synctest.Wait()
		equal(t, []Summary(nil), rec.take())
	})
}

// Concurrent callers: every event is either let through or counted in
// exactly one summary. Run with -race.
func TestConcurrentCountsAddUp(t *testing.T) {
	var rec recorder
	l := New(10, 5*time.Millisecond, rec.report)
	var wg sync.WaitGroup
	var mu sync.Mutex
	let := 0
	const goroutines, events = 8, 2000
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := range events {
				if l.Allow(fmt.Sprint("k", (g+i)%3)) {
					n++
				}
				if i%200 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			mu.Lock()
			let += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	l.Stop()
	counted := 0
	for _, s := range rec.take() {
		if s.Suppressed <= 0 {
			t.Errorf("summary %+v counts nothing", s)
		}
		counted += s.Suppressed
	}
	equal(t, goroutines*events, let+counted)
}

func TestNewRejectsNonPositiveInterval(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with interval 0 did not panic")
		}
	}()
	New(1, 0, func(Summary) {})
}

// equal fails the test unless got equals want; msg names what is compared.
func equal[T any](t *testing.T, want, got T, msg ...string) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%v: got %+v, want %+v", msg, got, want)
	}
}
