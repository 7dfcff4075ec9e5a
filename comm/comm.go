package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Rendezvous is what a communicator needs from bootstrap: its place in the
// job and a way to exchange small blobs with every rank. bootstrap's
// Bootstrap implements it; tests may use an in-process one.
type Rendezvous interface {
	Rank() int
	Size() int
	Allgather(ctx context.Context, data []byte) ([][]byte, error)
	Barrier(ctx context.Context) error
	Close() error
}

// ErrClosed is returned by calls on a closed communicator.
var ErrClosed = errors.New("communicator closed")

// Comm is a communicator: the ranks of a job, connected.
//
// Its methods are safe for concurrent use, but the order in which collectives
// are called must be the same on every rank; calls from several goroutines
// are ordered by the time they are made.
type Comm struct {
	call       collectives.Call // the running call's (execute; calls run one at a time)
	rank, size int
	id         string // names the communicator in bootstrap keys
	// world maps this communicator's ranks to the world's (the
	// communicator Init or New made), nil in the world itself; worldText
	// says it in errors (inSub).
	world     []int
	worldText string
	opts      Options
	rdv       Rendezvous

	fabric // the transports, links to the peers, the executor (fabric.go)

	callQueue // submitted requests, the worker, one run at a time (queue.go)

	lifetime   // the life context, the watchdog, the failure's root (lifetime.go)
	stallWatch // the stall clock and what the responder answers (stallwatch.go)

	mu     sync.Mutex // guards closed, err, regs, the queue's list
	closed bool
	err    error
	regs   []registration

	callState        // owned by the running request: numbering, plans, scratch (callstate.go)
	board     *board // the shared-memory board, if the ranks use one (board.go)
	quick     bool   // blocking calls may take the board's quick way (board_quick.go)
	// qnet are the calls the quick way over the links last ran
	// (net_quick.go), qnetPolls the polls a quick Recv makes.
	qnet      [2]quickNetEntry
	qcoll     quickCollEntry
	qnetPolls int

	// Algorithm selection: GOCCL_ALGO's forced choices, the α-β cost
	// model (agreed by all ranks at New), the cached choices (selection.go).
	selection
	debug bool
}

// Rank is this process's rank, 0 <= Rank < Size; -1 for a nil *Comm (the
// result of Split with a negative color, MPI_UNDEFINED).
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size is the number of ranks; 0 for a nil *Comm.
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

// New builds a communicator over a rendezvous and a transport device: it
// creates an endpoint and staging slots per peer, exchanges their addresses
// through rdv, connects every peer and waits until all ranks are ready.
// The fields opts leaves zero take the environment's values
// (OptionsFromEnv). The communicator owns rdv and, if opts.OwnDevice is
// set, dev: Close closes them, or, while communicators split from this
// one are open, the last of them to close.
func New(ctx context.Context, rdv Rendezvous, dev transport.Device, opts Options) (*Comm, error) {
	return newFromEnv(ctx, rdv, devices{net: dev, own: opts.OwnDevice}, opts)
}

// Devices are the transports of a communicator built with NewWith: Net
// reaches every peer; Shm, if not nil, reaches the peers on this host
// (equal Options.HostID), which then use it instead of Net. Net may be nil
// when every rank is on this host.
type Devices struct {
	Net, Shm transport.Device
}

// NewWith is New over several transports: shared memory for the peers on
// this host, the network device for the others. Close closes the devices
// if opts.OwnDevice is set (see New: the communicators split from this one
// share them).
func NewWith(ctx context.Context, rdv Rendezvous, devs Devices, opts Options) (*Comm, error) {
	if devs.Net == nil && devs.Shm == nil {
		rdv.Close()
		return nil, fmt.Errorf("comm: init rank %d of %d: no transport device", rdv.Rank(), rdv.Size())
	}
	return newFromEnv(ctx, rdv, devices{net: devs.Net, shm: devs.Shm, own: opts.OwnDevice}, opts)
}

// newFromEnv is New's and NewWith's boundary: the environment fills the
// fields opts leaves zero, once; newComm and everything below take the
// result.
func newFromEnv(ctx context.Context, rdv Rendezvous, devs devices, opts Options) (*Comm, error) {
	if err := opts.applyEnv(os.LookupEnv); err != nil {
		rdv.Close()
		devs.close()
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", rdv.Rank(), rdv.Size(), err)
	}
	if rdv.Rank() == 0 {
		warnMisspelled(resolveLogger(opts.Logger, opts.Debug), os.Environ())
	}
	return newComm(ctx, rdv, devs, opts, "world")
}

