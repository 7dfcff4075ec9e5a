package comm

import "context"

// The quick way onto the board: a blocking collective that the board
// takes in its lines or slots (every collective it implements but the
// half-precision reductions; a broadcast of up to 4 KiB), or a Send or
// Recv through the board's mailbox, with no options, on a communicator
// whose ranks share a board, goes from its API function to the board
// (runBoard) with only argument checks and the inline claim before it.
// The general way (newBlocking, the prep function, submit, runOnBoard,
// wait) does the same after 20-40 ns of generic work, a third of a small
// call's own work (BenchmarkBoardOverhead: a 2-rank broadcast's root 108
// ns the general way, 72-78 the quick way; an 8-byte allreduce 138 and
// 104-109; a send 66 and 46-56). Anything unusual (an argument the prep
// function would refuse, a call to this rank itself, a queued or running
// call, a broken or closed communicator, an ended context, a forced
// algorithm, StrictChecks) takes the general way, which reports it as
// before (TestBoardQuickWay).

// quickBoard says whether c's blocking calls may take the quick way: a
// board, no algorithm forced by GOCCL_ALGO, no StrictChecks. It is fixed
// once the board is set up.
func (c *Comm) quickBoard() bool {
	return c.board != nil && len(c.algoForced) == 0 && !c.opts.StrictChecks
}

// quickBroadcast is Broadcast's quick way (see above): false if it did
// nothing and the general way must run the call.
func (c *Comm) quickBroadcast(ctx context.Context, buf []byte, dt DataType, root int) (bool, error) {
	if c != nil && c.board == nil {
		if uint(root) >= uint(c.size) || !dt.Valid() || len(buf)&(dt.Size()-1) != 0 {
			return false, nil
		}
		return c.quickNetColl(ctx, collBroadcast, buf, buf, dt, 0, root, elems(len(buf), dt))
	}
	if c == nil || !c.quick || len(buf) > boardBcastDirect || uint(root) >= uint(c.size) || !dt.Valid() ||
		len(buf)&(dt.Size()-1) != 0 {
		return false, nil
	}
	return c.runQuick(ctx, collBroadcast, buf, buf, dt, 0, root, elems(len(buf), dt))
}

// quickAllreduce is Allreduce's quick way (see above).
func (c *Comm) quickAllreduce(ctx context.Context, send, recv []byte, dt DataType, op Op) (bool, error) {
	if c == nil || !c.quick || len(recv) > boardSlot || len(send) != len(recv) || !dt.Valid() || dt.Half() ||
		!opApplies(op, dt) || len(recv)&(dt.Size()-1) != 0 || overlapNotIn(send, recv, recv) {
		return false, nil
	}
	return c.runQuick(ctx, collAllreduce, send, recv, dt, op, -1, elems(len(recv), dt))
}

// quickAllgather is Allgather's quick way (see above).
func (c *Comm) quickAllgather(ctx context.Context, send, recv []byte, dt DataType) (bool, error) {
	if c == nil || !c.quick || len(send) > boardSlot || len(recv) != c.size*len(send) || !dt.Valid() ||
		len(send)&(dt.Size()-1) != 0 || overlapNotIn(send, recv, block(recv, c.rank, len(send))) {
		return false, nil
	}
	return c.runQuick(ctx, collAllgather, send, recv, dt, 0, -1, elems(len(send), dt))
}

// quickAlltoall is Alltoall's quick way (see above).
func (c *Comm) quickAlltoall(ctx context.Context, send, recv []byte, dt DataType) (bool, error) {
	if c == nil || !c.quick || len(send) > boardSlot || len(send) != len(recv) || !dt.Valid() ||
		len(send)%(c.size*dt.Size()) != 0 || (overlap(send, recv) && !sameBytes(send, recv)) {
		return false, nil
	}
	return c.runQuick(ctx, collAlltoall, send, recv, dt, 0, -1, elems(len(send)/c.size, dt))
}

// quickReduce is Reduce's quick way (see above).
func (c *Comm) quickReduce(ctx context.Context, send, recv []byte, dt DataType, op Op, root int) (bool, error) {
	if c == nil || !c.quick || len(send) > boardSlot || uint(root) >= uint(c.size) || !dt.Valid() || dt.Half() ||
		!opApplies(op, dt) || (len(send)|len(recv))&(dt.Size()-1) != 0 ||
		(c.rank == root && (len(recv) != len(send) || overlapNotIn(send, recv, recv))) {
		return false, nil
	}
	return c.runQuick(ctx, collReduce, send, recv, dt, op, root, elems(len(send), dt))
}

