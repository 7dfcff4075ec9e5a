package collectives

import "math"

// float16 (IEEE 754 binary16) and bfloat16 (the upper half of a float32)
// are storage formats here: goccl reduces them in float32 and rounds once,
// to nearest even, when the result is stored.

// F16ToF32 widens an IEEE binary16 value.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
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
// large become infinity, NaN stays NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	frac := b & 0x7fffff
	if exp == 0xff {
		if frac != 0 {
			return sign | 0x7e00 // quiet NaN
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

// F32ToBF16 narrows to bfloat16, rounding to nearest even; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // quiet NaN
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// Widen converts n half-precision elements of type dt in src to float32 in
// dst (4 bytes each).
func Widen(dt DataType, dst, src []byte) {
	d, s := asSlice[float32](dst), asSlice[uint16](src)
	conv := F16ToF32
	if dt == BFloat16 {
		conv = BF16ToF32
	}
	for i, h := range s {
		d[i] = conv(h)
	}
}

// Narrow converts float32 elements of src to type dt in dst, rounding once.
func Narrow(dt DataType, dst, src []byte) {
	d, s := asSlice[uint16](dst), asSlice[float32](src)
	conv := F32ToF16
	if dt == BFloat16 {
		conv = F32ToBF16
	}
	for i, f := range s {
		d[i] = conv(f)
	}
}
