package osu

import (
	"fmt"

	"github.com/goccl/goccl/comm"
)

var typeNames = map[string]comm.DataType{
	"int8": comm.TypeInt8, "uint8": comm.TypeUint8, "int32": comm.TypeInt32, "uint32": comm.TypeUint32,
	"int64": comm.TypeInt64, "uint64": comm.TypeUint64, "float32": comm.TypeFloat32, "float64": comm.TypeFloat64,
	"float16": comm.TypeFloat16, "bfloat16": comm.TypeBFloat16,
}

func typeByName(name string) (comm.DataType, bool) {
	t, ok := typeNames[name]
	return t, ok
}

// ncclTypeName is nccl-tests' name of a type.
func ncclTypeName(t string) string {
	switch t {
	case "float32":
		return "float"
	case "float64":
		return "double"
	case "float16":
		return "half"
	}
	return t
}

// layout returns the buffer lengths, in elements, of one call of coll at
// count elements on n ranks, and the block each rank contributes. OSU
// counts alltoall, allgather, gather and scatter per rank (count is the
// block) and reduce_scatter in total; nccl-tests counts every collective
// in total (count is split into n blocks).
func layout(coll string, count, n int, nccl bool) (sendLen, recvLen, block int) {
	coll = shape(coll)
	block = count
	if nccl || coll == "reduce_scatter" {
		block = count / n
	}
	switch coll {
	case "barrier":
		return 0, 0, 0
	case "alltoall":
		return n * block, n * block, block
	case "allgather", "gather":
		return block, n * block, block
	case "scatter", "reduce_scatter":
		return n * block, block, block
	}
	return count, count, count
}

// val is the validation value that rank src puts at element i of
// iteration iter: small integers, exact in every type, so that sums of a
// few ranks compare exactly (integer sums may wrap, identically on both
// sides). It depends on i only through i mod period, so that buffers are
// filled and checked at memory speed from one period.
func val[T comm.Number](src, i, iter int) T { return fromInt[T](rawVal[T](src, i, iter)) }

// rawVal is val as an int: 1 to 100, or to 8 in the 16-bit float types,
// whose sums stay exact (every partial sum, in any order) up to 32 ranks
// in bfloat16 (integers to 256) and 256 in float16 (to 2048).
func rawVal[T comm.Number](src, i, iter int) int {
	m := 100
	switch any(*new(T)).(type) {
	case comm.Float16, comm.BFloat16:
		m = 8
	}
	return (src*7+i%period+iter%5)%m + 1
}

// fromInt converts v to T: the nearest value in the 16-bit float types
// (a plain conversion would take v as their bits), else T(v), which wraps
// in the narrow integer types as their sums do.
func fromInt[T comm.Number](v int) T {
	var z T
	switch any(z).(type) {
	case comm.Float16:
		return any(comm.F16(float32(v))).(T)
	case comm.BFloat16:
		return any(comm.BF16(float32(v))).(T)
	}
	return T(v)
}

const period = 61

// pattern is one period of rank src's values.
func pattern[T comm.Number](src, iter int) *[period]T {
	var p [period]T
	for k := range p {
		p[k] = val[T](src, k, iter)
	}
	return &p
}

// sumPattern is one period of the sum of every rank's values (summed as
// ints, then converted: the same as T's own additions, wrapping included).
func sumPattern[T comm.Number](n, iter int) *[period]T {
	var p [period]T
	for k := range p {
		sum := 0
		for r := range n {
			sum += rawVal[T](r, k, iter)
		}
		p[k] = fromInt[T](sum)
	}
	return &p
}

// fillFrom writes p[(off+i) mod period] to dst[i].
func fillFrom[T comm.Number](dst []T, p *[period]T, off int) {
	k := off % period
	n := min(len(dst), period)
	for i := range n {
		dst[i] = p[(k+i)%period]
	}
	for filled := n; filled < len(dst); filled *= 2 {
		copy(dst[filled:], dst[:filled])
	}
}

// wrongFrom counts the elements of got that differ from p[(off+i) mod period].
func wrongFrom[T comm.Number](got []T, p *[period]T, off int) int {
	wrong, k := 0, off%period
	for _, v := range got {
		if v != p[k] {
			wrong++
		}
		if k++; k == period {
			k = 0
		}
	}
	return wrong
}

// fill writes this rank's inputs of iteration iter and clears its outputs.
func fill[T comm.Number](coll string, send, recv []T, block, rank, n, root, iter int) {
	coll = shape(coll)
	clear(recv)
	switch coll {
	case "allreduce", "reduce", "allgather", "gather", "sendrecv", "reduce_scatter":
		fillFrom(send, pattern[T](rank, iter), 0)
	case "bcast":
		if rank == root {
			fillFrom(recv, pattern[T](root, iter), 0)
		}
	case "alltoall":
		for j := range n {
			fillFrom(send[j*block:(j+1)*block], pattern[T](rank*n+j, iter), 0)
		}
	case "scatter":
		if rank == root {
			for j := range n {
				fillFrom(send[j*block:(j+1)*block], pattern[T](j, iter), 0)
			}
		}
	}
}

// check counts the wrong elements of this rank's outputs of iteration iter
// (for "sendrecv", the message from the other of 2 ranks).
func check[T comm.Number](coll string, recv []T, block, rank, n, root, iter int) int {
	coll = shape(coll)
	switch coll {
	case "allreduce":
		return wrongFrom(recv, sumPattern[T](n, iter), 0)
	case "reduce":
		if rank == root {
			return wrongFrom(recv, sumPattern[T](n, iter), 0)
		}
	case "bcast":
		return wrongFrom(recv, pattern[T](root, iter), 0)
	case "alltoall", "allgather", "gather":
		if coll == "gather" && rank != root {
			return 0
		}
		wrong := 0
		for j := range n {
			src := j
			if coll == "alltoall" {
				src = j*n + rank
			}
			wrong += wrongFrom(recv[j*block:(j+1)*block], pattern[T](src, iter), 0)
		}
		return wrong
	case "scatter":
		return wrongFrom(recv[:block], pattern[T](rank, iter), 0)
	case "reduce_scatter":
		return wrongFrom(recv[:block], sumPattern[T](n, iter), rank*block)
	case "sendrecv":
		return wrongFrom(recv, pattern[T](1-rank, iter), 0)
	}
	return 0
}

// shape is the collective whose buffers and data a benchmark's has: the
// v-forms time equal blocks (OSU's osu_gatherv, osu_scatterv).
func shape(coll string) string {
	switch coll {
	case "gatherv":
		return "gather"
	case "scatterv":
		return "scatter"
	}
	return coll
}

// typeErr reports an unknown type (Parse accepts only known ones).
func typeErr(t string) error { return fmt.Errorf("osu: unknown data type %q", t) }
