package comm_test

import (
	"context"
	"strings"
	"testing"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport/mem"
)

// TestChunkSizeRange checks that chunk sizes outside [MinChunkSize,
// MaxChunkSize] are refused at once by New, from Options or from
// GOCCL_CHUNK_SIZE, with an error naming the setting and the range (issue
// 11 item 6: 64-byte chunks made Init take minutes), and that the
// smallest one works.
func TestChunkSizeRange(t *testing.T) {
	newComm := func(opts Options) error {
		c, err := New(context.Background(), NewLocalGroup(1).Member(0), mem.NewNetwork(mem.Options{}).NewDevice(), opts)
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, n := range []int{64, MinChunkSize - 1, MaxChunkSize + 1} {
		err := newComm(Options{ChunkSize: n, OwnDevice: true})
		if err == nil || !strings.Contains(err.Error(), "Options.ChunkSize") || !strings.Contains(err.Error(), "64 MiB") {
			t.Errorf("ChunkSize %d: %v, want an error naming Options.ChunkSize and the range", n, err)
		}
	}
	t.Setenv("GOCCL_CHUNK_SIZE", "64")
	if err := newComm(Options{OwnDevice: true}); err == nil || !strings.Contains(err.Error(), `GOCCL_CHUNK_SIZE="64"`) {
		t.Errorf("GOCCL_CHUNK_SIZE=64: %v, want an error naming it", err)
	}
	t.Setenv("GOCCL_CHUNK_SIZE", "")
	opts := testOpts
	opts.ChunkSize = MinChunkSize
	runRanks(t, 2, opts, func(c *Comm) error {
		buf := make([]float32, 10000)
		return Allreduce(context.Background(), c, buf, buf, Sum)
	})
}
