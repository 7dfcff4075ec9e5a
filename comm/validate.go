package comm

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/goccl/goccl/collectives"
)

// The prep functions check a call's arguments and fill its request. An
// error names the call, this rank and what is wrong; nothing is queued.

func (c *Comm) errorf(k collKind, dt DataType, format string, args ...any) error {
	return fmt.Errorf("comm: %s(%s): rank %d: %s", k, dt, c.rank, fmt.Sprintf(format, args...))
}

func (c *Comm) checkType(k collKind, dt DataType, bufs ...[]byte) error {
	if c == nil { // every prep function checks the type first
		return errNilComm(k.String())
	}
	if !dt.Valid() {
		return fmt.Errorf("comm: %s: rank %d: unsupported data type %s", k, c.rank, dt)
	}
	for _, b := range bufs {
		if len(b)&(dt.Size()-1) != 0 { // sizes are powers of two
			return c.errorf(k, dt, "a buffer of %d bytes is not a whole number of elements", len(b))
		}
	}
	return nil
}

// opApplies reports whether op is a known operation that applies to dt
// (the bitwise ones to integer types only): the quick ways' condition,
// which leave any other call to checkOp's refusal.
func opApplies(op Op, dt DataType) bool { return op.Valid() && (!op.Bitwise() || dt.Integer()) }

func (c *Comm) checkOp(k collKind, dt DataType, op Op) error {
	if !op.Valid() {
		return c.errorf(k, dt, "unsupported reduction %s", op)
	}
	if op.Bitwise() && !dt.Integer() {
		return c.errorf(k, dt, "%s is a bitwise operation, for integer types only", op)
	}
	return nil
}

func (c *Comm) checkRoot(k collKind, dt DataType, root int) error {
	if root < 0 || root >= c.size {
		return c.errorf(k, dt, "root %d out of range [0, %d)", root, c.size)
	}
	return nil
}

func (c *Comm) checkPeer(k collKind, dt DataType, what string, peer int) error {
	if peer < 0 || peer >= c.size {
		return c.errorf(k, dt, "%s %d is not a rank of [0, %d)", what, peer, c.size)
	}
	return nil
}

// refuse fails r, a call whose arguments this rank refused, in its turn. A
// collective that one rank cannot join leaves the others waiting for it,
// so the rank tells every peer that it refused its arguments (a notice
// naming itself), publishes the refused argument for their errors, and
// breaks the communicator: every rank's call fails at once, and every later
// one, as MPI's default error handler makes errors fatal.
func (c *Comm) refuse(r *Request) error {
	err := r.refused
	c.exec.Fail(err)
	c.failRoot.Store(int64(c.rank))
	c.board.mark(boardFailed)
	if c.size == 1 {
		return err
	}
	seq := c.seq
	if !r.kind.IsP2P() {
		seq++ // the number the others give the call
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyWait)
	c.exec.Notify(ctx, collectives.Notice{Reason: collectives.NoticeBadArgs, Rank: c.rank, Seq: uint16(collectives.Epoch(seq, r.kind.IsP2P()))})
	cancel()
	c.breakLinks()
	if kv := kvOf(c.rdv); kv != nil {
		name := r.kind.String()
		if r.dt.Valid() {
			name = fmt.Sprintf("%s(%s)", r.kind, r.dt)
		}
		call := fmt.Sprintf("%s #%d", name, seq)
		if r.kind.IsP2P() {
			// Point-to-point calls are not numbered: seq is the last
			// collective's (as callName says it).
			call = fmt.Sprintf("%s tag %d after collective #%d", name, r.args.tag, seq)
		}
		// The cause without "comm: allreduce(float32): rank 3: ", which
		// the others' errors say in their own words.
		cause := err.Error()
		if _, after, ok := strings.Cut(cause, fmt.Sprintf("rank %d: ", c.rank)); ok {
			cause = after
		}
		c.publish(kv, report{reason: collectives.NoticeBadArgs, root: c.rank, peer: -1, seq: seq, call: call, cause: cause})
	}
	return err
}

