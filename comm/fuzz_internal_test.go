package comm

import (
	"testing"

	"github.com/goccl/goccl/transport"
)

// The communicator decodes two kinds of bytes that come from other
// processes through the bootstrap store: a rank's address table (endpoint
// blobs and staging keys) and failure reports. Neither may panic on any
// input.

func FuzzParseBlobs(f *testing.F) {
	var ok []byte
	ok = appendBlob(ok, nil, transport.RemoteRegion{})
	ok = appendBlob(ok, []byte("address"), transport.RemoteRegion{Key: 1, Addr: 2, Len: 3})
	f.Add(ok, 2)
	f.Add([]byte{}, 1)
	f.Add([]byte{0xff, 0xff, 1, 2}, 3)
	f.Fuzz(func(t *testing.T, b []byte, size int) {
		if size < 0 || size > 1024 {
			return
		}
		addrs, regions, err := parseBlobs(b, size)
		if err == nil && (len(addrs) != size || len(regions) != size) {
			t.Fatalf("%d addresses and %d regions for %d ranks", len(addrs), len(regions), size)
		}
	})
}

func FuzzDecodeReport(f *testing.F) {
	f.Add(report{root: 3, call: "allreduce(float32, 8, sum) #2", cause: "lost"}.encode())
	f.Add(report{root: -1, mismatch: true, call: "x", cause: "a\nb"}.encode())
	f.Add([]byte("1\ntrue\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok := decodeReport(b)
		if ok {
			// What decodes must encode back to something that decodes
			// to the same report.
			r2, ok2 := decodeReport(r.encode())
			if !ok2 || r2 != r {
				t.Fatalf("%q decodes to %+v, which round-trips to %+v (%v)", b, r, r2, ok2)
			}
		}
	})
}
