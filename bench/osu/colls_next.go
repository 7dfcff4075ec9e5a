//go:build gocclnext

package osu

import (
	"context"

	"github.com/goccl/goccl/comm"
)

// nextColls adds the collectives being added to comm, written against the
// names they will have. Build with -tags gocclnext once they exist; when
// one lands, move its entry to collsFor.
func nextColls[T comm.Number](m map[string]collImpl[T]) {
	m["reduce"] = collImpl[T]{
		Run: func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, root int) error {
			return comm.Reduce(ctx, c, send, recv, op, root)
		},
		Start: func(c *comm.Comm, send, recv []T, op comm.Op, root int) *comm.Request {
			return comm.ReduceAsync(c, send, recv, op, root)
		},
	}
	m["alltoall"] = collImpl[T]{
		Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, _ int) error {
			return comm.Alltoall(ctx, c, send, recv)
		},
		Start: func(c *comm.Comm, send, recv []T, _ comm.Op, _ int) *comm.Request {
			return comm.AlltoallAsync(c, send, recv)
		},
	}
	m["allgather"] = collImpl[T]{
		Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, _ int) error {
			return comm.Allgather(ctx, c, send, recv)
		},
		Start: func(c *comm.Comm, send, recv []T, _ comm.Op, _ int) *comm.Request {
			return comm.AllgatherAsync(c, send, recv)
		},
	}
	m["reduce_scatter"] = collImpl[T]{
		Run: func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, _ int) error {
			return comm.ReduceScatter(ctx, c, send, recv, op)
		},
		Start: func(c *comm.Comm, send, recv []T, op comm.Op, _ int) *comm.Request {
			return comm.ReduceScatterAsync(c, send, recv, op)
		},
	}
	m["gather"] = collImpl[T]{
		Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, root int) error {
			return comm.Gather(ctx, c, send, recv, root)
		},
		Start: func(c *comm.Comm, send, recv []T, _ comm.Op, root int) *comm.Request {
			return comm.GatherAsync(c, send, recv, root)
		},
	}
	m["scatter"] = collImpl[T]{
		Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, root int) error {
			return comm.Scatter(ctx, c, send, recv, root)
		},
		Start: func(c *comm.Comm, send, recv []T, _ comm.Op, root int) *comm.Request {
			return comm.ScatterAsync(c, send, recv, root)
		},
	}
}

// p2pFor returns comm's point-to-point calls.
func p2pFor[T comm.Number]() p2pImpl[T] {
	return p2pImpl[T]{
		Send: func(ctx context.Context, c *comm.Comm, buf []T, peer, tag int) error {
			return comm.Send(ctx, c, buf, peer, tag)
		},
		Recv: func(ctx context.Context, c *comm.Comm, buf []T, peer, tag int) error {
			return comm.Recv(ctx, c, buf, peer, tag)
		},
		SendAsync: func(c *comm.Comm, buf []T, peer, tag int) *comm.Request {
			return comm.SendAsync(c, buf, peer, tag)
		},
		RecvAsync: func(c *comm.Comm, buf []T, peer, tag int) *comm.Request {
			return comm.RecvAsync(c, buf, peer, tag)
		},
	}
}
