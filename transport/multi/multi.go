// Package multi joins several transport devices into one, so that one
// communicator reaches each peer by the transport that suits it (shared
// memory within a host, TCP or verbs across hosts) while the collectives
// see a single device: one set of registered regions and one completion
// queue.
//
// A Device has members, each a transport.Device. Memory registered with
// the Device is registered with every member (or, with RegisterOn, with
// one), and a Region holds each member's region: an endpoint, created on
// one member, posts with that member's region, so the same buffer can be
// sent to a shared-memory peer and a TCP peer. A completion queue holds one
// queue per member; Poll polls them all and Wait waits on all of them at
// once (see CompletionQueue). Memory is allocated by the first member that
// allocates memory itself (a transport.Allocator, as the shared-memory
// transport does: memory a peer can map) and registered with the others.
//
// The package imports only the transport contract.
package multi

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/transport"
)

// Device is a device made of member devices. It is safe for concurrent use.
type Device struct {
	members []transport.Device
	def     int // the member NewEndpoint uses
	name    string
	alloc   transport.Allocator // nil: transport.Alloc

	// Spin and Yield are the defaults of the completion queues created
	// after they are set (CompletionQueue.Spin and Yield): New sets 50 µs
	// and 1 ms. Where ranks outnumber cores, Spin 0 yields at once.
	Spin, Yield time.Duration

	mu     sync.Mutex
	closed bool
}

var (
	_ transport.Device    = (*Device)(nil)
	_ transport.Allocator = (*Device)(nil)
)

// New joins members (at least one) into a Device. NewEndpoint creates
// endpoints on member def; NewEndpointOn on any. The Device owns the
// members: Close closes them.
func New(def int, members ...transport.Device) (*Device, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("multi: no member devices: %w", transport.ErrInvalid)
	}
	if def < 0 || def >= len(members) {
		return nil, fmt.Errorf("multi: default member %d of %d: %w", def, len(members), transport.ErrInvalid)
	}
	names := make([]string, len(members))
	d := &Device{members: members, def: def, Spin: 50 * time.Microsecond, Yield: time.Millisecond}
	for i, m := range members {
		names[i] = m.Name()
		if a, ok := m.(transport.Allocator); ok && d.alloc == nil {
			d.alloc = a
		}
	}
	d.name = strings.Join(names, "+")
	return d, nil
}

// WaitSpins reports that the Device's completion queues poll their members
// in Wait (spinning, yielding, then parking): a caller needs no spin loop of
// its own around Poll before it calls Wait.
func (d *Device) WaitSpins() bool { return true }

// Name joins the members' names: "shm+tcp".
func (d *Device) Name() string { return d.name }

// Members returns the member devices.
func (d *Device) Members() []transport.Device { return d.members }

// Alloc allocates n bytes with the first member that allocates memory
// itself, else with transport.Alloc.
func (d *Device) Alloc(n int) ([]byte, error) {
	if d.alloc != nil {
		return d.alloc.Alloc(n)
	}
	return transport.Alloc(n)
}

// Free releases memory from Alloc.
func (d *Device) Free(b []byte) error {
	if d.alloc != nil {
		return d.alloc.Free(b)
	}
	return transport.Free(b)
}

// MaxInline is the smallest inline limit of the members (0 if one copies
// nothing at post time): the executor uses one limit for every link.
func (d *Device) MaxInline() int {
	n := -1
	for _, m := range d.members {
		in, ok := m.(transport.Inliner)
		if !ok {
			return 0
		}
		if n < 0 || in.MaxInline() < n {
			n = in.MaxInline()
		}
	}
	return max(n, 0)
}

// Region is memory registered with some or all members.
type Region struct {
	def    int // the Device's default member
	buf    []byte
	access transport.Access
	subs   []transport.Region // per member; nil where not registered
}

var _ transport.Region = (*Region)(nil)

func (r *Region) Bytes() []byte            { return r.buf }
func (r *Region) Access() transport.Access { return r.access }

