package collectives

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHazardsMatchPerByteModel checks the span-based dependency tracking
// against a per-byte model on random accesses.
func TestHazardsMatchPerByteModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		var h hazards
		const n = 40
		writer := make([]int32, n)
		readers := make([][]int32, n)
		for i := range writer {
			writer[i] = -1
		}
		for idx := range int32(30) {
			x := rng.IntN(n)
			y := x + rng.IntN(n-x+1)
			write := rng.IntN(2) == 0
			got := h.access(BufData, x, y, write, idx, nil)
			var want []int32
			if y <= x {
				y = x + 1
			}
			for b := x; b < y; b++ {
				if writer[b] >= 0 {
					want = addDep(want, writer[b])
				}
				if write {
					for _, r := range readers[b] {
						want = addDep(want, r)
					}
					writer[b], readers[b] = idx, nil
				} else {
					readers[b] = append(readers[b], idx)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d access %d [%d,%d) write=%v: deps %v, want %v", trial, idx, x, y, write, got, want)
			}
		}
		spans := h[BufData]
		for i := 1; i < len(spans); i++ {
			if spans[i].a < spans[i-1].b || spans[i].a >= spans[i].b {
				t.Fatalf("trial %d: spans overlap or are empty: %+v", trial, spans)
			}
		}
	}
}