// newComm is New over devs with the communicator's id (its prefix in the
// store). It reads no environment. The communicator holds devs and rdv
// alone (until Split shares them).
func newComm(ctx context.Context, rdv Rendezvous, devs devices, opts Options, id string) (*Comm, error) {
	h := &holders{n: 1, devs: devs, rdv: rdv, storeHost: -1}
	if g, ok := rdv.(goneMarker); ok {
		h.storeHost = g.StoreHost()
		if g.Watching() {
			h.gone = g.GoneKey
		}
	}
	return newHeld(ctx, rdv, h, opts, id)
}

// newHeld is newComm over the devices and root rendezvous of h, which
// holds one reference for the new communicator: released by its Close,
// or here if it fails. rdv is the communicator's own rendezvous: h's, or
// a sub-communicator's over h's store.
func newHeld(ctx context.Context, rdv Rendezvous, h *holders, opts Options, id string) (*Comm, error) {
	devs := h.devs
	err := opts.fill()
	var algoForced map[collKind]string
	if err == nil {
		if algoForced, err = parseAlgorithms(opts.Algorithms); err != nil {
			err = fmt.Errorf("Options.Algorithms=%q: %w", opts.Algorithms, err)
		}
	}
	if err == nil && opts.SIMD != "" {
		if err = collectives.SetSIMD(opts.SIMD); err != nil {
			err = fmt.Errorf("Options.SIMD: %w", err)
		}
	}
	// A communicator over h's own rendezvous (Init's, New's) that cannot
	// be made marks this rank gone in the store as h closes it (see
	// holders.failed), for the ranks that wait for it; a split one's
	// failure leaves h to its parent.
	top := rdv == h.rdv
	failing := func(err error) error {
		if top {
			h.failed = err
		}
		return err
	}
	if err != nil {
		err = failing(fmt.Errorf("comm: init rank %d of %d: %w", rdv.Rank(), rdv.Size(), err))
		h.leave()
		return nil, err
	}
	c := &Comm{id: id, rank: rdv.Rank(), size: rdv.Size(), opts: opts, rdv: rdv, fabric: fabric{devs: devs, held: h},
		callQueue: newCallQueue(), callState: newCallState(), debug: debugOn(opts.Logger), selection: newSelection(algoForced)}
	h.add(c)
	c.startLife(c.opts.Timeout, c.watchdogTick)
	c.caller.onEnd = c.abandoned
	c.startStall(min(time.Second, c.opts.StallTimeout/2), c.stallTick)
	c.renewPoke()
	if err := c.connect(ctx); err != nil {
		err = failing(fmt.Errorf("comm: init rank %d of %d: %w", c.rank, c.size, err))
		c.teardown()
		return nil, err
	}
	if kv := kvOf(c.rdv); kv != nil && c.size > 1 {
		rctx, cancel := context.WithCancel(context.Background())
		c.respCancel, c.respDone = cancel, make(chan struct{})
		go c.respond(rctx, kv)
	}
	c.wg.Add(1)
	go c.worker()
	if err := c.tune(ctx); err != nil {
		err = failing(fmt.Errorf("comm: init rank %d of %d: measuring the transport: %w", c.rank, c.size, err))
		c.Close()
		return nil, err
	}
	if err := c.setupBoard(ctx); err != nil {
		err = failing(fmt.Errorf("comm: init rank %d of %d: %w", c.rank, c.size, err))
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close ends the communicator: it waits for queued collectives to finish (or
// fail), then releases endpoints, registrations and the rendezvous. Close
// does not synchronise with other ranks; a rank that closes while peers still
// run collectives with it makes those collectives fail on the peers. Close
// of a nil *Comm does nothing.
func (c *Comm) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.gate.Or(gateClosed)
	c.mu.Unlock()
	c.shutdown()
	c.caller.unregister() // no call runs any more
	// Sends the transport copied at post time may still be on their way:
	// let them reach the peers before the connections close. Then tell
	// the peers how many collectives this rank made (a peer still waiting
	// in one fails at once, with a sequence mismatch) or that it aborted;
	// a notice placed at a peer also means that everything sent before it,
	// credits included, is there.
	var drainErr error
	switch {
	case c.exec == nil || c.size == 1:
		if !c.aborted.Load() && c.life.Err() == nil && (c.exec == nil || c.exec.Err() == nil) {
			if err := c.selfUntaken(); err != nil {
				drainErr = fmt.Errorf("comm: close: %w", err)
			}
		}
	case c.aborted.Load():
		// Also when the running call has failed the executor already
		// (Abort's cancellation): the peers learn that this rank
		// aborted, not that its connections closed.
		c.board.mark(boardFailed)
		ctx, cancel := context.WithTimeout(context.Background(), notifyWait)
		c.exec.Notify(ctx, collectives.Notice{Reason: collectives.NoticeAborted, Rank: c.rank, Seq: uint16(collectives.Epoch(c.seq, true))})
		cancel()
	case c.exec.Err() != nil:
	case c.closeAfterFamilyFailure():
	case c.life.Err() == nil:
		// A rooted board call that did not wait for every rank: they
		// reach it, or the ranks disagreed (as Confirm below).
		if err := c.streamSettle(nil); err != nil {
			drainErr = fmt.Errorf("comm: close: %w", err)
			break
		}
		if err := c.boardSettle(nil); err != nil {
			drainErr = fmt.Errorf("comm: close: %w", err)
			break
		}
		if err := c.mailSettle(min(10*time.Second, c.opts.StallTimeout)); err != nil {
			drainErr = fmt.Errorf("comm: close: %w", err)
		}
		// Marked closed before this rank looks at its mailboxes: a
		// message a peer puts there after the look is one the peer's own
		// Close finds untaken by a closed rank (mailDropped).
		c.board.mark(boardClosed)
		if err := c.mailUntaken(); err != nil {
			drainErr = errors.Join(drainErr, fmt.Errorf("comm: close: %w", err))
		}
		if err := c.mailStrayUntaken(); err != nil {
			drainErr = errors.Join(drainErr, fmt.Errorf("comm: close: %w", err))
		}
		// A peer that takes nothing for the stall timeout is stopped or
		// hung: Close names it then (it waited 10 s, then closeWait and
		// the stall timeout again in Confirm, 15 s with a 3 s timeout).
		ctx, cancel := context.WithTimeout(c.life, min(10*time.Second, c.opts.StallTimeout))
		if err := c.exec.Drain(ctx); err != nil {
			drainErr = fmt.Errorf("comm: close: %w", err)
		}
		cancel()
		stuck := c.exec.Unacked()
		ctx, cancel = context.WithTimeout(context.Background(), closeWait)
		c.exec.Notify(ctx, collectives.Notice{Reason: collectives.NoticeClosed, Rank: c.rank, Seq: uint16(c.seq % collectives.SeqMod)}, stuck...)
		cancel()
		// Rooted calls that completed once sent (Call.Eager): the peers
		// they sent to have taken it, or the ranks disagreed. As long as
		// such a call would have waited; not for a peer that took
		// nothing above.
		if len(stuck) == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), c.opts.StallTimeout)
			if err := c.exec.Confirm(ctx); err != nil {
				drainErr = errors.Join(drainErr, fmt.Errorf("comm: close: %w", err))
			} else if err := c.exec.PeerFailed(c.seq); err != nil {
				// A peer failed in a call this rank completed (see Confirm).
				drainErr = errors.Join(drainErr, fmt.Errorf("comm: close: %w", err))
			}
			cancel()
		}
		// Messages sent to this rank that no Recv took, and messages this
		// rank sent through the mailboxes to a peer that closed without
		// taking them (over the links Confirm above names those): a
		// Send that fits the slots completes before its Recv is called,
		// and nothing else says its data was dropped.
		for _, err := range []error{c.exec.Unreceived(), c.mailDropped(), c.selfUntaken()} {
			if err != nil {
				drainErr = errors.Join(drainErr, fmt.Errorf("comm: close: %w", err))
			}
		}
		// Peers not connected to this rank learn it from the store, should
		// a call of theirs still need it (lazy.go).
		if kv := kvOf(c.rdv); kv != nil {
			ctx, cancel = context.WithTimeout(context.Background(), closeWait)
			kv.Set(ctx, c.closedKey(c.rank), []byte(strconv.FormatUint(uint64(c.seq), 10)))
			cancel()
		}
	}
	c.lifeCancel(ErrClosed)
	c.board.mark(boardClosed) // if not marked above: failed stays failed
	return c.inSub(errors.Join(drainErr, c.teardown()))
}