// Remote is the descriptor for peers of the default member (the one
// NewEndpoint uses), or of the one member a RegisterOn region is
// registered with; peers of another member need RemoteOn.
func (r *Region) Remote() transport.RemoteRegion {
	if s := r.subs[r.def]; s != nil {
		return s.Remote()
	}
	for _, s := range r.subs {
		if s != nil {
			return s.Remote()
		}
	}
	return transport.RemoteRegion{}
}

// RemoteOn is the descriptor a peer reached through member i needs, and
// false if the region is not registered with member i.
func (r *Region) RemoteOn(i int) (transport.RemoteRegion, bool) {
	if i < 0 || i >= len(r.subs) || r.subs[i] == nil {
		return transport.RemoteRegion{}, false
	}
	return r.subs[i].Remote(), true
}

// Register registers buf with every member.
func (d *Device) Register(buf []byte, access transport.Access) (transport.Region, error) {
	return d.register(buf, access, -1)
}

// RegisterOn registers buf with member i only (staging that only one
// peer uses, say).
func (d *Device) RegisterOn(i int, buf []byte, access transport.Access) (*Region, error) {
	if i < 0 || i >= len(d.members) {
		return nil, fmt.Errorf("multi: register on member %d of %d: %w", i, len(d.members), transport.ErrInvalid)
	}
	return d.register(buf, access, i)
}

func (d *Device) register(buf []byte, access transport.Access, only int) (*Region, error) {
	r := &Region{def: d.def, buf: buf, access: access, subs: make([]transport.Region, len(d.members))}
	for i, m := range d.members {
		if only >= 0 && i != only {
			continue
		}
		s, err := m.Register(buf, access)
		if err != nil {
			d.deregister(r)
			return nil, fmt.Errorf("multi: register with %s: %w", m.Name(), err)
		}
		r.subs[i] = s
	}
	return r, nil
}

// Deregister deregisters the region from every member it was registered
// with.
func (d *Device) Deregister(tr transport.Region) error {
	r, ok := tr.(*Region)
	if !ok || r == nil {
		return fmt.Errorf("multi: deregister a region of another device: %w", transport.ErrInvalid)
	}
	return d.deregister(r)
}

func (d *Device) deregister(r *Region) error {
	var errs []error
	for i, s := range r.subs {
		if s != nil {
			errs = append(errs, d.members[i].Deregister(s))
			r.subs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// sub is the member region of tr for member i.
func (d *Device) sub(tr transport.Region, i int, op string) (transport.Region, error) {
	r, ok := tr.(*Region)
	if !ok || r == nil {
		return nil, fmt.Errorf("multi: post %s: region of another device: %w", op, transport.ErrInvalid)
	}
	if r.subs[i] == nil {
		return nil, fmt.Errorf("multi: post %s: region not registered with %s: %w", op, d.members[i].Name(), transport.ErrInvalid)
	}
	return r.subs[i], nil
}

// NewEndpoint creates an endpoint on the default member.
func (d *Device) NewEndpoint(cq transport.CompletionQueue) (transport.Endpoint, error) {
	return d.NewEndpointOn(d.def, cq)
}

// NewEndpointOn creates an endpoint on member i; its completions go to cq,
// which must be one of this Device's queues.
func (d *Device) NewEndpointOn(i int, tq transport.CompletionQueue) (transport.Endpoint, error) {
	if i < 0 || i >= len(d.members) {
		return nil, fmt.Errorf("multi: endpoint on member %d of %d: %w", i, len(d.members), transport.ErrInvalid)
	}
	q, ok := tq.(*CompletionQueue)
	if !ok || q == nil || q.dev != d {
		return nil, fmt.Errorf("multi: new endpoint: completion queue of another device: %w", transport.ErrInvalid)
	}
	sub, err := d.members[i].NewEndpoint(q.subs[i].cq)
	if err != nil {
		return nil, err
	}
	ep := &endpoint{dev: d, member: i, sub: sub}
	var e transport.Endpoint = ep
	if qw, ok := sub.(transport.QuietWriter); ok {
		e = &quietEndpoint{endpoint: ep, quiet: qw}
	}
	q.addEndpoint(sub, e)
	return e, nil
}

// Close closes every member.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	var errs []error
	for _, m := range d.members {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}
