package kernels

import "math"

// float16 (IEEE 754 binary16) and bfloat16 (the upper half of a float32)
// are storage formats: they are reduced in float32 and rounded once, to
// nearest even, when the result is stored. The conversions below are the
// reference every SIMD path reproduces bit for bit:
//
//   - F16ToF32 is exact; a NaN comes back quiet with its payload (as the
//     F16C instruction VCVTPH2PS does).
//   - F32ToF16 rounds to nearest even, with subnormal results and overflow
//     to infinity; a NaN keeps its sign and the top 9 bits of its payload
//     and is made quiet (as VCVTPS2PH does).
//   - BF16ToF32 is a shift: every value, NaNs included, comes back as is.
//   - F32ToBF16 rounds to nearest even, subnormals included (AVX512-BF16's
//     VCVTNEPS2BF16 flushes those to zero, which is why the SIMD paths
//     round with integer arithmetic instead); a NaN keeps its sign and top
//     payload bits and is made quiet.

// F16ToF32 widens an IEEE binary16 value.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f && frac != 0: // NaN: made quiet
		return math.Float32frombits(sign | 0x7fc00000 | frac<<13)
	case exp == 0x1f: // infinity
		return math.Float32frombits(sign | 0x7f800000)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (frac&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// F32ToF16 narrows to IEEE binary16, rounding to nearest even; values too
// large become infinity.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	frac := b & 0x7fffff
	if exp == 0xff {
		if frac != 0 {
			return sign | 0x7e00 | uint16(frac>>13) // quiet NaN, payload kept
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal or zero: shift the full significand into place.
		if e < -10 {
			return sign
		}
		m := frac | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		v := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && v&1 == 1) {
			v++
		}
		return sign | uint16(v)
	}
	v := uint32(e)<<10 | frac>>13
	rem := frac & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && v&1 == 1) {
		v++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(v)
}

// BF16ToF32 widens a bfloat16 value.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
