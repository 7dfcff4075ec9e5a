package comm

import (
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// registration is one registered user buffer.
type registration struct {
	start, end uintptr
	region     transport.Region
	mem        ownedMem // the Alloc'd memory when owned
	owned      bool
	id         uint64 // unique in the process (regIDs)
}

// regIDs numbers the registrations of every communicator of the process.
var regIDs atomic.Uint64

// scratchBuf is a registered staging buffer. It grows to the largest
// need seen and is reused.
type scratchBuf struct {
	region transport.Region
	mem    []byte
	own    ownedMem
}

// Alloc returns a slice of n elements in memory registered with the
// communicator's transport: collectives on it (or on any subslice) run
// without staging copies. Release it with Free.
func Alloc[T Number](c *Comm, n int) ([]T, error) {
	if err := c.usable("alloc"); err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, fmt.Errorf("comm: alloc: negative length %d", n)
	}
	var z T
	if n == 0 {
		return []T{}, nil
	}
	if size := int(unsafe.Sizeof(z)); n > math.MaxInt/size {
		return nil, c.inSub(fmt.Errorf("comm: rank %d: alloc: %d elements of %d bytes is more than %d bytes", c.rank, n, size, math.MaxInt))
	}
	m, err := allocFrom(c.dev, n*int(unsafe.Sizeof(z)))
	if err != nil {
		return nil, c.inSub(fmt.Errorf("comm: rank %d: %w", c.rank, err))
	}
	if err := c.register(m.mem, m); err != nil {
		m.free()
		return nil, c.inSub(err)
	}
	return fromBytes[T](m.mem), nil
}

// Free releases a slice returned by Alloc (Close releases those not
// freed). It refuses, with an error naming the call, a slice that a call
// of this communicator, or of one split from it (or from which it was
// split), has not finished with: an asynchronous call (or a started
// Persistent) still queued or running; wait for its request first. Do not use the slice afterwards. If it is used anyway, nothing
// faults, unlike C's free: the memory stays mapped (its pages go back to
// the system) and a later Alloc may hand it out again, zeroed, so a stale
// slice reads and writes that later buffer. The same holds after Close.
func Free[T Number](c *Comm, buf []T) error {
	if len(buf) == 0 {
		return nil
	}
	return c.inSub(c.deregister(asBytes(buf), true))
}

// Register registers an existing slice so collectives on it (or its
// subslices) skip the staging copies. The slice must stay alive and must not
// be resized until Deregister. Registration pins the memory on hardware
// transports; prefer Alloc for buffers made for communication.
func Register[T Number](c *Comm, buf []T) error {
	if err := c.usable("register"); err != nil {
		return err
	}
	if len(buf) == 0 {
		return nil
	}
	return c.inSub(c.register(asBytes(buf), ownedMem{}))
}

// Deregister undoes Register. Like Free, it refuses a slice that a call
// still queued or running uses.
func Deregister[T Number](c *Comm, buf []T) error {
	if len(buf) == 0 {
		return nil
	}
	return c.inSub(c.deregister(asBytes(buf), false))
}

