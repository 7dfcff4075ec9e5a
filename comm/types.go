package comm

import (
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// Number is the set of element types collectives accept on Go slices.
type Number interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint8 | ~int8 | ~uint32 | ~uint64 | Float16 | BFloat16
}

// Float16 is an IEEE 754 binary16 value, stored as its bits. Reductions
// over it run in float32 and round once (to nearest even) at the end.
type Float16 uint16

// BFloat16 is a bfloat16 value (the upper 16 bits of a float32), stored as
// its bits; reductions run in float32 and round once.
type BFloat16 uint16

// F16 converts a float32 to the nearest Float16.
func F16(f float32) Float16 { return Float16(collectives.F32ToF16(f)) }

// Float32 widens a Float16.
func (h Float16) Float32() float32 { return collectives.F16ToF32(uint16(h)) }

// BF16 converts a float32 to the nearest BFloat16.
func BF16(f float32) BFloat16 { return BFloat16(collectives.F32ToBF16(f)) }

// Float32 widens a BFloat16.
func (h BFloat16) Float32() float32 { return collectives.BF16ToF32(uint16(h)) }

// DataType names an element type for the byte-level API.
type DataType = collectives.DataType

// Op is a reduction operation.
type Op = collectives.ReduceOp

// Data types.
const (
	Float32 = collectives.Float32
	Float64 = collectives.Float64
	Int32   = collectives.Int32
	Int64   = collectives.Int64
	Uint8   = collectives.Uint8
	Int8    = collectives.Int8
	Uint32  = collectives.Uint32
	Uint64  = collectives.Uint64
	// DTFloat16 and DTBFloat16 name the half types in the byte-level API.
	DTFloat16  = collectives.Float16
	DTBFloat16 = collectives.BFloat16
)

// Reduction operations. Avg of integers truncates toward zero.
const (
	Sum  = collectives.Sum
	Prod = collectives.Prod
	Min  = collectives.Min
	Max  = collectives.Max
	Avg  = collectives.Avg
)

// TypeOf returns the DataType of T.
func TypeOf[T Number]() DataType {
	var z T
	switch any(z).(type) {
	case float32:
		return Float32
	case float64:
		return Float64
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case int8:
		return Int8
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case Float16:
		return DTFloat16
	case BFloat16:
		return DTBFloat16
	}
	// Named types (~T): fall back on size and kind via a conversion probe.
	switch unsafe.Sizeof(z) {
	case 1:
		if T(0)-1 > 0 {
			return Uint8
		}
		return Int8
	case 4:
		if T(1)/2 != 0 {
			return Float32
		}
		if T(0)-1 > 0 {
			return Uint32
		}
		return Int32
	default:
		if T(1)/2 != 0 {
			return Float64
		}
		if T(0)-1 > 0 {
			return Uint64
		}
		return Int64
	}
}

// asBytes views a slice of numbers as bytes, without copying.
func asBytes[T Number](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// fromBytes views bytes as a slice of T.
func fromBytes[T Number](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}
