package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Request is an asynchronous collective. Until Wait (or Test) reports it
// done, its buffers belong to the communicator: do not read or write them.
type Request struct {
	c     *Comm
	kind  collKind
	send  []byte
	recv  []byte
	dt    DataType
	op    Op
	root  int
	count int // elements of the buffer, or of one block for block collectives
	algo  string
	// named is the type the caller passed when the call runs on dt
	// instead (a float16 or bfloat16 reduction runs on float32: see
	// executeHalf): the call is named and fingerprinted by it, so that
	// ranks that pass different types disagree and errors name the
	// caller's type. Zero otherwise.
	named DataType
	// label names an internal call in place of its kind (Split's
	// allgather is "split"): the name is part of the call's fingerprint,
	// so a user's call of the same kind and size at the same turn is a
	// mismatch, and such a call stays off the board.
	label string
	// splitNo, for Split's call, takes the call's number among the
	// communicator's splits when it succeeds (see run).
	splitNo *int
	args    callArgs
	// refused is why this rank refused the call's arguments: the call
	// fails in its turn and breaks the communicator (see refuse).
	refused error
	ctx     context.Context // nil: the communicator's timeout applies
	done    chan struct{}
	err     error
	next    *Request // the next request in the communicator's queue
	used    string   // the algorithm the call ran, once chosen
	// pooled requests belong to blocking calls (and persistent ones): the
	// worker signals done with a send instead of closing it, and the
	// request is reused.
	pooled     bool
	persistent bool // reused by Persistent: never returned to the pool
	// prepOnly: an ...Init's request, checked and not queued (see
	// persist).
	prepOnly bool
	// inlined: a blocking call that ran on its caller's goroutine (see
	// submit); it is done when run returns, with no signal to wait for.
	inlined bool
	// owned: the communicator's own request (Comm.own), handed out with
	// the communicator claimed for an inline run (newBlocking).
	owned bool
}

var requestPool = sync.Pool{New: func() any {
	return &Request{done: make(chan struct{}, 1), pooled: true}
}}

// name is the collective's name in the call's fingerprint and errors:
// its kind's, or the label of an internal call.
func (r *Request) name() string {
	if r.label != "" {
		return r.label
	}
	return r.kind.String()
}

// newBlocking returns the request of a blocking call. When nothing is
// queued or running it claims the communicator for an inline run (see
// submit) at once and returns the communicator's own request, which the
// claim keeps for this call until wait releases both; otherwise a pooled
// one. c may be nil (the call then fails in submitOrReject's checks).
func (c *Comm) newBlocking(ctx context.Context) *Request {
	if c != nil && c.beginInline() {
		r := &c.own
		r.c, r.ctx, r.pooled, r.owned = c, ctx, true, true
		return r
	}
	r := requestPool.Get().(*Request)
	r.ctx = ctx
	return r
}

// wait is Wait for the blocking calls: the request's own context bounds the
// collective, so it always finishes; wait never returns while the
// communicator still uses the buffers. A pooled request goes back to the
// pool; the communicator's own request is cleared and the communicator's
// inline claim released.
func (r *Request) wait() error {
	if r.owned {
		c, err, spare := r.c, r.err, r.args.spare
		*r = Request{}
		r.args.spare = spare
		c.endInline()
		return c.inSub(err)
	}
	if !r.inlined {
		var ended <-chan struct{}
		if r.ctx != nil {
			ended = r.ctx.Done()
		}
		select {
		case <-r.done:
		case <-ended:
			// Queued behind asynchronous calls, the call's context
			// ended: it bounds the call, which cannot be taken back
			// (the other ranks call it), so it ends the communicator
			// now, as it would have when its turn came.
			r.c.givenUp(r)
			<-r.done
		}
	}
	c, err := r.c, r.err
	if r.pooled && !r.persistent {
		done, spare := r.done, r.args.spare
		*r = Request{done: done, pooled: true}
		r.args.spare = spare
		requestPool.Put(r)
	}
	return c.inSub(err)
}

