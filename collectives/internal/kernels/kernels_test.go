package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// specials are interesting bit patterns per element size: zeros of both
// signs, ones, infinities, quiet and signalling NaNs with payloads and
// either sign, subnormals, extremes, and the integer edges.
var specials = map[int][]uint64{
	1: {0, 1, 0x7f, 0x80, 0xff, 0xfe, 2, 0x81},
	2: {0, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7dff, 0xfd55, 0x7fff,
		0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x3f80, 0xbf80, 0x7f80, 0xff80,
		0x7fc0, 0xffc1, 0x7f81, 0x7fbf, 0x0080, 0x007f, 0x8001, 0x7f7f, 0xff7f, 0x3c01, 0x4000},
	4: {0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000,
		0x7f800001, 0xff800001, 0x7fbfffff, 0x7fc00001, 0xffffffff, 0x00000001, 0x80000001,
		0x007fffff, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x33800000, 0x387fe000,
		0x477ff000, 0x477fefff, 0x3f808000, 0x3f818000, 0x00008000, 0x00018000, 0x7f7f8000,
		0x40000000, 0x7fffffff, 1, 0x7ffffffe},
	8: {0, 1 << 63, 0x3ff0000000000000, 0xbff0000000000000, 0x7ff0000000000000, 0xfff0000000000000,
		0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0xfff0000000000001,
		0x7ff7ffffffffffff, 0x7ff8000000000001, 0xffffffffffffffff, 1, 0x8000000000000001,
		0x000fffffffffffff, 0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff,
		0x7fffffffffffffff, 0x4000000000000000, 2},
}

// fill writes random elements of size bytes into b, half of them special.
func fill(rng *rand.Rand, size int, b []byte) {
	sp := specials[size]
	for i := 0; i+size <= len(b); i += size {
		v := rng.Uint64()
		switch rng.IntN(4) {
		case 0, 1:
			v = sp[rng.IntN(len(sp))]
		case 2: // small numbers: sums and products that stay finite
			v = v & 0x00ff00ff00ff00ff
			if size == 4 {
				v = uint64(0x3f800000 + uint32(v)%0x01000000)
			}
		}
		putUint(b[i:], size, v)
	}
}

func putUint(b []byte, size int, v uint64) {
	switch size {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b, v)
	}
}

// aligned returns n bytes starting off bytes past a 64-byte boundary.
func aligned(n, off int) []byte {
	b := make([]byte, n+off+128)
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	return b[skip+off : skip+off+n]
}

// firstDiff describes the first element where got and want differ.
func firstDiff(t Type, got, want, a, b []byte) string {
	s := t.Size()
	for i := 0; i < len(got); i += s {
		if !bytes.Equal(got[i:i+s], want[i:i+s]) {
			e := func(x []byte) string { return fmt.Sprintf("%x", reverse(x[i:i+s])) }
			in := "a=" + e(a)
			if b != nil {
				in += " b=" + e(b)
			}
			return fmt.Sprintf("element %d: %s: got %s, want %s", i/s, in, e(got), e(want))
		}
	}
	return ""
}

func reverse(b []byte) []byte {
	r := make([]byte, len(b))
	for i := range b {
		r[len(b)-1-i] = b[i]
	}
	return r
}

// vectorLevels are the levels this CPU runs besides the portable one.
func vectorLevels(t *testing.T) []Level {
	var ls []Level
	for _, l := range Levels[1:] {
		if Supported(l) {
			ls = append(ls, l)
		} else {
			t.Logf("level %s not checked: %s", l, missing(l))
		}
	}
	if len(ls) == 0 {
		t.Skip("this CPU runs no vector level: only the portable kernels exist")
	}
	return ls
}

