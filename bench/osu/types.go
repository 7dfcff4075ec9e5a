package osu

import (
	"fmt"

	"github.com/goccl/goccl/comm"
)

var typeNames = map[string]comm.DataType{
	"int8": comm.Int8, "uint8": comm.Uint8, "int32": comm.Int32, "uint32": comm.Uint32,
	"int64": comm.Int64, "uint64": comm.Uint64, "float32": comm.Float32, "float64": comm.Float64,
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
	}
	return t
}

// layout returns the buffer lengths, in elements, of one call of coll at
// count elements on n ranks, and the block each rank contributes. OSU
// counts alltoall, allgather, gather and scatter per rank (count is the
// block) and reduce_scatter in total; nccl-tests counts every collective
// in total (count is split into n blocks).
func layout(coll string, count, n int, nccl bool) (sendLen, recvLen, block int) {
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
// sides).
func val[T comm.Number](src, i, iter int) T {
	return T((src*7+i%61+iter%5)%100 + 1)
}

// fill writes this rank's inputs of iteration iter and clears its outputs.
func fill[T comm.Number](coll string, send, recv []T, block, rank, n, root, iter int) {
	clear(recv)
	switch coll {
	case "allreduce", "reduce", "allgather", "gather", "sendrecv":
		for i := range send {
			send[i] = val[T](rank, i, iter)
		}
	case "bcast":
		if rank == root {
			for i := range recv {
				recv[i] = val[T](root, i, iter)
			}
		}
	case "alltoall":
		for j := range n {
			for e := range block {
				send[j*block+e] = val[T](rank*n+j, e, iter)
			}
		}
	case "scatter":
		if rank == root {
			for j := range n {
				for e := range block {
					send[j*block+e] = val[T](j, e, iter)
				}
			}
		}
	case "reduce_scatter":
		for i := range send {
			send[i] = val[T](rank, i, iter)
		}
	}
}

// sumOf is the reduction (sum) of val over n ranks at element i.
func sumOf[T comm.Number](n, i, iter int) T {
	var s T
	for r := range n {
		s += val[T](r, i, iter)
	}
	return s
}

// check counts the wrong elements of this rank's outputs of iteration iter
// (peer is the other rank of a point-to-point test).
func check[T comm.Number](coll string, recv []T, block, rank, n, root, iter int) int {
	wrong := 0
	expect := func(i int, want T) {
		if recv[i] != want {
			wrong++
		}
	}
	switch coll {
	case "allreduce":
		for i := range recv {
			expect(i, sumOf[T](n, i, iter))
		}
	case "reduce":
		if rank == root {
			for i := range recv {
				expect(i, sumOf[T](n, i, iter))
			}
		}
	case "bcast":
		for i := range recv {
			expect(i, val[T](root, i, iter))
		}
	case "alltoall":
		for j := range n {
			for e := range block {
				expect(j*block+e, val[T](j*n+rank, e, iter))
			}
		}
	case "allgather":
		for j := range n {
			for e := range block {
				expect(j*block+e, val[T](j, e, iter))
			}
		}
	case "gather":
		if rank == root {
			for j := range n {
				for e := range block {
					expect(j*block+e, val[T](j, e, iter))
				}
			}
		}
	case "scatter":
		for e := range block {
			expect(e, val[T](rank, e, iter))
		}
	case "reduce_scatter":
		for e := range block {
			expect(e, sumOf[T](n, rank*block+e, iter))
		}
	case "sendrecv":
		for i := range recv {
			expect(i, val[T](1-rank, i, iter))
		}
	}
	if wrong > 0 {
		return wrong
	}
	return 0
}

// typeErr reports an unknown type (Parse accepts only known ones).
func typeErr(t string) error { return fmt.Errorf("osu: unknown data type %q", t) }
