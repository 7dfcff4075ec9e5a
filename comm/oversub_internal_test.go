package comm

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/internal/affinity"
)

// A rank bound to one core (gorun's default --bind-to, mpirun's
// --bind-to core) sees one processor in runtime.NumCPU; whether the ranks
// of its host outnumber the host's cores must not depend on that. Before
// the fix every job of two or more bound ranks per host counted as
// oversubscribed: TCP waits yielded the core after 5 µs (a sched_yield
// per message), shared-memory and verbs waits did not spin at all.
func TestOversubscribedCountsHostCPUs(t *testing.T) {
	if os.Getenv("GOCCL_TEST_BOUND_CHILD") == "1" {
		if runtime.NumCPU() != 1 {
			t.Fatalf("the child runs on %d processors, want 1 (affinity not inherited)", runtime.NumCPU())
		}
		host := onlineCPUs()
		var o Options
		if o.crowded(host) {
			t.Errorf("%d ranks on a host of %d processors, each bound to one: counted as oversubscribed", host, host)
		}
		if !o.crowded(host + 1) {
			t.Errorf("%d ranks on a host of %d processors: not counted as oversubscribed", host+1, host)
		}
		return
	}
	if onlineCPUs() < 2 {
		t.Skip("SKIP: needs a host of at least 2 processors to bind a process to one of them")
	}
	// The child inherits the affinity of the thread that forks it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		t.Fatal(err)
	}
	one.Set(0)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Skipf("SKIP: cannot bind a thread to CPU 0: %v", err)
	}
	defer unix.SchedSetaffinity(0, &old)
	cmd := exec.Command(os.Args[0], "-test.run=^TestOversubscribedCountsHostCPUs$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GOCCL_TEST_BOUND_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bound child: %v\n%s", err, out)
	}
}

// Options.YieldWhenIdle (GOCCL_YIELD_WHEN_IDLE) overrides the count: 1
// yields with a processor per rank (hosts that share their processors with
// other hosts' ranks), 0 spins with more ranks than processors.
func TestYieldWhenIdle(t *testing.T) {
	host := onlineCPUs()
	for _, tc := range []struct {
		v     string
		n     int
		yield bool
	}{{"", host, false}, {"", host + 1, true}, {"auto", host + 1, true}, {"1", 1, true}, {"0", host + 1, false}} {
		o := Options{YieldWhenIdle: tc.v}
		if got := o.crowded(tc.n); got != tc.yield {
			t.Errorf("YieldWhenIdle %q, %d ranks on %d processors: yield %v, want %v", tc.v, tc.n, host, got, tc.yield)
		}
	}
	var o Options
	if err := o.applyEnv(func(k string) (string, bool) {
		return "yes", k == "GOCCL_YIELD_WHEN_IDLE"
	}); err == nil || !strings.Contains(err.Error(), "GOCCL_YIELD_WHEN_IDLE") {
		t.Errorf("GOCCL_YIELD_WHEN_IDLE=yes: %v, want an error naming it", err)
	}
	if err := o.applyEnv(func(k string) (string, bool) {
		return "1", k == "GOCCL_YIELD_WHEN_IDLE"
	}); err != nil || !o.crowded(1) {
		t.Errorf("GOCCL_YIELD_WHEN_IDLE=1: %v, yield %v", err, o.crowded(1))
	}
}

// A rank that gorun starts over ssh binds itself at Init (GOCCL_BIND) to
// its share of its host's CPUs, every thread of it, threads made later
// included, and runs with GOMAXPROCS the size of that share.
func TestBindSelf(t *testing.T) {
	if os.Getenv("GOCCL_TEST_BIND_CHILD") == "1" {
		cpus, err := affinity.Usable()
		if err != nil {
			t.Fatal(err)
		}
		info := bootstrap.Info{Rank: 1, Size: 2, LocalRank: 1, LocalSize: 2}
		if err := bindSelf("auto", info); err != nil {
			t.Fatal(err)
		}
		per := len(cpus) / 2
		want := cpus[per : 2*per]
		if got := runtime.GOMAXPROCS(0); got != per {
			t.Errorf("GOMAXPROCS %d after binding to %v, want %d", got, want, per)
		}
		// Threads made after the binding: lock goroutines to threads
		// of their own and look at each one's affinity.
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				runtime.LockOSThread()
				got, err := affinity.Usable()
				if err == nil && !slices.Equal(got, want) {
					err = fmt.Errorf("a thread runs on CPUs %v, want %v", got, want)
				}
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		return
	}
	cpus, err := affinity.Usable()
	if err != nil || len(cpus) < 2 {
		t.Skipf("SKIP: binding needs at least 2 usable CPUs (have %v, %v)", cpus, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBindSelf$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GOCCL_TEST_BIND_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
