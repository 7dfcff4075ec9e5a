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

// FuzzDecodeNotice: a notice's immediate comes from a peer; decoding never
// panics, and what decodes encodes back to the same immediate.
func FuzzDecodeNotice(f *testing.F) {
	f.Add(Notice{Reason: NoticeLost, Rank: 3}.imm(), 1, 4)
	f.Add(Notice{Reason: NoticeClosed, Rank: 2, Seq: 77}.imm(), 2, 4)
	f.Add(uint32(immCredit|noticeFlag|7<<noticeReasonShift), 0, 2)
	f.Add(uint32(0xffffffff), 0, 1)
	f.Fuzz(func(t *testing.T, imm uint32, sender, size int) {
		if size <= 0 || size > 1<<16 || sender < 0 || sender >= size {
			return
		}
		n, ok := decodeNotice(imm, sender, size)
		if !ok {
			return
		}
		if n.Rank < 0 || n.Rank >= size {
			t.Fatalf("%#x decodes to rank %d of %d", imm, n.Rank, size)
		}
		if got := n.imm(); got != imm {
			t.Fatalf("%#x decodes to %+v, which encodes to %#x", imm, n, got)
		}
	})
}
