package comm

import (
	"context"

	"github.com/goccl/goccl/collectives"
)

// The quick way over the links (TCP, verbs): a blocking Send or Recv with
// no options whose message is one chunk (at most the chunk size; a Send at
// most what the transport copies at post time), on a communicator without
// a shared-memory board, goes from its API function to the executor's
// QuickSend or QuickRecv (collectives/quick.go) with only argument checks,
// the inline claim and the call's number around it. The general way
// (newBlocking, submit, run's clocks and context watch, prepare, the
// plan's Run, deliver) spent ~1.6 µs of user time on an 8-byte Send and
// ~1.9 on a Recv over TCP on this kind of machine, on top of the kernel's
// few microseconds per message. A Recv whose message has not arrived
// within a few polls, and anything unusual (see quickNetP2P and the
// executor's conditions), takes the general way, which waits under the
// stall clocks and reports errors as before (TestNetQuickWay).

// quickNetPolls is how many polls of the completion queue a quick Recv
// makes for its message before it takes the general way, which waits
// under the clocks (spinning, then asleep in the transport). A ping-pong's
// answer over loopback TCP comes within a few polls; one that takes
// longer costs these polls once more than the general way alone would.
// With more ranks than processors a poll that finds nothing takes the
// processor from a rank with work: one poll then.
const quickNetPolls = 32

// quickPolls is how many polls a quick receive makes (quickNetPolls, or
// one with more ranks on this host than processors), found once.
func (c *Comm) quickPolls() int {
	if c.qnetPolls == 0 {
		c.qnetPolls = quickNetPolls
		if c.opts.crowded(c.localRanks()) {
			c.qnetPolls = 1
		}
	}
	return c.qnetPolls
}

// quickNetOK says whether c's blocking Send and Recv may take the quick
// way over the links: an executor and no board, no algorithm forced, no
// StrictChecks, no debug log (the general way logs each call's choice).
func (c *Comm) quickNetOK() bool {
	return c.board == nil && c.exec != nil && c.size > 1 && len(c.algoForced) == 0 && !c.opts.StrictChecks && !c.debug
}

// quickNetP2P is Send's and Recv's quick way over the links (see above):
// false if it did nothing and the general way must run the call.
func (c *Comm) quickNetP2P(ctx context.Context, kind collKind, buf []byte, dt DataType, peer, tag int) (bool, error) {
	if c == nil || !c.quickNetOK() || uint(peer) >= uint(c.size) || peer == c.rank || uint(tag) > MaxTag ||
		!dt.Valid() || len(buf) == 0 || len(buf)&(dt.Size()-1) != 0 || len(buf) > c.opts.ChunkSize ||
		(kind == collSend && len(buf) > c.exec.Inline) || c.tuning.Load() {
		return false, nil
	}
	r := c.quickClaim(ctx)
	if r == nil {
		return false, nil
	}
	fillP2P(r, kind, buf, dt, peer, tag)
	return c.endQuickNet(r, c.runQuickNet)
}

// endQuickNet runs r, c's own request filled by a quick way over the
// links, with run, clears it and releases the inline claim: false if run
// did nothing and the general way must run the call.
func (c *Comm) endQuickNet(r *Request, run func(*Request) (bool, error)) (bool, error) {
	done, err := run(r)
	r.clearQuick()
	c.endInline()
	if !done {
		return false, nil
	}
	return true, c.inSub(err) // as wait does for the general way
}

// runQuickNet runs r, a Send or Recv with the inline claim, the quick way
// if it can: false, with nothing done that the general way depends on,
// otherwise.
func (c *Comm) runQuickNet(r *Request) (bool, error) {
	if c.gate.Load()&gateBroken != 0 || c.life.Err() != nil {
		return false, nil // run reports it
	}
	call, ok := c.quickNetCall(r)
	if !ok {
		return false, nil
	}
	n := c.callNo.Load() + 1
	storeRelease(&c.callNo, n)
	defer storeRelease(&c.callNo, n+1)
	if r.kind == collSend {
		t, ok := c.lookup(r.send)
		if !ok {
			var err error
			if t, err = c.scratchFor(scratchInput, len(r.send)); err != nil {
				return false, nil
			}
			copy(t.Region.Bytes()[:len(r.send)], r.send)
		}
		call.Bufs[collectives.BufInput] = t
		done, err := c.exec.QuickSend(call, r.args.peer, c.quickPolls())
		call.Bufs[collectives.BufInput] = collectives.Target{}
		if err != nil {
			err = c.fail(err, call) // as a failed Run (see below)
			c.breakOn(err)
		}
		return done, err
	}
	done, err := c.exec.QuickRecv(call, r.args.peer, r.recv, c.quickPolls())
	if err != nil {
		// As a failed Run: the peers learn of it at once.
		err = c.fail(err, call)
		c.breakOn(err)
	}
	return done, err
}

