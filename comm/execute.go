package comm

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/goccl/goccl/collectives"
)

// Staging buffers, one per role, grown on demand and reused.
const (
	scratchData  = iota // the collective's BufData when recv is not registered
	scratchInput        // its BufInput when send is not registered
	scratchAlgo         // the algorithm's BufScratch
	numScratch
)

type planKey struct {
	kind      collKind
	algo      string
	count     int
	elemSize  int
	root      int
	peer, src int
	recvCount int
	chunkSize int
	fromInput bool
}

// plan returns the compiled plan of a call, from the cache when it has no
// per-rank counts. With fromInput (a reducing collective whose input is a
// separate registered buffer of dataLen bytes) it asks for the schedule
// rewritten to read BufInput instead of a copy of it in BufData
// (collectives.FromInput), and says whether it got it (if not, the caller
// copies the input into BufData).
func (c *Comm) plan(r *Request, algo string, fromInput bool, dataLen int) (p *collectives.Plan, scratch int, rewritten bool, err error) {
	elemSize := 1
	if r.dt.Valid() {
		elemSize = r.dt.Size()
	}
	k := planKey{kind: r.kind, algo: algo, count: r.count, elemSize: elemSize, root: r.root,
		peer: r.args.peer, src: r.args.src, recvCount: r.args.recvCount, chunkSize: c.opts.ChunkSize, fromInput: fromInput}
	cacheable := r.args.sendCounts == nil && r.args.recvCounts == nil
	if cacheable {
		if e, ok := c.plans[k]; ok {
			return e.plan, e.scratch, e.fromInput, nil
		}
	}
	a := r.args // escapes to the constructor: copied only when compiling
	a.count, a.elemSize, a.root = r.count, elemSize, r.root
	s := algorithms[r.kind][algo](c.rank, c.size, &a)
	if fromInput {
		s, rewritten = collectives.FromInput(s, dataLen)
	}
	p, err = collectives.Compile(s, c.opts.ChunkSize)
	if err != nil {
		return nil, 0, false, err
	}
	if cacheable {
		if len(c.plans) >= 512 {
			clear(c.plans)
		}
		c.plans[k] = planEntry{plan: p, scratch: s.ScratchBytes, fromInput: rewritten}
	}
	return p, s.ScratchBytes, rewritten, nil
}

type planEntry struct {
	plan      *collectives.Plan
	scratch   int
	fromInput bool // the schedule reads BufInput (FromInput)
}

// dataBytes is how many bytes of BufData the call uses on this rank, and
// whether the user's recv may serve as BufData directly when registered.
func (c *Comm) dataBytes(r *Request) (n int, direct bool) {
	switch r.kind {
	case collReduce:
		// The tree reduces in place and leaves partial results on the
		// non-roots: only root's recv may take them.
		return len(r.send), c.rank == r.root
	case collReduceScatter:
		return len(r.send), false
	case collGather:
		if c.rank != r.root {
			return 0, false
		}
	case collSend:
		return 0, false
	}
	return len(r.recv), true
}

