package comm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestScanExscan: Scan (MPI_Scan) leaves on rank r the reduction of ranks
// 0 to r, Exscan (MPI_Exscan) that of ranks 0 to r-1 (rank 0: its own
// block), for every operation they take, on every transport, in and out of
// place, from registered and plain buffers, with each algorithm, with a
// block of several chunks and an empty one; Avg is refused on every rank.
func TestScanExscan(t *testing.T) {
	ops := []Op{Sum, Prod, Min, Max, BAnd, BOr, BXor}
	for _, kind := range []string{"mem", "tcp", "shm"} {
		ns := []int{1, 2, 3, 5, 6}
		if testing.Short() {
			ns = []int{3, 6} // a chain, and recursive doubling off a power of two
		}
		for _, n := range ns {
			t.Run(fmt.Sprint(kind, n), func(t *testing.T) {
				opts := testOptsFast
				opts.ChunkSize = 4096
				runRanksOn(t, kind, n, opts, func(c *Comm) error {
					ctx := context.Background()
					r := c.Rank()
					in := func(q, i int) int64 { return int64((q*7+i*3)%9 - 4) }
					for _, count := range []int{0, 3, 5000} {
						for _, op := range ops {
							for _, excl := range []bool{false, true} {
								for _, variant := range []string{"plain", "inplace", "alloc", "linear", "recursive-doubling"} {
									if (variant == "inplace" || variant == "alloc") && op != Sum && op != BXor {
										continue // the buffers' ways with two ops: the package's time
									}
									send := make([]int64, count)
									recv := make([]int64, count)
									if variant == "alloc" {
										var err error
										if recv, err = Alloc[int64](c, count); err != nil {
											return err
										}
									}
									var o []CallOption
									if variant == "linear" || variant == "recursive-doubling" {
										o = append(o, WithAlgorithm(variant))
									}
									for i := range send {
										send[i] = in(r, i)
									}
									s := send
									if variant == "inplace" {
										copy(recv, send)
										s = nil
									}
									var err error
									if excl {
										err = Exscan(ctx, c, s, recv, op, o...)
									} else {
										err = Scan(ctx, c, s, recv, op, o...)
									}
									if err != nil {
										return fmt.Errorf("%v %s %s count %d: %w", op, map[bool]string{false: "scan", true: "exscan"}[excl], variant, count, err)
									}
									last := r
									if excl && r > 0 {
										last = r - 1
									}
									for i := range count {
										want := in(0, i)
										for q := 1; q <= last; q++ {
											v := in(q, i)
											switch op {
											case Sum:
												want += v
											case Prod:
												want *= v
											case Min:
												want = min(want, v)
											case Max:
												want = max(want, v)
											case BAnd:
												want &= v
											case BOr:
												want |= v
											case BXor:
												want ^= v
											}
										}
										if excl && r == 0 {
											want = in(0, i)
										}
										if recv[i] != want {
											return fmt.Errorf("%v exscan=%v %s count %d: element %d is %d, want %d", op, excl, variant, count, i, recv[i], want)
										}
									}
									if variant == "alloc" {
										if err := Free(c, recv); err != nil {
											return err
										}
									}
								}
							}
						}
					}
					// float16, reduced in float32 as an allreduce is.
					h := []Float16{F16(float32(r + 1)), F16(0.5)}
					if err := Scan(ctx, c, h, h, Sum); err != nil {
						return fmt.Errorf("float16 scan: %w", err)
					}
					if got, want := h[0].Float32(), float32((r+1)*(r+2)/2); got != want || h[1].Float32() != 0.5*float32(r+1) {
						return fmt.Errorf("float16 scan: %v, %v; want %v, %v", got, h[1].Float32(), want, 0.5*float32(r+1))
					}
					// Refused as bad arguments: on a Dup, which it breaks.
					d, err := c.Dup(ctx)
					if err != nil {
						return err
					}
					defer d.Close()
					err = Scan(ctx, d, []float32{1}, make([]float32, 1), Avg)
					if err == nil || !strings.Contains(err.Error(), "scan(float32)") || !strings.Contains(err.Error(), "avg") {
						return fmt.Errorf("scan with avg: %v, want a refusal naming scan and avg", err)
					}
					return nil
				})
			})
		}
	}
}
