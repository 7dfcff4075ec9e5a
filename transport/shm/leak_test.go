package shm

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestNoLeaks connects, uses and closes many pairs and checks that the
// process's descriptors and its mappings of goccl's memfds come back to
// where they were: every memfd, socket and shared mapping is released.
func TestNoLeaks(t *testing.T) {
	count := func() (fds, maps int) {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skipf("no /proc/self/maps: %v", err)
		}
		return len(ents), strings.Count(string(b), "memfd:goccl")
	}
	// Nothing here may outlive the round (no t.Cleanup): the rings of a
	// closed endpoint are unmapped once it is unreachable.
	round := func() {
		o := testOptions(t)
		o.noSelf = true
		da, db := newTestDevice(t, o), newTestDevice(t, o)
		defer da.Close()
		defer db.Close()
		qa, err := da.NewCompletionQueue(16)
		if err != nil {
			t.Fatal(err)
		}
		qb, err := db.NewCompletionQueue(16)
		if err != nil {
			t.Fatal(err)
		}
		a, b := connectOn(t, da, qa, db, qb)
		mem, err := Alloc(1 << 16)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := db.Register(mem, transport.AccessAll)
		if err != nil {
			t.Fatal(err)
		}
		ra, err := da.Register(make([]byte, 64), transport.AccessAll)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.PostWrite(1, ra, 0, 64, rb.Remote(), 0, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := transporttest.CollectN(qa, 1, transporttest.ShortTimeout); err != nil {
			t.Fatal(err)
		}
		a.Close()
		b.Close()
		db.Deregister(rb)
		da.Close()
		db.Close()
		if err := Free(mem); err != nil {
			t.Fatal(err)
		}
	}
	round() // warm up: goroutines, the netpoller, the race clocks
	runtime.GC()
	fds0, maps0 := count()
	for range 50 {
		round()
	}
	var fds, maps int
	for i := 0; i < 50; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if fds, maps = count(); fds <= fds0+2 && maps <= maps0 {
			return
		}
	}
	t.Fatalf("after 50 pairs: %d descriptors (was %d), %d mappings of goccl memfds (was %d)", fds, fds0, maps, maps0)
}
