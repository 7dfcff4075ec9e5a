package shm

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations on words in shared mappings. They use the shared (not
// FUTEX_PRIVATE) variants, so a waiter in one process is woken by a wake in
// another that maps the same page.
const (
	futexWait = 0 // FUTEX_WAIT
	futexWake = 1 // FUTEX_WAKE
)

// futexSleep blocks while *w == val, at most d (d <= 0: do not sleep). It
// returns early on a wake, a signal or when *w != val; the caller re-checks
// its condition in every case.
func futexSleep(w *atomic.Uint32, val uint32, d time.Duration) {
	if d <= 0 {
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWakeAll wakes every thread sleeping on w, in any process.
func futexWakeAll(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}

// FutexSleep blocks while *w == val, at most d, for a word in memory shared
// between processes (Alloc, MapRemote). It may return early for any
// reason; the caller re-checks its condition.
func FutexSleep(w *atomic.Uint32, val uint32, d time.Duration) { futexSleep(w, val, d) }

// FutexNap is FutexSleep as a raw system call, for a goroutine that
// sleeps a short while (d at most a millisecond or so) in a wait it drives
// itself: the runtime does not see it, so the thread keeps its processor
// (P) and the runtime's monitor thread (sysmon) neither hands the P to
// another thread meanwhile nor, because the process had no running P,
// sleeps deeply and restarts at its fastest pace afterwards. That pace (a
// wake-up every 20 µs of sleep for its next 50 rounds: about every 120 µs
// here, each taking the core for ~15 µs) stalls a rank pinned to one core,
// and every rank that waits on it, for milliseconds after each nap. The
// caller lets the process's other goroutines run before each nap
// (runtime.Gosched): they cannot run on this P during it.
func FutexNap(w *atomic.Uint32, val uint32, d time.Duration) {
	if d <= 0 {
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// FutexWakeAll wakes every thread of any process sleeping on w.
func FutexWakeAll(w *atomic.Uint32) { futexWakeAll(w) }
