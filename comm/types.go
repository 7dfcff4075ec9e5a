package comm

import (
	"strconv"
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

// String formats the value as a number (fmt's %v), not as its bits.
func (h Float16) String() string { return strconv.FormatFloat(float64(h.Float32()), 'g', -1, 32) }

// BF16 converts a float32 to the nearest BFloat16.
func BF16(f float32) BFloat16 { return BFloat16(collectives.F32ToBF16(f)) }

// Float32 widens a BFloat16.
func (h BFloat16) Float32() float32 { return collectives.BF16ToF32(uint16(h)) }

// String formats the value as a number (fmt's %v), not as its bits.
func (h BFloat16) String() string { return strconv.FormatFloat(float64(h.Float32()), 'g', -1, 32) }

// DataType names an element type for the byte-level API (the ...Bytes
// calls). Its constants are named Type and the Go type's name:
// TypeFloat32 for float32, TypeFloat16 for Float16, and so on; TypeOf
// gives the one of a Go type.
type DataType = collectives.DataType

// Op is a reduction operation.
type Op = collectives.ReduceOp

// Data types.
const (
	TypeFloat32  = collectives.Float32
	TypeFloat64  = collectives.Float64
	TypeInt32    = collectives.Int32
	TypeInt64    = collectives.Int64
	TypeUint8    = collectives.Uint8
	TypeInt8     = collectives.Int8
	TypeUint32   = collectives.Uint32
	TypeUint64   = collectives.Uint64
	TypeFloat16  = collectives.Float16
	TypeBFloat16 = collectives.BFloat16
)

// MaxTag is the largest tag of Send, Recv and SendRecv (2^29-1): tags
// 0..MaxTag match exactly; others are refused.
const MaxTag = collectives.MaxTag

// ProcNull as the peer of a Send or Recv, or the destination or source of
// a SendRecv, makes that side of the call do nothing, as MPI_PROC_NULL
// does: a Send to it sends nothing, a Recv from it leaves its buffer as it
// is, and both complete at once, in their turn among the calls. The ranks
// at the ends of a chain then exchange with their one neighbour in the
// same SendRecv as the ranks between them (a halo exchange without
// periodic boundaries).
const ProcNull = -1

// Reduction operations. Avg of integers truncates toward zero. BAnd, BOr
// and BXor are the bitwise and, or and exclusive or of integer types
// (MPI_BAND, MPI_BOR, MPI_BXOR); with another type the call is refused.
const (
	Sum  = collectives.Sum
	Prod = collectives.Prod
	Min  = collectives.Min
	Max  = collectives.Max
	Avg  = collectives.Avg
	BAnd = collectives.BAnd
	BOr  = collectives.BOr
	BXor = collectives.BXor
)

// TypeOf returns the DataType of T.
func TypeOf[T Number]() DataType {
	var z T
	switch any(z).(type) {
	case float32:
		return TypeFloat32
	case float64:
		return TypeFloat64
	case int32:
		return TypeInt32
	case int64:
		return TypeInt64
	case uint8:
		return TypeUint8
	case int8:
		return TypeInt8
	case uint32:
		return TypeUint32
	case uint64:
		return TypeUint64
	case Float16:
		return TypeFloat16
	case BFloat16:
		return TypeBFloat16
	}
	// Named types (~T): fall back on size and kind via a conversion probe.
	switch unsafe.Sizeof(z) {
	case 1:
		if T(0)-1 > 0 {
			return TypeUint8
		}
		return TypeInt8
	case 4:
		if T(1)/2 != 0 {
			return TypeFloat32
		}
		if T(0)-1 > 0 {
			return TypeUint32
		}
		return TypeInt32
	default:
		if T(1)/2 != 0 {
			return TypeFloat64
		}
		if T(0)-1 > 0 {
			return TypeUint64
		}
		return TypeInt64
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