// givenUp ends the communicator's life for r, a blocking call whose
// context ended while it was queued: the calls ahead of it and after fail
// at once, on every rank, as for a cancelled context in a running call
// (the running one watches its own context, see run).
func (c *Comm) givenUp(r *Request) {
	c.mu.Lock()
	queued := c.queuedLocked(r)
	c.mu.Unlock()
	if queued {
		c.lifeCancel(fmt.Errorf("a later %s's context ended while it was queued: %w", r.kind, context.Cause(r.ctx)))
	}
}

// finish marks r done.
func (r *Request) finish() {
	if r.inlined {
		return // its caller runs it, and waits for nothing
	}
	if r.pooled {
		r.done <- struct{}{}
	} else {
		close(r.done)
	}
}

// ErrNilRequest is returned by the methods of a nil *Request.
var ErrNilRequest = errors.New("comm: nil *Request")

// Wait blocks until the collective has finished and returns its error. If
// ctx ends first Wait returns ctx's error, and the collective goes on: call
// Wait again before touching its buffers, or Abort the communicator.
func (r *Request) Wait(ctx context.Context) error {
	if r == nil {
		return ErrNilRequest
	}
	select {
	case <-r.done:
		// Finished: its result, even if ctx has ended too (a select
		// of both picks either at random).
		return r.c.inSub(r.err)
	default:
	}
	select {
	case <-r.done:
		return r.c.inSub(r.err)
	case <-ctx.Done():
		return r.c.inSub(fmt.Errorf("comm: rank %d: waiting for %s: %w", r.c.Rank(), r.name(), ctx.Err()))
	}
}

// Test reports whether the collective has finished, and its error if so.
// It never blocks.
func (r *Request) Test() (bool, error) {
	if r == nil {
		return true, ErrNilRequest
	}
	select {
	case <-r.done:
		return true, r.c.inSub(r.err)
	default:
		return false, nil
	}
}

// Algorithm names the algorithm the finished call ran (a name from
// Algorithms, e.g. "ring"): "" while it runs, if it failed before one was
// chosen, or for a nil request. It never blocks.
func (r *Request) Algorithm() string {
	if r == nil {
		return ""
	}
	select {
	case <-r.done: // closed: requests handed to callers are never pooled
		return r.used
	default:
		return ""
	}
}

