package collectives

import "testing"

// BenchmarkFingerprint is the cost of mismatch detection per call: the
// 16-bit fingerprint is hashed once per collective (it rides in the
// immediate data every chunk already carries, so it adds no bytes and no
// message; receivers compare 16 bits per chunk).
func BenchmarkFingerprint(b *testing.B) {
	p := &Plan{Name: "rabenseifner"}
	c := &Call{Plan: p, Type: Float32, Op: Sum, Coll: "allreduce", Count: 1 << 20, Root: -1}
	b.ReportAllocs()
	var sink uint16
	for b.Loop() {
		c.fp = 0
		sink ^= c.fingerprint()
	}
	if sink == 0xffff {
		b.Log(sink)
	}
}

func TestFingerprintDistinguishesCalls(t *testing.T) {
	base := Call{Plan: &Plan{Name: "ring"}, Type: Float32, Op: Sum, Coll: "allreduce", Count: 1024, Root: -1}
	variants := []Call{base, base, base, base, base, base}
	variants[1].Type = Int32
	variants[2].Op = Max
	variants[3].Count = 1025
	variants[4].Coll = "reduce"
	variants[5].Plan = &Plan{Name: "tree"}
	seen := map[uint16]int{}
	for i := range variants {
		fp := variants[i].fingerprint()
		if j, ok := seen[fp]; ok && i > 0 {
			t.Errorf("variant %d has the fingerprint of variant %d (%#04x)", i, j, fp)
		}
		seen[fp] = i
	}
}
