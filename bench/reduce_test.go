package bench

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/bench/kernelref"
	"github.com/goccl/goccl/collectives"
)

// BenchmarkReduceKernel times goccl's reduction kernel (dst op= src, and
// Avg's final division) beside the C loop d[i] op= s[i] built by gcc -O3
// -march=native (bench/kernelref), alternating the two in one loop over
// the same pre-touched buffers, at 512 KiB (the default chunk, in cache)
// and 64 MiB (memory). Each sub-benchmark reports both throughputs
// (counting the operand once, over all calls) and the ratio goccl / C of
// their fastest calls ("ratio", robust on a loaded machine; "ratio-mean"
// is that of all calls); the parent prints the table at the end, with each
// half-precision type's elements per second (fastest call) against
// float32's. Without cgo only goccl's side runs.
//
//	go test -run '^$' -bench ReduceKernel ./bench/
func BenchmarkReduceKernel(b *testing.B) {
	types := []collectives.DataType{collectives.Float32, collectives.Float64, collectives.Float16, collectives.BFloat16,
		collectives.Int8, collectives.Uint8, collectives.Int32, collectives.Uint32, collectives.Int64, collectives.Uint64}
	ops := []collectives.ReduceOp{collectives.Sum, collectives.Prod, collectives.Min, collectives.Max, collectives.Avg}
	type key struct {
		size int
		dt   collectives.DataType
		op   collectives.ReduceOp
	}
	type result struct{ ratio, elems float64 }
	results := map[key]result{}
	sizes := []int{512 << 10, 64 << 20}
	dst, src := make([]byte, sizes[len(sizes)-1]), make([]byte, sizes[len(sizes)-1])
	for _, size := range sizes {
		for _, dt := range types {
			for _, op := range ops {
				name := fmt.Sprintf("size=%s/type=%s/op=%s", sizeName(size), dt, op)
				b.Run(name, func(b *testing.B) {
					d, s := dst[:size], src[:size]
					fillOperands(dt, op, d, s) // also touches every page
					run := func() {
						var err error
						if op == collectives.Avg {
							err = collectives.Finish(dt, op, d, kernelRanks)
						} else {
							err = collectives.Reduce(dt, op, d, s)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					run()
					if kernelref.Available {
						kernelref.Run(dt, op, d, s, kernelRanks)
					}
					b.ReportAllocs()
					// Totals, and the fastest call of each side: on a shared
					// machine the minimum is what the code can do, the total
					// also counts what other processes took.
					var tGo, tC time.Duration
					minGo, minC := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
					for b.Loop() {
						if op == collectives.Avg {
							copy(d, s) // divide ordinary values, not what earlier calls left
						}
						t0 := time.Now()
						run()
						t1 := time.Now()
						tGo += t1.Sub(t0)
						minGo = min(minGo, t1.Sub(t0))
						if kernelref.Available {
							if op == collectives.Avg {
								copy(d, s)
								t1 = time.Now()
							}
							kernelref.Run(dt, op, d, s, kernelRanks)
							dc := time.Since(t1)
							tC += dc
							minC = min(minC, dc)
						}
					}
					bytes := float64(size) * float64(b.N)
					b.ReportMetric(bytes/tGo.Seconds()/1e9, "goccl-GB/s")
					r := result{elems: float64(size) / float64(dt.Size()) / minGo.Seconds()}
					if kernelref.Available {
						b.ReportMetric(bytes/tC.Seconds()/1e9, "C-GB/s")
						r.ratio = minC.Seconds() / minGo.Seconds()
						b.ReportMetric(r.ratio, "ratio")
						b.ReportMetric(tC.Seconds()/tGo.Seconds(), "ratio-mean")
					}
					results[key{size, dt, op}] = r
				})
			}
		}
	}
	var t strings.Builder
	t.WriteString("\n| type | op | size | goccl / C | goccl Gelem/s | elem/s vs float32 |\n|---|---|---|---|---|---|\n")
	for _, size := range sizes {
		for _, dt := range types {
			for _, op := range ops {
				r, ok := results[key{size, dt, op}]
				if !ok {
					continue
				}
				vs := ""
				if f, ok := results[key{size, collectives.Float32, op}]; ok && dt.Half() {
					vs = fmt.Sprintf("%.2f", r.elems/f.elems)
				}
				ratio := "-"
				if kernelref.Available {
					ratio = fmt.Sprintf("%.2f", r.ratio)
				}
				fmt.Fprintf(&t, "| %s | %s | %s | %s | %.2f | %s |\n", dt, op, sizeName(size), ratio, r.elems/1e9, vs)
			}
		}
	}
	fmt.Print(t.String()) // b.Log of a benchmark with sub-benchmarks is not shown
}

// kernelRanks is the divisor of the Avg benchmark.
const kernelRanks = 3

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// fillOperands writes values that keep a repeated dst op= src ordinary
// (no overflow to infinity, no subnormals for long): src 1 for products,
// small for sums, varied for min and max.
func fillOperands(dt collectives.DataType, op collectives.ReduceOp, dst, src []byte) {
	size := dt.Size()
	for i, k := 0, 0; i < len(dst); i, k = i+size, k+1 {
		d, s := float64(k%7+1), float64(k%5+1)
		switch op {
		case collectives.Prod:
			s = 1
		case collectives.Sum:
			s = 0.5
		}
		putValue(dt, dst[i:], d)
		putValue(dt, src[i:], s)
	}
}

func putValue(dt collectives.DataType, b []byte, v float64) {
	switch dt {
	case collectives.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case collectives.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case collectives.Float16:
		binary.LittleEndian.PutUint16(b, collectives.F32ToF16(float32(v)))
	case collectives.BFloat16:
		binary.LittleEndian.PutUint16(b, collectives.F32ToBF16(float32(v)))
	case collectives.Int8, collectives.Uint8:
		b[0] = byte(int(v))
	case collectives.Int32, collectives.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(int(v)))
	case collectives.Int64, collectives.Uint64:
		binary.LittleEndian.PutUint64(b, uint64(int(v)))
	}
}
