package comm_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// BenchmarkBoardOverhead is the work of a small allreduce and barrier on
// the shared-memory board, waits excluded: rank 1's side of each call is
// published before rank 0 makes it (BoardPeerAhead), so ns/op is what rank
// 0 spends from its call to its return, the cost every board call adds to
// the cache lines' trips between the ranks.
func BenchmarkBoardOverhead(b *testing.B) {
	comms := benchRanks(b, "shm", 2)
	c := comms[0]
	ctx := context.Background()
	for _, n := range []int{2, 64, 256} { // 8 B in a line, 256 B in 5, 1 KiB in a slot
		send, recv := make([]float32, n), make([]float32, n)
		name := "allreduce"
		if n != 2 {
			name = fmt.Sprintf("allreduce-%dB", 4*n)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				BoardPeerAhead(c, 1, false, TypeFloat32, Sum, len(send))
				if err := Allreduce(ctx, c, send, recv, Sum); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("barrier", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			BoardPeerAhead(c, 1, true, 0, 0, 0)
			if err := c.Barrier(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	bc := make([]float32, 2)
	for _, root := range []int{0, 1} {
		b.Run(fmt.Sprintf("bcast-root=%d", root), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				BoardPeerAheadBroadcast(c, 1, root, TypeFloat32, len(bc))
				if err := Broadcast(ctx, c, bc, root); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	buf := make([]byte, 8)
	b.Run("send", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if err := Send(ctx, c, buf, 1, 1); err != nil {
				b.Fatal(err)
			}
			BoardMailTaken(c, 1)
		}
	})
	b.Run("recv", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			BoardMailAhead(c, 1, 1, len(buf))
			if err := Recv(ctx, c, buf, 1, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
