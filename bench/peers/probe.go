package peers

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/affinity"
)

// The host's state. On a shared VM the time a cache line takes to go from
// one core to another is not a constant: the host moves the VM's virtual
// CPUs between its cores, and the round trip between the two CPUs the
// ranks run on changes with it, every few seconds. On this project's
// 2-core AMD EPYC VMs it sat at one of three levels (sampled every 0.3 s
// for a minute, 5 December): 57-80 ns, 130-170 ns and 500-590 ns; the
// CPU's own speed did not change (a multiply-add loop 1.25-1.31 ns per
// step throughout). Every small-message call between processes on one
// host waits for such trips, and OSU's method (each call alone, a barrier
// after it) waits for more of them per call than back-to-back calls,
// which overlap them: in the slow state goccl's and Open MPI's OSU-style
// 8-byte broadcasts over shared memory took 0.34 and 0.36-0.42 us, against
// 0.13-0.14 and 0.19-0.20 in the middle one, while Open MPI's back-to-back
// broadcast only went from 0.11-0.12 to 0.14-0.16. So two programs timed a
// few seconds apart may have run on different machines, in effect; the
// harness samples the state around every run (HostProbe) and runs a round
// again when its samples disagree (CompareSteady).

// CacheLineTrip returns the mean round trip of a cache line between CPUs a
// and b over n exchanges: two threads, pinned to a and b, pass a counter
// back and forth through two words on separate cache lines, each spinning
// until the other's word changes. It needs GOMAXPROCS of 2 or more and
// both CPUs in the process's affinity, and gives up after probeLimit (a
// CPU the host hardly gives the threads: each exchange then waits for the
// scheduler). The threads end with the call (a goroutine that exits locked
// to its thread takes the thread with it), so no pinning is left behind.
func CacheLineTrip(a, b, n int) (time.Duration, error) {
	if n <= 0 {
		return 0, fmt.Errorf("cache-line probe: %d exchanges", n)
	}
	if p := runtime.GOMAXPROCS(0); p < 2 {
		return 0, fmt.Errorf("cache-line probe: GOMAXPROCS is %d, two threads must run at once", p)
	}
	var w struct {
		_    [64]byte
		ping atomic.Uint64
		_    [120]byte
		pong atomic.Uint64
		_    [120]byte
		stop atomic.Bool // the asker gave up: the answerer returns
		_    [120]byte
	}
	pinned := make(chan error, 2)
	start := make(chan bool, 2)
	took := make(chan time.Duration, 1)
	go func() { // answers on b
		runtime.LockOSThread()
		pinned <- pinTo(b)
		if !<-start {
			return
		}
		for i := uint64(1); i <= uint64(n); i++ {
			for w.ping.Load() != i {
				if w.stop.Load() {
					return
				}
			}
			w.pong.Store(i)
		}
	}()
	go func() { // asks on a, and times
		runtime.LockOSThread()
		pinned <- pinTo(a)
		if !<-start {
			return
		}
		t0 := time.Now()
		for i := uint64(1); i <= uint64(n); i++ {
			w.ping.Store(i)
			for spins := 1; w.pong.Load() != i; spins++ {
				if spins&1023 == 0 && time.Since(t0) > probeLimit {
					w.stop.Store(true)
					took <- -1
					return
				}
			}
		}
		took <- time.Since(t0)
	}()
	err := errors.Join(<-pinned, <-pinned)
	start <- err == nil
	start <- err == nil
	if err != nil {
		return 0, fmt.Errorf("cache-line probe between CPUs %d and %d: %w", a, b, err)
	}
	d := <-took
	if d < 0 {
		return 0, fmt.Errorf("cache-line probe between CPUs %d and %d: %d exchanges took more than %v", a, b, n, probeLimit)
	}
	return d / time.Duration(n), nil
}

// probeLimit bounds a CacheLineTrip.
var probeLimit = time.Second

// pinTo binds the calling thread to cpu.
func pinTo(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("bind to CPU %d: %w", cpu, err)
	}
	return nil
}

// probeExchanges is how many round trips a HostProbe sample averages:
// 3-12 ms at the levels above.
const probeExchanges = 20000

// HostProbe returns a probe of the host's state for CompareSteady: the
// cache-line round trip between the first two CPUs this process may run
// on (where gorun binds ranks 0 and 1). It fails with fewer than two, or
// with GOMAXPROCS below 2.
func HostProbe() (func() (time.Duration, error), error) {
	if p := runtime.GOMAXPROCS(0); p < 2 {
		return nil, fmt.Errorf("host probe: GOMAXPROCS is %d, two threads must run at once", p)
	}
	a, b, err := probeCPUs()
	if err != nil {
		return nil, err
	}
	return func() (time.Duration, error) { return CacheLineTrip(a, b, probeExchanges) }, nil
}

// probeCPUs returns the first two CPUs this process may run on.
func probeCPUs() (a, b int, err error) {
	cpus, err := affinity.Usable()
	if err != nil {
		return 0, 0, fmt.Errorf("host probe: %w", err)
	}
	if len(cpus) < 2 {
		return 0, 0, errors.New("host probe: this process may run on one CPU only")
	}
	return cpus[0], cpus[1], nil
}
