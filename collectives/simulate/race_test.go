//go:build race

package simulate

// raceEnabled: the build has the race detector (see sequentialTest).
const raceEnabled = true
