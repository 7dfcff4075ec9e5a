package comm

import (
	"context"
	"unsafe"
)

// The quick way onto the board: a blocking broadcast or allreduce of a few
// bytes, with no options, on a communicator whose ranks share a board,
// goes from its API function to executeBoard with only run's bookkeeping
// between them (the inline claim, the call's number, its summary,
// breaking the communicator on an error). The general way (newBlocking,
// the prep function, submit, runOnBoard, wait) does the same after 30-40
// ns of generic work: a request filled field by field and cleared whole,
// the argument checks' general forms, the kind's and options' tests
// (BenchmarkBoardOverhead: a 2-rank broadcast's root 108 ns, of which
// the board's own work is half). Anything unusual (an argument the prep
// function would refuse, a queued or running call, a broken or closed
// communicator, an ended context, a forced algorithm, StrictChecks)
// takes the general way, which reports it as before
// (TestBoardQuickFallbacks).

// quickBoard says whether c's blocking calls may take the quick way: a
// board, no algorithm forced by GOCCL_ALGO, no StrictChecks. It is fixed
// once the board is set up.
func (c *Comm) quickBoard() bool {
	return c.board != nil && len(c.algoForced) == 0 && !c.opts.StrictChecks
}

// quickBroadcast is Broadcast's quick way (see above): false if it did
// nothing and the general way must run the call.
func (c *Comm) quickBroadcast(ctx context.Context, buf []byte, dt DataType, root int) (bool, error) {
	if c == nil || !c.quick || len(buf) > boardBcastDirect || uint(root) >= uint(c.size) || !dt.Valid() ||
		len(buf)&(dt.Size()-1) != 0 {
		return false, nil
	}
	return c.runQuick(ctx, collBroadcast, buf, buf, dt, 0, root, elems(len(buf), dt))
}

// quickAllreduce is Allreduce's quick way (see above).
func (c *Comm) quickAllreduce(ctx context.Context, send, recv []byte, dt DataType, op Op) (bool, error) {
	if c == nil || !c.quick || len(recv) > boardSlot || len(send) != len(recv) || !dt.Valid() || dt.Half() ||
		!op.Valid() || len(recv)&(dt.Size()-1) != 0 {
		return false, nil
	}
	return c.runQuick(ctx, collAllreduce, send, recv, dt, op, -1, elems(len(recv), dt))
}

// quickAllgather is Allgather's quick way (see above).
func (c *Comm) quickAllgather(ctx context.Context, send, recv []byte, dt DataType) (bool, error) {
	if c == nil || !c.quick || len(send) > boardSlot || len(recv) != c.size*len(send) || !dt.Valid() ||
		len(send)&(dt.Size()-1) != 0 {
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

// runQuick runs a call on the board as runOnBoard does, once it has the
// inline claim and nothing stands in the way; false, having done nothing,
// otherwise.
func (c *Comm) runQuick(ctx context.Context, kind collKind, send, recv []byte, dt DataType, op Op, root, count int) (bool, error) {
	if !c.beginInline() {
		return false, nil
	}
	if c.exec.Err() != nil || (ctx != nil && ctx.Err() != nil) {
		c.endInline()
		return false, nil // run reports it
	}
	r := &c.own
	r.c, r.ctx, r.kind, r.send, r.recv, r.dt, r.op, r.root = c, ctx, kind, send, recv, dt, op, root
	r.count = count
	n := c.callNo.Load() + 1
	storeRelease(&c.callNo, n)
	storeRelease32(&c.seqNow, c.beginRequest(r))
	err := c.executeQuick(r)
	storeRelease(&c.callNo, n+1)
	if err != nil {
		c.breakOn()
	}
	// As wait leaves it (the general way fills only what it needs).
	r.c, r.ctx, r.kind, r.send, r.recv, r.dt, r.op, r.root, r.count, r.used = nil, nil, 0, nil, nil, 0, 0, 0, 0, ""
	c.endInline()
	return true, err
}

// executeQuick is executeBoard for the quick way's calls (a broadcast of
// up to boardBcastDirect bytes; an allreduce, allgather or all-to-all of
// up to boardSlot): the same steps, in the same order, without its choices
// among kinds and sizes.
func (c *Comm) executeQuick(r *Request) error {
	b := c.board
	r.used = "shm-board"
	k := mkCall(r.kind, r.dt, r.op, r.root, r.count)
	if c.life.Err() != nil { // abandoned before it started
		return c.boardFail(k, context.Cause(c.life))
	}
	if b.owedSeq != 0 {
		if err := c.boardSettle(r); err != nil {
			return err
		}
	}
	b.seq++
	seq := b.seq
	L := len(r.send)
	inLines := lined(r.kind, L)
	if r.kind == collBroadcast {
		if c.rank == r.root {
			if inLines {
				b.publishWith(seq, k, r.send)
			} else {
				copy(b.slot(b.me, seq), r.send)
				b.publish(seq, k)
			}
			b.owe(seq, k, c.seq)
			return nil
		}
		b.publish(seq, k)
		if err := c.quickWait(r, seq, k, r.root, r.root+1, llLinesFor(L)); err != nil {
			return err
		}
		b.owe(seq, k, c.seq)
		b.take(r.root, seq, inLines, 0, r.recv)
		return nil
	}
	// Every rank waits for every other.
	if inLines {
		b.publishWith(seq, k, r.send)
	} else {
		copy(b.slot(b.me, seq), r.send)
		b.publish(seq, k)
	}
	if err := c.quickWait(r, seq, k, 0, b.n, 1); err != nil {
		return err
	}
	switch r.kind {
	case collAllreduce:
		return c.boardReduce(r.recv, 0, seq, inLines, r)
	case collAllgather:
		for p := range b.n {
			if L > 0 && (p != b.me || &r.recv[p*L] != unsafe.SliceData(r.send)) {
				b.take(p, seq, inLines, 0, r.recv[p*L:(p+1)*L])
			}
		}
	case collAlltoall:
		blk := L / b.n
		for p := range b.n {
			b.take(p, seq, inLines, b.me*blk, r.recv[p*blk:(p+1)*blk])
		}
	}
	return nil
}

// quickWait is boardWaitWord's wait for ranks lo..hi-1 to publish seq in
// that many lines, its first look inline.
func (c *Comm) quickWait(r *Request, seq uint64, k boardCall, lo, hi, lines int) error {
	if c.board.allReady(lo, hi, seq, lines) {
		return c.boardCheckCalls(seq, k, lo, hi, c.seq)
	}
	only := waitAll
	if hi-lo == 1 {
		only = lo
	}
	return c.boardWaitWord(r, seq, k, only, c.seq, bSeq, lines)
}