// closeAfterFamilyFailure is Close of a communicator that did not fail
// while another of its family did (a split-off one whose peer died, say),
// and made no call since, the user closing everything on that error (not
// when this process aborted the other itself): its peers still in a call
// learn the root of that failure, from its notice or the board, not that
// this rank closed (which they took for a sequence mismatch, blaming this
// rank: 26 of 30 runs of a helper's hunt, over TCP and shared memory). It
// reports whether it did so.
func (c *Comm) closeAfterFamilyFailure() bool {
	if c.held == nil {
		return false
	}
	w, reason, why := c.held.familyFailure(c)
	if w < 0 || c.life.Err() != nil || w == c.worldRank(c.rank) && reason == collectives.NoticeAborted {
		return false // (this process aborted the other: its choice)
	}
	root := c.rankOfWorld(w)
	switch {
	case root < 0 || root == c.rank:
		// Not a member, or this rank itself: it failed.
		reason, root = collectives.NoticeFailed, c.rank
	case reason != collectives.NoticeLost && reason != collectives.NoticeStall && reason != collectives.NoticeAborted:
		// A mismatch or bad arguments elsewhere: the root failed.
		reason = collectives.NoticeFailed
	}
	c.board.markRoot(boardFailed, root)
	cause := fmt.Sprintf("rank %d closed the communicator after a failure: %s", c.rank, why)
	if w != c.worldRank(c.rank) && c.rankOfWorld(w) >= 0 {
		cause = fmt.Sprintf("rank %d closed the communicator after rank %d's failure: %s", c.rank, root, why)
	}
	if kv := kvOf(c.rdv); kv != nil {
		c.publish(kv, report{reason: reason, root: root, peer: -1, seq: c.seq, cause: cause})
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyWait)
	c.exec.Notify(ctx, collectives.Notice{Reason: reason, Rank: root, Seq: uint16(collectives.Epoch(c.seq+1, false))})
	cancel()
	return true
}

