package kernels

import "unsafe"

// The portable kernels: plain Go, the reference for every SIMD path and the
// path on CPUs and architectures without one. Each computes
// out[i] = a[i] op b[i] for i < n; out may be a or b, element for element.

type integer interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64
}

func view[T any](p unsafe.Pointer, n int) []T {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(p), n)
}

// kernel is the shape of every reduction kernel: n elements of a and b
// into out.
type kernel func(out, a, b unsafe.Pointer, n int)

// The portable reductions, one function per element type with the
// operation switched inside, called directly: the vector levels' tables
// hold them as kernels (portableReduce) for the elements after the last
// whole vector, and Reduce calls portable directly for a few bytes. The
// float operations, called directly, inline; before, a kernel per
// operation took its operation as a function value and called it for
// every element (an 8-byte float32 sum from the kernel's entry on this
// VM: 15-16 ns that way, 7.6 switched and inlined).

func reduceInt[T integer](op Op, o, x, y unsafe.Pointer, n int) {
	out, a, b := view[T](o, n), view[T](x, n), view[T](y, n)
	switch op {
	case Sum:
		for i := range out {
			out[i] = a[i] + b[i]
		}
	case Prod:
		for i := range out {
			out[i] = a[i] * b[i]
		}
	case Min:
		for i := range out {
			out[i] = min(a[i], b[i])
		}
	case Max:
		for i := range out {
			out[i] = max(a[i], b[i])
		}
	}
}

func reduceF32(op Op, o, x, y unsafe.Pointer, n int) {
	out, a, b := view[float32](o, n), view[float32](x, n), view[float32](y, n)
	switch op {
	case Sum:
		for i := range out {
			out[i] = add32(a[i], b[i])
		}
	case Prod:
		for i := range out {
			out[i] = mul32(a[i], b[i])
		}
	case Min:
		for i := range out {
			out[i] = min32(a[i], b[i])
		}
	case Max:
		for i := range out {
			out[i] = max32(a[i], b[i])
		}
	}
}

func reduceF64(op Op, o, x, y unsafe.Pointer, n int) {
	out, a, b := view[float64](o, n), view[float64](x, n), view[float64](y, n)
	switch op {
	case Sum:
		for i := range out {
			out[i] = add64(a[i], b[i])
		}
	case Prod:
		for i := range out {
			out[i] = mul64(a[i], b[i])
		}
	case Min:
		for i := range out {
			out[i] = min64(a[i], b[i])
		}
	case Max:
		for i := range out {
			out[i] = max64(a[i], b[i])
		}
	}
}

// portable reduces n elements of type t with op (see above).
func portable(t Type, op Op, o, x, y unsafe.Pointer, n int) {
	switch t {
	case I8:
		reduceInt[int8](op, o, x, y, n)
	case U8:
		reduceInt[uint8](op, o, x, y, n)
	case I32:
		reduceInt[int32](op, o, x, y, n)
	case U32:
		reduceInt[uint32](op, o, x, y, n)
	case I64:
		reduceInt[int64](op, o, x, y, n)
	case U64:
		reduceInt[uint64](op, o, x, y, n)
	case F32:
		reduceF32(op, o, x, y, n)
	case F64:
		reduceF64(op, o, x, y, n)
	default:
		portableHalf[halfIndex(t)][op](o, x, y, n)
	}
}

// halfKernel reduces half-precision elements pairwise in float32, rounding
// each result.
func halfKernel(wide func(uint16) float32, narrow func(float32) uint16, f func(a, b float32) float32) kernel {
	return func(o, x, y unsafe.Pointer, n int) {
		out, a, b := view[uint16](o, n), view[uint16](x, n), view[uint16](y, n)
		for i := range out {
			out[i] = narrow(f(wide(a[i]), wide(b[i])))
		}
	}
}

// portableHalf is the portable kernel of the half types (F16, BF16) for
// each operation.
var portableHalf = func() (t [2][numOps]kernel) {
	for _, op := range Ops {
		f := [numOps]func(a, b float32) float32{Sum: add32, Prod: mul32, Min: min32, Max: max32}[op]
		t[0][op] = halfKernel(F16ToF32, F32ToF16, f)
		t[1][op] = halfKernel(BF16ToF32, F32ToBF16, f)
	}
	return t
}()

// portableReduce is the portable kernel of every type and operation.
var portableReduce = func() (t [numTypes][numOps]kernel) {
	for _, ty := range Types {
		for _, op := range Ops {
			t[ty][op] = func(o, x, y unsafe.Pointer, n int) { portable(ty, op, o, x, y, n) }
		}
	}
	return t
}()

// divKernel divides n elements at p by d in place (Avg's final step).
type divKernel func(p unsafe.Pointer, n int, d int)

func divInt[T integer](p unsafe.Pointer, n int, d int) {
	buf := view[T](p, n)
	var z T
	if unsafe.Sizeof(z) == 1 {
		// d may not fit the type: divide in int.
		for i := range buf {
			buf[i] = T(int(buf[i]) / d)
		}
		return
	}
	dt := T(d)
	for i := range buf {
		buf[i] /= dt
	}
}

func divHalf(wide func(uint16) float32, narrow func(float32) uint16) divKernel {
	return func(p unsafe.Pointer, n int, d int) {
		buf := view[uint16](p, n)
		df := float32(d)
		for i := range buf {
			buf[i] = narrow(wide(buf[i]) / df)
		}
	}
}

var portableDiv = [numTypes]divKernel{
	F32: func(p unsafe.Pointer, n int, d int) {
		buf, df := view[float32](p, n), float32(d)
		for i := range buf {
			buf[i] /= df
		}
	},
	F64: func(p unsafe.Pointer, n int, d int) {
		buf, df := view[float64](p, n), float64(d)
		for i := range buf {
			buf[i] /= df
		}
	},
	I8: divInt[int8], U8: divInt[uint8], I32: divInt[int32], U32: divInt[uint32],
	I64: divInt[int64], U64: divInt[uint64],
	F16: divHalf(F16ToF32, F32ToF16), BF16: divHalf(BF16ToF32, F32ToBF16),
}

// convKernel converts n elements from src to dst (Widen, Narrow).
type convKernel func(dst, src unsafe.Pointer, n int)

func widenPortable(conv func(uint16) float32) convKernel {
	return func(d, s unsafe.Pointer, n int) {
		dst, src := view[float32](d, n), view[uint16](s, n)
		for i, h := range src {
			dst[i] = conv(h)
		}
	}
}

func narrowPortable(conv func(float32) uint16) convKernel {
	return func(d, s unsafe.Pointer, n int) {
		dst, src := view[uint16](d, n), view[float32](s, n)
		for i, f := range src {
			dst[i] = conv(f)
		}
	}
}
