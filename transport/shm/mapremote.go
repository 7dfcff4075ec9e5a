package shm

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// ErrNotMapped says that MapRemote found the peer's region but not yet the
// mapping of the segment holding it: MapRemote asked the peer for the
// segment's handle (a peer gets a segment when it first needs it), and the
// answer may still be on its way. Retry shortly.
var ErrNotMapped = errors.New("shm: the peer's segment is not mapped here yet")

// MapRemote maps the peer's region named by remote into this process once
// more and returns the mapping, which belongs to the caller: it stays valid
// until Unmap, whatever the peer, its device or this endpoint do meanwhile
// (the pages live as long as a mapping of them does). It is for memory two
// ranks share in place, such as flags and small payloads that every rank
// of a host reads and writes directly. The region must be in memory from
// Alloc and allow remote reads and writes, and the peer must be reachable
// through a mapping (not cross-memory attach only); otherwise the error
// wraps transport.ErrInvalid. ep is an shm endpoint, or an endpoint that
// wraps one (a method Sub() transport.Endpoint), connected.
func MapRemote(ep transport.Endpoint, remote transport.RemoteRegion) ([]byte, error) {
	for {
		s, ok := ep.(interface{ Sub() transport.Endpoint })
		if !ok {
			break
		}
		ep = s.Sub()
	}
	e, ok := ep.(*endpoint)
	if !ok || e == nil {
		return nil, fmt.Errorf("shm: map remote region: %T is not a shared-memory endpoint: %w", ep, transport.ErrInvalid)
	}
	if !e.live.Load() {
		return nil, fmt.Errorf("shm: map remote region of %s: endpoint not connected: %w", e.peerName, transport.ErrInvalid)
	}
	key := remote.Key
	slot := key & (maxSlots - 1)
	if slot >= uint64(len(e.peerTab)/slotSize) {
		return nil, fmt.Errorf("shm: map remote region of %s: key %#x: %w", e.peerName, key, transport.ErrInvalid)
	}
	sv := tableSlot(e.peerTab, int(slot))
	var info slotInfo
	if sv.state().Load() == slotLive {
		info = sv.read()
	}
	if info.key != key || info.len == 0 {
		return nil, fmt.Errorf("shm: map remote region of %s: key %#x is not a live region: %w", e.peerName, key, transport.ErrInvalid)
	}
	const rw = transport.AccessRemoteRead | transport.AccessRemoteWrite
	if transport.Access(info.access)&rw != rw {
		return nil, fmt.Errorf("shm: map remote region of %s: key %#x does not allow remote reads and writes: %w", e.peerName, key, transport.ErrInvalid)
	}
	// Under txMu the endpoint's mapping of the segment cannot go away
	// (unmapSegment takes it).
	e.txMu.Lock()
	defer e.txMu.Unlock()
	var src []byte
	if e.self != nil {
		r := e.self.slots[slot].Load()
		if r == nil || r.key != key || uint64(len(r.buf)) != info.len || !r.exported {
			return nil, fmt.Errorf("shm: map remote region of %s: key %#x is not in shared memory: %w", e.peerName, key, transport.ErrInvalid)
		}
		src = r.buf
	} else {
		if info.seg == 0 {
			return nil, fmt.Errorf("shm: map remote region of %s: key %#x is not in shared memory: %w", e.peerName, key, transport.ErrInvalid)
		}
		e.segMu.Lock()
		m := e.segs[info.seg]
		e.segMu.Unlock()
		if m == nil {
			if e.failed.Load() {
				// The peer died or the connection broke: the segment
				// will never come (a caller retrying on ErrNotMapped
				// waited out its own deadline).
				return nil, fmt.Errorf("shm: map remote region of %s: key %#x: the connection failed: %w", e.peerName, key, transport.ErrLink)
			}
			e.askSegment(info.seg)
			return nil, fmt.Errorf("shm: map remote region of %s: key %#x: %w", e.peerName, key, ErrNotMapped)
		}
		if !inBounds(info.segOff, info.len, uint64(len(m))) {
			return nil, fmt.Errorf("shm: map remote region of %s: key %#x lies outside its segment: %w", e.peerName, key, transport.ErrInvalid)
		}
		src = m[info.segOff : info.segOff+info.len]
	}
	return dupMapping(src)
}

// dupMapping maps the pages under b (part of a MAP_SHARED mapping) a
// second time and returns the same bytes in the new mapping.
func dupMapping(b []byte) ([]byte, error) {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	base := addr &^ uintptr(pageSize-1)
	size := uintptr(pageRound(int(addr-base) + len(b)))
	// mremap with an old size of 0 makes a new mapping of the same pages
	// of a shared mapping.
	p, err := unix.MremapPtr(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), -int(addr-base)), 0, nil, size, unix.MREMAP_MAYMOVE)
	if err != nil {
		return nil, fmt.Errorf("shm: map remote region: mremap: %w", err)
	}
	return unsafe.Slice((*byte)(unsafe.Add(p, addr-base)), len(b)), nil
}

// Unmap releases a mapping MapRemote returned.
func Unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	base := addr &^ uintptr(pageSize-1)
	size := uintptr(pageRound(int(addr-base) + len(b)))
	if err := unix.MunmapPtr(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), -int(addr-base)), size); err != nil {
		return fmt.Errorf("shm: unmap: %w", err)
	}
	return nil
}
