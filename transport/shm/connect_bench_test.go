package shm

import (
	"fmt"
	"testing"

	"github.com/goccl/goccl/transport"
)

// BenchmarkConnect is the cost of a transient link as a large job's
// all-to-all makes one per peer and window (comm/lazy.go): on both sides
// an endpoint, a registered staging buffer of 128 KiB from Alloc, Connect,
// then Close, Deregister and Free. Others is how many other endpoints each
// device has connected (a rank's ring, tree and window peers): a segment
// each side registers may be sent to them.
//
//	go test ./transport/shm/ -run '^$' -bench Connect -benchmem
func BenchmarkConnect(b *testing.B) {
	for _, others := range []int{0, 16} {
		b.Run(fmt.Sprintf("Others=%d", others), func(b *testing.B) {
			o := testOptions(b)
			o.noSelf = true
			d0, d1 := newTestDevice(b, o), newTestDevice(b, o)
			defer d0.Close()
			defer d1.Close()
			q0, q1 := testCQ(b, d0), testCQ(b, d1)
			pair := func() (transport.Endpoint, transport.Endpoint) { return connectOn(b, d0, q0, d1, q1) }
			for range others {
				e0, e1 := pair()
				defer e0.Close()
				defer e1.Close()
			}
			stage := func(d *Device) ([]byte, transport.Region) {
				m, err := Alloc(128 << 10)
				if err != nil {
					b.Fatal(err)
				}
				r, err := d.Register(m, transport.AccessLocalWrite|transport.AccessRemoteWrite)
				if err != nil {
					b.Fatal(err)
				}
				return m, r
			}
			b.ResetTimer()
			for range b.N {
				m0, r0 := stage(d0)
				m1, r1 := stage(d1)
				e0, e1 := pair()
				e0.Close()
				e1.Close()
				d0.Deregister(r0)
				d1.Deregister(r1)
				Free(m0)
				Free(m1)
			}
		})
	}
}
