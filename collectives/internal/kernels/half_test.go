package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestF16RoundTripAll(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			if back := F32ToF16(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

func TestBF16RoundTripAll(t *testing.T) {
	for h := range 1 << 16 {
		f := BF16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := F32ToBF16(f); back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
}

// TestHalfRoundsToNearestEven checks narrowing against its neighbours: the
// result is the closest representable value, ties to the even one.
func TestHalfRoundsToNearestEven(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name   string
		narrow func(float32) uint16
		wide   func(uint16) float32
		max    float64
	}{{"float16", F32ToF16, F16ToF32, 65504}, {"bfloat16", F32ToBF16, BF16ToF32, 3e38}} {
		for range 200000 {
			f := float32((rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(40)-20)))
			if math.Abs(float64(f)) > tc.max {
				continue
			}
			h := tc.narrow(f)
			got := float64(tc.wide(h))
			d := math.Abs(got - float64(f))
			for _, nb := range []uint16{h - 1, h + 1} {
				if nb&0x7fff >= 0x7c00 && tc.name == "float16" {
					continue
				}
				dn := math.Abs(float64(tc.wide(nb)) - float64(f))
				if dn < d || (dn == d && h&1 == 1) {
					t.Fatalf("%s(%v) = %#04x (%v), but %#04x (%v) is nearer or even", tc.name, f, h, got, nb, tc.wide(nb))
				}
			}
		}
	}
}
