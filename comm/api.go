package comm

import (
	"context"
)

// Every collective comes in four forms: blocking on typed Go slices
// (Allreduce), asynchronous on typed slices, returning a *Request at once
// (AllreduceAsync), and the same two on bytes with an explicit data type
// (AllreduceBytes, AllreduceBytesAsync), for frameworks that hold raw
// tensors. Every form takes per-call options (WithAlgorithm). Arguments are
// checked before anything is sent; a call whose arguments a rank refuses
// (an out-of-range root, a buffer of the wrong length, an unknown type or
// operation) fails on that rank with an error naming the argument, and, as
// MPI's default error handler makes errors fatal, breaks the communicator:
// the other ranks' call fails at once with an error naming that rank and
// the argument, and so does every later call.
//
// A blocking call's ctx bounds the collective; if it ends mid-way the
// communicator breaks (the ranks can no longer agree on its state), as do
// the communicator's timeout (Options.Timeout) and Abort. Until an
// asynchronous call's Request is done its buffers belong to the
// communicator.
//
// In place (MPI_IN_PLACE): where a collective's result overwrites its own
// input, pass the same memory as the doc comment of each call says (send
// == recv, or send is this rank's block of recv, or recv this rank's block
// of send); any other overlap of send and recv is refused.

// CallOption tunes one call.
type CallOption struct {
	algo string
}

// WithAlgorithm forces the algorithm of one call (a name from Algorithms).
// Every rank must force the same one.
func WithAlgorithm(name string) CallOption { return CallOption{algo: name} }

func applyOpts(r *Request, opts []CallOption) *Request {
	for _, o := range opts {
		if o.algo != "" {
			r.algo = o.algo
		}
	}
	return r
}

// Allreduce reduces send across all ranks with op and leaves the result in
// recv on every rank. send and recv have the same length; send may be recv
// (or nil) for in place.
func Allreduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickAllreduce(ctx, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op); ok {
			return err
		}
	}
	return c.allreduce(applyOpts(c.newBlocking(ctx), opts), asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op).wait()
}

// AllreduceAsync starts an Allreduce.
func AllreduceAsync[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) *Request {
	return c.allreduce(applyOpts(&Request{}, opts), asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op)
}

// Scan is MPI_Scan, an inclusive prefix reduction: rank r's recv ends as
// the reduction with op of the send buffers of ranks 0 to r, element by
// element, reduced in rank order. send and recv have the same length;
// send may be recv (or nil) for in place. Every operation but Avg (which
// is no prefix reduction); the half-precision types reduce in float32, as
// an allreduce does.
func Scan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, opts ...CallOption) error {
	return c.scan(applyOpts(c.newBlocking(ctx), opts), collScan, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op).wait()
}

// ScanAsync starts a Scan.
func ScanAsync[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) *Request {
	return c.scan(applyOpts(&Request{}, opts), collScan, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op)
}

// Exscan is MPI_Exscan, an exclusive prefix reduction: rank r's recv ends
// as the reduction with op of the send buffers of ranks 0 to r-1. Rank 0's
// recv, which MPI leaves undefined, holds its own send. As Scan otherwise.
func Exscan[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, opts ...CallOption) error {
	return c.scan(applyOpts(c.newBlocking(ctx), opts), collExscan, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op).wait()
}

// ExscanAsync starts an Exscan.
func ExscanAsync[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) *Request {
	return c.scan(applyOpts(&Request{}, opts), collExscan, asBytes(orRecv(send, recv)), asBytes(recv), TypeOf[T](), op)
}

// Broadcast copies root's buf into buf on every other rank.
func Broadcast[T Number](ctx context.Context, c *Comm, buf []T, root int, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickBroadcast(ctx, asBytes(buf), TypeOf[T](), root); ok {
			return err
		}
	}
	return c.broadcast(applyOpts(c.newBlocking(ctx), opts), asBytes(buf), TypeOf[T](), root).wait()
}

// BroadcastAsync starts a Broadcast.
func BroadcastAsync[T Number](c *Comm, buf []T, root int, opts ...CallOption) *Request {
	return c.broadcast(applyOpts(&Request{}, opts), asBytes(buf), TypeOf[T](), root)
}

