package kernels

import (
	"testing"
)

// FuzzReduceMatchesPortable runs every vector level's kernel on fuzzed
// operands (type and operation from the first byte, the element offset
// from the second, then a and b) and compares it with the portable one;
// division and the conversions likewise.
func FuzzReduceMatchesPortable(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0x80, 0x7f, 0xff, 0xff, 0xc0, 0x7f, 0, 0, 0x80, 0xff})
	f.Add([]byte{3, 1, 1, 0, 0, 0, 0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x23, 2, 0x01, 0x7c, 0x00, 0x80, 0xff, 0x7f, 0x00, 0x00})
	f.Add([]byte{0x27, 0, 0x7f, 0x80, 0x80, 0x00, 0xc0, 0xff, 0x01, 0x00, 0x80, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		ty := Types[int(data[0]&0x0f)%len(Types)]
		op := Ops[int(data[0]>>4)%len(Ops)]
		s := ty.Size()
		body := data[2:]
		n := len(body) / (2 * s)
		off := s * int(data[1]%8)
		a, b := aligned(n*s, off), aligned(n*s, 0)
		copy(a, body[:n*s])
		copy(b, body[n*s:2*n*s])
		for _, l := range Levels[1:] {
			if !Supported(l) {
				continue
			}
			if d := checkReduce(l, ty, op, a, b); d != "" {
				t.Fatalf("%s %s %s n=%d: %s", l, ty, op, n, d)
			}
			div := 2 + int(data[1])
			want, got := append([]byte(nil), a...), append([]byte(nil), a...)
			portableDiv[ty](ptr(want), n, div)
			tables[l].div[ty](ptr(got), n, div)
			if d := firstDiff(ty, got, want, a, nil); d != "" {
				t.Fatalf("%s %s / %d n=%d: %s", l, ty, div, n, d)
			}
			if ty == F16 || ty == BF16 {
				i := halfIndex(ty)
				w, g := make([]byte, 4*n), make([]byte, 4*n)
				portableTable.widen[i](ptr(w), ptr(a), n)
				tables[l].widen[i](ptr(g), ptr(a), n)
				if d := firstDiff(F32, g, w, nil, nil); d != "" {
					t.Fatalf("%s widen %s n=%d: %s", l, ty, n, d)
				}
			}
			if ty == F32 {
				for i := range 2 {
					w, g := make([]byte, 2*n), make([]byte, 2*n)
					portableTable.narrow[i](ptr(w), ptr(a), n)
					tables[l].narrow[i](ptr(g), ptr(a), n)
					if d := firstDiff(F16, g, w, a, nil); d != "" {
						t.Fatalf("%s narrow %d n=%d: %s", l, i, n, d)
					}
				}
			}
		}
	})
}
