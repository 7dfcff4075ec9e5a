package shm

import (
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/transport"
)

// region is registered memory. Its slot in the device's table (shared with
// peers) says whether the key is live; peers check it, and announce the
// slot they copy into or out of in their busy word, before every direct
// copy (see endpoint.remote). Transfers this side carries out for the
// ring (placing a message, a staged write, answering a staged read) hold
// mu for reading and check revoked, so that Deregister, which takes mu for
// writing, returns only once none uses the memory.
type region struct {
	dev    *Device
	buf    []byte
	key    uint64
	slot   int
	access transport.Access
	seg    *segment // the Alloc segment holding buf, nil if none
	// exported: peers map seg (the region grants them a right).
	exported bool

	mu      sync.RWMutex
	revoked bool
	gone    atomic.Bool // revoked, for lock-free checks at post time
}

var _ transport.Region = (*region)(nil)

// Bytes is the registered memory.
func (r *region) Bytes() []byte { return r.buf }

// Remote is the descriptor a peer passes to PostWrite and PostRead. Addr is
// zero: the key alone names the region, and offsets are relative to its
// start.
func (r *region) Remote() transport.RemoteRegion {
	return transport.RemoteRegion{Key: r.key, Len: uint64(len(r.buf))}
}

// Access is the set of rights granted at registration.
func (r *region) Access() transport.Access { return r.access }

// Shared reports whether peers map the region's memory (it is from Alloc
// and grants a remote right): their writes and reads of it are one copy
// with no work on this side.
func (r *region) Shared() bool { return r.exported }

// acquire pins the region for a local transfer; it reports false if the
// region was deregistered. A true result must be paired with release.
func (r *region) acquire() bool {
	r.mu.RLock()
	if r.revoked {
		r.mu.RUnlock()
		return false
	}
	return true
}

func (r *region) release() { r.mu.RUnlock() }

func (r *region) revoke() {
	r.gone.Store(true)
	r.mu.Lock()
	r.revoked = true
	r.mu.Unlock()
}

// isRevoked says whether Deregister started; transfers still pin the
// region (acquire), this is the check of a post.
func (r *region) isRevoked() bool { return r.gone.Load() }

// inBounds reports whether [off, off+n) lies inside a region of length
// size, without overflow.
func inBounds(off, n, size uint64) bool {
	return off <= size && n <= size-off
}
