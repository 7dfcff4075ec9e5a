package tcp

import (
	"sync"

	"github.com/goccl/goccl/transport"
)

// region is registered memory. Every touch of buf by the transport (a
// peer's write or read, a local send, receive or read placement) holds mu
// for reading and checks revoked, so Deregister, which takes mu for writing,
// returns only once no transfer is using the memory any more.
type region struct {
	dev    *Device
	buf    []byte
	key    uint64
	access transport.Access

	mu      sync.RWMutex
	revoked bool
}

var _ transport.Region = (*region)(nil)

func (r *region) Bytes() []byte { return r.buf }

func (r *region) Remote() transport.RemoteRegion {
	return transport.RemoteRegion{Key: r.key, Len: uint64(len(r.buf))}
}

func (r *region) Access() transport.Access { return r.access }

// acquire pins the region for a transfer; it reports false if the region
// was deregistered. A true result must be paired with release.
func (r *region) acquire() bool {
	r.mu.RLock()
	if r.revoked {
		r.mu.RUnlock()
		return false
	}
	return true
}

func (r *region) release() { r.mu.RUnlock() }

// inBounds reports whether [off, off+n) lies inside a region of length size,
// without overflow.
func inBounds(off, n, size uint64) bool {
	return off <= size && n <= size-off
}
