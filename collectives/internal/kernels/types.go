package kernels

import "fmt"

// Type is an element type. The numbering is collectives.DataType's, so
// that package converts with a cast.
type Type uint8

const (
	F32 Type = iota + 1
	F64
	I32
	I64
	U8
	I8
	U32
	U64
	F16
	BF16
	numTypes
)

// Types lists every type, for tests and benchmarks.
var Types = []Type{F32, F64, I32, I64, U8, I8, U32, U64, F16, BF16}

// Size is the element size in bytes (0 for an unknown type).
func (t Type) Size() int {
	switch t {
	case F32, I32, U32:
		return 4
	case F64, I64, U64:
		return 8
	case U8, I8:
		return 1
	case F16, BF16:
		return 2
	}
	return 0
}

func (t Type) String() string {
	switch t {
	case F32:
		return "float32"
	case F64:
		return "float64"
	case I32:
		return "int32"
	case I64:
		return "int64"
	case U8:
		return "uint8"
	case I8:
		return "int8"
	case U32:
		return "uint32"
	case U64:
		return "uint64"
	case F16:
		return "float16"
	case BF16:
		return "bfloat16"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Op is an elementwise reduction. The numbering is collectives.ReduceOp's
// (whose Avg reduces as Sum and is finished by Div).
type Op uint8

const (
	Sum Op = iota + 1
	Prod
	Min
	Max
	numOps
)

// Ops lists every operation.
var Ops = []Op{Sum, Prod, Min, Max}

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Prod:
		return "prod"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}
