package tcp

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// spinPolicy says how a Wait spins on its sockets before it parks.
//
// Spinning is what makes small messages fast (no goroutine or thread is
// woken between the socket and the waiting caller), and what makes them
// slow when ranks outnumber cores (the spinner holds the core the peer
// needs). So a Wait spins for at most budget without seeing data move,
// and once it has spun for yieldAfter without data it gives the processor
// back to the kernel between polls (sched_yield), so that another process
// runnable on this core runs at once.
type spinPolicy struct {
	budget     time.Duration // idle spinning before parking
	yieldAfter time.Duration // idle spinning before each poll yields to the kernel
}

// Defaults: a round trip between two processes of this host takes 10-30
// µs; a collective step seldom waits longer than a few of them.
const (
	defaultSpinTime  = 200 * time.Microsecond
	defaultYieldTime = 20 * time.Microsecond
)

func newSpinPolicy(o *Options) spinPolicy {
	s := spinPolicy{budget: o.SpinTime, yieldAfter: defaultYieldTime}
	if s.budget == 0 {
		s.budget = defaultSpinTime
	}
	if s.budget < 0 {
		s.budget = 0
	}
	if o.Oversubscribed {
		s.yieldAfter = 0
		s.budget = min(s.budget, 50*time.Microsecond)
	}
	return s
}

// pause is called between two fruitless polls of iteration i, idle for
// the given time.
func (s spinPolicy) pause(i int, idle time.Duration) {
	switch {
	case idle >= s.yieldAfter:
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	case i&7 == 7:
		runtime.Gosched() // let this process's other goroutines run
	}
}
