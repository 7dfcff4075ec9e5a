package tcp

import "github.com/goccl/goccl/transport"

// Steering (transport.Steerer): a write-with-immediate the caller expects
// is read from the socket straight into the caller's buffer instead of its
// target region. The executor arms one entry per staging slot whose next
// chunk is only to be copied into the caller's buffer; the copy out of the
// slot is then saved, and so is the slot's room in the caches (4 ranks on
// 2 cores, 1 MiB all-to-all: the copy was an eighth of the processor time,
// and the kernel's own copies ran slower beside it).
//
// The entries are guarded by the endpoint's mu. The receive side looks at
// them (begin) only while some are armed, which one atomic load tells.

// Entry states.
const (
	steerIdle   uint8 = iota
	steerArmed        // waiting for its write
	steerTaken        // its write is being placed into dst
	steerPlaced       // its write was placed into dst
)

type steerEntry struct {
	state uint8
	reg   *region
	off   uint64
	imm   uint32
	dst   []byte
}

var _ transport.Steerer = (*endpoint)(nil)

// Steer arms entry i (transport.Steerer).
func (e *endpoint) Steer(i int, tr transport.Region, off int, imm uint32, dst []byte) bool {
	if i < 0 || i >= transport.MaxSteer || len(dst) == 0 {
		return false
	}
	r, ok := e.dev.localRegion(tr)
	if !ok || off < 0 || !inBounds(uint64(off), uint64(len(dst)), uint64(len(r.buf))) {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return false
	}
	if e.steers == nil {
		e.steers = make([]steerEntry, transport.MaxSteer)
	}
	s := &e.steers[i]
	if s.state != steerIdle {
		return false
	}
	*s = steerEntry{state: steerArmed, reg: r, off: uint64(off), imm: imm, dst: dst}
	e.steerHi = max(e.steerHi, i+1)
	e.steering.Add(1)
	return true
}

// Unsteer disarms entry i (transport.Steerer).
func (e *endpoint) Unsteer(i int) bool {
	if i < 0 || i >= transport.MaxSteer {
		return false
	}
	e.mu.Lock()
	if e.steers == nil {
		e.mu.Unlock()
		return false
	}
	s := &e.steers[i]
	if s.state == steerTaken {
		// A write is being placed into dst: it goes on into its target.
		// The receive side is taken first (the lock order of begin).
		e.mu.Unlock()
		l := e.ctl() // set: a write arrived through it
		l.rxMu.Lock()
		defer l.rxMu.Unlock()
		e.mu.Lock()
		if s.state == steerTaken && l.rx.busy && l.rx.steer == i {
			// What it placed so far goes to the target too: the target
			// then holds the whole write, as if it had never been
			// steered (a run that yields while a chunk is being placed
			// takes it from its slot when it runs again).
			r := s.reg.buf[s.off : s.off+uint64(len(s.dst))]
			copy(r[:l.rx.got], s.dst[:l.rx.got])
			l.rx.dst = r
			l.rx.steer = -1
			s.state = steerIdle
		}
	}
	placed := s.state == steerPlaced
	if s.state == steerArmed {
		e.steering.Add(-1)
	}
	*s = steerEntry{}
	e.mu.Unlock()
	return placed
}

// steerTake returns the armed entry that the write with header h to
// region r matches, now taken, or -1. It is called with n > 0 bytes to
// place and the immediate flag set.
func (e *endpoint) steerTake(r *region, h *header) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.steerHi {
		s := &e.steers[i]
		if s.state == steerArmed && s.reg == r && s.off == h.offset && s.imm == h.imm && uint64(len(s.dst)) == h.length {
			s.state = steerTaken
			e.steering.Add(-1)
			return i
		}
	}
	return -1
}

// steerDone ends the placement of a steered write: placed, or dropped
// (placed false: the endpoint failed). The caller holds e.mu.
func (e *endpoint) steerDoneLocked(i int, placed bool) {
	if s := &e.steers[i]; s.state == steerTaken {
		if placed {
			s.state = steerPlaced
		} else {
			*s = steerEntry{}
		}
	}
}
