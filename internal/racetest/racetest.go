// Package racetest tells tests whether the race detector is on, and skips
// the tests it can find nothing in.
package racetest

import "testing"

// SkipSequential skips t under the race detector: t runs in one goroutine
// (a simulator, a compiler), where the detector can find nothing and only
// multiplies the time by 5-10; the run without -race checks the same in
// full.
func SkipSequential(t testing.TB) {
	t.Helper()
	if Enabled {
		t.Skip("one goroutine only: nothing for the race detector (the run without -race checks it)")
	}
}