// submitOrReject submits r, or finishes it with err.
func (c *Comm) submitOrReject(r *Request, k collKind, err error) *Request {
	if err == nil {
		err = c.checkAlgo(r, k)
	}
	if r.prepOnly { // an ...Init: checked, not called (see persist)
		r.c, r.kind, r.err = c, k, err
		return r
	}
	if err != nil {
		return c.reject(r, k, err)
	}
	r.c = c
	return c.submit(r)
}

func (c *Comm) allreduce(r *Request, send, recv []byte, dt DataType, op Op) *Request {
	return c.submitOrReject(r, collAllreduce, c.prepAllreduce(r, send, recv, dt, op))
}

// scan is Scan's and Exscan's (k): an allreduce's arguments, without Avg.
func (c *Comm) scan(r *Request, k collKind, send, recv []byte, dt DataType, op Op) *Request {
	err := c.prepElementwise(r, k, send, recv, dt, op)
	if err == nil && op == Avg {
		err = c.errorf(k, dt, "avg is no prefix reduction (MPI_Scan has none): scan with sum and divide rank r's result by r+1")
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) prepAllreduce(r *Request, send, recv []byte, dt DataType, op Op) error {
	return c.prepElementwise(r, collAllreduce, send, recv, dt, op)
}

// prepElementwise checks and records the arguments of k, a collective
// that reduces recv's elements across ranks in place of send's (an
// allreduce, a scan).
func (c *Comm) prepElementwise(r *Request, k collKind, send, recv []byte, dt DataType, op Op) error {
	if err := c.checkType(k, dt, send, recv); err != nil {
		return err
	}
	if err := c.checkOp(k, dt, op); err != nil {
		return err
	}
	if len(send) != len(recv) {
		return c.errorf(k, dt, "send has %d bytes but recv has %d", len(send), len(recv))
	}
	if overlapNotIn(send, recv, recv) {
		return c.errorf(k, dt, "send and recv overlap (in place, send is recv)")
	}
	r.kind, r.send, r.recv, r.dt, r.op, r.root, r.count = k, send, recv, dt, op, -1, elems(len(recv), dt)
	return nil
}

// checkAlgo refuses an algorithm asked for (WithAlgorithm) that the
// collective does not have: an argument of the call like the others, so
// that it fails the call on every rank, naming this rank and the name,
// and breaks the communicator. (It failed this rank's call alone once it
// ran, left the communicator working, and its peers, which waited for
// the call, found this rank's next call in its place: "collective
// mismatch: rank 0 sent data of its collective #2"; over the
// shared-memory board this rank's next call completed with the peers'
// data of this one.)
func (c *Comm) checkAlgo(r *Request, k collKind) error {
	if c == nil || r.algo == "" {
		return nil
	}
	if _, err := collectives.LookupAlgo(k, r.algo); err != nil {
		return c.errorf(k, r.dt, "WithAlgorithm: %v", err)
	}
	return nil
}

func (c *Comm) broadcast(r *Request, buf []byte, dt DataType, root int) *Request {
	k := collBroadcast
	err := c.checkType(k, dt, buf)
	if err == nil {
		err = c.checkRoot(k, dt, root)
	}
	r.kind, r.send, r.recv, r.dt, r.root = k, buf, buf, dt, root
	if err == nil {
		r.count = elems(len(buf), dt)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) reduce(r *Request, send, recv []byte, dt DataType, op Op, root int) *Request {
	k := collReduce
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		err = c.checkOp(k, dt, op)
	}
	if err == nil {
		err = c.checkRoot(k, dt, root)
	}
	if err == nil && c.rank == root && len(recv) != len(send) {
		err = c.errorf(k, dt, "root's recv has %d bytes but send has %d", len(recv), len(send))
	}
	if err == nil && c.rank == root && overlapNotIn(send, recv, recv) {
		err = c.errorf(k, dt, "root's send and recv overlap (in place, send is recv)")
	}
	r.kind, r.send, r.recv, r.dt, r.op, r.root = k, send, recv, dt, op, root
	if err == nil {
		r.count = elems(len(send), dt)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) allgather(r *Request, send, recv []byte, dt DataType) *Request {
	k := collAllgather
	err := c.checkType(k, dt, send, recv)
	if err == nil && len(recv) != c.size*len(send) {
		err = c.errorf(k, dt, "recv has %d bytes, want %d ranks x %d bytes of send", len(recv), c.size, len(send))
	}
	if err == nil && overlapNotIn(send, recv, block(recv, c.rank, len(send))) {
		err = c.errorf(k, dt, "send and recv overlap (in place, send is this rank's block of recv)")
	}
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, -1
	if err == nil {
		r.count = elems(len(send), dt)
	}
	return c.submitOrReject(r, k, err)
}

// checkV checks per-rank counts and displacements (in elements) against a
// buffer of n elements; displs nil means packed. It returns the
// displacements to use (0 for an empty block).
func (c *Comm) checkV(k collKind, dt DataType, what string, counts, displs []int, n int, into *[]int) ([]int, error) {
	if len(counts) != c.size {
		return nil, c.errorf(k, dt, "%d %s counts for %d ranks", len(counts), what, c.size)
	}
	if displs != nil && len(displs) != c.size {
		return nil, c.errorf(k, dt, "%d %s displacements for %d ranks", len(displs), what, c.size)
	}
	// The displacements go to *into, kept by a reused request from call
	// to call (callArgs.spare).
	if cap(*into) < c.size {
		*into = make([]int, c.size)
	}
	out := (*into)[:c.size]
	clear(out)
	pos := 0
	for j, cnt := range counts {
		d := pos
		if displs != nil {
			d = displs[j]
			if cnt == 0 {
				// An empty block is neither read nor written: its
				// displacement is not looked at (MPI; programs leave it
				// anything, past the buffer's end or negative).
				continue
			}
		}
		if cnt < 0 || d < 0 || d > n || cnt > n-d { // not d+cnt > n: it overflows
			return nil, c.errorf(k, dt, "%s block of rank %d (%d elements at %d) outside a buffer of %d elements", what, j, cnt, d, n)
		}
		out[j] = d
		pos = d + cnt
	}
	if what == "recv" && displs != nil {
		if i, j, ok := overlapping(counts, out); ok {
			// MPI: no location of recv may be written more than once;
			// the ranks' blocks would land in an order nobody chose.
			return nil, c.errorf(k, dt, "recv blocks of ranks %d (%d elements at %d) and %d (%d elements at %d) overlap",
				i, counts[i], out[i], j, counts[j], out[j])
		}
	}
	return out, nil
}

// overlapping finds two non-empty blocks (counts[i] elements at displs[i])
// that share an element: by pairs for a few ranks, else in the order of
// the displacements.
func overlapping(counts, displs []int) (int, int, bool) {
	n := len(counts)
	if n <= 16 {
		for i := range n {
			for j := i + 1; j < n; j++ {
				if counts[i] > 0 && counts[j] > 0 && displs[i] < displs[j]+counts[j] && displs[j] < displs[i]+counts[i] {
					return i, j, true
				}
			}
		}
		return 0, 0, false
	}
	order := make([]int, 0, n)
	for i, cnt := range counts {
		if cnt > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return displs[a] - displs[b] })
	for x := 1; x < len(order); x++ {
		i, j := order[x-1], order[x]
		if displs[j] < displs[i]+counts[i] {
			return min(i, j), max(i, j), true
		}
	}
	return 0, 0, false
}

func (c *Comm) allgatherv(r *Request, send, recv []byte, dt DataType, counts, displs []int) *Request {
	k := collAllgatherv
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, -1
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		r.args.recvDispls, err = c.checkV(k, dt, "recv", counts, displs, elems(len(recv), dt), &r.args.spare[3])
	}
	if err == nil && len(send) != counts[c.rank]*dt.Size() {
		err = c.errorf(k, dt, "send has %d elements but counts[%d] is %d", elems(len(send), dt), c.rank, counts[c.rank])
	}
	if err == nil && overlapNotIn(send, recv, recv[r.args.recvDispls[c.rank]*dt.Size():][:len(send)]) {
		err = c.errorf(k, dt, "send and recv overlap (in place, send is this rank's block of recv)")
	}
	if err == nil {
		r.args.recvCounts = r.args.keep(2, counts)
		r.count = sum(counts)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) reduceScatter(r *Request, send, recv []byte, dt DataType, op Op) *Request {
	k := collReduceScatter
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		err = c.checkOp(k, dt, op)
	}
	if err == nil && len(send) != c.size*len(recv) {
		err = c.errorf(k, dt, "send has %d bytes, want %d ranks x %d bytes of recv", len(send), c.size, len(recv))
	}
	if err == nil && overlapNotIn(recv, send, block(send, c.rank, len(recv))) {
		err = c.errorf(k, dt, "send and recv overlap (in place, recv is this rank's block of send)")
	}
	r.kind, r.send, r.recv, r.dt, r.op, r.root = k, send, recv, dt, op, -1
	if err == nil {
		r.count = elems(len(recv), dt)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) alltoall(r *Request, send, recv []byte, dt DataType) *Request {
	k := collAlltoall
	err := c.checkType(k, dt, send, recv)
	if err == nil && (len(send) != len(recv) || len(send)%(c.size*dt.Size()) != 0) {
		err = c.errorf(k, dt, "send (%d bytes) and recv (%d bytes) must be equal and hold %d whole blocks", len(send), len(recv), c.size)
	}
	if err == nil && overlap(send, recv) && !sameBytes(send, recv) {
		err = c.errorf(k, dt, "send and recv overlap (in place, send is recv)")
	}
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, -1
	if err == nil {
		r.count = elems(len(send)/c.size, dt)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) alltoallv(r *Request, send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int, dt DataType) *Request {
	k := collAlltoallv
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, -1
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		r.args.sendDispls, err = c.checkV(k, dt, "send", sendCounts, sendDispls, elems(len(send), dt), &r.args.spare[1])
	}
	if err == nil {
		r.args.recvDispls, err = c.checkV(k, dt, "recv", recvCounts, recvDispls, elems(len(recv), dt), &r.args.spare[3])
	}
	if err == nil && overlap(send, recv) && !sameBytes(send, recv) {
		err = c.errorf(k, dt, "send and recv overlap (in place, send is recv)")
	}
	if err == nil && sendCounts[c.rank] != recvCounts[c.rank] {
		err = c.errorf(k, dt, "sendCounts[%d] is %d but recvCounts[%d] is %d: this rank's block to itself", c.rank, sendCounts[c.rank], c.rank, recvCounts[c.rank])
	}
	if err == nil {
		r.args.sendCounts = r.args.keep(0, sendCounts)
		r.args.recvCounts = r.args.keep(2, recvCounts)
		r.count = sum(recvCounts)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) gather(r *Request, send, recv []byte, dt DataType, root int) *Request {
	k := collGather
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		err = c.checkRoot(k, dt, root)
	}
	if err == nil && c.rank == root && len(recv) != c.size*len(send) {
		err = c.errorf(k, dt, "root's recv has %d bytes, want %d ranks x %d bytes of send", len(recv), c.size, len(send))
	}
	if err == nil && c.rank == root && overlapNotIn(send, recv, block(recv, root, len(send))) {
		err = c.errorf(k, dt, "root's send overlaps recv other than as root's own block (in place)")
	}
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, root
	if err == nil {
		r.count = elems(len(send), dt)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) scatter(r *Request, send, recv []byte, dt DataType, root int) *Request {
	k := collScatter
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		err = c.checkRoot(k, dt, root)
	}
	if err == nil && c.rank == root && len(send) != c.size*len(recv) {
		err = c.errorf(k, dt, "root's send has %d bytes, want %d ranks x %d bytes of recv", len(send), c.size, len(recv))
	}
	if err == nil && c.rank == root && overlapNotIn(recv, send, block(send, root, len(recv))) {
		err = c.errorf(k, dt, "root's recv overlaps send other than as root's own block (in place)")
	}
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, root
	if err == nil {
		r.count = elems(len(recv), dt)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) gatherv(r *Request, send, recv []byte, dt DataType, counts, displs []int, root int) *Request {
	k := collGatherv
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, root
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		err = c.checkRoot(k, dt, root)
	}
	if err == nil && c.rank == root {
		r.args.recvDispls, err = c.checkV(k, dt, "recv", counts, displs, elems(len(recv), dt), &r.args.spare[3])
		if err == nil && len(send) != counts[root]*dt.Size() {
			err = c.errorf(k, dt, "root's send has %d elements but counts[%d] is %d", elems(len(send), dt), root, counts[root])
		}
		if err == nil && overlapNotIn(send, recv, recv[r.args.recvDispls[root]*dt.Size():][:len(send)]) {
			err = c.errorf(k, dt, "send and recv overlap (in place, send is the root's own block of recv)")
		}
		if err == nil {
			r.args.recvCounts = r.args.keep(2, counts)
		}
	}
	if err == nil {
		r.count = elems(len(send), dt) // this rank's block (the fingerprint leaves it out)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) scatterv(r *Request, send, recv []byte, dt DataType, counts, displs []int, root int) *Request {
	k := collScatterv
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, root
	err := c.checkType(k, dt, send, recv)
	if err == nil {
		err = c.checkRoot(k, dt, root)
	}
	if err == nil && c.rank == root {
		r.args.sendDispls, err = c.checkV(k, dt, "send", counts, displs, elems(len(send), dt), &r.args.spare[1])
		if err == nil && len(recv) != counts[root]*dt.Size() {
			err = c.errorf(k, dt, "root's recv has %d elements but counts[%d] is %d", elems(len(recv), dt), root, counts[root])
		}
		if err == nil && overlapNotIn(recv, send, send[r.args.sendDispls[root]*dt.Size():][:len(recv)]) {
			err = c.errorf(k, dt, "send and recv overlap (in place, recv is the root's own block of send)")
		}
		if err == nil {
			r.args.sendCounts = r.args.keep(0, counts)
		}
	}
	if err == nil {
		r.count = elems(len(recv), dt) // this rank's block (the fingerprint leaves it out)
	}
	return c.submitOrReject(r, k, err)
}

func (c *Comm) barrier(r *Request) *Request {
	r.kind, r.root = collBarrier, -1
	var err error
	if c == nil {
		err = errNilComm("barrier")
	}
	return c.submitOrReject(r, collBarrier, err)
}

func (c *Comm) p2p(r *Request, k collKind, buf []byte, dt DataType, peer, tag int) *Request {
	err := c.checkType(k, dt, buf)
	if err == nil && peer != ProcNull {
		err = c.checkPeer(k, dt, "peer", peer)
	}
	if err == nil && (tag < 0 || tag > MaxTag) {
		err = c.errorf(k, dt, "tag %d outside 0..%d (MaxTag)", tag, MaxTag)
	}
	fillP2P(r, k, buf, dt, peer, tag)
	if err != nil {
		r.count, r.args.recvCount = 0, 0
	}
	return c.submitOrReject(r, k, err)
}

// fillP2P fills r as a Send or Recv (k) of buf with peer and tag.
func fillP2P(r *Request, k collKind, buf []byte, dt DataType, peer, tag int) {
	r.kind, r.dt, r.root = k, dt, -1
	r.args.peer, r.args.src, r.args.tag = peer, peer, tag
	if k == collSend {
		r.send = buf
	} else {
		r.recv = buf
	}
	r.count = elems(len(buf), dt)
	r.args.recvCount = r.count
}

func (c *Comm) sendRecv(r *Request, send []byte, dst int, recv []byte, src int, dt DataType, tag int) *Request {
	k := collSendRecv
	err := c.checkType(k, dt, send, recv)
	if err == nil && dst != ProcNull {
		err = c.checkPeer(k, dt, "destination", dst)
	}
	if err == nil && src != ProcNull {
		err = c.checkPeer(k, dt, "source", src)
	}
	if err == nil && (tag < 0 || tag > MaxTag) {
		err = c.errorf(k, dt, "tag %d outside 0..%d (MaxTag)", tag, MaxTag)
	}
	if err == nil && overlap(send, recv) {
		err = c.errorf(k, dt, "send and recv overlap")
	}
	r.kind, r.send, r.recv, r.dt, r.root = k, send, recv, dt, -1
	r.args.peer, r.args.src, r.args.tag = dst, src, tag
	if err == nil {
		r.count = elems(len(send), dt)
		r.args.recvCount = elems(len(recv), dt)
	}
	return c.submitOrReject(r, k, err)
}

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// elems is the number of elements of type dt in n bytes: a shift, as the
// sizes are powers of two (a division costs as much as the rest of a
// small call's checks).
func elems(n int, dt DataType) int { return n >> bits.TrailingZeros(uint(dt.Size())) }