// execute runs one call on the worker: it maps the schedule's buffers to
// registered memory (the user's when registered, else staging), copies in,
// runs the plan, and copies out.
func (c *Comm) execute(ctx context.Context, r *Request) error {
	if halfReduction(r) {
		return c.executeHalf(ctx, r)
	}
	if !r.kind.p2p() {
		c.seq++
	}
	algo, err := c.choose(r.kind, r.algo, c.costBytes(r))
	if err != nil {
		return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
	}
	var bufs [collectives.NumBufs]collectives.Target
	// BufData.
	dlen, direct := c.dataBytes(r)
	staged := false
	if dlen > 0 {
		t, ok := collectives.Target{}, false
		if direct {
			t, ok = c.lookup(r.recv)
		}
		if !ok {
			if t, err = c.scratchFor(scratchData, dlen); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
			staged = true
		}
		bufs[collectives.BufData] = t
	}
	data := func() []byte {
		t := bufs[collectives.BufData]
		return t.Region.Bytes()[t.Off : t.Off+dlen]
	}
	// The plan. A reducing collective whose input is a registered buffer
	// other than BufData reads it in place (the schedule rewritten by
	// collectives.FromInput) instead of a copy of it in BufData: on 2
	// ranks, half the input is sent straight from it and only the half
	// reduced into is copied, chunk by chunk.
	var plan *collectives.Plan
	scratch, fromInput := 0, false
	reducing := r.kind == collAllreduce || r.kind == collReduce || r.kind == collReduceScatter
	if reducing && dlen > 0 && c.size > 1 && !sameBytes(r.send, data()) {
		if t, ok := c.lookup(r.send); ok {
			if plan, scratch, fromInput, err = c.plan(r, algo, true, dlen); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
			if fromInput {
				bufs[collectives.BufInput] = t
			}
		}
	}
	if plan == nil {
		if plan, scratch, _, err = c.plan(r, algo, false, dlen); err != nil {
			return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
		}
	}
	// Initial content of BufData.
	switch r.kind {
	case collAllreduce, collReduce, collReduceScatter:
		if dlen > 0 && !fromInput && (staged || !sameBytes(r.send, r.recv)) {
			copy(data(), r.send)
		}
	case collBroadcast:
		if staged && c.rank == r.root {
			copy(data(), r.send)
		}
	}
	// BufInput: the send buffer of out-of-place collectives.
	if usesInput(r.kind) && len(r.send) > 0 {
		t, ok := c.lookup(r.send)
		if !ok {
			if t, err = c.scratchFor(scratchInput, len(r.send)); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
			copy(t.Region.Bytes()[:len(r.send)], r.send)
		}
		bufs[collectives.BufInput] = t
	}
	if c.size > 1 {
		p := plan
		if scratch > 0 {
			if bufs[collectives.BufScratch], err = c.scratchFor(scratchAlgo, scratch); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
		}
		call := collectives.Call{Plan: p, Bufs: bufs, Type: r.dt, Op: r.op, Seq: c.seq,
			Coll: r.kind.String(), Count: r.count, Root: r.root}
		if r.kind.p2p() {
			call.Seq, call.P2P = uint32(r.args.tag), true
		}
		call.VarCount = r.kind == collAlltoallv
		if err := c.exec.Run(ctx, &call); err != nil {
			// Drop every connection at once, so that peers waiting on this
			// rank fail now rather than at their timeout.
			c.breakLinks()
			return fmt.Errorf("comm: %w", c.explain(err, call.Desc()))
		}
	} else {
		// One rank: only the schedule's local copies.
		call := collectives.Call{Plan: plan, Bufs: bufs, Coll: r.kind.String(), Root: r.root}
		if err := c.exec.Run(ctx, &call); err != nil {
			return fmt.Errorf("comm: %w", err)
		}
	}
	// Results.
	switch r.kind {
	case collAllreduce:
		if dlen > 0 {
			if err := collectives.Finish(r.dt, r.op, data(), c.size); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
		}
		if staged {
			copy(r.recv, data())
		}
	case collReduce:
		if c.rank == r.root && dlen > 0 {
			if err := collectives.Finish(r.dt, r.op, data(), c.size); err != nil {
				return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
			}
			if staged {
				copy(r.recv, data())
			}
		}
	case collReduceScatter:
		if dlen == 0 {
			break
		}
		block := data()[c.rank*len(r.recv) : (c.rank+1)*len(r.recv)]
		if err := collectives.Finish(r.dt, r.op, block, c.size); err != nil {
			return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
		}
		copy(r.recv, block)
	case collBroadcast:
		if staged && c.rank != r.root {
			copy(r.recv, data())
		}
	default:
		if staged && dlen > 0 {
			copy(r.recv, data())
		}
	}
	return nil
}

// costBytes is the size the cost model prices a call at: the full buffer
// of allreduce, broadcast and reduce; all size blocks of the block
// collectives.
func (c *Comm) costBytes(r *Request) int {
	switch r.kind {
	case collReduce, collReduceScatter, collAlltoall, collAlltoallv:
		return len(r.send)
	case collGather:
		return c.size * len(r.send)
	case collScatter:
		return c.size * len(r.recv)
	}
	return len(r.recv)
}

// usesInput says whether the collective reads a separate send buffer.
func usesInput(k collKind) bool {
	switch k {
	case collAllgather, collAllgatherv, collAlltoall, collAlltoallv, collGather, collScatter, collSend, collSendRecv:
		return true
	}
	return false
}

func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// overlap reports whether a and b share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