// Reduce reduces send across all ranks with op into recv on root. recv is
// used on root only (other ranks may pass nil); on root send may be recv
// (in place). Otherwise send is never modified.
func Reduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, root int, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickReduce(ctx, asBytes(send), asBytes(recv), TypeOf[T](), op, root); ok {
			return err
		}
	}
	return c.reduce(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T](), op, root).wait()
}

// ReduceAsync starts a Reduce.
func ReduceAsync[T Number](c *Comm, send, recv []T, op Op, root int, opts ...CallOption) *Request {
	return c.reduce(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T](), op, root)
}

// Allgather gathers every rank's send block into recv on every rank: rank
// j's block at recv[j*len(send):]. len(recv) is Size()*len(send). send may
// be this rank's own block of recv (in place).
func Allgather[T Number](ctx context.Context, c *Comm, send, recv []T, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickAllgather(ctx, asBytes(send), asBytes(recv), TypeOf[T]()); ok {
			return err
		}
	}
	return c.allgather(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T]()).wait()
}

// AllgatherAsync starts an Allgather.
func AllgatherAsync[T Number](c *Comm, send, recv []T, opts ...CallOption) *Request {
	return c.allgather(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T]())
}

// Allgatherv gathers blocks of different lengths: rank j contributes
// counts[j] elements, placed at element displs[j] of recv on every rank
// (displs nil: packed in rank order). Every rank passes the same counts and
// displs; len(send) is counts[Rank()], and send may be this rank's own
// block of recv (in place). The blocks may not overlap (as in MPI, no
// element of recv is written twice); elements of recv outside them are
// left untouched.
func Allgatherv[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int, opts ...CallOption) error {
	return c.allgatherv(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T](), counts, displs).wait()
}

// AllgathervAsync starts an Allgatherv.
func AllgathervAsync[T Number](c *Comm, send, recv []T, counts, displs []int, opts ...CallOption) *Request {
	return c.allgatherv(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T](), counts, displs)
}

// ReduceScatter reduces send (Size() blocks of len(recv) elements) across
// all ranks with op and leaves block Rank() of the result in recv (as
// MPI_Reduce_scatter_block). recv may be this rank's own block of send (in
// place: that block is overwritten with the result); otherwise send is
// never modified.
func ReduceScatter[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickReduceScatter(ctx, asBytes(send), asBytes(recv), TypeOf[T](), op); ok {
			return err
		}
	}
	return c.reduceScatter(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T](), op).wait()
}

// ReduceScatterAsync starts a ReduceScatter.
func ReduceScatterAsync[T Number](c *Comm, send, recv []T, op Op, opts ...CallOption) *Request {
	return c.reduceScatter(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T](), op)
}

// Alltoall sends block j of send to rank j and receives rank j's block for
// this rank into block j of recv; send and recv hold Size() blocks of the
// same length. send may be recv (in place: the data sent is read before
// any is received); they may not overlap otherwise.
func Alltoall[T Number](ctx context.Context, c *Comm, send, recv []T, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickAlltoall(ctx, asBytes(send), asBytes(recv), TypeOf[T]()); ok {
			return err
		}
	}
	return c.alltoall(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T]()).wait()
}

// AlltoallAsync starts an Alltoall.
func AlltoallAsync[T Number](c *Comm, send, recv []T, opts ...CallOption) *Request {
	return c.alltoall(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T]())
}

// Alltoallv is Alltoall with per-peer lengths, as MPI_Alltoallv: this rank
// sends sendCounts[j] elements at element sendDispls[j] of send to rank j,
// and receives recvCounts[j] elements from rank j at element recvDispls[j]
// of recv. sendCounts[j] on rank i must equal recvCounts[i] on rank j.
// Displacements may be nil (packed in rank order). send may be recv (in
// place, as Alltoall). The blocks of recv may not overlap (those of send
// may); elements of recv outside them are left untouched.
func Alltoallv[T Number](ctx context.Context, c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int, opts ...CallOption) error {
	return c.alltoallv(applyOpts(c.newBlocking(ctx), opts), asBytes(send), sendCounts, sendDispls, asBytes(recv), recvCounts, recvDispls, TypeOf[T]()).wait()
}