// quickReduceScatter is ReduceScatter's quick way (see above).
func (c *Comm) quickReduceScatter(ctx context.Context, send, recv []byte, dt DataType, op Op) (bool, error) {
	if c == nil || !c.quick || len(send) > boardSlot || len(send) != c.size*len(recv) || !dt.Valid() || dt.Half() ||
		!opApplies(op, dt) || len(recv)&(dt.Size()-1) != 0 || overlapNotIn(recv, send, block(send, c.rank, len(recv))) {
		return false, nil
	}
	return c.runQuick(ctx, collReduceScatter, send, recv, dt, op, -1, elems(len(recv), dt))
}

// quickGather is Gather's quick way (see above).
func (c *Comm) quickGather(ctx context.Context, send, recv []byte, dt DataType, root int) (bool, error) {
	if c == nil || !c.quick || len(send) > boardSlot || uint(root) >= uint(c.size) || !dt.Valid() ||
		(len(send)|len(recv))&(dt.Size()-1) != 0 ||
		(c.rank == root && (len(recv) != c.size*len(send) || overlapNotIn(send, recv, block(recv, root, len(send))))) {
		return false, nil
	}
	return c.runQuick(ctx, collGather, send, recv, dt, 0, root, elems(len(send), dt))
}

// quickScatter is Scatter's quick way (see above).
func (c *Comm) quickScatter(ctx context.Context, send, recv []byte, dt DataType, root int) (bool, error) {
	if c == nil || !c.quick || c.size*len(recv) > boardSlot || uint(root) >= uint(c.size) || !dt.Valid() ||
		(len(send)|len(recv))&(dt.Size()-1) != 0 {
		return false, nil
	}
	if c.rank == root && (len(send) != c.size*len(recv) || overlapNotIn(recv, send, block(send, root, len(recv)))) {
		return false, nil
	}
	return c.runQuick(ctx, collScatter, send, recv, dt, 0, root, elems(len(recv), dt))
}

// quickBarrier is Barrier's quick way (see above).
func (c *Comm) quickBarrier(ctx context.Context) (bool, error) {
	if c == nil || !c.quick {
		return false, nil
	}
	return c.runQuick(ctx, collBarrier, nil, nil, 0, 0, -1, 0)
}

// quickP2P is Send's and Recv's quick way (see above): the board's
// mailbox.
func (c *Comm) quickP2P(ctx context.Context, kind collKind, buf []byte, dt DataType, peer, tag int) (bool, error) {
	if c != nil && c.board == nil {
		return c.quickNetP2P(ctx, kind, buf, dt, peer, tag)
	}
	if c == nil || !c.quick || !c.board.mail || uint(peer) >= uint(c.size) || peer == c.rank ||
		uint(tag) > MaxTag || !dt.Valid() || len(buf)&(dt.Size()-1) != 0 {
		return false, nil
	}
	r := c.quickClaim(ctx)
	if r == nil {
		return false, nil
	}
	fillP2P(r, kind, buf, dt, peer, tag)
	return true, c.quickRun(r)
}

// runQuick runs a collective on the board as runOnBoard does, once it has
// the inline claim and nothing stands in the way; false, having done
// nothing, otherwise.
func (c *Comm) runQuick(ctx context.Context, kind collKind, send, recv []byte, dt DataType, op Op, root, count int) (bool, error) {
	r := c.quickClaim(ctx)
	if r == nil {
		return false, nil
	}
	r.kind, r.send, r.recv, r.dt, r.op, r.root, r.count = kind, send, recv, dt, op, root, count
	return true, c.quickRun(r)
}

// quickClaim claims c for an inline run and returns its own request with
// ctx, or nil, having done nothing, if anything stands in the way: a call
// queued or running, a closed or broken communicator, an ended context.
func (c *Comm) quickClaim(ctx context.Context) *Request {
	if !c.beginInline() {
		return nil
	}
	if c.exec.Err() != nil || (ctx != nil && ctx.Err() != nil) {
		c.endInline()
		return nil // run reports it
	}
	r := &c.own
	r.c, r.ctx = c, ctx
	return r
}

// quickRun runs r, c's own request filled by a quick way (runBoard), then
// clears r as wait leaves it (the general way fills only what it needs)
// and releases the claim.
func (c *Comm) quickRun(r *Request) error {
	err := c.runBoard(r)
	r.clearQuick()
	c.endInline()
	return c.inSub(err) // as wait does for the general way
}

// clearQuick clears what the quick ways fill in c's own request, as wait
// leaves it (the general way fills only what it needs).
func (r *Request) clearQuick() {
	r.c, r.ctx, r.kind, r.send, r.recv, r.dt, r.op, r.root, r.count, r.used = nil, nil, 0, nil, nil, 0, 0, 0, 0, ""
	r.args.peer, r.args.src, r.args.tag, r.args.recvCount = 0, 0, 0, 0
}
