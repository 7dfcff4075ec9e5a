package collectives

import (
	"fmt"
	"unsafe"
)

type number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8 | ~int8 | ~uint16 | ~uint32 | ~uint64
}

// asSlice views b as a slice of T. b's length must be a multiple of T's size
// and b must be aligned for T (staging slots and registered buffers are page
// aligned and offsets are multiples of the element size).
func asSlice[T number](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// Reduce computes dst[i] = dst[i] op src[i] for the elements of type dt in
// dst and src, which must have the same length. Avg reduces as Sum; the
// division happens once, in Finish.
func Reduce(dt DataType, op ReduceOp, dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("reduce %s %s: length mismatch %d != %d", dt, op, len(dst), len(src))
	}
	if s := dt.Size(); s == 0 || len(dst)%s != 0 {
		return fmt.Errorf("reduce %s %s: length %d is not a multiple of the element size", dt, op, len(dst))
	}
	switch dt {
	case Float32:
		return reduceT(op, asSlice[float32](dst), asSlice[float32](src))
	case Float64:
		return reduceT(op, asSlice[float64](dst), asSlice[float64](src))
	case Int32:
		return reduceT(op, asSlice[int32](dst), asSlice[int32](src))
	case Int64:
		return reduceT(op, asSlice[int64](dst), asSlice[int64](src))
	case Uint8:
		return reduceT(op, asSlice[uint8](dst), asSlice[uint8](src))
	case Int8:
		return reduceT(op, asSlice[int8](dst), asSlice[int8](src))
	case Uint32:
		return reduceT(op, asSlice[uint32](dst), asSlice[uint32](src))
	case Uint64:
		return reduceT(op, asSlice[uint64](dst), asSlice[uint64](src))
	case Float16, BFloat16:
		return reduceHalf(dt, op, asSlice[uint16](dst), asSlice[uint16](src))
	}
	return fmt.Errorf("reduce: unsupported data type %s", dt)
}

func reduceT[T number](op ReduceOp, dst, src []T) error {
	src = src[:len(dst)]
	switch op {
	case Sum, Avg:
		sumT(dst, src)
	case Prod:
		i := 0
		for ; i+4 <= len(dst); i += 4 {
			d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
			d[0] *= s[0]
			d[1] *= s[1]
			d[2] *= s[2]
			d[3] *= s[3]
		}
		for ; i < len(dst); i++ {
			dst[i] *= src[i]
		}
	case Min:
		for i, s := range src {
			if s < dst[i] {
				dst[i] = s
			}
		}
	case Max:
		for i, s := range src {
			if s > dst[i] {
				dst[i] = s
			}
		}
	default:
		return fmt.Errorf("reduce: unsupported operation %s", op)
	}
	return nil
}

func sumT[T number](dst, src []T) {
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		d, s := dst[i:i+8:i+8], src[i:i+8:i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// Finish applies the post-processing an operation needs once the reduction
// over n ranks is complete: for Avg, every element is divided by n (integer
// types truncate toward zero). It does nothing for the other operations.
func Finish(dt DataType, op ReduceOp, buf []byte, n int) error {
	if op != Avg || n <= 1 {
		return nil
	}
	switch dt {
	case Float32:
		divT(asSlice[float32](buf), float32(n))
	case Float64:
		divT(asSlice[float64](buf), float64(n))
	case Int32:
		divT(asSlice[int32](buf), int32(n))
	case Int64:
		divT(asSlice[int64](buf), int64(n))
	case Uint8:
		b := asSlice[uint8](buf)
		for i := range b {
			b[i] = uint8(int(b[i]) / n) // n may exceed 255
		}
	case Int8:
		b := asSlice[int8](buf)
		for i := range b {
			b[i] = int8(int(b[i]) / n)
		}
	case Uint32:
		divT(asSlice[uint32](buf), uint32(n))
	case Uint64:
		divT(asSlice[uint64](buf), uint64(n))
	case Float16, BFloat16:
		h := asSlice[uint16](buf)
		wide, narrow := F16ToF32, F32ToF16
		if dt == BFloat16 {
			wide, narrow = BF16ToF32, F32ToBF16
		}
		for i := range h {
			h[i] = narrow(wide(h[i]) / float32(n))
		}
	default:
		return fmt.Errorf("avg: unsupported data type %s", dt)
	}
	return nil
}

func divT[T number](buf []T, n T) {
	for i := range buf {
		buf[i] /= n
	}
}

// reduceHalf reduces half-precision elements pairwise in float32, rounding
// each result. (comm avoids it for whole collectives: it widens the
// buffers, reduces in float32 and rounds once at the end.)
func reduceHalf(dt DataType, op ReduceOp, dst, src []uint16) error {
	wide, narrow := F16ToF32, F32ToF16
	if dt == BFloat16 {
		wide, narrow = BF16ToF32, F32ToBF16
	}
	for i := range dst {
		d, s := wide(dst[i]), wide(src[i])
		switch op {
		case Sum, Avg:
			d += s
		case Prod:
			d *= s
		case Min:
			d = min(d, s)
		case Max:
			d = max(d, s)
		default:
			return fmt.Errorf("reduce: unsupported operation %s", op)
		}
		dst[i] = narrow(d)
	}
	return nil
}