// AlltoallvAsync starts an Alltoallv.
func AlltoallvAsync[T Number](c *Comm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int, opts ...CallOption) *Request {
	return c.alltoallv(applyOpts(&Request{}, opts), asBytes(send), sendCounts, sendDispls, asBytes(recv), recvCounts, recvDispls, TypeOf[T]())
}

// Gather collects every rank's send block into recv on root, rank j's at
// recv[j*len(send):]; len(recv) is Size()*len(send) on root, and recv is
// unused (may be nil) elsewhere. On root send may be root's own block of
// recv (in place).
func Gather[T Number](ctx context.Context, c *Comm, send, recv []T, root int, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickGather(ctx, asBytes(send), asBytes(recv), TypeOf[T](), root); ok {
			return err
		}
	}
	return c.gather(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T](), root).wait()
}

// GatherAsync starts a Gather.
func GatherAsync[T Number](c *Comm, send, recv []T, root int, opts ...CallOption) *Request {
	return c.gather(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T](), root)
}

// Scatter sends block j of root's send (Size() blocks of len(recv)
// elements) to rank j's recv. send is unused (may be nil) except on root,
// where recv may be root's own block of send (in place).
func Scatter[T Number](ctx context.Context, c *Comm, send, recv []T, root int, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickScatter(ctx, asBytes(send), asBytes(recv), TypeOf[T](), root); ok {
			return err
		}
	}
	return c.scatter(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T](), root).wait()
}

// ScatterAsync starts a Scatter.
func ScatterAsync[T Number](c *Comm, send, recv []T, root int, opts ...CallOption) *Request {
	return c.scatter(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T](), root)
}

// Gatherv gathers blocks of different lengths on root (MPI_Gatherv): rank
// j's send, counts[j] elements, lands at element displs[j] of root's recv
// (displs nil: packed in rank order). counts and displs are read on root
// only (the other ranks may pass nil, and recv too), where they are
// checked as Allgatherv's; a rank's send must hold its count on root, or
// the call fails naming the lengths (when one of the two is 0 no data
// moves between them to check: without Options.StrictChecks the ranks
// learn of it as of any disagreement, one in the call and the other in a
// later call, naming the calls but not the lengths). On root send may be
// its own block of recv (in place). Elements of recv outside the blocks
// are left untouched. A rank other than the root returns once its block
// is sent, as in Gather (the root checks its length; a disagreement fails
// the root's call and reaches the rank in its next call or at Close, or
// in this one with Options.StrictChecks); one whose block is empty sends
// nothing and returns at once (with Options.StrictChecks it sends the root
// an empty message, so that a disagreement on an empty block fails both in
// the call).
func Gatherv[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int, root int, opts ...CallOption) error {
	return c.gatherv(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T](), counts, displs, root).wait()
}

// GathervAsync starts a Gatherv.
func GathervAsync[T Number](c *Comm, send, recv []T, counts, displs []int, root int, opts ...CallOption) *Request {
	return c.gatherv(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T](), counts, displs, root)
}

// Scatterv scatters blocks of different lengths from root (MPI_Scatterv):
// rank j receives into recv the counts[j] elements at element displs[j]
// of root's send (displs nil: packed in rank order). counts, displs and
// send are read on root only (the other ranks may pass nil); a rank's
// recv must hold its count on root, or the call fails naming the lengths
// (when one of the two is 0, as Gatherv says). On root recv may be its own
// block of send (in place). The root returns once its blocks are sent, as
// in Scatter (each rank checks its block's length); a rank whose block is
// empty receives nothing and returns at once (with Options.StrictChecks the root sends it an empty message, so
// that a disagreement on an empty block fails both in the call).
func Scatterv[T Number](ctx context.Context, c *Comm, send, recv []T, counts, displs []int, root int, opts ...CallOption) error {
	return c.scatterv(applyOpts(c.newBlocking(ctx), opts), asBytes(send), asBytes(recv), TypeOf[T](), counts, displs, root).wait()
}

// ScattervAsync starts a Scatterv.
func ScattervAsync[T Number](c *Comm, send, recv []T, counts, displs []int, root int, opts ...CallOption) *Request {
	return c.scatterv(applyOpts(&Request{}, opts), asBytes(send), asBytes(recv), TypeOf[T](), counts, displs, root)
}

