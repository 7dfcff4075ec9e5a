package comm

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	fused     bool
	// vhash is a hash of a v-collective's counts and displacements
	// (planEntry.v holds them, compared on a hit); 0 for the others.
	vhash uint64
}

// plan returns the compiled plan of a call, from the cache when it has no
// per-rank counts. fuse > 0 compiles it with collectives.CompileFused for
// a BufData of fuse bytes that starts as a copy of BufInput.
func (c *Comm) plan(ctx context.Context, r *Request, algo string, fuse int) (*collectives.Plan, int, error) {
	elemSize := 1
	if r.dt.Valid() {
		elemSize = r.dt.Size()
	}
	k := planKey{kind: r.kind, algo: algo, count: r.count, elemSize: elemSize, root: r.root,
		peer: r.args.peer, src: r.args.src, recvCount: r.args.recvCount, chunkSize: c.opts.ChunkSize, fused: fuse > 0}
	// A v-collective's plan depends on its counts and displacements too:
	// keyed by their hash, and taken only if they are the same (a
	// blocking Allgatherv compiled its plan on every call before: ~40
	// allocations).
	v := [4][]int{r.args.sendCounts, r.args.sendDispls, r.args.recvCounts, r.args.recvDispls}
	if v[0] != nil || v[2] != nil {
		k.vhash = hashInts(v)
	}
	if e, ok := c.cachedPlan(k); ok && sameInts(e.v, v) {
		return e.plan, e.scratch, nil
	}
	al, err := collectives.LookupAlgo(r.kind, algo)
	if err != nil {
		return nil, 0, err
	}
	a := r.args.schedArgs() // escapes to the constructor: made only when compiling
	a.Count, a.ElemSize, a.Root, a.Hosts = r.count, elemSize, r.root, c.hosts
	s := al.Build(c.rank, c.size, &a)
	if c.opts.StrictChecks && (r.kind == collGatherv || r.kind == collScatterv) {
		// An empty block moves nothing, so nobody checks that the root
		// and its rank agree on it: an empty message does (every rank
		// that disagrees then fails in the call, as StrictChecks says).
		counts := r.args.recvCounts
		if r.kind == collScatterv {
			counts = r.args.sendCounts
		}
		s = collectives.EmptyBlocksChecked(s, r.kind, r.root, counts, r.count)
	}
	if c.opts.StrictChecks && agreed(r.kind, c.size, r.count) {
		// A tree's leaf hears only from ranks that agree with it: the
		// barrier's messages make every rank check every rank's call
		// (root included) before it completes (collectives.Agreed).
		s = collectives.Agreed(s, c.size)
	}
	var p *collectives.Plan
	if fuse > 0 {
		// The bytes of BufData the call keeps (what deliver reads): all of
		// them but on a reduce's other ranks, where BufData is scratch
		// (dataBytes), and in a reduce-scatter, where only this rank's
		// block is delivered.
		lo, hi := 0, fuse
		switch {
		case r.kind == collReduce && c.rank != r.root:
			hi = 0
		case r.kind == collReduceScatter:
			lo, hi = c.rank*len(r.recv), (c.rank+1)*len(r.recv)
		}
		p, err = collectives.CompileFusedContext(ctx, s, c.opts.ChunkSize, lo, hi)
	} else {
		p, err = collectives.CompileContext(ctx, s, c.opts.ChunkSize)
	}
	if err != nil {
		return nil, 0, err
	}
	e := planEntry{plan: p, scratch: s.ScratchBytes}
	if k.vhash != 0 {
		for i, x := range v { // the request's own copies are reused by its next call
			e.v[i] = slices.Clone(x)
		}
	}
	c.rememberPlan(k, e)
	return p, s.ScratchBytes, nil
}

type planEntry struct {
	plan    *collectives.Plan
	scratch int
	v       [4][]int // a v-collective's counts and displacements (planKey.vhash)
}

// hashInts is FNV-1a over the lengths and elements of v, never 0.
func hashInts(v [4][]int) uint64 {
	h := uint64(14695981039346656037)
	mix := func(x uint64) {
		for range 8 {
			h ^= x & 0xff
			h *= 1099511628211
			x >>= 8
		}
	}
	for _, s := range v {
		mix(uint64(len(s)))
		for _, x := range s {
			mix(uint64(x))
		}
	}
	return h | 1
}

