package osu

import (
	"context"

	"github.com/goccl/goccl/comm"
)

// collImpl is how a benchmark calls one collective on buffers of T. A nil
// Run means comm does not offer the collective yet.
type collImpl[T comm.Number] struct {
	// Run is the blocking call. For collectives with one buffer it uses recv.
	Run func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, root int) error
	// Start is the asynchronous call, nil if there is none.
	Start func(c *comm.Comm, send, recv []T, op comm.Op, root int) *comm.Request
	// InPlace is the in-place form for nccl-tests' second column, nil if
	// the collective has none.
	InPlace func(ctx context.Context, c *comm.Comm, buf []T, op comm.Op, root int) error
}

// p2pImpl is point-to-point messaging, for latency, bw and bibw.
type p2pImpl[T comm.Number] struct {
	Send      func(ctx context.Context, c *comm.Comm, buf []T, peer, tag int) error
	Recv      func(ctx context.Context, c *comm.Comm, buf []T, peer, tag int) error
	SendAsync func(c *comm.Comm, buf []T, peer, tag int) *comm.Request
	RecvAsync func(c *comm.Comm, buf []T, peer, tag int) *comm.Request
}

// collsFor lists the collectives comm offers today. The ones being added
// to comm are written in colls_next.go against the names they will have
// and are compiled only with the gocclnext build tag until they land;
// enabling one is moving its line from nextColls into this table.
func collsFor[T comm.Number]() map[string]collImpl[T] {
	m := map[string]collImpl[T]{
		"allreduce": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, _ int) error {
				return comm.Allreduce(ctx, c, send, recv, op)
			},
			Start: func(c *comm.Comm, send, recv []T, op comm.Op, _ int) *comm.Request {
				return comm.AllreduceAsync(c, send, recv, op)
			},
			InPlace: func(ctx context.Context, c *comm.Comm, buf []T, op comm.Op, _ int) error {
				return comm.Allreduce(ctx, c, buf, buf, op)
			},
		},
		"bcast": {
			Run: func(ctx context.Context, c *comm.Comm, _, recv []T, _ comm.Op, root int) error {
				return comm.Broadcast(ctx, c, recv, root)
			},
			Start: func(c *comm.Comm, _, recv []T, _ comm.Op, root int) *comm.Request {
				return comm.BroadcastAsync(c, recv, root)
			},
			InPlace: func(ctx context.Context, c *comm.Comm, buf []T, _ comm.Op, root int) error {
				return comm.Broadcast(ctx, c, buf, root)
			},
		},
		"barrier": {
			Run: func(ctx context.Context, c *comm.Comm, _, _ []T, _ comm.Op, _ int) error {
				return c.Barrier(ctx)
			},
			Start: func(c *comm.Comm, _, _ []T, _ comm.Op, _ int) *comm.Request {
				return c.BarrierAsync()
			},
		},
	}
	nextColls(m)
	return m
}

// supported reports whether comm offers the collective (or, for
// "sendrecv", point-to-point messaging).
func supported(coll string) bool {
	if coll == "sendrecv" {
		return p2pFor[int8]().Send != nil
	}
	return collsFor[int8]()[coll].Run != nil
}

// apiName names the comm functions a benchmark needs, for the error
// printed while they are missing.
func apiName(coll string) string {
	switch coll {
	case "sendrecv":
		return "comm.Send and comm.Recv"
	case "reduce":
		return "comm.Reduce"
	case "alltoall":
		return "comm.Alltoall"
	case "allgather":
		return "comm.Allgather"
	case "reduce_scatter":
		return "comm.ReduceScatter"
	case "gather":
		return "comm.Gather"
	case "scatter":
		return "comm.Scatter"
	}
	return "comm." + coll
}
