//go:build race

package comm_test

// Under the race detector (5-10x slower) the table tests shrink: fewer rank
// counts and a smaller "large" size. The full tables run without -race.
const raceEnabled = true

func init() { bigCount = 1<<14 + 3 }
