package collectives

import "github.com/goccl/goccl/collectives/internal/kernels"

// float16 (IEEE 754 binary16) and bfloat16 (the upper half of a float32)
// are storage formats here: goccl reduces them in float32 and rounds once,
// to nearest even, when the result is stored.

// F16ToF32 widens an IEEE binary16 value exactly; a NaN comes back quiet,
// with its payload.
func F16ToF32(h uint16) float32 { return kernels.F16ToF32(h) }

// F32ToF16 narrows to IEEE binary16, rounding to nearest even; values too
// large become infinity. A NaN stays a NaN, quiet, with its sign and the
// top bits of its payload.
func F32ToF16(f float32) uint16 { return kernels.F32ToF16(f) }

// BF16ToF32 widens a bfloat16 value.
func BF16ToF32(h uint16) float32 { return kernels.BF16ToF32(h) }

// F32ToBF16 narrows to bfloat16, rounding to nearest even (subnormals
// included); a NaN stays a NaN, quiet, with its sign and the top bits of
// its payload.
func F32ToBF16(f float32) uint16 { return kernels.F32ToBF16(f) }

// Widen converts len(src)/2 half-precision elements of type dt in src to
// float32 in dst (4 bytes each; len(dst) must be 2*len(src)).
func Widen(dt DataType, dst, src []byte) {
	kernels.Widen(kernels.Type(dt), dst, src)
}

// Narrow converts the float32 elements of src to type dt in dst (len(dst)
// must be len(src)/2), rounding once.
func Narrow(dt DataType, dst, src []byte) {
	kernels.Narrow(kernels.Type(dt), dst, src)
}
