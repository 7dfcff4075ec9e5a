package multi

import "syscall"

// yield gives the processor to another thread or process that wants it.
// Not runtime.Gosched: with an idle P that wakes another thread to take
// the goroutine over (transport/tcp's spin measured that).
//
// Through syscall.Syscall, not as a raw system call (as transport/shm's
// yield, for the same reason): on a loaded host a sched_yield gives the
// core away for a whole time slice, and a raw call keeps this goroutine's
// processor (P) all that time, so no other goroutine of this process runs
// on it: not a peer rank of the same process that has the data this Wait
// waits for, nor a member's helper goroutines. Entering the system call
// through the runtime lets its monitor hand the P on once the yield lasts.
// 4 ranks as goroutines on 2 "hosts" (shared memory within, TCP between,
// commtest's "hosts") beside three busy loops on 2 cores: New's 4 MiB ring
// allreduce measured 345-1,325 ns/B with the raw call (TCP alone: 59),
// 68-250 with this one.
func yield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
