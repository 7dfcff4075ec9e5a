//go:build !race

package racetest

// Enabled: the build has the race detector.
const Enabled = false