// quickNetCall returns the call of r as the general way would describe and
// plan it, from the last one made for the same kind, peer, size and type
// (the tag and the collective count are set anew); false if its plan is
// not at hand (the general way makes it).
func (c *Comm) quickNetCall(r *Request) (*collectives.Call, bool) {
	q := &c.qnet[0]
	if r.kind == collRecv {
		q = &c.qnet[1]
	}
	if q.call.Plan == nil || q.peer != r.args.peer || q.count != r.count || q.dt != r.dt || q.chunk != c.opts.ChunkSize {
		call, _, ok := c.quickCallOf(r)
		if !ok {
			return nil, false
		}
		*q = quickNetEntry{peer: r.args.peer, count: r.count, dt: r.dt, chunk: c.opts.ChunkSize, call: call}
	}
	q.call.Seq, q.call.CollSeq = uint32(r.args.tag), c.seq
	return &q.call, true
}

// quickCallOf is r's call as execute describes and plans it (the
// algorithm the selector chooses, the plan from the cache), Eager, without
// buffers; false if the choice or the plan fails (the general way says
// why).
func (c *Comm) quickCallOf(r *Request) (collectives.Call, string, bool) {
	algo, err := c.choose(r.kind, r.algo, c.costBytes(r))
	if err != nil {
		return collectives.Call{}, "", false
	}
	p, _, err := c.plan(c.life, r, algo, 0)
	if err != nil {
		return collectives.Call{}, "", false
	}
	call := c.describe(r)
	call.Plan, call.Eager = p, true
	return call, p.Name, true // what the schedule runs (see prepare)
}

// quickNetEntry is the call the quick way last ran for a kind (qnet[0]
// sends, qnet[1] receives).
type quickNetEntry struct {
	peer, count, chunk int
	dt                 DataType
	call               collectives.Call
}

// quickNetColl is a collective's quick way over the links: the calls
// whose plan on this rank is one chunk to or from one peer (a broadcast
// of two ranks, say) go to the executor's QuickSend or QuickRecv with the
// buffers the general way would give them (stage, deliver) and the
// collective's number taken only once the call is done (beginRequest: a
// call that takes the general way after all numbers itself). false if it
// did nothing and the general way must run the call.
func (c *Comm) quickNetColl(ctx context.Context, kind collKind, send, recv []byte, dt DataType, op Op, root, count int) (bool, error) {
	if c == nil || !c.quickNetOK() || count == 0 || c.tuning.Load() {
		return false, nil
	}
	r := c.quickClaim(ctx)
	if r == nil {
		return false, nil
	}
	r.kind, r.send, r.recv, r.dt, r.op, r.root, r.count = kind, send, recv, dt, op, root, count
	return c.endQuickNet(r, c.runQuickNetColl)
}

// runQuickNetColl runs r, a collective with the inline claim, the quick
// way if it can (see quickNetColl).
func (c *Comm) runQuickNetColl(r *Request) (bool, error) {
	if c.gate.Load()&gateBroken != 0 || c.life.Err() != nil {
		return false, nil // run reports it
	}
	q := &c.qcoll
	if q.call.Plan == nil || q.kind != r.kind || q.count != r.count || q.dt != r.dt || q.op != r.op || q.root != r.root || q.chunk != c.opts.ChunkSize {
		call, algo, ok := c.quickCallOf(r)
		if !ok {
			return false, nil
		}
		*q = quickCollEntry{kind: r.kind, count: r.count, dt: r.dt, op: r.op, root: r.root, chunk: c.opts.ChunkSize, peer: -1, algo: algo, call: call}
		if peers := call.Plan.Peers(); len(peers) == 1 && call.Plan.NumChunks() == 1 {
			q.peer = peers[0]
		}
	}
	if q.peer < 0 || c.links[q.peer] == nil {
		return false, nil
	}
	call := &q.call
	call.Seq = c.seq + 1 // the number beginRequest gives the call
	var x callBufs
	if err := c.stage(r, &x); err != nil {
		return false, nil
	}
	call.Bufs = x.bufs
	defer func() { call.Bufs = [collectives.NumBufs]collectives.Target{} }()
	n := c.callNo.Load() + 1
	storeRelease(&c.callNo, n)
	defer storeRelease(&c.callNo, n+1)
	var done bool
	var err error
	if c.rank == r.root { // a broadcast's root sends, its other rank receives
		done, err = c.exec.QuickSend(call, q.peer, c.quickPolls())
	} else {
		done, err = c.exec.QuickRecv(call, q.peer, nil, c.quickPolls())
	}
	if !done {
		return false, nil
	}
	r.used = q.algo
	storeRelease32(&c.seqNow, c.beginRequest(r))
	if err != nil {
		err = c.fail(err, call)
		c.breakOn(err)
		return true, err
	}
	if err := c.deliver(r, &x); err != nil {
		err = c.callErr(r, err)
		c.breakOn(err)
		return true, err
	}
	return true, nil
}

// quickCollEntry is the collective the quick way last ran (qcoll): its
// call, and the one peer of its plan on this rank (-1: not one chunk).
type quickCollEntry struct {
	kind                     collKind
	count, root, chunk, peer int
	op                       Op
	dt                       DataType
	algo                     string
	call                     collectives.Call
}
