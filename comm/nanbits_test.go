package comm_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestAllreduceNaNBitsAgree: ranks whose inputs hold NaNs of different
// signs and payloads (math.NaN(), amd64's default NaN from Inf-Inf, a
// payload) end with the same bits on every rank, whatever algorithm ran,
// as README's Determinism promises. Recursive doubling (and hier-leader,
// which runs it among the hosts' leaders) reduced own op received on both
// partners, so each kept its own NaN.
func TestAllreduceNaNBitsAgree(t *testing.T) {
	nans := []float32{float32(math.NaN()), math.Float32frombits(0xffc00000), math.Float32frombits(0x7fc00123), 1, float32(math.Inf(1))}
	for _, kind := range []string{"mem", "mem-hosts"} {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%s/ranks=%d", kind, n), func(t *testing.T) {
				const count = 13
				algos := Algorithms("allreduce")
				var mu sync.Mutex
				got := map[string][][]float32{}
				runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
					for _, op := range []Op{Sum, Prod, Min, Max, Avg} {
						for _, a := range algos {
							buf := make([]float32, count)
							for i := range buf {
								buf[i] = nans[(i+c.Rank())%len(nans)]
							}
							if err := Allreduce(context.Background(), c, buf, buf, op, WithAlgorithm(a)); err != nil {
								return fmt.Errorf("%s %s: %w", a, op, err)
							}
							mu.Lock()
							k := fmt.Sprintf("%s %s", a, op)
							if got[k] == nil {
								got[k] = make([][]float32, n)
							}
							got[k][c.Rank()] = buf
							mu.Unlock()
						}
					}
					return nil
				})
				for k, bufs := range got {
					for r := 1; r < n; r++ {
						for i := range count {
							if g, w := math.Float32bits(bufs[r][i]), math.Float32bits(bufs[0][i]); g != w {
								t.Errorf("%s: rank %d element %d is %#08x, rank 0's %#08x", k, r, i, g, w)
								break
							}
						}
					}
				}
			})
		}
	}
}
