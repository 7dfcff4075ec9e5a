package comm

import (
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/bootstrap"
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
		if oversubscribed(bootstrap.Info{LocalSize: host}) {
			t.Errorf("%d ranks on a host of %d processors, each bound to one: counted as oversubscribed", host, host)
		}
		if !oversubscribed(bootstrap.Info{LocalSize: host + 1}) {
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