// Barrier returns once every rank has entered it.
func (c *Comm) Barrier(ctx context.Context, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickBarrier(ctx); ok {
			return err
		}
	}
	return c.barrier(applyOpts(c.newBlocking(ctx), opts)).wait()
}

// BarrierAsync starts a Barrier.
func (c *Comm) BarrierAsync(opts ...CallOption) *Request {
	return c.barrier(applyOpts(&Request{}, opts))
}

// Send sends buf to rank peer. It is matched by a Recv on peer naming this
// rank and the same tag, as MPI matches: messages of one tag in the order
// they were sent; a Recv of another tag passes over it (peer sets it aside
// until its Recv, up to collectives.DefaultStrayLimit bytes), as do
// collectives. A Recv of another length fails with a mismatch (the element
// type is not compared, as in MPI). Tags are 0 <= tag <= MaxTag. Point-to-point calls are ordered
// with the collectives of the communicator: both ranks must issue their
// matching calls in the same order relative to their other calls. Send
// blocks until peer has the data in its staging slots or, for more than
// Options.Slots chunks, until peer receives. Over the shared-memory board
// the same holds with a mailbox of 8 messages per pair of ranks: a message
// of more than 4 KiB that peer has not begun to take within microseconds
// is copied for it, up to Options.Slots chunks of such copies per peer.
//
// A rank may send to itself: the message is copied and kept until this
// rank's matching Recv (later in call order), as MPI buffers it.
func Send[T Number](ctx context.Context, c *Comm, buf []T, peer, tag int, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickP2P(ctx, collSend, asBytes(buf), TypeOf[T](), peer, tag); ok {
			return err
		}
	}
	return c.p2p(applyOpts(c.newBlocking(ctx), opts), collSend, asBytes(buf), TypeOf[T](), peer, tag).wait()
}

// SendAsync starts a Send.
func SendAsync[T Number](c *Comm, buf []T, peer, tag int, opts ...CallOption) *Request {
	return c.p2p(applyOpts(&Request{}, opts), collSend, asBytes(buf), TypeOf[T](), peer, tag)
}

// Recv receives into buf from rank peer the oldest message with tag that
// peer sent this rank and no Recv took yet (see Send). A Recv from this
// rank itself takes the oldest message with tag this rank sent itself and
// has not received yet; if there is none it fails at once (no later Send
// could ever match it: calls run in order).
func Recv[T Number](ctx context.Context, c *Comm, buf []T, peer, tag int, opts ...CallOption) error {
	if len(opts) == 0 {
		if ok, err := c.quickP2P(ctx, collRecv, asBytes(buf), TypeOf[T](), peer, tag); ok {
			return err
		}
	}
	return c.p2p(applyOpts(c.newBlocking(ctx), opts), collRecv, asBytes(buf), TypeOf[T](), peer, tag).wait()
}

// RecvAsync starts a Recv.
func RecvAsync[T Number](c *Comm, buf []T, peer, tag int, opts ...CallOption) *Request {
	return c.p2p(applyOpts(&Request{}, opts), collRecv, asBytes(buf), TypeOf[T](), peer, tag)
}

func orRecv[T Number](send, recv []T) []T {
	if send == nil {
		return recv
	}
	return send
}

// SendRecv sends send to rank dst and receives recv from rank src in one
// step, as MPI_Sendrecv: the way to exchange messages with a peer (dst and
// src may be the same rank, or this rank). Separate Send and Recv calls run
// one after the other, so an exchange of large messages through them would
// wait on itself. Matched by the peers' SendRecv, Send or Recv calls with
// the same tag; send and recv must not overlap.
func SendRecv[T Number](ctx context.Context, c *Comm, send []T, dst int, recv []T, src, tag int, opts ...CallOption) error {
	return c.sendRecv(applyOpts(c.newBlocking(ctx), opts), asBytes(send), dst, asBytes(recv), src, TypeOf[T](), tag).wait()
}

// SendRecvAsync starts a SendRecv.
func SendRecvAsync[T Number](c *Comm, send []T, dst int, recv []T, src, tag int, opts ...CallOption) *Request {
	return c.sendRecv(applyOpts(&Request{}, opts), asBytes(send), dst, asBytes(recv), src, TypeOf[T](), tag)
}
