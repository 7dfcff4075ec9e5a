//go:build !amd64 || race

package comm

import "sync/atomic"

// storeRelease publishes v in *w (see release_amd64.go): elsewhere, and
// under the race detector, a sequentially consistent store.
func storeRelease(w *atomic.Uint64, v uint64) { w.Store(v) }

// storeRelease32 is storeRelease for a 32-bit word.
func storeRelease32(w *atomic.Uint32, v uint32) { w.Store(v) }