// Abort fails every pending and later collective with cause (ErrAborted if
// nil) and tears the communicator down. It may be called from any
// goroutine, also while collectives are running; it never waits on a
// peer's call: queued collectives fail at once, the running one as soon as
// the executor sees the cancellation. It waits at most 300 ms for the
// bootstrap store to take its report, and as long for the peers'
// connections to take its notice, so that they name its cause. Abort of a
// nil *Comm does nothing.
func (c *Comm) Abort(cause error) {
	if c == nil {
		return
	}
	if cause == nil {
		cause = ErrAborted
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("comm: rank %d aborted: %w", c.rank, cause)
		c.gate.Or(gateBroken)
		c.aborted.Store(true)
	}
	err := c.err
	queued := c.takeAllLocked()
	c.mu.Unlock()
	for r := queued; r != nil; {
		next := r.next
		r.next, r.err = nil, err
		c.pending.Add(-1)
		r.finish()
		r = next
	}
	// Cancelling the life context wakes the executor, which fails the
	// running collective; Close below tears down the rest.
	c.lifeCancel(cause)
	c.board.mark(boardFailed) // ranks waiting on this one's board slot fail now
	if kv := kvOf(c.rdv); kv != nil && c.size > 1 {
		// For the peers that find the mark (reportedCause), before Close
		// ends the store's connection (in a goroutine it lost that race
		// when the process exited at once, and the peers waited
		// reportWait for it, then said "failed or aborted"): bounded by
		// queryWait, as the store may be a peer's.
		c.publish(kv, report{reason: collectives.NoticeAborted, root: c.rank, peer: -1, cause: cause.Error()})
	}
	c.Close()
}

// ErrAborted is the cause of collectives failed by Abort(nil).
var ErrAborted = errors.New("communicator aborted")

// closeWait bounds how long Close waits for its notices to reach the peers.
const closeWait = 2 * time.Second

func (c *Comm) teardown() error {
	c.stopClocks()
	c.stopResponder()
	errs := []error{c.closeLinks()}
	c.mu.Lock()
	for _, r := range c.regs {
		errs = append(errs, c.dev.Deregister(r.region))
		if r.owned {
			errs = append(errs, r.mem.free())
		}
	}
	c.regs = nil
	c.mu.Unlock()
	for i := range c.scratch {
		if sb := &c.scratch[i]; sb.region != nil {
			errs = append(errs, c.dev.Deregister(sb.region), sb.own.free())
			*sb = scratchBuf{}
		}
	}
	if c.board != nil {
		errs = append(errs, c.board.part.free())
		c.board.part = ownedMem{}
		c.board.withdrawKept()
	}
	// The rendezvous and the devices, if no communicator split from this
	// one (or the one this was split from) still uses them.
	c.held.remove(c)
	errs = append(errs, c.held.leave())
	c.board.release()
	return errors.Join(errs...)
}
