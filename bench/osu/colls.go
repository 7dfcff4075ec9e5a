package osu

import (
	"context"

	"github.com/goccl/goccl/comm"
)

// collImpl is how a benchmark calls one collective on buffers of T. A nil
// Run means comm does not offer the collective.
type collImpl[T comm.Number] struct {
	// Run is the blocking call. For collectives with one buffer it uses recv.
	Run func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, root int, opts []comm.CallOption) error
	// Start is the asynchronous call, nil if there is none.
	Start func(c *comm.Comm, send, recv []T, op comm.Op, root int, opts []comm.CallOption) *comm.Request
	// InPlace is the in-place form for nccl-tests' second column, nil if
	// the collective has none; buf is the output buffer, holding the input
	// where the in-place form expects it (see prepareInPlace).
	InPlace func(ctx context.Context, c *comm.Comm, buf []T, op comm.Op, root int, opts []comm.CallOption) error
}

// p2pImpl is point-to-point messaging, for latency, bw and bibw.
type p2pImpl[T comm.Number] struct {
	Send          func(ctx context.Context, c *comm.Comm, buf []T, peer, tag int) error
	Recv          func(ctx context.Context, c *comm.Comm, buf []T, peer, tag int) error
	SendAsync     func(c *comm.Comm, buf []T, peer, tag int) *comm.Request
	RecvAsync     func(c *comm.Comm, buf []T, peer, tag int) *comm.Request
	SendRecvAsync func(c *comm.Comm, send []T, dst int, recv []T, src, tag int) *comm.Request
}

// collsFor is the table of collectives, by the name benchmarks use. A
// collective comm lacks is left out (or given a nil Run); its benchmark
// then fails with ErrNotSupported.
func collsFor[T comm.Number]() map[string]collImpl[T] {
	return map[string]collImpl[T]{
		"allreduce": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, _ int, o []comm.CallOption) error {
				return comm.Allreduce(ctx, c, send, recv, op, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, op comm.Op, _ int, o []comm.CallOption) *comm.Request {
				return comm.AllreduceAsync(c, send, recv, op, o...)
			},
			InPlace: func(ctx context.Context, c *comm.Comm, buf []T, op comm.Op, _ int, o []comm.CallOption) error {
				return comm.Allreduce(ctx, c, buf, buf, op, o...)
			},
		},
		"bcast": {
			Run: func(ctx context.Context, c *comm.Comm, _, recv []T, _ comm.Op, root int, o []comm.CallOption) error {
				return comm.Broadcast(ctx, c, recv, root, o...)
			},
			Start: func(c *comm.Comm, _, recv []T, _ comm.Op, root int, o []comm.CallOption) *comm.Request {
				return comm.BroadcastAsync(c, recv, root, o...)
			},
			InPlace: func(ctx context.Context, c *comm.Comm, buf []T, _ comm.Op, root int, o []comm.CallOption) error {
				return comm.Broadcast(ctx, c, buf, root, o...)
			},
		},
		"reduce": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, root int, o []comm.CallOption) error {
				return comm.Reduce(ctx, c, send, recv, op, root, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, op comm.Op, root int, o []comm.CallOption) *comm.Request {
				return comm.ReduceAsync(c, send, recv, op, root, o...)
			},
			InPlace: func(ctx context.Context, c *comm.Comm, buf []T, op comm.Op, root int, o []comm.CallOption) error {
				return comm.Reduce(ctx, c, buf, buf, op, root, o...)
			},
		},
		"alltoall": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, _ int, o []comm.CallOption) error {
				return comm.Alltoall(ctx, c, send, recv, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, _ comm.Op, _ int, o []comm.CallOption) *comm.Request {
				return comm.AlltoallAsync(c, send, recv, o...)
			},
		},
		"allgather": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, _ int, o []comm.CallOption) error {
				return comm.Allgather(ctx, c, send, recv, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, _ comm.Op, _ int, o []comm.CallOption) *comm.Request {
				return comm.AllgatherAsync(c, send, recv, o...)
			},
			InPlace: func(ctx context.Context, c *comm.Comm, buf []T, _ comm.Op, _ int, o []comm.CallOption) error {
				block := len(buf) / c.Size()
				return comm.Allgather(ctx, c, buf[c.Rank()*block:(c.Rank()+1)*block], buf, o...)
			},
		},
		"reduce_scatter": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, op comm.Op, _ int, o []comm.CallOption) error {
				return comm.ReduceScatter(ctx, c, send, recv, op, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, op comm.Op, _ int, o []comm.CallOption) *comm.Request {
				return comm.ReduceScatterAsync(c, send, recv, op, o...)
			},
		},
		"gather": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) error {
				return comm.Gather(ctx, c, send, recv, root, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) *comm.Request {
				return comm.GatherAsync(c, send, recv, root, o...)
			},
		},
		"scatter": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) error {
				return comm.Scatter(ctx, c, send, recv, root, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) *comm.Request {
				return comm.ScatterAsync(c, send, recv, root, o...)
			},
		},
		// The v-forms with every rank's block the same length, as OSU's
		// osu_gatherv and osu_scatterv time them.
		"gatherv": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) error {
				return comm.Gatherv(ctx, c, send, recv, equalCounts(c.Size(), len(send)), nil, root, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) *comm.Request {
				return comm.GathervAsync(c, send, recv, equalCounts(c.Size(), len(send)), nil, root, o...)
			},
		},
		"scatterv": {
			Run: func(ctx context.Context, c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) error {
				return comm.Scatterv(ctx, c, send, recv, equalCounts(c.Size(), len(recv)), nil, root, o...)
			},
			Start: func(c *comm.Comm, send, recv []T, _ comm.Op, root int, o []comm.CallOption) *comm.Request {
				return comm.ScattervAsync(c, send, recv, equalCounts(c.Size(), len(recv)), nil, root, o...)
			},
		},
		"barrier": {
			Run: func(ctx context.Context, c *comm.Comm, _, _ []T, _ comm.Op, _ int, _ []comm.CallOption) error {
				return c.Barrier(ctx)
			},
			Start: func(c *comm.Comm, _, _ []T, _ comm.Op, _ int, _ []comm.CallOption) *comm.Request {
				return c.BarrierAsync()
			},
		},
	}
}

// equalCounts is n counts of block elements: the v-collectives' counts
// when every rank's block has the same length.
func equalCounts(n, block int) []int {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = block
	}
	return counts
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
		SendRecvAsync: func(c *comm.Comm, send []T, dst int, recv []T, src, tag int) *comm.Request {
			return comm.SendRecvAsync(c, send, dst, recv, src, tag)
		},
	}
}

// prepareInPlace puts this rank's input where the in-place form of coll
// reads it, after fill wrote it to send.
func prepareInPlace[T comm.Number](coll string, send, recv []T, block, rank int) {
	switch coll {
	case "allreduce", "reduce":
		copy(recv, send)
	case "allgather":
		copy(recv[rank*block:(rank+1)*block], send)
	}
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
	case "reduce_scatter":
		return "comm.ReduceScatter"
	}
	return "comm." + coll
}

// commName is comm's name of a collective (comm.Algorithms, GOCCL_ALGO).
func commName(coll string) string {
	switch coll {
	case "bcast":
		return "broadcast"
	case "reduce_scatter":
		return "reduce-scatter"
	}
	return coll
}
