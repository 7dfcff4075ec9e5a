package shm

import (
	"sync"
	"sync/atomic"
)

// The race detector does not see the synchronization between two
// endpoints of one process through their shared segments: each side
// reaches the shared words through its own mapping, at its own addresses.
// So in race builds each endpoint also has a clock, a Go variable both
// sides find by the endpoint's token: a side increments its own clock just
// before a store that publishes (a ring's tail or head, the end of a copy
// in the busy word) and loads the peer's clock just after the load that
// observes such a store. The increments form a release sequence, so the
// detector sees the happens-before the hardware provides. In other builds
// this compiles to nothing.
var raceClocks sync.Map // [16]byte -> *atomic.Uint64

func raceClock(token [16]byte) *atomic.Uint64 {
	if !raceEnabled {
		return nil
	}
	c, _ := raceClocks.LoadOrStore(token, new(atomic.Uint64))
	return c.(*atomic.Uint64)
}

// raceRelease precedes a publishing store of this side.
func (e *endpoint) raceRelease() {
	if raceEnabled && e.myClock != nil {
		e.myClock.Add(1)
	}
}

// raceAcquire follows a load that observed a publishing store of the peer.
func (e *endpoint) raceAcquire() {
	if raceEnabled && e.peerClock != nil {
		e.peerClock.Load()
	}
}
