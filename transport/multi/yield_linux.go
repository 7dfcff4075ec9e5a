package multi

import "syscall"

// yield gives the processor to another thread or process that wants it,
// as a raw system call: the runtime does not hand this goroutine's
// processor (P) to another thread meanwhile. Not runtime.Gosched: with an
// idle P that wakes another thread to take the goroutine over
// (transport/tcp's spin measured that).
func yield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