// checkReduce compares level l's kernel with the portable one on n
// elements at element offset off, out of place and in place.
func checkReduce(l Level, ty Type, op Op, a, b []byte) string {
	s := ty.Size()
	n := len(a) / s
	want, got := make([]byte, len(a)), make([]byte, len(a))
	portableReduce[ty][op](ptr(want), ptr(a), ptr(b), n)
	tables[l].reduce[ty][op](ptr(got), ptr(a), ptr(b), n)
	if d := firstDiff(ty, got, want, a, b); d != "" {
		return "out of place: " + d
	}
	in := append([]byte(nil), a...)
	tables[l].reduce[ty][op](ptr(in), ptr(in), ptr(b), n)
	if d := firstDiff(ty, in, want, a, b); d != "" {
		return "in place: " + d
	}
	return ""
}

// TestReduceMatchesPortable checks every vector level against the portable
// kernels for every type, operation and length 0..257, at starts that are
// not vector aligned, out of place (out = a op b) and in place.
func TestReduceMatchesPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, l := range vectorLevels(t) {
		for _, ty := range Types {
			for _, op := range Ops {
				s := ty.Size()
				for n := 0; n <= 257; n++ {
					off := s * (n % 5)
					a, b := aligned(n*s, off), aligned(n*s, s*(n%3))
					fill(rng, s, a)
					fill(rng, s, b)
					if d := checkReduce(l, ty, op, a, b); d != "" {
						t.Fatalf("%s %s %s n=%d: %s", l, ty, op, n, d)
					}
				}
			}
		}
	}
}

// TestReduceAllPairs runs every pair of special values through every
// kernel, so that each NaN, zero and infinity meets each other.
func TestReduceAllPairs(t *testing.T) {
	for _, l := range vectorLevels(t) {
		for _, ty := range Types {
			s := ty.Size()
			sp := specials[s]
			a, b := make([]byte, s*len(sp)*len(sp)), make([]byte, s*len(sp)*len(sp))
			for i, x := range sp {
				for j, y := range sp {
					putUint(a[(i*len(sp)+j)*s:], s, x)
					putUint(b[(i*len(sp)+j)*s:], s, y)
				}
			}
			for _, op := range Ops {
				if d := checkReduce(l, ty, op, a, b); d != "" {
					t.Errorf("%s %s %s: %s", l, ty, op, d)
				}
			}
		}
	}
}

func TestDivMatchesPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, l := range vectorLevels(t) {
		for _, ty := range Types {
			s := ty.Size()
			for _, d := range []int{2, 3, 7, 10, 127, 128, 255, 256, 1000, 1 << 20, 1<<31 - 1} {
				for n := 0; n <= 257; n += 1 + n/16 {
					buf := aligned(n*s, s*(n%3))
					fill(rng, s, buf)
					want, got := append([]byte(nil), buf...), append([]byte(nil), buf...)
					portableDiv[ty](ptr(want), n, d)
					if ty.Size() == 1 && d >= 1<<24 {
						continue // Div keeps the portable kernel there
					}
					tables[l].div[ty](ptr(got), n, d)
					if diff := firstDiff(ty, got, want, buf, nil); diff != "" {
						t.Fatalf("%s %s / %d n=%d: %s", l, ty, d, n, diff)
					}
				}
			}
		}
	}
}

func TestConvMatchesPortable(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, l := range vectorLevels(t) {
		for i, ty := range []Type{F16, BF16} {
			for n := 0; n <= 257; n++ {
				h := aligned(2*n, 2*(n%3))
				fill(rng, 2, h)
				want, got := make([]byte, 4*n), make([]byte, 4*n)
				portableTable.widen[i](ptr(want), ptr(h), n)
				tables[l].widen[i](ptr(got), ptr(h), n)
				if d := firstDiff(F32, got, want, nil, nil); d != "" {
					t.Fatalf("%s widen %s n=%d: %s", l, ty, n, d)
				}
				f := aligned(4*n, 4*(n%5))
				fill(rng, 4, f)
				wantH, gotH := make([]byte, 2*n), make([]byte, 2*n)
				portableTable.narrow[i](ptr(wantH), ptr(f), n)
				tables[l].narrow[i](ptr(gotH), ptr(f), n)
				if d := firstDiff(ty, gotH, wantH, nil, nil); d != "" {
					t.Fatalf("%s narrow %s n=%d: %s (input %x)", l, ty, n, d, f)
				}
			}
		}
	}
}
