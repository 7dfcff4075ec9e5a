package bench

import (
	"testing"

	"github.com/goccl/goccl/collectives"
)

// BenchmarkReduceKernel times dst op= src over 512 KiB (the default chunk
// size) per data type and operation.
func BenchmarkReduceKernel(b *testing.B) {
	const size = 512 << 10
	types := []collectives.DataType{collectives.Float32, collectives.Float64, collectives.Int32, collectives.Int64,
		collectives.Uint8, collectives.Int8, collectives.Uint32, collectives.Uint64}
	ops := []collectives.ReduceOp{collectives.Sum, collectives.Prod, collectives.Min, collectives.Max}
	dst, src := make([]byte, size), make([]byte, size)
	for i := range src {
		src[i] = byte(i%5 + 1)
		dst[i] = byte(i%3 + 1)
	}
	for _, dt := range types {
		for _, op := range ops {
			b.Run("type="+dt.String()+"/op="+op.String(), func(b *testing.B) {
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					if err := collectives.Reduce(dt, op, dst, src); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