// register registers mem; owner, when it has memory, is the Alloc'd
// memory mem is, freed at deregistration.
func (c *Comm) register(mem []byte, owner ownedMem) error {
	start := uintptr(unsafe.Pointer(&mem[0]))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.regs {
		if start < r.end && r.start < start+uintptr(len(mem)) {
			return fmt.Errorf("comm: rank %d: register %d bytes at %#x: overlaps a registered buffer", c.rank, len(mem), start)
		}
	}
	region, err := c.dev.Register(mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
	if err != nil {
		return fmt.Errorf("comm: rank %d: register %d bytes: %w", c.rank, len(mem), err)
	}
	c.regs = append(c.regs, registration{start: start, end: start + uintptr(len(mem)), region: region, mem: owner, owned: owner.mem != nil, id: regIDs.Add(1)})
	return nil
}

// allocHold is the Alloc'd buffer that held a slice when a Persistent was
// prepared on it: the communicator it came from and its registration.
type allocHold struct {
	c  *Comm
	id uint64
}

// holdOf returns the Alloc'd buffer of c or a communicator of its family
// that holds b's first byte, if any.
func (c *Comm) holdOf(b []byte) allocHold {
	if len(b) == 0 {
		return allocHold{}
	}
	for _, o := range append([]*Comm{c}, c.held.others(c)...) {
		if id := o.ownedID(b); id != 0 {
			return allocHold{c: o, id: id}
		}
	}
	return allocHold{}
}

// ownedID is the id of c's Alloc'd buffer holding b's first byte, 0 if
// none.
func (c *Comm) ownedID(b []byte) uint64 {
	start := uintptr(unsafe.Pointer(&b[0]))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.regs {
		if r.owned && start >= r.start && start < r.end {
			return r.id
		}
	}
	return 0
}

// stillHeld reports whether the buffer h is still allocated (not freed,
// its communicator not closed): b is in it.
func (h allocHold) stillHeld(b []byte) bool {
	return h.c == nil || h.c.ownedID(b) == h.id
}

func (c *Comm) deregister(mem []byte, owned bool) error {
	if c == nil {
		return errNilComm("deregister")
	}
	start := uintptr(unsafe.Pointer(&mem[0]))
	// A call of a communicator split from this one (or the one this was
	// split from) may use the buffer too, through its staging: freed, a
	// later Alloc could hand the memory out while that call still writes
	// it. (Checked first, each under its own lock: never two at once.)
	for _, o := range c.held.others(c) {
		o.mu.Lock()
		q := o.inUseLocked(start, start+uintptr(len(mem)))
		state := "queued"
		if q != nil && q == o.active {
			state = "running"
		}
		o.mu.Unlock()
		if q != nil {
			what := "free"
			if !owned {
				what = "deregister"
			}
			return fmt.Errorf("comm: rank %d: %s %#x: %s (%s) on communicator %s still uses the buffer: wait for its request first", c.rank, what, start, q.kind, state, o.id)
		}
	}
	c.mu.Lock()
	for i, r := range c.regs {
		if r.start == start && r.owned == owned {
			if q := c.inUseLocked(r.start, r.end); q != nil {
				state := "queued"
				if q == c.active {
					state = "running"
				}
				kind := q.kind
				c.mu.Unlock()
				what := "free"
				if !owned {
					what = "deregister"
				}
				return fmt.Errorf("comm: rank %d: %s %#x: %s (%s) still uses the buffer: wait for its request first", c.rank, what, start, kind, state)
			}
			c.regs = append(c.regs[:i], c.regs[i+1:]...)
			err := c.dev.Deregister(r.region)
			if owned {
				if ferr := r.mem.free(); err == nil {
					err = ferr
				}
			}
			c.mu.Unlock()
			return err
		}
	}
	closed := c.closed
	c.mu.Unlock()
	// Live on another communicator of the family (c closed or not): say
	// where, rather than that Close released it (it did not).
	if why := c.registeredElsewhere(start, owned); why != "" {
		what := "free"
		if !owned {
			what = "deregister"
		}
		return fmt.Errorf("comm: rank %d: %s %#x: %s", c.rank, what, start, why)
	}
	if closed {
		// Close freed (and deregistered) every buffer: say so, rather
		// than that this one was never live.
		what, did := "free", "freed every buffer from Alloc"
		if !owned {
			what, did = "deregister", "deregistered every registered buffer"
		}
		return fmt.Errorf("comm: rank %d: %s %#x: %w: Close %s", c.rank, what, start, ErrClosed, did)
	}
	if owned {
		return fmt.Errorf("comm: rank %d: free %#x: not a live buffer from Alloc (freed already, or a subslice)", c.rank, start)
	}
	return fmt.Errorf("comm: rank %d: deregister %#x: not a registered buffer", c.rank, start)
}

// registeredElsewhere says why a Free (owned) or Deregister of the buffer
// at start found nothing to release on c, when the buffer is live all the
// same: from Alloc where Deregister was called (or registered where Free
// was), or c's family's (a communicator split from c, or c from it),
// which the call must go to. "" if neither. It takes each communicator's
// mu in turn, never two at once.
func (c *Comm) registeredElsewhere(start uintptr, owned bool) string {
	for _, o := range append([]*Comm{c}, c.held.others(c)...) {
		o.mu.Lock()
		found, alloc := false, false
		for _, r := range o.regs {
			if r.start == start {
				found, alloc = true, r.owned
				break
			}
		}
		o.mu.Unlock()
		switch {
		case !found:
		case o != c:
			how := "registered by Register on"
			if alloc {
				how = "from Alloc of"
			}
			return fmt.Sprintf("the buffer is %s communicator %s, not this one: release it there", how, o.id)
		case alloc:
			return "the buffer is from Alloc: release it with Free"
		default:
			return "the buffer was registered with Register: release it with Deregister"
		}
	}
	return ""
}

// inUseLocked returns a call, queued or running on the worker, whose
// buffers overlap [start, end), or nil. A blocking call that runs on its
// caller's goroutine is not seen: another goroutine that frees its buffer
// meanwhile races with it, as with any memory two goroutines share.
func (c *Comm) inUseLocked(start, end uintptr) *Request {
	touches := func(r *Request) bool {
		for _, b := range [2][]byte{r.send, r.recv} {
			if len(b) > 0 {
				b0 := uintptr(unsafe.Pointer(&b[0]))
				if b0 < end && start < b0+uintptr(len(b)) {
					return true
				}
			}
		}
		return false
	}
	if c.active != nil && touches(c.active) {
		return c.active
	}
	for _, list := range [2]*Request{c.qhead, c.hoisted} {
		for r := list; r != nil; r = r.next {
			if touches(r) {
				return r
			}
		}
	}
	return nil
}

// lookup finds the registered region holding b, if any.
func (c *Comm) lookup(b []byte) (collectives.Target, bool) {
	if len(b) == 0 {
		return collectives.Target{}, false
	}
	start := uintptr(unsafe.Pointer(&b[0]))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.regs {
		if start >= r.start && start+uintptr(len(b)) <= r.end {
			return collectives.Target{Region: r.region, Off: int(start - r.start)}, true
		}
	}
	return collectives.Target{}, false
}

// scratchFor returns staging buffer i, grown to at least n bytes. Called
// by the worker only.
func (c *Comm) scratchFor(i, n int) (collectives.Target, error) {
	sb := &c.scratch[i]
	if sb.region != nil && len(sb.mem) >= n {
		return collectives.Target{Region: sb.region}, nil
	}
	size := max(n, 1<<20)
	if sb.region != nil {
		size = max(size, 2*len(sb.mem))
		c.dev.Deregister(sb.region)
		sb.own.free()
		*sb = scratchBuf{}
	}
	m, err := allocFrom(c.dev, size)
	if err != nil {
		return collectives.Target{}, err
	}
	r, err := c.dev.Register(m.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
	if err != nil {
		m.free()
		return collectives.Target{}, fmt.Errorf("register staging buffer of %d bytes: %w", size, err)
	}
	*sb = scratchBuf{region: r, mem: m.mem, own: m}
	return collectives.Target{Region: r}, nil
}
