//go:build !linux

package multi

import "runtime"

// yield lets other goroutines run (see yield_linux.go).
func yield() { runtime.Gosched() }
