//go:build amd64 && !race

package comm

import (
	"sync/atomic"
	"unsafe"
)

// storeRelease publishes v in *w with a release store: every store this
// goroutine made before it is visible to another core before v is. On
// amd64 (TSO: stores are never reordered with earlier loads or stores) that
// is a plain MOV, where atomic.Uint64.Store is an XCHG, a full fence that
// waits until the line holding w is owned again (the peers spinning on it
// hold it shared): on the board's small calls that wait is a cache-line
// round trip, about a third of the call. A release store does not order
// the store with later loads (StoreLoad): callers that then read a word a
// peer writes (the sleepers count before ringing the bell) must tolerate
// reading it a little early (a sleeper's nap is bounded).
// The function is in assembly so that the compiler keeps it where it is:
// a call is a compiler barrier. The race detector cannot see a release
// through it, so race builds use atomic.Uint64.Store (release_other.go).
func storeRelease(w *atomic.Uint64, v uint64) { storeRelease64((*uint64)(unsafe.Pointer(w)), v) }

//go:noescape
func storeRelease64(p *uint64, v uint64)

// storeRelease32 is storeRelease for a 32-bit word.
func storeRelease32(w *atomic.Uint32, v uint32) { storeRelease32asm((*uint32)(unsafe.Pointer(w)), v) }

//go:noescape
func storeRelease32asm(p *uint32, v uint32)
