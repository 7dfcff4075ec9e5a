package tcp

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// spinPolicy says how a Wait spins on its sockets before it parks.
//
// Spinning is what makes small messages fast (no goroutine or thread is
// woken between the socket and the waiting caller), and what makes them
// slow when ranks outnumber cores (the spinner holds the core the peer
// needs). So a Wait spins for at most budget without seeing data move,
// then parks; with more ranks than cores (Options.Oversubscribed) the
// budget is short, and once it has spun for yieldAfter without data it
// gives the processor back to the kernel between polls (sched_yield), so
// that another process runnable on this core runs at once.
type spinPolicy struct {
	budget     time.Duration // idle spinning before parking
	yieldAfter time.Duration // idle spinning before each poll yields to the kernel
}

// Defaults: a round trip between two processes of this host takes 10-30
// µs. A longer spin catches slower answers but costs a loaded host dearly:
// measured under load 9 (ping-pong of 8 B between two processes, one way),
// a 20-50 µs budget gave p50 23 µs and mean 74-85 µs, a 200 µs budget p50
// 23 µs but mean 99 µs (the spinner held the core the peer needed), and no
// spin at all p50 67 µs.
const (
	defaultSpinTime = 50 * time.Microsecond
	// defaultYieldTime: with more ranks than cores every empty poll
	// yields. Measured (4 ranks on 2 cores, each bound to one, osu
	// allreduce 8-64 B, 3 alternating runs): 119-144 us against 129-160
	// us when the first 5 us of each wait spun (a read per poll that the
	// rank sharing the core waited through).
	defaultYieldTime = 0
	// oversubscribedSpinTime is the default budget with more ranks than
	// cores, where each empty poll yields the core.
	oversubscribedSpinTime = 50 * time.Microsecond
)

func newSpinPolicy(o *Options) spinPolicy {
	// Alone on its cores a spinner never yields to the kernel before it
	// parks: a yield is a system call between two polls, and there is
	// nobody to yield to.
	s := spinPolicy{budget: o.SpinTime, yieldAfter: time.Hour}
	if o.Oversubscribed {
		s.yieldAfter = defaultYieldTime
	}
	switch {
	case s.budget == 0 && o.Oversubscribed:
		s.budget = oversubscribedSpinTime
	case s.budget == 0:
		s.budget = defaultSpinTime
	case s.budget < 0:
		s.budget = 0
	}
	return s
}

// spinning counts the Waits of this process that are spinning, on every
// queue. When it exceeds GOMAXPROCS (ranks run as goroutines of one
// process, say), spinners take the processors their peers need: each then
// yields to the other goroutines between polls and parks sooner.
var spinning atomic.Int32

// crowdedBudget is the idle spin of a Wait among more spinners than
// processors.
const crowdedBudget = 20 * time.Microsecond

// crowded reports whether the process has more spinning Waits than procs.
func crowded(procs int32) bool { return spinning.Load() > procs }

// budgetFor is the idle spin allowed now.
func (s spinPolicy) budgetFor(crowd bool) time.Duration {
	if crowd {
		return min(s.budget, crowdedBudget)
	}
	return s.budget
}

// pause is called between two fruitless polls, idle for the given time.
func (s spinPolicy) pause(idle time.Duration, crowd bool) {
	// No runtime.Gosched when not crowded: it puts the goroutine on the
	// global run queue and wakes another thread to look for work, which
	// takes the goroutine over, so every call is a thread wake-up and a
	// migration (measured: the p90 of a ping-pong between two processes
	// fell from 136 µs to 25 µs without it). The scheduler preempts a
	// spinner that runs too long anyway.
	switch {
	case crowd:
		runtime.Gosched() // the other spinners of this process need the processor
	case idle >= s.yieldAfter:
		unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}
