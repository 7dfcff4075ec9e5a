package kernels

import "math"

// The results of floating-point operations, NaNs included, are pinned down
// so that every path (portable Go on any architecture, AVX2, AVX-512) gives
// the same bits:
//
//   - Sum and Prod are IEEE 754 additions and multiplications. A NaN result
//     is the first operand (the destination's element, a) made quiet if it
//     is a NaN, else the second made quiet if that is, else the default NaN
//     of amd64 (sign set, quiet: 0xffc00000 / 0xfff8000000000000) for an
//     invalid operation such as Inf - Inf. This is what amd64's vector
//     instructions do; Go code is not held to an order of operands, so the
//     portable code applies the rule itself.
//   - Min and Max follow Go's built-in min and max: a NaN in either operand
//     makes the result a NaN (chosen as for Sum), and -0 is less than +0.
//
// Half-precision results go through float32 and the narrowing conversions
// (half.go), which make every NaN quiet.

const (
	defaultNaN32 = 0xffc00000
	defaultNaN64 = 0xfff8000000000000
	quiet32      = 0x00400000
	quiet64      = 0x0008000000000000
)

// nan32 is the NaN an operation on a and b yields (see above).
func nan32(a, b float32) float32 {
	switch {
	case a != a:
		return math.Float32frombits(math.Float32bits(a) | quiet32)
	case b != b:
		return math.Float32frombits(math.Float32bits(b) | quiet32)
	}
	return math.Float32frombits(defaultNaN32)
}

func nan64(a, b float64) float64 {
	switch {
	case a != a:
		return math.Float64frombits(math.Float64bits(a) | quiet64)
	case b != b:
		return math.Float64frombits(math.Float64bits(b) | quiet64)
	}
	return math.Float64frombits(defaultNaN64)
}

func add32(a, b float32) float32 {
	if r := a + b; r == r {
		return r
	}
	return nan32(a, b)
}

func mul32(a, b float32) float32 {
	if r := a * b; r == r {
		return r
	}
	return nan32(a, b)
}

func min32(a, b float32) float32 {
	switch {
	case b < a:
		return b
	case a < b:
		return a
	}
	return min32Tie(a, b)
}

// min32Tie is min32 of equal values (zeros of either sign: -0 wins)
// or NaNs, out of line so that min32 inlines.
//
//go:noinline
func min32Tie(a, b float32) float32 {
	if a == b {
		return math.Float32frombits(math.Float32bits(a) | math.Float32bits(b))
	}
	return nan32(a, b)
}

func max32(a, b float32) float32 {
	switch {
	case b > a:
		return b
	case a > b:
		return a
	}
	return max32Tie(a, b)
}

// max32Tie is max32 of equal values (zeros of either sign: +0 wins)
// or NaNs, out of line so that max32 inlines.
//
//go:noinline
func max32Tie(a, b float32) float32 {
	if a == b {
		return math.Float32frombits(math.Float32bits(a) & math.Float32bits(b))
	}
	return nan32(a, b)
}

func add64(a, b float64) float64 {
	if r := a + b; r == r {
		return r
	}
	return nan64(a, b)
}

func mul64(a, b float64) float64 {
	if r := a * b; r == r {
		return r
	}
	return nan64(a, b)
}

func min64(a, b float64) float64 {
	switch {
	case b < a:
		return b
	case a < b:
		return a
	}
	return min64Tie(a, b)
}

// min64Tie is min64 of equal values (zeros of either sign: -0 wins)
// or NaNs, out of line so that min64 inlines.
//
//go:noinline
func min64Tie(a, b float64) float64 {
	if a == b {
		return math.Float64frombits(math.Float64bits(a) | math.Float64bits(b))
	}
	return nan64(a, b)
}

func max64(a, b float64) float64 {
	switch {
	case b > a:
		return b
	case a > b:
		return a
	}
	return max64Tie(a, b)
}

// max64Tie is max64 of equal values (zeros of either sign: +0 wins)
// or NaNs, out of line so that max64 inlines.
//
//go:noinline
func max64Tie(a, b float64) float64 {
	if a == b {
		return math.Float64frombits(math.Float64bits(a) & math.Float64bits(b))
	}
	return nan64(a, b)
}
