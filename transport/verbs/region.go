package verbs

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// regKey names a registration in the cache: the exact address range and
// access. Registering the same range with the same access again takes a
// reference on the existing memory region instead of calling ibv_reg_mr.
type regKey struct {
	addr   uintptr
	n      int
	access transport.Access
}

// mrEntry is one ibv memory region shared by every Register of its range.
type mrEntry struct {
	key  regKey
	mr   ibv.MR // nil for an empty region
	pin  runtime.Pinner
	refs int // guarded by Device.mu
}

func (e *mrEntry) release() error {
	var err error
	if e.mr != nil {
		err = e.mr.Dereg()
	}
	// Only now may the memory move or be collected again: the adapter no
	// longer holds its address.
	e.pin.Unpin()
	return err
}

func (e *mrEntry) lkey() uint32 {
	if e.mr == nil {
		return 0
	}
	return e.mr.LKey()
}

// region is one Register's handle. Handles of the same range share an
// mrEntry; each is deregistered once.
type region struct {
	dev  *Device
	e    *mrEntry
	buf  []byte
	dead atomic.Bool
}

var _ transport.Region = (*region)(nil)

func (r *region) Bytes() []byte { return r.buf }

func (r *region) Access() transport.Access { return r.e.key.access }

func (r *region) Remote() transport.RemoteRegion {
	if r.e.mr == nil {
		return transport.RemoteRegion{}
	}
	return transport.RemoteRegion{Key: uint64(r.e.mr.RKey()), Addr: uint64(r.e.key.addr), Len: uint64(r.e.key.n)}
}

func (r *region) addr(off int) uintptr { return r.e.key.addr + uintptr(off) }

// ibvAccess is the hardware access for a contract access. Verbs requires
// local write whenever remote write is granted, so the memory region may
// carry IBV_ACCESS_LOCAL_WRITE that the region does not report; the
// transport still refuses local writes (receive, read target) into a region
// registered without AccessLocalWrite, before posting.
func ibvAccess(a transport.Access) ibv.Access {
	var x ibv.Access
	if a&(transport.AccessLocalWrite|transport.AccessRemoteWrite) != 0 {
		x |= ibv.AccessLocalWrite
	}
	if a&transport.AccessRemoteWrite != 0 {
		x |= ibv.AccessRemoteWrite
	}
	if a&transport.AccessRemoteRead != 0 {
		x |= ibv.AccessRemoteRead
	}
	return x
}

// Register registers buf with access. The memory must stay in place until
// Deregister: memory from transport.Alloc does; Go heap memory is pinned
// (runtime.Pinner) for the registration's lifetime so that it is never
// moved or collected while the adapter holds its address. Registering the
// same range with the same access again is a cache hit that costs no verbs
// call; each Register needs its own Deregister, and the key is revoked when
// the last one is.
func (d *Device) Register(buf []byte, access transport.Access) (transport.Region, error) {
	if access&^transport.AccessAll != 0 {
		return nil, fmt.Errorf("verbs: register: access %#x: %w", uint32(access), transport.ErrInvalid)
	}
	key := regKey{n: len(buf), access: access}
	if len(buf) > 0 {
		key.addr = uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("verbs: register: %s: %w", d.name, transport.ErrClosed)
	}
	if e := d.regs[key]; e != nil {
		e.refs++
		return &region{dev: d, e: e, buf: buf}, nil
	}
	e := &mrEntry{key: key, refs: 1}
	if len(buf) > 0 {
		e.pin.Pin(unsafe.SliceData(buf))
		mr, err := d.pd.RegMR(key.addr, len(buf), ibvAccess(access))
		if err != nil {
			e.pin.Unpin()
			hint := ""
			if errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EPERM) {
				hint = " (the pages could not be pinned: raise the locked-memory limit, ulimit -l unlimited)"
			}
			return nil, fmt.Errorf("verbs: register %d bytes %v on %s: %w%s", len(buf), access, d.name, err, hint)
		}
		e.mr = mr
		d.nreg++
	}
	d.regs[key] = e
	return &region{dev: d, e: e, buf: buf}, nil
}

// Deregister releases one registration of the region's range; with the last
// one the memory region is deregistered and its key revoked: later remote
// accesses with it are refused by the adapter. Requests in flight on it may
// complete with an error.
func (d *Device) Deregister(r transport.Region) error {
	reg, ok := r.(*region)
	if !ok || reg.dev != d {
		return fmt.Errorf("verbs: deregister: region of another device: %w", transport.ErrInvalid)
	}
	if !reg.dead.CompareAndSwap(false, true) {
		return fmt.Errorf("verbs: deregister: region already deregistered: %w", transport.ErrInvalid)
	}
	d.mu.Lock()
	e := reg.e
	e.refs--
	last := e.refs == 0 && d.regs[e.key] == e
	if last {
		delete(d.regs, e.key)
	}
	d.mu.Unlock()
	if !last {
		return nil
	}
	if err := e.release(); err != nil {
		return fmt.Errorf("verbs: deregister on %s: %w", d.name, err)
	}
	return nil
}

// localRegion checks that r is a live region of d and that [off, off+n)
// lies inside it; with write it must grant AccessLocalWrite.
func (d *Device) localRegion(r transport.Region, off, n int, write bool) (*region, error) {
	reg, ok := r.(*region)
	if !ok || reg == nil || reg.dev != d {
		return nil, fmt.Errorf("region of another device: %w", transport.ErrInvalid)
	}
	if reg.dead.Load() {
		return nil, fmt.Errorf("region was deregistered: %w", transport.ErrInvalid)
	}
	if off < 0 || n < 0 || off > len(reg.buf) || n > len(reg.buf)-off {
		return nil, fmt.Errorf("[%d, %d+%d) outside the region's %d bytes: %w", off, off, n, len(reg.buf), transport.ErrInvalid)
	}
	if write && reg.e.key.access&transport.AccessLocalWrite == 0 {
		return nil, fmt.Errorf("region lacks local-write access (has %v): %w", reg.e.key.access, transport.ErrInvalid)
	}
	return reg, nil
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
