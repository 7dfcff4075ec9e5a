package tcp

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// region is registered memory. Every touch of buf by the transport (a
// peer's write or read, a local send, receive or read placement) holds a
// reference taken with acquire, which fails once the region is revoked, so
// Deregister, which revokes and then waits for the references to drop,
// returns only once no transfer uses the memory any more. Acquiring never
// blocks: a transfer in progress (a payload half on the wire) may hold its
// reference across calls and goroutines.
type region struct {
	dev    *Device
	buf    []byte
	key    uint64
	access transport.Access

	refs    atomic.Int64
	revoked atomic.Bool
}

var _ transport.Region = (*region)(nil)

func (r *region) Bytes() []byte { return r.buf }

func (r *region) Remote() transport.RemoteRegion {
	return transport.RemoteRegion{Key: r.key, Len: uint64(len(r.buf))}
}

func (r *region) Access() transport.Access { return r.access }

// acquire takes a reference for a transfer; it reports false if the region
// was deregistered. A true result must be paired with release.
func (r *region) acquire() bool {
	r.refs.Add(1)
	if r.revoked.Load() {
		r.refs.Add(-1)
		return false
	}
	return true
}

func (r *region) release() { r.refs.Add(-1) }

// revoke refuses later acquires and waits until the transfers holding a
// reference have released it. Transfers are bounded (a payload in flight
// finishes or its connection fails within the socket timeouts), so this
// returns.
func (r *region) revoke() {
	r.revoked.Store(true)
	for i := 0; r.refs.Load() > 0; i++ {
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// inBounds reports whether [off, off+n) lies inside a region of length size,
// without overflow.
func inBounds(off, n, size uint64) bool {
	return off <= size && n <= size-off
}
