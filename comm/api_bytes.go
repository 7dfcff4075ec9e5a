package comm

import "context"

// The byte-level forms: the same calls as the typed ones in api.go, on
// byte slices holding elements of an explicit DataType, each blocking
// (XBytes) and asynchronous (XBytesAsync). Lengths are in bytes and must
// be whole elements; counts and displacements of the v-collectives are in
// elements, as in the typed forms.

// AllreduceBytes is Allreduce on bytes; send may be nil or recv (in place).
func (c *Comm) AllreduceBytes(ctx context.Context, send, recv []byte, dt DataType, op Op, opts ...CallOption) error {
	return c.allreduce(applyOpts(c.newBlocking(ctx), opts), orRecv(send, recv), recv, dt, op).wait()
}

// AllreduceBytesAsync starts an AllreduceBytes.
func (c *Comm) AllreduceBytesAsync(send, recv []byte, dt DataType, op Op, opts ...CallOption) *Request {
	return c.allreduce(applyOpts(&Request{}, opts), orRecv(send, recv), recv, dt, op)
}

// ScanBytes is Scan on bytes; send may be nil or recv (in place).
func (c *Comm) ScanBytes(ctx context.Context, send, recv []byte, dt DataType, op Op, opts ...CallOption) error {
	return c.scan(applyOpts(c.newBlocking(ctx), opts), collScan, orRecv(send, recv), recv, dt, op).wait()
}

// ScanBytesAsync starts a ScanBytes.
func (c *Comm) ScanBytesAsync(send, recv []byte, dt DataType, op Op, opts ...CallOption) *Request {
	return c.scan(applyOpts(&Request{}, opts), collScan, orRecv(send, recv), recv, dt, op)
}

// ExscanBytes is Exscan on bytes; send may be nil or recv (in place).
func (c *Comm) ExscanBytes(ctx context.Context, send, recv []byte, dt DataType, op Op, opts ...CallOption) error {
	return c.scan(applyOpts(c.newBlocking(ctx), opts), collExscan, orRecv(send, recv), recv, dt, op).wait()
}

// ExscanBytesAsync starts an ExscanBytes.
func (c *Comm) ExscanBytesAsync(send, recv []byte, dt DataType, op Op, opts ...CallOption) *Request {
	return c.scan(applyOpts(&Request{}, opts), collExscan, orRecv(send, recv), recv, dt, op)
}

// BroadcastBytes is Broadcast on bytes.
func (c *Comm) BroadcastBytes(ctx context.Context, buf []byte, dt DataType, root int, opts ...CallOption) error {
	return c.broadcast(applyOpts(c.newBlocking(ctx), opts), buf, dt, root).wait()
}

// BroadcastBytesAsync starts a BroadcastBytes.
func (c *Comm) BroadcastBytesAsync(buf []byte, dt DataType, root int, opts ...CallOption) *Request {
	return c.broadcast(applyOpts(&Request{}, opts), buf, dt, root)
}

// ReduceBytes is Reduce on bytes.
func (c *Comm) ReduceBytes(ctx context.Context, send, recv []byte, dt DataType, op Op, root int, opts ...CallOption) error {
	return c.reduce(applyOpts(c.newBlocking(ctx), opts), send, recv, dt, op, root).wait()
}

// ReduceBytesAsync starts a ReduceBytes.
func (c *Comm) ReduceBytesAsync(send, recv []byte, dt DataType, op Op, root int, opts ...CallOption) *Request {
	return c.reduce(applyOpts(&Request{}, opts), send, recv, dt, op, root)
}

// AllgatherBytes is Allgather on bytes.
func (c *Comm) AllgatherBytes(ctx context.Context, send, recv []byte, dt DataType, opts ...CallOption) error {
	return c.allgather(applyOpts(c.newBlocking(ctx), opts), send, recv, dt).wait()
}

// AllgatherBytesAsync starts an AllgatherBytes.
func (c *Comm) AllgatherBytesAsync(send, recv []byte, dt DataType, opts ...CallOption) *Request {
	return c.allgather(applyOpts(&Request{}, opts), send, recv, dt)
}

// AllgathervBytes is Allgatherv on bytes (counts and displs in elements).
func (c *Comm) AllgathervBytes(ctx context.Context, send, recv []byte, dt DataType, counts, displs []int, opts ...CallOption) error {
	return c.allgatherv(applyOpts(c.newBlocking(ctx), opts), send, recv, dt, counts, displs).wait()
}

// AllgathervBytesAsync starts an AllgathervBytes.
func (c *Comm) AllgathervBytesAsync(send, recv []byte, dt DataType, counts, displs []int, opts ...CallOption) *Request {
	return c.allgatherv(applyOpts(&Request{}, opts), send, recv, dt, counts, displs)
}

// ReduceScatterBytes is ReduceScatter on bytes.
func (c *Comm) ReduceScatterBytes(ctx context.Context, send, recv []byte, dt DataType, op Op, opts ...CallOption) error {
	return c.reduceScatter(applyOpts(c.newBlocking(ctx), opts), send, recv, dt, op).wait()
}

// ReduceScatterBytesAsync starts a ReduceScatterBytes.
func (c *Comm) ReduceScatterBytesAsync(send, recv []byte, dt DataType, op Op, opts ...CallOption) *Request {
	return c.reduceScatter(applyOpts(&Request{}, opts), send, recv, dt, op)
}

