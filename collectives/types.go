package collectives

import "fmt"

// DataType is the element type of a collective's buffers.
type DataType uint8

const (
	Float32 DataType = iota + 1
	Float64
	Int32
	Int64
	Uint8
	Int8
	Uint32
	Uint64
	// Float16 is IEEE 754 binary16 and BFloat16 the upper half of a
	// float32. Reductions on them run in float32 and round once (see
	// Widen and Narrow); as plain data they move as 2-byte elements.
	Float16
	BFloat16
)

// Size is the element size in bytes.
func (d DataType) Size() int {
	switch d {
	case Float32, Int32, Uint32:
		return 4
	case Float64, Int64, Uint64:
		return 8
	case Uint8, Int8:
		return 1
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// Valid reports whether d is a known data type.
func (d DataType) Valid() bool { return d.Size() != 0 }

// Integer reports whether d is an integer type (the bitwise operations'
// types).
func (d DataType) Integer() bool {
	switch d {
	case Int32, Int64, Uint8, Int8, Uint32, Uint64:
		return true
	}
	return false
}

// Half reports whether d is a 2-byte floating-point type that reduces in
// float32.
func (d DataType) Half() bool { return d == Float16 || d == BFloat16 }

func (d DataType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case Uint8:
		return "uint8"
	case Int8:
		return "int8"
	case Uint32:
		return "uint32"
	case Uint64:
		return "uint64"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("datatype(%d)", uint8(d))
}

// ReduceOp is a reduction operation.
type ReduceOp uint8

const (
	Sum ReduceOp = iota + 1
	Prod
	Min
	Max
	// Avg sums, then divides by the number of ranks once at the end. For
	// integer types the division truncates toward zero (as Go's / does).
	Avg
	// BAnd, BOr and BXor are the bitwise and, or and exclusive or of
	// integer types (MPI_BAND, MPI_BOR, MPI_BXOR; Gloo's and
	// torch.distributed's BAND, BOR, BXOR).
	BAnd
	BOr
	BXor
)

// Valid reports whether o is a known operation.
func (o ReduceOp) Valid() bool { return o >= Sum && o <= BXor }

// Bitwise reports whether o is one of the bitwise operations, which apply
// to integer types only.
func (o ReduceOp) Bitwise() bool { return o >= BAnd && o <= BXor }

func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Prod:
		return "prod"
	case Min:
		return "min"
	case Max:
		return "max"
	case Avg:
		return "avg"
	case BAnd:
		return "band"
	case BOr:
		return "bor"
	case BXor:
		return "bxor"
	}
	return fmt.Sprintf("reduceop(%d)", uint8(o))
}
