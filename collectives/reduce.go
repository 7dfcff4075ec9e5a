package collectives

import (
	"encoding/binary"
	"fmt"

	"github.com/goccl/goccl/collectives/internal/kernels"
)

// The reduction kernels live in internal/kernels: plain Go everywhere, and
// AVX2 and AVX-512 assembly on amd64 CPUs that have them (chosen at start;
// see SetSIMD), all giving the same bits for every input.
//
// Floating-point semantics, the same on every path and architecture:
//   - Sum and Prod are IEEE 754 additions and multiplications. When the
//     result is a NaN it is the destination's element made quiet if that is
//     a NaN, else the source's made quiet, else (Inf - Inf, 0 * Inf) the
//     quiet NaN with the sign bit set (amd64's default NaN).
//   - Min and Max follow Go's built-in min and max: if either element is a
//     NaN the result is a NaN (chosen as for Sum), and -0 is less than +0.
//   - float16 and bfloat16 reduce pairwise in float32, rounding each result
//     to nearest even (subnormals kept); every NaN result is quiet.
//
// Integers wrap around on overflow, as Go's arithmetic does. The bitwise
// operations (integers only) act on the bits, whatever the type's width.

// Reduce computes dst[i] = dst[i] op src[i] for the elements of type dt in
// dst and src, which must have the same length. Avg reduces as Sum; the
// division happens once, in Finish.
func Reduce(dt DataType, op ReduceOp, dst, src []byte) error {
	return ReduceTo(dt, op, dst, dst, src)
}

// ReduceTo computes out[i] = a[i] op b[i]: the fused form of a copy and a
// Reduce, which reads and writes each byte once. out, a and b must have the
// same length; out may be a or b, but must not overlap them otherwise.
func ReduceTo(dt DataType, op ReduceOp, out, a, b []byte) error {
	if len(a) != len(out) || len(b) != len(out) {
		return fmt.Errorf("reduce %s %s: length mismatch %d, %d, %d", dt, op, len(out), len(a), len(b))
	}
	if s := dt.Size(); s == 0 || len(out)&(s-1) != 0 { // sizes are powers of two
		return fmt.Errorf("reduce %s %s: length %d is not a multiple of the element size", dt, op, len(out))
	}
	if !op.Valid() {
		return fmt.Errorf("reduce: unsupported operation %s", op)
	}
	if op.Bitwise() {
		if !dt.Integer() {
			return fmt.Errorf("reduce %s %s: a bitwise operation needs an integer type", dt, op)
		}
		bitwise(op, out, a, b)
		return nil
	}
	kop := kernels.Op(op)
	if op == Avg {
		kop = kernels.Sum
	}
	kernels.Reduce(kernels.Type(dt), kop, out, a, b)
	return nil
}

// Finish applies the post-processing an operation needs once the reduction
// over n ranks is complete: for Avg, every element is divided by n (integer
// types truncate toward zero; float16 and bfloat16 divide in float32 and
// round once). It does nothing for the other operations.
func Finish(dt DataType, op ReduceOp, buf []byte, n int) error {
	if op != Avg || n <= 1 {
		return nil
	}
	if s := dt.Size(); s == 0 || len(buf)%s != 0 {
		return fmt.Errorf("avg %s: length %d is not a multiple of the element size", dt, len(buf))
	}
	if int64(n) >= 1<<31 {
		return fmt.Errorf("avg %s: %d ranks is out of range", dt, n)
	}
	kernels.Div(kernels.Type(dt), buf, n)
	return nil
}

// bitwise computes out = a op b for a bitwise op, bytes at a time: the
// result of an and, or or exclusive or does not depend on the element
// width, so it runs on 8-byte words (each loaded and stored whole, out
// may be a or b), then on the last bytes.
func bitwise(op ReduceOp, out, a, b []byte) {
	n := len(out) &^ 7
	le := binary.LittleEndian
	switch op {
	case BAnd:
		for i := 0; i < n; i += 8 {
			le.PutUint64(out[i:], le.Uint64(a[i:])&le.Uint64(b[i:]))
		}
		for i := n; i < len(out); i++ {
			out[i] = a[i] & b[i]
		}
	case BOr:
		for i := 0; i < n; i += 8 {
			le.PutUint64(out[i:], le.Uint64(a[i:])|le.Uint64(b[i:]))
		}
		for i := n; i < len(out); i++ {
			out[i] = a[i] | b[i]
		}
	case BXor:
		for i := 0; i < n; i += 8 {
			le.PutUint64(out[i:], le.Uint64(a[i:])^le.Uint64(b[i:]))
		}
		for i := n; i < len(out); i++ {
			out[i] = a[i] ^ b[i]
		}
	}
}