// WaitAll waits for every request and returns the first error.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var first error
	for _, r := range reqs {
		if r == nil {
			continue
		}
		if err := r.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ErrNilComm is the cause of the errors of calls on a nil *Comm (Split
// returns one to the ranks that pass a negative color).
var ErrNilComm = errors.New("nil *Comm")

func errNilComm(op string) error { return fmt.Errorf("comm: %s: %w", op, ErrNilComm) }

// usable returns the communicator's sticky error, or ErrClosed (or
// ErrNilComm for a nil c).
func (c *Comm) usable(op string) error {
	if c == nil {
		return errNilComm(op)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usableLocked(op)
}

// isClosed reports whether Close was called on c.
func (c *Comm) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Comm) usableLocked(op string) error {
	if c.err != nil {
		return c.inSub(c.err)
	}
	if c.closed {
		return fmt.Errorf("comm: rank %d: %s: %w", c.rank, op, ErrClosed)
	}
	return nil
}

// submit queues r for the worker, or completes it at once with the
// communicator's error. A blocking call with nothing queued or running
// runs on the caller's goroutine instead: no hand-off to the worker and
// back, which costs two wake-ups per call on small messages (see
// callQueue).
func (c *Comm) submit(r *Request) *Request {
	r.c = c
	if r.owned { // claimed by newBlocking; wait releases the claim
		r.inlined = true
		if !c.runOnBoard(r) {
			c.run(r)
		}
		return r
	}
	if r.pooled && !r.persistent && c.beginInline() {
		r.inlined = true
		c.run(r)
		c.endInline()
		return r
	}
	if r.done == nil {
		r.done = make(chan struct{})
	}
	c.mu.Lock()
	if err := c.usableLocked(r.kind.String()); err != nil {
		c.mu.Unlock()
		r.err = err
		if r.refused != nil {
			r.err = r.refused // a refused call reports its own argument
		}
		r.finish()
		return r
	}
	c.pushLocked(r)
	c.mu.Unlock()
	c.signal()
	if r.kind == collSend && c.recvWaits.Load() {
		c.poke.Load().cancel(errHoist) // it may go ahead of the waiting Recv
	}
	return r
}

// reject queues r, a call whose arguments this rank refused with err: in
// its turn it fails, and breaks the communicator on every rank (see
// refuse).
func (c *Comm) reject(r *Request, kind collKind, err error) *Request {
	if c == nil {
		r.kind, r.err = kind, err // no communicator to break
		if r.done == nil {
			r.done = make(chan struct{})
		}
		r.finish()
		return r
	}
	r.kind, r.refused = kind, err
	return c.submit(r)
}

// worker runs queued collectives one at a time, in order. Once the
// communicator is closed (nothing more can be queued) it runs what is left
// and returns.
func (c *Comm) worker() {
	defer c.wg.Done()
	for {
		c.awaitInlineQueued()
		c.mu.Lock()
		r := c.dequeueLocked()
		c.active = r
		closed := c.closed
		c.mu.Unlock()
		if r != nil {
			c.runQueued(r)
			continue
		}
		if closed {
			return
		}
		c.awaitWork()
	}
}

// runQueued runs a request the worker took from the queue, once a
// blocking call running inline (submitted before it) has returned.
func (c *Comm) runQueued(r *Request) {
	c.awaitInline()
	c.run(r)
	c.pending.Add(-1)
}

// finishRun signals the end of r's run. The worker's request stops being
// active first, under mu, so that a Free that its caller makes once Wait
// returns finds the buffer free (and one made before finds it in use); a
// request run inline (a blocking call on its caller's goroutine) never
// was.
func (c *Comm) finishRun(r *Request) {
	if !r.inlined {
		c.mu.Lock()
		if c.active == r {
			c.active = nil
		}
		c.mu.Unlock()
	}
	r.finish()
}

// abandoned ends the communicator's life: the context of the running
// call, a kind, ended.
func (c *Comm) abandoned(kind collKind, cause error) {
	c.lifeCancel(fmt.Errorf("%s abandoned: %w", kind, cause))
}

func (c *Comm) run(r *Request) {
	defer c.finishRun(r)
	var err error
	if c.gate.Load()&gateBroken != 0 {
		c.mu.Lock()
		err = c.err
		c.mu.Unlock()
	}
	if err == nil {
		err = c.exec.Err()
	}
	if err != nil {
		r.err = err
		if r.refused != nil {
			r.err = r.refused // a refused call reports its own argument
		}
		return
	}
	// Collectives run under the communicator's life context, which the
	// watchdog (Options.Timeout), Abort, or the end of the caller's context
	// cancel. Any of them breaks the communicator: a collective abandoned
	// half way leaves the ranks out of step. The caller's context is
	// watched by one registration kept across the calls that use it
	// (callerWatch): nothing is allocated per call.
	// A call on the shared-memory board keeps its own clocks and watches
	// the caller's context itself (boardWait): timers and a context
	// callback would cost as much as the call.
	timed := r.refused != nil || !c.boardTakes(r)
	watched := false
	if r.ctx != nil && r.ctx.Done() != nil {
		if err := r.ctx.Err(); err != nil {
			c.lifeCancel(fmt.Errorf("%s abandoned before it started: %w", r.kind, context.Cause(r.ctx)))
		} else if timed {
			c.caller.watch(r.ctx, r.kind)
			watched = true
			// Ended between the check above and the watch: its
			// callback may have found no call running.
			if r.ctx.Err() != nil {
				c.abandoned(r.kind, context.Cause(r.ctx))
			}
		}
	}
	// callNo and seqNow have one writer, whichever goroutine runs
	// requests: a release store publishes them (no locked instruction).
	// A timed call's start and number are set before callNo says it runs,
	// and its clocks armed after (see armClocks).
	n := c.callNo.Load() + 1
	if timed {
		now := mono()
		storeRelease(&c.started, uint64(now))
		c.lastProgress.Store(now)
		if c.stallElapsed.Load() != 0 {
			c.stallElapsed.Store(0)
		}
		storeRelease(&c.timedNo, n)
	}
	storeRelease(&c.callNo, n)
	if timed {
		c.armClocks()
	}
	if r.refused != nil {
		r.err = c.refuse(r)
	} else {
		r.err = c.execute(c.callCtx(), r)
		if r.err == nil && r.splitNo != nil {
			c.splits++
			*r.splitNo = c.splits
		}
	}
	storeRelease(&c.callNo, c.callNo.Load()+1)
	if watched {
		c.caller.unwatch()
	}
	if r.err != nil {
		c.breakOn(r.err)
	}
}

// breakOn makes a call's error the communicator's if the call broke it
// (the executor has an error): the calls after it return that error, as
// the failed call did, with its headline naming the rank at the root.
// (They returned the executor's own error, without it: a raw "collective
// mismatch: rank 1 called a different collective ... (fingerprint
// 0xd0c8)" where the failed call had named both calls.)
func (c *Comm) breakOn(err error) {
	c.mu.Lock()
	if c.err == nil && c.exec.Err() != nil {
		c.err = err
		c.gate.Or(gateBroken)
	}
	c.mu.Unlock()
}

// runOnBoard is run for a blocking call that runs inline (r.owned) on the
// shared-memory board, where nothing stands in its way: no error to
// report, no context ended before it starts, not a call to this rank
// itself or a half-precision reduction. It does what run does for such a
// call and nothing else: no clocks to arm and no context to watch (the
// board's waits keep their own, see boardWaitOn), no algorithm to choose,
// the board found once. Board calls of a few bytes take a few hundred
// nanoseconds end to end, most of it each rank's own work, and run's and
// execute's general part of it was 10-20 ns (BenchmarkBoardOverhead). It
// returns false, having done nothing, where run must run r
// (TestBoardInlineFallbacks).
func (c *Comm) runOnBoard(r *Request) bool {
	if c.board == nil || r.refused != nil || c.gate.Load()&gateBroken != 0 || c.exec.Err() != nil ||
		!c.boardTakes(r) || halfReduction(r) {
		return false
	}
	if r.kind.IsP2P() && (r.args.peer == c.rank || r.args.src == c.rank || r.args.peer == ProcNull || r.args.src == ProcNull) {
		return false
	}
	if r.ctx != nil && r.ctx.Err() != nil {
		return false // run abandons it
	}
	r.err = c.runBoard(r)
	return true
}

// runBoard runs r on the board with run's bookkeeping and nothing else:
// the call's number (callNo), a collective's summary (beginRequest), and
// breaking the communicator on an error.
func (c *Comm) runBoard(r *Request) error {
	n := c.callNo.Load() + 1
	storeRelease(&c.callNo, n)
	var err error
	if r.kind.IsP2P() {
		err = c.executeMail(r)
	} else {
		storeRelease32(&c.seqNow, c.beginRequest(r))
		err = c.executeBoard(r)
	}
	storeRelease(&c.callNo, n+1)
	if err != nil {
		c.breakOn(err)
	}
	return err
}

// calledType is the type r is named by: the caller's (see Request.named).
func (r *Request) calledType() DataType {
	if r.named != 0 {
		return r.named
	}
	return r.dt
}