// AlltoallBytes is Alltoall on bytes.
func (c *Comm) AlltoallBytes(ctx context.Context, send, recv []byte, dt DataType, opts ...CallOption) error {
	return c.alltoall(applyOpts(c.newBlocking(ctx), opts), send, recv, dt).wait()
}

// AlltoallBytesAsync starts an AlltoallBytes.
func (c *Comm) AlltoallBytesAsync(send, recv []byte, dt DataType, opts ...CallOption) *Request {
	return c.alltoall(applyOpts(&Request{}, opts), send, recv, dt)
}

// AlltoallvBytes is Alltoallv on bytes (counts and displacements in
// elements).
func (c *Comm) AlltoallvBytes(ctx context.Context, send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int, dt DataType, opts ...CallOption) error {
	return c.alltoallv(applyOpts(c.newBlocking(ctx), opts), send, sendCounts, sendDispls, recv, recvCounts, recvDispls, dt).wait()
}

// AlltoallvBytesAsync starts an AlltoallvBytes.
func (c *Comm) AlltoallvBytesAsync(send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int, dt DataType, opts ...CallOption) *Request {
	return c.alltoallv(applyOpts(&Request{}, opts), send, sendCounts, sendDispls, recv, recvCounts, recvDispls, dt)
}

// GatherBytes is Gather on bytes.
func (c *Comm) GatherBytes(ctx context.Context, send, recv []byte, dt DataType, root int, opts ...CallOption) error {
	return c.gather(applyOpts(c.newBlocking(ctx), opts), send, recv, dt, root).wait()
}

// GatherBytesAsync starts a GatherBytes.
func (c *Comm) GatherBytesAsync(send, recv []byte, dt DataType, root int, opts ...CallOption) *Request {
	return c.gather(applyOpts(&Request{}, opts), send, recv, dt, root)
}

// ScatterBytes is Scatter on bytes.
func (c *Comm) ScatterBytes(ctx context.Context, send, recv []byte, dt DataType, root int, opts ...CallOption) error {
	return c.scatter(applyOpts(c.newBlocking(ctx), opts), send, recv, dt, root).wait()
}

// ScatterBytesAsync starts a ScatterBytes.
func (c *Comm) ScatterBytesAsync(send, recv []byte, dt DataType, root int, opts ...CallOption) *Request {
	return c.scatter(applyOpts(&Request{}, opts), send, recv, dt, root)
}

// GathervBytes is Gatherv on bytes (counts and displs in elements).
func (c *Comm) GathervBytes(ctx context.Context, send, recv []byte, dt DataType, counts, displs []int, root int, opts ...CallOption) error {
	return c.gatherv(applyOpts(c.newBlocking(ctx), opts), send, recv, dt, counts, displs, root).wait()
}

// GathervBytesAsync starts a GathervBytes.
func (c *Comm) GathervBytesAsync(send, recv []byte, dt DataType, counts, displs []int, root int, opts ...CallOption) *Request {
	return c.gatherv(applyOpts(&Request{}, opts), send, recv, dt, counts, displs, root)
}

// ScattervBytes is Scatterv on bytes (counts and displs in elements).
func (c *Comm) ScattervBytes(ctx context.Context, send, recv []byte, dt DataType, counts, displs []int, root int, opts ...CallOption) error {
	return c.scatterv(applyOpts(c.newBlocking(ctx), opts), send, recv, dt, counts, displs, root).wait()
}

// ScattervBytesAsync starts a ScattervBytes.
func (c *Comm) ScattervBytesAsync(send, recv []byte, dt DataType, counts, displs []int, root int, opts ...CallOption) *Request {
	return c.scatterv(applyOpts(&Request{}, opts), send, recv, dt, counts, displs, root)
}

// SendBytes is Send on bytes.
func (c *Comm) SendBytes(ctx context.Context, buf []byte, dt DataType, peer, tag int, opts ...CallOption) error {
	return c.p2p(applyOpts(c.newBlocking(ctx), opts), collSend, buf, dt, peer, tag).wait()
}

// SendBytesAsync starts a SendBytes.
func (c *Comm) SendBytesAsync(buf []byte, dt DataType, peer, tag int, opts ...CallOption) *Request {
	return c.p2p(applyOpts(&Request{}, opts), collSend, buf, dt, peer, tag)
}

// RecvBytes is Recv on bytes.
func (c *Comm) RecvBytes(ctx context.Context, buf []byte, dt DataType, peer, tag int, opts ...CallOption) error {
	return c.p2p(applyOpts(c.newBlocking(ctx), opts), collRecv, buf, dt, peer, tag).wait()
}

// RecvBytesAsync starts a RecvBytes.
func (c *Comm) RecvBytesAsync(buf []byte, dt DataType, peer, tag int, opts ...CallOption) *Request {
	return c.p2p(applyOpts(&Request{}, opts), collRecv, buf, dt, peer, tag)
}

// SendRecvBytes is SendRecv on bytes.
func (c *Comm) SendRecvBytes(ctx context.Context, send []byte, dst int, recv []byte, src int, dt DataType, tag int, opts ...CallOption) error {
	return c.sendRecv(applyOpts(c.newBlocking(ctx), opts), send, dst, recv, src, dt, tag).wait()
}

// SendRecvBytesAsync starts a SendRecvBytes.
func (c *Comm) SendRecvBytesAsync(send []byte, dst int, recv []byte, src int, dt DataType, tag int, opts ...CallOption) *Request {
	return c.sendRecv(applyOpts(&Request{}, opts), send, dst, recv, src, dt, tag)
}
