package bootstrap

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkAllgather measures one Allgather of 64-byte blobs across ranks
// running as goroutines in this process.
func BenchmarkAllgather(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		b.Run(fmt.Sprint("ranks=", n), func(b *testing.B) {
			blob := make([]byte, 64)
			runRanksB(b, n, func(ctx context.Context, g *Bootstrap) error {
				for range b.N {
					if _, err := g.Allgather(ctx, blob); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