// sameInts reports whether a and b hold the same slices' contents (nil and
// empty alike).
func sameInts(a, b [4][]int) bool {
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
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
	case collGather, collGatherv:
		if c.rank != r.root {
			return 0, false
		}
	case collSend:
		return 0, false
	}
	return len(r.recv), true
}

// execute runs one call on the worker: it chooses the algorithm, maps the
// schedule's buffers to registered memory (the user's when registered,
// else staging) and copies in (prepare), runs the plan, and copies out
// (deliver).
func (c *Comm) execute(ctx context.Context, r *Request) error {
	if halfReduction(r) {
		return c.executeHalf(ctx, r)
	}
	if r.kind.IsP2P() && (r.args.peer == ProcNull || r.args.src == ProcNull) {
		return c.executeNull(ctx, r)
	}
	if r.kind.IsP2P() && (r.args.peer == c.rank || r.args.src == c.rank) {
		return c.executeSelf(ctx, r)
	}
	onBoard := c.boardTakes(r)
	if r.kind.IsP2P() && onBoard {
		return c.executeMail(r)
	}
	if !r.kind.IsP2P() {
		storeRelease32(&c.seqNow, c.beginRequest(r))
	}
	if onBoard {
		return c.executeBoard(r)
	}
	if c.board != nil && !r.kind.IsP2P() && !c.tuning.Load() {
		// (The measurement at New numbers its calls apart: tune.go.)
		c.board.markExec(c.seq, mkCall(r.kind, r.calledType(), r.op, r.root, r.count))
	}
	var x callBufs
	p, err := c.prepare(r, &x)
	if err != nil {
		if c.size > 1 && c.life.Err() != nil {
			// Given up (its context ended) or aborted while it was
			// prepared: the peers wait for this rank in the call, so
			// tell them, as a failed run does. (A send given up while its
			// plan was compiled left its receiver waiting for its stall
			// timeout.) An algorithm this rank does not know stays its
			// own error, as an argument the peers pass too.
			call := c.describe(r)
			if cause := context.Cause(c.life); cause != nil && errors.Is(err, cause) {
				// The plan's compile saw the life end: the cause is
				// the life's ("compile recursive-doubling: rank 0: ..."
				// is no step of the user's).
				err = cause
			}
			return c.fail(fmt.Errorf("%s: rank %d: %w", c.callName(&call), c.rank, err), &call)
		}
		return c.callErr(r, err)
	}
	algo, bufs := r.used, x.bufs
	if c.size > 1 {
		// The communicator's Call is reused (calls run one at a time): a
		// Call of its own per run escaped to the heap, an allocation on
		// every collective.
		call := &c.call
		*call = c.describe(r)
		call.Plan, call.Bufs = p, bufs
		call.VarCount = r.kind == collAlltoallv || r.kind == collGatherv || r.kind == collScatterv
		// Rooted collectives on a tree or chain: senders wait until their
		// receivers complete, so that a disagreement reaches them (see
		// collectives/checks.go).
		// Without StrictChecks they complete once sent (Call.Eager).
		call.Confirm = c.opts.StrictChecks && r.root >= 0 && (algo == "binomial" || algo == "pipeline" || algo == "linear") && p.Name == algo && !agreed(r.kind, c.size, r.count)
		call.Eager = !c.opts.StrictChecks
		// Peers this rank has not talked to yet are connected now, on
		// both sides of each pair (lazy.go).
		if err := c.ensureLinks(call); err != nil {
			return c.fail(err, call)
		}
		look := true // at the queue before the run (hoist.go)
		c.relooks = 0
		for {
			// A Recv may yield to the Sends queued behind it (hoist.go).
			yields := r.kind == collRecv && !c.hoisting
			if yields {
				c.waitingRecv = r
				c.recvWaits.Store(true)
			}
			var err error
			if yields && look && c.sendsQueued.Load() > 0 && c.linkHoistable(r) {
				// Queued before this run began: no poke says so.
				err = collectives.ErrYield
			} else {
				err = c.exec.Run(c.runCtx(ctx), call)
			}
			if yields {
				c.recvWaits.Store(false)
				c.waitingRecv = nil
			}
			if yields && errors.Is(err, collectives.ErrYield) {
				c.hoisting = true
				look = c.hoistLinkSends(r) > 0 // none ran: wait in the run for a poke
				if look {
					c.relooks = 0
				}
				c.hoisting = false
				*call = c.describe(r) // the Sends ran in it
				call.Plan, call.Bufs, call.Eager = p, bufs, !c.opts.StrictChecks
				ctx = c.callCtx() // the poke that ended the run was replaced
				continue
			}
			if err != nil {
				// Tell the peers and drop every connection at once, so
				// that peers waiting on this rank fail now rather than at
				// their timeout.
				return c.fail(err, call)
			}
			break
		}
	} else {
		// One rank: only the schedule's local copies.
		call := &c.call
		*call = collectives.Call{Plan: p, Bufs: bufs, Coll: r.name(), Root: r.root}
		if err := c.exec.Run(ctx, call); err != nil {
			return fmt.Errorf("comm: %w", err)
		}
	}
	if err := c.deliver(r, &x); err != nil {
		return c.callErr(r, err)
	}
	return nil
}

