package comm_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestReductionsFromRegisteredSend runs out-of-place reductions whose send
// buffer is registered, which read it directly instead of copying it first
// (collectives.CompileFused), with every algorithm and with receive buffers
// registered or not, and checks the results and that send is untouched.
func TestReductionsFromRegisteredSend(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			runRanks(t, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				for _, count := range []int{1, 7, 3000} { // 3000 floats: several 4 KiB chunks
					send, err := Alloc[float32](c, n*count)
					if err != nil {
						return err
					}
					reg, err := Alloc[float32](c, n*count)
					if err != nil {
						return err
					}
					val := func(r, i int) float32 { return float32((r+1)*1000 + i%997) }
					for i := range send {
						send[i] = val(me, i)
					}
					sum := func(i int) float32 {
						var s float32
						for r := range n {
							s += val(r, i)
						}
						return s
					}
					check := func(what string, got []float32, at func(i int) float32) error {
						for i, v := range got {
							if w := at(i); v != w {
								return fmt.Errorf("%s count %d: element %d = %v, want %v", what, count, i, v, w)
							}
						}
						for i, v := range send {
							if v != val(me, i) {
								return fmt.Errorf("%s count %d: send element %d modified", what, count, i)
							}
						}
						return nil
					}
					for _, algo := range append(Algorithms("allreduce"), "") {
						for _, recv := range [][]float32{reg[:count], make([]float32, count)} {
							clear(recv)
							var o []CallOption
							if algo != "" {
								o = append(o, WithAlgorithm(algo))
							}
							if err := Allreduce(ctx, c, send[:count], recv, Sum, o...); err != nil {
								return err
							}
							if err := check("allreduce "+algo, recv, sum); err != nil {
								return err
							}
						}
					}
					for _, algo := range append(Algorithms("reducescatter"), "") {
						recv := make([]float32, count)
						var o []CallOption
						if algo != "" {
							o = append(o, WithAlgorithm(algo))
						}
						if err := ReduceScatter(ctx, c, send, recv, Sum, o...); err != nil {
							return err
						}
						if err := check("reducescatter "+algo, recv, func(i int) float32 { return sum(me*count + i) }); err != nil {
							return err
						}
					}
					root := n - 1
					var recv []float32
					if me == root {
						recv = reg[:count]
						clear(recv)
					}
					if err := Reduce(ctx, c, send[:count], recv, Sum, root); err != nil {
						return err
					}
					if err := check("reduce", recv, sum); err != nil {
						return err
					}
					if err := Free(c, send); err != nil {
						return err
					}
					if err := Free(c, reg); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// A reduce's ranks other than the root keep nothing of their BufData (it
// is scratch): fused, a rank that only sends its input (every rank of the
// flat tree but the root, the binomial tree's leaves) copies nothing
// before it sends. It copied the whole buffer into scratch before
// (1 MiB a call and rank at 1 MiB).
func TestFusedReduceNonRootsCopyNothing(t *testing.T) {
	const count = 1 << 16
	runRanks(t, 4, testOpts, func(c *Comm) error {
		for _, algo := range []string{"linear", "binomial"} {
			n, err := FusedPreCopied(c, "reduce", algo, count, 0)
			if err != nil {
				return err
			}
			leaf := c.Rank() != 0 && (algo == "linear" || c.Rank()%2 == 1)
			if leaf && n != 0 {
				return fmt.Errorf("%s: rank %d copies %d bytes before it sends", algo, c.Rank(), n)
			}
		}
		return nil
	})
}

// A reduce-scatter keeps only its rank's block of BufData (the rest is
// working space): fused, it copies nothing before its steps. Recursive
// halving copied the half it sends away first, and more, before.
func TestFusedReduceScatterCopiesNothing(t *testing.T) {
	const count = 1 << 12
	runRanks(t, 4, testOpts, func(c *Comm) error {
		for _, algo := range []string{"ring", "recursive-halving"} {
			n, err := FusedPreCopied(c, "reduce-scatter", algo, count, -1)
			if err != nil {
				return err
			}
			if n != 0 {
				return fmt.Errorf("%s: rank %d copies %d bytes before its steps", algo, c.Rank(), n)
			}
		}
		return nil
	})
}
