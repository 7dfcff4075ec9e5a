//go:build !amd64

package comm

import "unsafe"

// prefetch is a hint (see prefetch_amd64.go); elsewhere it does nothing.
func prefetch(p unsafe.Pointer) {}
