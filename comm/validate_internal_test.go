package comm

import (
	"math/rand/v2"
	"testing"
)

// TestOverlapping checks both ways overlapping finds overlapping blocks
// (pairs for a few ranks, sorted displacements for more) against every
// pair, on random blocks, empty ones among them.
func TestOverlapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20000 {
		n := 1 + rng.IntN(40)
		counts, displs := make([]int, n), make([]int, n)
		for i := range n {
			counts[i] = rng.IntN(4)
			displs[i] = rng.IntN(4 * n)
		}
		want := false
		for i := range n {
			for j := i + 1; j < n; j++ {
				if counts[i] > 0 && counts[j] > 0 && displs[i] < displs[j]+counts[j] && displs[j] < displs[i]+counts[i] {
					want = true
				}
			}
		}
		i, j, got := overlapping(counts, displs)
		if got != want {
			t.Fatalf("trial %d: counts %v displs %v: overlapping %v, want %v", trial, counts, displs, got, want)
		}
		if got && (i >= j || counts[i] == 0 || counts[j] == 0 || displs[i] >= displs[j]+counts[j] || displs[j] >= displs[i]+counts[i]) {
			t.Fatalf("trial %d: counts %v displs %v: named blocks %d and %d, which do not overlap", trial, counts, displs, i, j)
		}
	}
}
