//go:build race

package collectives

// raceEnabled: the build has the race detector (see sequentialTest).
const raceEnabled = true