// describe is the Call of r without its plan and buffers: what it is, and
// its number (a point-to-point call's is its tag).
func (c *Comm) describe(r *Request) collectives.Call {
	call := collectives.Call{Type: r.dt, Named: r.named, Op: r.op, Seq: c.seq, Coll: r.name(), Count: r.count, Root: r.root}
	if r.kind.IsP2P() {
		call.Seq, call.P2P, call.CollSeq = uint32(r.args.tag), true, c.seq
	}
	return call
}

// callErr names the call and this rank in an error of execute's.
func (c *Comm) callErr(r *Request, err error) error {
	return fmt.Errorf("comm: %s: rank %d: %w", r.kind, c.rank, err)
}

// callBufs are the schedule's buffers of one call, mapped to registered
// memory by prepare and read back by deliver.
type callBufs struct {
	bufs   [collectives.NumBufs]collectives.Target
	dlen   int  // bytes of BufData the call uses on this rank (dataBytes)
	staged bool // BufData is staging, not the user's recv
	// fuse > 0: BufData starts as a copy of BufInput, which the plan's
	// first reductions make (collectives.CompileFused).
	fuse int
}

// data is the part of BufData the call uses.
func (x *callBufs) data() []byte {
	t := x.bufs[collectives.BufData]
	return t.Region.Bytes()[t.Off : t.Off+x.dlen]
}

