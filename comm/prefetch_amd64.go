package comm

import "unsafe"

// prefetch asks the processor to bring the cache line at p into its
// cache and goes on at once (PREFETCHT0): a hint, never a fault, and not
// a read the race detector or the memory model sees.
//
//go:noescape
func prefetch(p unsafe.Pointer)
