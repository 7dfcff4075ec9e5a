//go:build amd64

package comm

// spinPause is one PAUSE instruction, between two polls of a word that
// another core will write. Without it the core issues the polling loads
// back to back: the writer's request for the line competes with them, and
// the loop's exit, once the line changed, discards every load in flight.
// Two threads on this VM's two cores handing a cache line back and forth
// (each writing its line, then spinning on the other's) took 185-267 ns an
// exchange with a PAUSE per poll against 271-303 without, alternating
// runs, 6 December.
func spinPause()
