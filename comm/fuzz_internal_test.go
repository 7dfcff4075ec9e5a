package comm

import (
	"reflect"
	"testing"

	"github.com/goccl/goccl/collectives"

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
	f.Add(report{reason: collectives.NoticeLost, root: 3, peer: -1, seq: 2, call: "allreduce(float32, 8, sum) #2", cause: "lost"}.encode())
	f.Add(report{reason: collectives.NoticeMismatch, root: 1, peer: 1, call: "x", other: "y #3", cause: "a\nb"}.encode())
	f.Add([]byte("1 2 3\n\n"))
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

// FuzzDecodeState: the answers ranks give each other about their state
// (stall diagnosis) come through the store.
func FuzzDecodeState(f *testing.F) {
	f.Add(rankState{seq: 5, running: true, stalled: true, call: "broadcast(float32, 8, root=1) #5", fp: 77, waiting: []int{0, 3}}.encode())
	f.Add(rankState{seq: 1}.encode())
	f.Add(rankState{seq: 0, elseCall: "allreduce(float32, 1, sum) #1 of communicator world/split2/color0", elseWaiting: []int{0, 5}}.encode())
	f.Add([]byte("1 true true 3 false\n1,,2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := decodeState(b)
		if ok {
			s2, ok2 := decodeState(s.encode())
			if !ok2 || !reflect.DeepEqual(s, s2) {
				t.Fatalf("%q decodes to %+v, which round-trips to %+v (%v)", b, s, s2, ok2)
			}
		}
	})
}