// prepare chooses the call's algorithm (r.used), maps its buffers into x
// with their initial content, and compiles its plan.
func (c *Comm) prepare(r *Request, x *callBufs) (*collectives.Plan, error) {
	algo, err := c.choose(r.kind, r.algo, c.costBytes(r))
	if err != nil {
		return nil, err
	}
	r.used = algo
	if err := c.stage(r, x); err != nil {
		return nil, err
	}
	p, scratch, err := c.plan(c.life, r, algo, x.fuse)
	if p != nil && p.Name != "" {
		// The schedule may be another algorithm's (hier-ring on hosts of
		// unequal rank counts runs hier-leader): say what ran.
		r.used = p.Name
	}
	if err != nil || c.size == 1 {
		return p, err // one rank: only the schedule's local copies
	}
	if p.NumChunks() == 0 && r.count == 0 && !r.kind.IsP2P() && r.kind != collAlltoallv && r.kind != collGatherv && r.kind != collScatterv {
		// Nothing to move, but the other ranks must still learn that
		// this rank is in the call, and with which arguments (one rank
		// may pass an empty buffer where the others pass data): a
		// barrier's messages carry the call's fingerprint.
		if p, _, err = c.plan(c.life, &Request{kind: collBarrier, root: -1}, "dissemination", 0); err != nil {
			return nil, err
		}
	}
	if scratch > 0 {
		if x.bufs[collectives.BufScratch], err = c.scratchFor(scratchAlgo, scratch); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// stage maps BufData and BufInput of a call to registered memory, the
// user's buffers where registered, else staging, and gives BufData its
// initial content.
func (c *Comm) stage(r *Request, x *callBufs) error {
	var err error
	// BufData.
	dlen, direct := c.dataBytes(r)
	x.dlen = dlen
	if dlen > 0 {
		t, ok := collectives.Target{}, false
		if direct {
			t, ok = c.lookup(r.recv)
		}
		if !ok {
			if t, err = c.scratchFor(scratchData, dlen); err != nil {
				return err
			}
			x.staged = true
		}
		x.bufs[collectives.BufData] = t
	}
	// Initial content of BufData. An out-of-place reduction from a
	// registered send buffer reads it directly instead: most of the copy
	// becomes part of the first reduction of each chunk
	// (collectives.CompileFused).
	switch r.kind {
	case collAllreduce, collReduce, collReduceScatter:
		if dlen > 0 && (x.staged || !sameBytes(r.send, r.recv)) {
			if t, ok := c.lookup(r.send); ok && c.size > 1 {
				x.bufs[collectives.BufInput], x.fuse = t, dlen
			} else {
				copy(x.data(), r.send)
			}
		}
	case collScan, collExscan:
		// Not fused: the chain's first step on rank 0 sends BufData.
		if dlen > 0 && (x.staged || !sameBytes(r.send, r.recv)) {
			copy(x.data(), r.send)
		}
	case collBroadcast:
		if x.staged && c.rank == r.root {
			copy(x.data(), r.send)
		}
	}
	// BufInput: the send buffer of out-of-place collectives.
	if r.kind.Info().Input && len(r.send) > 0 {
		t, ok := c.lookup(r.send)
		if !ok || (r.kind.Info().StagedInPlace && overlap(r.send, r.recv)) {
			if t, err = c.scratchFor(scratchInput, len(r.send)); err != nil {
				return err
			}
			copy(t.Region.Bytes()[:len(r.send)], r.send)
		}
		x.bufs[collectives.BufInput] = t
	}
	return nil
}

// deliver finishes a call's results (the reductions' last step, such as
// Avg's division) and copies them from staging to the user's recv.
func (c *Comm) deliver(r *Request, x *callBufs) error {
	switch r.kind {
	case collAllreduce:
		if x.dlen > 0 {
			if err := collectives.Finish(r.dt, r.op, x.data(), c.size); err != nil {
				return err
			}
		}
		if x.staged {
			copy(r.recv, x.data())
		}
	case collReduce:
		if c.rank == r.root && x.dlen > 0 {
			if err := collectives.Finish(r.dt, r.op, x.data(), c.size); err != nil {
				return err
			}
			if x.staged {
				copy(r.recv, x.data())
			}
		}
	case collReduceScatter:
		if x.dlen == 0 {
			break
		}
		block := x.data()[c.rank*len(r.recv) : (c.rank+1)*len(r.recv)]
		if err := collectives.Finish(r.dt, r.op, block, c.size); err != nil {
			return err
		}
		copy(r.recv, block)
	case collBroadcast:
		if x.staged && c.rank != r.root {
			copy(r.recv, x.data())
		}
	default:
		if x.staged && x.dlen > 0 {
			if r.args.recvCounts != nil {
				// The v-collectives deliver blocks: the bytes between them
				// are the caller's, not the staging buffer's leftovers.
				copyBlocks(r.recv, x.data(), r.args.recvCounts, r.args.recvDispls, r.dt.Size())
			} else {
				copy(r.recv, x.data())
			}
		}
	}
	return nil
}

// copyBlocks copies the blocks of counts[j] elements at displs[j] (in
// elements of size bytes) from src to dst, and nothing else.
func copyBlocks(dst, src []byte, counts, displs []int, size int) {
	for j, n := range counts {
		a, b := displs[j]*size, (displs[j]+n)*size
		copy(dst[a:b], src[a:b])
	}
}

// costBytes is the size the cost model prices a call at (see
// collectives.Coll.PricedBytes).
func (c *Comm) costBytes(r *Request) int {
	es := 1
	if r.dt.Valid() {
		es = r.dt.Size()
	}
	return r.kind.PricedBytes(c.size, r.count, es)
}

func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// overlapNotIn reports whether a and b share memory other than as the
// in-place form of a call: a is exactly place (a part of b, or b).
func overlapNotIn(a, b, place []byte) bool {
	return overlap(a, b) && !sameBytes(a, place)
}

// block returns block i of n bytes of buf (whose length the caller
// checked to hold it).
func block(buf []byte, i, n int) []byte { return buf[i*n : (i+1)*n] }

// overlap reports whether a and b share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// agreed says whether a call's schedule ends with the agreement barrier
// (collectives.Agreed): broadcasts and scatters of three or more ranks.
// Such calls need no confirmation step (Call.Confirm): the barrier already
// keeps every rank in the call until every rank's call was checked.
func agreed(k collKind, size, count int) bool {
	return (k == collBroadcast || k == collScatter) && size >= 3 && count > 0
}
