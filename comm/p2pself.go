package comm

import (
	"context"
	"fmt"
)

// A rank may send to itself, as in MPI: calls run one at a time in call
// order, so a Send to oneself cannot wait for its Recv (which comes
// later); the message is copied and kept, in order, until a Recv from
// this rank with its tag takes it (messages match by tag, oldest first, as
// from peers). A Recv from oneself with no message of its tag waiting
// fails at once: no later call could match it.

// selfMessage is a message this rank sent itself.
type selfMessage struct {
	tag  int
	data []byte
}

// executeSelf runs a point-to-point call of which one side (or both) is
// this rank: the message to itself is queued first, then the side with a
// peer runs, then the message from itself is taken, so that the peer is
// served even if taking fails.
func (c *Comm) executeSelf(ctx context.Context, r *Request) error {
	algo, err := c.choose(r.kind, r.algo, len(r.send)+len(r.recv))
	if err != nil {
		return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
	}
	r.used = algo
	sendSelf := r.kind != collRecv && r.args.peer == c.rank
	recvSelf := r.kind != collSend && r.args.src == c.rank
	if sendSelf {
		c.sendSelf(r.args.tag, r.send)
	}
	if r.kind == collSendRecv && sendSelf != recvSelf {
		// The other side, with a peer. It carries the caller's context:
		// over the shared-memory board run does not watch it (a board
		// call watches it in its own waits, boardWait), so without it a
		// SendRecv whose peer never came ignored its deadline until the
		// stall timeout.
		inner := Request{c: c, ctx: r.ctx, dt: r.dt, root: -1, algo: r.algo, args: r.args}
		if sendSelf {
			inner.kind, inner.recv, inner.count = collRecv, r.recv, r.args.recvCount
			inner.args.peer, inner.args.recvCount = r.args.src, r.args.recvCount
		} else {
			inner.kind, inner.send, inner.count = collSend, r.send, r.count
			inner.args.src = r.args.peer
		}
		if err := c.execute(ctx, &inner); err != nil {
			return err
		}
	}
	if !recvSelf {
		return nil
	}
	desc := fmt.Sprintf("comm: %s(%s, %d) (tag %d): rank %d <- %d", r.kind, r.dt, r.args.recvCount, r.args.tag, c.rank, c.rank)
	m, ok := c.oldestSelf()
	if !ok {
		return fmt.Errorf("%s: this rank has sent itself no message to receive (a Send to oneself must come before its Recv)", desc)
	}
	i := c.selfWithTag(r.args.tag)
	if i < 0 {
		return fmt.Errorf("%s: this rank has sent itself no message with tag %d to receive (the oldest it sent itself has tag %d)", desc, r.args.tag, m.tag)
	}
	if m = c.selfq[i]; len(m.data) != len(r.recv) {
		return fmt.Errorf("%s: the oldest message with tag %d this rank sent itself has %d bytes where this receive expects %d", desc, m.tag, len(m.data), len(r.recv))
	}
	copy(r.recv, m.data)
	c.dropSelf(i)
	return nil
}

// executeNull runs a point-to-point call with ProcNull as its peer, or as
// a SendRecv's destination or source: that side does nothing (MPI's
// MPI_PROC_NULL), and a SendRecv's other side runs as a Send or Recv.
func (c *Comm) executeNull(ctx context.Context, r *Request) error {
	algo, err := c.choose(r.kind, r.algo, len(r.send)+len(r.recv))
	if err != nil {
		return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
	}
	r.used = algo
	if r.kind != collSendRecv || (r.args.peer == ProcNull && r.args.src == ProcNull) {
		return nil
	}
	// With the caller's context, as executeSelf's inner request.
	inner := Request{c: c, ctx: r.ctx, dt: r.dt, root: -1, algo: r.algo, args: r.args}
	if r.args.peer == ProcNull {
		inner.kind, inner.recv, inner.count = collRecv, r.recv, r.args.recvCount
		inner.args.peer = r.args.src
	} else {
		inner.kind, inner.send, inner.count = collSend, r.send, r.count
		inner.args.src = r.args.peer
	}
	err = c.execute(ctx, &inner)
	r.used = inner.used
	return err
}
