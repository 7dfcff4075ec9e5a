package comm

import (
	"context"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// StagingBytes is the staging memory c holds now (its links' slots).
func StagingBytes(c *Comm) int64 { return c.stagingBytes.Load() }

// LinkStagingBytes is the staging memory of one link of c.
func LinkStagingBytes(c *Comm) int64 { return int64(c.opts.Slots) * int64(c.opts.ChunkSize) }

// CostModel is c's cost model: α, β and γ, and the local links' α and β
// (zero on one host).
func CostModel(c *Comm) (alpha, beta, gamma, localAlpha, localBeta float64) {
	l := c.linkCost[collectives.LinkLocal]
	if c.nHosts <= 1 {
		l = collectives.LinkCost{}
	}
	return c.alpha, c.beta, c.gamma, l.Alpha, l.Beta
}

// RabenseifnerBeta is the β fitted at New to Rabenseifner's allreduce (0
// where it was not measured).
func RabenseifnerBeta(c *Comm) float64 { return c.algoBeta[collAllreduce]["rabenseifner"] }

// MailSlots is how many messages a mailbox of the board holds.
const MailSlots = mailSlots

// BoardMailTaken makes rank d look as if it had taken every message c
// sent it through the board's mailbox.
func BoardMailTaken(c *Comm, d int) {
	b := c.board
	b.u64(b.box(b.me, d)).Store(b.sent[d])
}

// BoardMailAhead makes rank s look as if it had sent c its next message
// through the board's mailbox: n bytes of zeros with tag.
func BoardMailAhead(c *Comm, s, tag, n int) {
	b := c.board
	i := b.got[s]
	e := b.entry(s, b.me, i)
	*u32at(e, mTag), *u32at(e, mLen), *u32at(e, mLarge) = uint32(tag), uint32(n), 0
	clear(e[mData : mData+n])
	for j := 1; j < mailLinesFor(n); j++ {
		(*atomic.Uint64)(unsafe.Pointer(&e[j*llLine+llFlag])).Store(i + 1)
	}
	(*atomic.Uint64)(unsafe.Pointer(&e[mSeq])).Store(i + 1)
}

// BoardPeerAhead makes rank p of c's shared-memory board look as if it had
// published c's next board call already: an allreduce of count elements of
// dt with op (barrier: true, a barrier), with zeros as its contribution.
// c's next call then finds p arrived, and times only its own work.
func BoardPeerAhead(c *Comm, p int, barrier bool, dt DataType, op Op, count int) {
	b := c.board
	seq := b.seq + 1
	k := mkCall(collAllreduce, dt, op, -1, count)
	if barrier {
		k = mkCall(collBarrier, 0, 0, -1, 0)
	}
	var contrib []byte
	if L := count * dt.Size(); !barrier && lined(collAllreduce, L) {
		contrib = make([]byte, llCap)[:L]
	} else if !barrier {
		clear(b.slot(p, seq)[:L])
	}
	b.writeLines(p, seq, k, contrib)
}

// BoardPeerAheadBroadcast makes rank p of c's board look as if it had
// published c's next board call already: a broadcast of count elements of
// dt from root, with zeros as root's bytes.
func BoardPeerAheadBroadcast(c *Comm, p, root int, dt DataType, count int) {
	b := c.board
	seq := b.seq + 1
	k := mkCall(collBroadcast, dt, 0, root, count)
	if c.streams(&Request{kind: collBroadcast}, count*dt.Size()) && b.lastSmall {
		// The stream (board_stream.go): the root's ring line, or the
		// receiver's progress on the root's ring; and p's log.
		if p == root {
			at := b.sPos[root] // where streamAt puts the call
			if at+llLinesFor(count*dt.Size()) > b.sg.ring {
				at = 0
			}
			b.writeAt(b.ringLine(root, at), seq, k, make([]byte, llCap)[:count*dt.Size()])
		} else {
			storeRelease(b.u64(b.progOff(p, root)), seq)
		}
		b.logCall(p, seq, k)
		return
	}
	var contrib []byte
	if p == root {
		contrib = make([]byte, llCap)[:count*dt.Size()]
	}
	b.writeLines(p, seq, k, contrib)
}

// QuickTakes runs a blocking call of kind ("broadcast", "allreduce",
// "allgather", "alltoall", "barrier", "reduce", "reducescatter",
// "gather", "scatter") of float32s through the board's quick way only
// (board_quick.go) and says whether it took the call; false means it did
// nothing and the general way would run it.
func QuickTakes(ctx context.Context, c *Comm, kind string, send, recv []float32, op Op, root int) (bool, error) {
	s, r := asBytes(send), asBytes(recv)
	switch kind {
	case "barrier":
		return c.quickBarrier(ctx)

	case "broadcast":
		return c.quickBroadcast(ctx, r, TypeFloat32, root)
	case "allreduce":
		return c.quickAllreduce(ctx, s, r, TypeFloat32, op)
	case "allgather":
		return c.quickAllgather(ctx, s, r, TypeFloat32)
	case "alltoall":
		return c.quickAlltoall(ctx, s, r, TypeFloat32)
	case "reduce":
		return c.quickReduce(ctx, s, r, TypeFloat32, op, root)
	case "reducescatter":
		return c.quickReduceScatter(ctx, s, r, TypeFloat32, op)
	case "gather":
		return c.quickGather(ctx, s, r, TypeFloat32, root)
	case "scatter":
		return c.quickScatter(ctx, s, r, TypeFloat32, root)
	}
	panic("QuickTakes: " + kind)
}

// QuickP2PTakes is QuickTakes for a Send (send true) or Recv of buf with
// peer and tag.
func QuickP2PTakes(ctx context.Context, c *Comm, send bool, buf []float32, peer, tag int) (bool, error) {
	if send {
		return c.quickP2P(ctx, collSend, asBytes(buf), TypeFloat32, peer, tag)
	}
	return c.quickP2P(ctx, collRecv, asBytes(buf), TypeFloat32, peer, tag)
}

// StreamLen is the lines of each rank's broadcast ring with n ranks.
func StreamLen(n int) int { return ringLen(n) }

// FusedPreCopied is how many bytes the plan of a reduce (to root) or
// reduce-scatter of count float32 elements (a reduce-scatter's: a rank's
// block) copies on c before its steps, compiled as execute compiles one
// whose send buffer is registered (fused, collectives.CompileFused) with
// algorithm algo.
func FusedPreCopied(c *Comm, coll, algo string, count, root int) (int, error) {
	r := &Request{kind: collReduce, dt: TypeFloat32, count: count, root: root}
	fuse := 4 * count
	if coll == "reduce-scatter" {
		r.kind, r.root, fuse = collReduceScatter, -1, 4*count*c.size
		r.send, r.recv = make([]byte, fuse), make([]byte, 4*count)
	}
	p, _, err := c.plan(context.Background(), r, algo, fuse)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pc := range p.PreCopies() {
		n += pc.Len
	}
	return n, nil
}

// SetRootReduceMax sets, until the test ends, the most bytes of its
// peers' buffers a direct reduce's root reads alone (rootReduceMax).
func SetRootReduceMax(t interface{ Cleanup(func()) }, n int) {
	old := rootReduceMax
	rootReduceMax = n
	t.Cleanup(func() { rootReduceMax = old })
}

var DescribeWorld = describeWorld

// OnlineCPUs is the host's processor count as the selector counts them.
func OnlineCPUs() int { return onlineCPUs() }

// SetMailLookHook makes f run at each look of a mailbox wait at its
// peer's state (after its test of the mailbox found nothing), until the
// returned function restores the default.
func SetMailLookHook(f func()) (restore func()) {
	mailLookHook = f
	return func() { mailLookHook = nil }
}

// SetAddrHook makes f run as a rank's link set-up receives the address of
// a peer's half of their link, before it takes it, until the returned
// function restores the default.
func SetAddrHook(f func(rank, peer int)) (restore func()) {
	addrHook = f
	return func() { addrHook = nil }
}
