package mem

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/transport"
)

// Device is an in-memory transport device on a Network. It is safe for
// concurrent use.
type Device struct {
	net  *Network
	name string

	mu      sync.RWMutex
	closed  bool
	regions map[uint64]*Region // by remote key
	eps     map[*Endpoint]struct{}
	cqs     map[*CompletionQueue]struct{}
}

var _ transport.Device = (*Device)(nil)

// Region is memory registered with a Device.
type Region struct {
	dev    *Device
	buf    []byte
	access transport.Access
	key    uint64

	// use is held shared while a peer copies to or from buf, and taken by
	// Deregister, so that no copy runs after Deregister returns.
	use  sync.RWMutex
	dead atomic.Bool // set with use held exclusively
}

var _ transport.Region = (*Region)(nil)

// Bytes returns the registered memory.
func (r *Region) Bytes() []byte { return r.buf }

// Remote returns the descriptor a peer passes to PostWrite and PostRead.
// Addr is always zero.
func (r *Region) Remote() transport.RemoteRegion {
	return transport.RemoteRegion{Key: r.key, Len: uint64(len(r.buf))}
}

// Access returns the rights granted at registration.
func (r *Region) Access() transport.Access { return r.access }

// Name returns "mem:<network>/<device>".
func (d *Device) Name() string { return d.name }

// Register registers buf with access and a fresh random key. It does not
// block. buf stays the caller's memory; peers holding the key read or write
// it, within the access granted, until Deregister.
func (d *Device) Register(buf []byte, access transport.Access) (transport.Region, error) {
	if access&^transport.AccessAll != 0 {
		return nil, fmt.Errorf("mem: register: unknown access bits %#x: %w", uint32(access), transport.ErrInvalid)
	}
	r := &Region{dev: d, buf: buf, access: access}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("mem: register on %s: %w", d.name, transport.ErrClosed)
	}
	for {
		var k [8]byte
		if _, err := rand.Read(k[:]); err != nil {
			return nil, fmt.Errorf("mem: register: random key: %v: %w", err, transport.ErrInvalid)
		}
		r.key = binary.LittleEndian.Uint64(k[:])
		if _, used := d.regions[r.key]; r.key != 0 && !used {
			break
		}
	}
	d.regions[r.key] = r
	return r, nil
}

// Deregister revokes the region's key. It waits for a peer's copy in
// progress on the region (bounded by the copy's size) and returns; later
// remote accesses with the key are refused.
func (d *Device) Deregister(reg transport.Region) error {
	r, ok := reg.(*Region)
	if !ok || r == nil || r.dev != d {
		return fmt.Errorf("mem: deregister: region not of %s: %w", d.name, transport.ErrInvalid)
	}
	d.mu.Lock()
	if d.regions[r.key] != r {
		d.mu.Unlock()
		return fmt.Errorf("mem: deregister key %#x: not registered: %w", r.key, transport.ErrInvalid)
	}
	delete(d.regions, r.key)
	d.mu.Unlock()
	r.use.Lock()
	r.dead.Store(true)
	r.use.Unlock()
	return nil
}

// acquire validates a peer's access to [off, off+n) of the region with key
// for need, and returns the bytes with the region held shared; the caller
// calls release after the copy. It never touches the memory.
func (d *Device) acquire(key, off uint64, n int, need transport.Access) ([]byte, *Region, error) {
	d.mu.RLock()
	r := d.regions[key]
	d.mu.RUnlock()
	what := func(reason string) error {
		return fmt.Errorf("mem: %s: %d bytes at offset %d of key %#x: %s: %w", d.name, n, off, key, reason, transport.ErrRemoteAccess)
	}
	if r == nil {
		return nil, nil, what("no such region")
	}
	if r.access&need != need {
		return nil, nil, what(fmt.Sprintf("region grants %v, access needs %v", r.access, need))
	}
	size := uint64(len(r.buf))
	if n < 0 || off > size || uint64(n) > size-off {
		return nil, nil, what(fmt.Sprintf("out of bounds of %d-byte region", size))
	}
	r.use.RLock()
	if r.dead.Load() {
		r.use.RUnlock()
		return nil, nil, what("key revoked")
	}
	return r.buf[off : off+uint64(n)], r, nil
}

func (r *Region) release() { r.use.RUnlock() }

// NewCompletionQueue creates a completion queue of depth entries (at least
// 1; any positive depth is supported): at most depth requests may be posted
// and not yet taken out (transport.ErrQueueFull beyond).
func (d *Device) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	if depth < 1 {
		return nil, fmt.Errorf("mem: completion queue depth %d: %w", depth, transport.ErrInvalid)
	}
	q := newCompletionQueue(d, depth)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("mem: new completion queue on %s: %w", d.name, transport.ErrClosed)
	}
	d.cqs[q] = struct{}{}
	return q, nil
}

// NewEndpoint creates an unconnected endpoint whose completions go to cq,
// which must be a queue of this device.
func (d *Device) NewEndpoint(cq transport.CompletionQueue) (transport.Endpoint, error) {
	q, ok := cq.(*CompletionQueue)
	if !ok || q == nil || q.dev != d {
		return nil, fmt.Errorf("mem: new endpoint: completion queue not of %s: %w", d.name, transport.ErrInvalid)
	}
	e := newEndpoint(d, q)
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("mem: new endpoint on %s: %w", d.name, transport.ErrClosed)
	}
	d.eps[e] = struct{}{}
	d.mu.Unlock()
	d.net.addEndpoint(e)
	return e, nil
}

// forget drops a closed endpoint.
func (d *Device) forget(e *Endpoint) {
	d.mu.Lock()
	delete(d.eps, e)
	d.mu.Unlock()
}

// endpoints returns the device's open endpoints.
func (d *Device) endpoints() []*Endpoint {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]*Endpoint, 0, len(d.eps))
	for e := range d.eps {
		out = append(out, e)
	}
	return out
}

// Close closes every endpoint (their peers see ErrPeerClosed), waits for
// their goroutines, closes every completion queue and revokes every key.
// Closing a closed device does nothing.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	for _, e := range d.endpoints() {
		e.Close()
	}
	d.mu.Lock()
	cqs := d.cqs
	regions := d.regions
	d.cqs = map[*CompletionQueue]struct{}{}
	d.regions = map[uint64]*Region{}
	d.mu.Unlock()
	for q := range cqs {
		q.Close()
	}
	for _, r := range regions {
		r.use.Lock()
		r.dead.Store(true)
		r.use.Unlock()
	}
	return nil
}
