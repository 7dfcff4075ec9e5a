//go:build race

package tcp

import (
	"runtime"
	"unsafe"
)

// The socket system calls of lane bypass internal/poll, which tells the
// race detector that whatever a goroutine did before writing to a socket
// happens before what a goroutine does after reading from one (all sockets
// of the process alike). raceWritten and raceRead do the same, so that
// memory placed by one endpoint and read after the completion its peer
// received is not reported as a race in tests that hold both sides.
var ioSync byte

func raceWritten() { runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync)) }
func raceRead()    { runtime.RaceAcquire(unsafe.Pointer(&ioSync)) }
