package commtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
)

// Every collective has its check (send and recv share one; CheckAll ends
// with a barrier).
func TestChecksCoverEveryCollective(t *testing.T) {
	have := map[string]bool{"barrier": true}
	for _, name := range commtest.Checks() {
		for _, part := range strings.Split(name, "/") {
			have[part] = true
		}
	}
	for _, ci := range collectives.Collectives() {
		require.True(t, have[ci.Name], "no check of %s in %v", ci.Name, commtest.Checks())
	}
}

// Both variants pass on a healthy communicator, and a failing check is
// named with its arguments and buffers.
func TestCheckAllVariants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := comm.Options{ChunkSize: 4096, Slots: 3, Alpha: 20e-6, Beta: 1e-9}
	for r, err := range commtest.Run(ctx, "mem", 3, opts, func(c *comm.Comm) error {
		if err := commtest.CheckAll[float32](ctx, c, 1500, commtest.AllOps); err != nil { // two chunks
			return err
		}
		return commtest.CheckAllRegistered[int32](ctx, c, 1500, commtest.AllOps)
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	comms, err := commtest.Connect(ctx, "mem", 2, opts)
	require.NoError(t, err)
	for _, c := range comms {
		require.NoError(t, c.Close())
	}
	err = commtest.CheckAll[float32](ctx, comms[0], 3, commtest.AllOps)
	require.ErrorContains(t, err, "commtest: check allreduce (float32, count 3, plain buffers): ")
	require.ErrorIs(t, err, comm.ErrClosed)
	err = commtest.CheckAllRegistered[int64](ctx, comms[1], 5, commtest.AllOps)
	require.ErrorContains(t, err, "commtest: check allreduce (int64, count 5, registered buffers): ")
}
