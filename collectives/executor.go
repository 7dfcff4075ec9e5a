package collectives

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/goccl/goccl/transport"
)

// Executor runs plans over the links of one rank. It is not safe for
// concurrent use: a communicator runs one collective at a time through it,
// in the same order on every rank.
//
// Run is thin: a plan says what may run; the executor posts every send whose
// dependencies are done while the peer has a free slot, consumes every
// arrived chunk whose dependencies are done (copying or reducing it out of
// its staging slot and returning the credit), makes every local copy whose
// dependencies are done, and otherwise waits on the completion queue:
// spinning briefly, then blocking in the transport. Where the transport
// steers writes (transport.Steerer), a plain receive of steerMin bytes or
// more whose destination is ready before its chunk arrives is placed there
// by the transport, and consuming it copies nothing (steerAhead).
//
// A post that the completion queue refuses as full (transport.ErrQueueFull)
// is not an error: the executor takes completions out and posts again (a
// refused credit or receive token is owed to the link until then). A queue
// of CQEntriesPerLink entries per link never refuses one in the steady
// state; a queue smaller than the receive tokens of its links can deadlock.
type Executor struct {
	Rank     int
	Size     int
	Links    []*Link // indexed by peer; nil for self and unconnected peers
	CQ       transport.CompletionQueue
	NSlots   int
	SlotSize int
	// SpinPolls is how many empty polls of the completion queue (each
	// followed by a yield) precede a blocking wait.
	SpinPolls int
	// OnProgress, if set, is called whenever completions arrive (a
	// communicator's stall watchdog rearms on it).
	OnProgress func()
	// Inline is the largest chunk the transport copies at post time
	// (transport.Inliner; 0 if none). Such a send is done for the run as
	// soon as it is posted: the bytes it read may be overwritten and the
	// run may end before the peer's acknowledgement, which arrives later
	// and is recognised by its epoch.
	Inline int
	// StrayLimit bounds the bytes of point-to-point messages set aside
	// for receives of their tags while a receive of another tag waits
	// (stray.go); 0: DefaultStrayLimit.
	StrayLimit int
	// Stalled, if set, is called on the running goroutine when a wait
	// ends because Run's ctx ended: the communicator ends that context to
	// poke a stalled run, so that it compares its call with those of the
	// ranks it waits on (see Waiting). Stalled returns the context to go
	// on with; or an error, which fails the run; or neither, and the end
	// of ctx fails the run.
	Stalled func(ctx context.Context, c *Call) (context.Context, error)
	// Window bounds the peers that a run of a plan with rounds
	// (Schedule.Rounds) exchanges with at once, in a job of more than
	// Window+1 ranks: such a run goes through batches of at most Window
	// peers (window.go). 0: no bound.
	Window int
	// Connect, if set, links the peers without a link of the batch a
	// windowed run admits (Links[peer] set for each), blocking until they
	// are, or returns the error that fails the run. It must not keep the
	// slice.
	Connect func(c *Call, peers []int) error
	// Release, if set, closes and frees a transient link (Link.Transient)
	// once both ranks are done with it; the executor then forgets it
	// (Links[peer] = nil). Nil: the executor closes the endpoint.
	Release func(peer int)

	win       window // a windowed run's state (window.go)
	err       error  // sticky: after a failure every Run returns it
	comps     []transport.Completion
	remaining []int32
	sendHead  []int
	recvHead  []int
	dirty     []bool
	dirtyList []int
	copyReady []int32 // Copy chunks whose dependencies are done, in that order
	copyHead  int     // copyReady[copyHead:] are still to be made
	done      int
	epoch     uint8  // this run's epoch, in data write ids
	released  []bool // sends done: inline ones at post time, others placed at the peer
	inflight  int    // inline sends posted and not yet acknowledged
	// strayBytes: the bytes the links' strays hold (stray.go).
	strayBytes int
	// lastColl is the Seq of the last collective run that completed;
	// settled (for other goroutines) the last such run after which every
	// inline send was acknowledged (see Settled).
	lastColl uint32
	settled  atomic.Uint32
	// unflushed: data was posted since the last poll of the queue (see
	// the end of Run).
	unflushed bool
	sent0     []uint64 // per peer: the link's sent count when this run began
	// stalled lists the peers a post to which the completion queue refused
	// with ErrQueueFull; they are processed again after the next poll.
	stalled   []int
	isStalled []bool

	noticeOut      uint32 // the immediate of the notices being sent
	noticesPending int    // notices posted and not yet placed
	noticeLater    bool   // a peer's failure notice about a later collective was kept
}

// Target is where a schedule buffer lives: a registered region and the
// offset of the buffer's first byte in it.
type Target struct {
	Region transport.Region
	Off    int
}

// Call is one run of a plan.
type Call struct {
	Plan *Plan
	// Bufs maps each schedule buffer (BufData, BufInput, BufScratch) to
	// registered memory.
	Bufs [NumBufs]Target
	Type DataType
	Op   ReduceOp
	Seq  uint32 // the communicator's collective sequence number
	// Coll, Count and Root name the call in errors, e.g.
	// "allreduce(float32, 1024)" or "broadcast(float32, 8, root=0)".
	Coll  string
	Count int
	Root  int // -1 when the collective has no root
	// Named, if valid, is the type the call is named and fingerprinted
	// by in place of Type: the caller's float16 or bfloat16 of a
	// reduction that runs on float32.
	Named DataType
	// P2P marks point-to-point calls: Seq is the tag (0..MaxTag), which
	// travels whole instead of the sequence number and fingerprint (the
	// executor checks each message's length).
	P2P bool
	// VarCount marks calls whose count differs across ranks (alltoallv):
	// the fingerprint leaves it out.
	VarCount bool
	// CollSeq is, for point-to-point calls, the number of collectives the
	// communicator started before (failure notices compare it).
	CollSeq uint32
	// Confirm makes senders-only wait until their receivers complete the
	// call (see checks.go); set for rooted collectives whose algorithm
	// is a tree or a chain, never for one whose messages go round a cycle.
	Confirm bool
	// Eager lets a rank that only sends to a peer in this call (a
	// broadcast or scatter root, a reduce or gather leaf) complete once
	// its sends are done, without waiting for proof that the peer is in
	// the same call, as MPI's eager sends and NCCL's collectives do: the
	// peer still checks every chunk, and a disagreement fails the peer's
	// call and, through its failure notice or the chunk a later call
	// finds out of place, this rank's next call; Executor.Confirm waits,
	// at close, for the proof of the last such sends. Never together with
	// Confirm.
	Eager bool

	fp uint16 // cached fingerprint
}

// fingerprint hashes what every rank must agree on in this call (FNV-1a
// folded to 16 bits). Algorithm names are part of it: ranks that chose
// different algorithms would exchange incompatible messages.
func (c *Call) fingerprint() uint16 {
	if c.fp != 0 {
		return c.fp
	}
	// FNV-1a: each byte of the names once, each number's 8 bytes
	// (BenchmarkFingerprint: 41 ns a call; 205 when each character was
	// mixed as 8 bytes, 7 of them zero).
	h := uint32(2166136261)
	mix := func(v uint64) {
		for range 8 {
			h ^= uint32(v & 0xff)
			h *= 16777619
			v >>= 8
		}
	}
	str := func(s string) {
		for i := 0; i < len(s); i++ {
			h ^= uint32(s[i])
			h *= 16777619
		}
	}
	if !c.P2P {
		str(c.Coll)
	}
	str(c.Plan.Name)
	mix(uint64(c.named()))
	mix(uint64(c.Op))
	if !c.P2P && !c.VarCount {
		mix(uint64(c.Count))
	}
	mix(uint64(int64(c.Root)))
	fp := uint16(h>>16) ^ uint16(h)
	if fp == 0 {
		fp = 1
	}
	c.fp = fp
	return fp
}

// Fingerprint is the 16-bit hash of what every rank must agree on in the
// call (collective, algorithm, type, count, root, operation), as it
// travels with each chunk.
func (c *Call) Fingerprint() uint16 { return c.fingerprint() }

// PeerError is a failure caused by one peer: its connection is gone (it
// closed, died, or the link failed).
type PeerError struct {
	Peer int
	Err  error
}

func (e *PeerError) Error() string { return e.Err.Error() }
func (e *PeerError) Unwrap() error { return e.Err }

// MismatchError reports that a peer sent data of a different collective
// call than this rank's: different sequence number, collective, algorithm,
// type, count, root or operation. The communicator adds both sides' calls
// when it can learn the peer's.
type MismatchError struct {
	Call            string // this rank's call
	Seq             uint32
	Algo            string
	Rank, Peer      int
	PeerSeq         uint16 // the peer's sequence number, mod 2^14
	PeerFingerprint uint16
	Fingerprint     uint16
	PeerCall        string // the peer's call, if known
	// Surplus: the peer sent data of this very call beyond what this rank
	// expects from it (the ranks disagree on sizes that the fingerprint
	// leaves out).
	Surplus bool
}

func (m *MismatchError) Error() string {
	if m.Surplus {
		return fmt.Sprintf("collective mismatch: rank %d sent rank %d more data in %s #%d (%s) than rank %d expects: the ranks disagree on the counts",
			m.Peer, m.Rank, m.Call, m.Seq, m.Algo, m.Rank)
	}
	if m.PeerSeq != uint16(m.Seq&seqMask) {
		return fmt.Sprintf("collective mismatch: rank %d sent data of its collective #%d (mod %d) to rank %d, which is in %s #%d: the ranks called different collectives before (a rooted collective with different roots, or a different number of collectives)",
			m.Peer, m.PeerSeq, 1<<seqBits, m.Rank, m.Call, m.Seq)
	}
	if m.PeerCall != "" {
		return fmt.Sprintf("collective mismatch: rank %d called %s #%d while rank %d called %s #%d",
			m.Peer, m.PeerCall, m.Seq, m.Rank, m.Call, m.Seq)
	}
	return fmt.Sprintf("collective mismatch: rank %d called a different collective, algorithm, type, count, root or operation (fingerprint %#04x) than rank %d's %s #%d (%s, fingerprint %#04x)",
		m.Peer, m.PeerFingerprint, m.Rank, m.Call, m.Seq, m.Algo, m.Fingerprint)
}

// Num is the call's number as errors give it: "#N" for a collective,
// "tag N" for a point-to-point call (whose Seq is its tag).
func (c *Call) Num() string {
	if c.P2P {
		return "tag " + strconv.FormatUint(uint64(c.Seq), 10)
	}
	return "#" + strconv.FormatUint(uint64(c.Seq), 10)
}

// Desc is how errors name the call.
func (c *Call) Desc() string {
	s := c.Coll
	if c.Type.Valid() {
		s += fmt.Sprintf("(%s, %d", c.named(), c.Count)
		if c.Op.Valid() {
			s += ", " + c.Op.String()
		}
		if c.Root >= 0 {
			s += fmt.Sprintf(", root=%d", c.Root)
		}
		s += ")"
	}
	return s
}

// named is the type the call is named by (see Named).
func (c *Call) named() DataType {
	if c.Named.Valid() {
		return c.Named
	}
	return c.Type
}

// Err returns the error that broke the executor, if any.
func (e *Executor) Err() error { return e.err }

// compBuf returns the buffer the completions are polled into, made on
// first use: by a run, or by the failure path of a call that failed
// before its first run (its set-up of links), whose Notify polled into an
// empty buffer (the queue refused it at once), so the notice was not
// waited for, and was dropped when the links closed: the peer waited for
// its stall timeout.
func (e *Executor) compBuf() []transport.Completion {
	if e.comps == nil {
		e.comps = make([]transport.Completion, 64)
	}
	return e.comps
}

// Fail breaks the executor with err (Abort uses it); later Runs return it.
func (e *Executor) Fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

func (e *Executor) reset(p *Plan) {
	n := len(p.chunks)
	if cap(e.remaining) < n {
		e.remaining = make([]int32, n)
	}
	e.remaining = e.remaining[:n]
	if cap(e.released) < n {
		e.released = make([]bool, n)
	}
	e.released = e.released[:n]
	clear(e.released)
	e.epoch++
	for i := range p.chunks {
		e.remaining[i] = p.chunks[i].nDeps
	}
	if len(e.sendHead) != e.Size {
		e.sendHead = make([]int, e.Size)
		e.recvHead = make([]int, e.Size)
		e.dirty = make([]bool, e.Size)
		e.dirtyList = make([]int, 0, e.Size)
		e.isStalled = make([]bool, e.Size)
		e.stalled = make([]int, 0, e.Size)
	}
	if len(e.sent0) != e.Size {
		e.sent0 = make([]uint64, e.Size)
	}
	for _, peer := range p.peers {
		e.sendHead[peer], e.recvHead[peer] = 0, 0
		if l := e.Links[peer]; l != nil {
			e.sent0[peer] = l.sent
			l.unplaced = 0
			l.steerPos = 0
		}
	}
	e.compBuf()
	if cap(e.copyReady) < len(p.copies) {
		e.copyReady = make([]int32, 0, len(p.copies))
	}
	e.copyReady, e.copyHead = e.copyReady[:0], 0
	e.done = 0
	e.win.reset(e, p)
}

// Run executes c.Plan. It returns when every chunk is done (all sends
// placed at the peers, all receives consumed), or with an error naming the
// call, this rank, the peer and the cause. A failure breaks the executor.
func (e *Executor) Run(ctx context.Context, c *Call) error {
	err := e.run(ctx, c)
	if err != nil {
		e.unsteer()
		if c.P2P && !errors.Is(err, ErrYield) {
			err = e.strayNote(c, err)
		}
	}
	return err
}

func (e *Executor) run(ctx context.Context, c *Call) error {
	if e.err != nil {
		return e.err
	}
	p := c.Plan
	if p.ChunkSize > e.SlotSize {
		return fmt.Errorf("%s: plan chunk %d exceeds staging slot %d", c.Desc(), p.ChunkSize, e.SlotSize)
	}
	for _, peer := range p.peers {
		if peer >= len(e.Links) || (e.Links[peer] == nil && !p.gated(peer, e.Window)) {
			return fmt.Errorf("%s: rank %d has no link to rank %d", c.Desc(), e.Rank, peer)
		}
	}
	for _, idx := range p.copies {
		ch := &p.chunks[idx]
		if ch.len > 0 && (c.Bufs[ch.srcBuf].Region == nil || c.Bufs[ch.buf].Region == nil) {
			return fmt.Errorf("%s: rank %d: local copy between buffers %d and %d, which the call does not provide", c.Desc(), e.Rank, ch.srcBuf, ch.buf)
		}
	}
	if p.fused && c.Bufs[BufInput].Region == nil {
		return fmt.Errorf("%s: rank %d: fused plan without an input buffer", c.Desc(), e.Rank)
	}
	e.reset(p)
	for _, cp := range p.pre {
		src, dst := &c.Bufs[cp.Src], &c.Bufs[cp.Dst]
		if src.Region == nil || dst.Region == nil {
			return fmt.Errorf("%s: rank %d: local copy between buffers %d and %d, which the call does not provide", c.Desc(), e.Rank, cp.Src, cp.Dst)
		}
		copy(dst.Region.Bytes()[dst.Off+cp.DstOff:dst.Off+cp.DstOff+cp.Len], src.Region.Bytes()[src.Off+cp.SrcOff:src.Off+cp.SrcOff+cp.Len])
	}
	for _, peer := range p.peers {
		if err := e.checkDown(c, peer); err != nil {
			e.Fail(err)
			return err
		}
	}
	if err := e.laterNotice(c); err != nil {
		e.Fail(err)
		return err
	}
	for _, peer := range p.peers {
		e.markDirty(peer)
	}
	for _, idx := range p.copies {
		if e.remaining[idx] == 0 {
			e.copyReady = append(e.copyReady, idx)
		}
	}
	for {
		if err := e.progress(c); err != nil {
			e.Fail(err)
			return err
		}
		if e.win.on { // windowed: the next batch (window.go)
			if again, err := e.advance(c); err != nil {
				e.Fail(err)
				return err
			} else if again {
				continue
			}
		}
		if e.done == len(p.chunks) && e.confirmed(c) {
			if !c.P2P {
				e.lastColl = c.Seq
				e.settle()
			}
			e.releaseCredits(c)
			e.noteUnconfirmed(c)
			// Transports that write posts at the caller's next poll (to
			// send the frames of one pass together) get that poll now if
			// a peer waits for what was posted since the last one: data
			// (a send that completed at post) or credits kept back until
			// this run completed. Credits returned for chunks consumed and
			// the transport's acknowledgements of small writes leave with
			// the next call's first frames instead (or the transport's own
			// timer): a peer needs them only for its next call, and a
			// system call of its own on the path of every small call cost
			// ~17 µs of a 40 µs 8-byte allreduce between two processes.
			if len(p.peers) > 0 && e.unflushed {
				e.CQ.Poll(e.comps[:0])
				e.unflushed = false
			}
			return nil
		}
		var n int
		var err error
		switch {
		case e.copyHead == len(e.copyReady):
			n, err = e.wait(ctx)
		case len(p.peers) > 0:
			// Local copies are waiting: look at the links without
			// blocking, then make the next copy. The context counts only
			// if the poll took nothing: completions taken must be handled
			// (a poke that ends ctx now would drop them, and with them a
			// chunk and its receive token for good).
			e.unflushed = false
			if n = e.CQ.Poll(e.comps); n > 0 {
				e.progressed()
			} else {
				err = ctx.Err()
			}
		default:
			err = ctx.Err()
		}
		if err != nil && ctx.Err() != nil && e.Stalled != nil {
			next, serr := e.Stalled(ctx, c)
			if errors.Is(serr, ErrYield) {
				if e.yieldable(c) {
					return serr // nothing done: the caller runs c again later
				}
				serr = nil
			}
			if serr != nil {
				e.Fail(serr)
				return serr
			}
			if next != nil {
				ctx = next
				continue
			}
		}
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			// A collective abandoned half way leaves the links out of step
			// with the peers: the executor is broken whatever the cause.
			err = fmt.Errorf("%s %s (%s): rank %d: %w (%s)", c.Desc(), c.Num(), p.Name, e.Rank, err, e.pendingString(p))
			e.Fail(err)
			return err
		}
		for i := range n {
			if err := e.handle(c, &e.comps[i]); err != nil {
				e.Fail(err)
				return err
			}
		}
		e.unstall()
	}
}

// ErrYield, from a Stalled hook, asks a run that has done nothing yet to
// return it instead of waiting on (Run returns it, and the executor is
// not failed): its caller runs other calls first, then this one again.
// Only a point-to-point run that only receives, has received nothing and
// has nothing arrived to take yields (yieldable); any other goes on with
// the context the hook returned. comm runs the Sends queued behind a
// waiting Recv so (hoist.go).
var ErrYield = errors.New("collectives: the run yields to other calls")

// yieldable reports whether the run of c may end now as if it never
// began: a point-to-point receive, nothing consumed, no chunk waiting to
// be, nothing sent.
func (e *Executor) yieldable(c *Call) bool {
	p := c.Plan
	if !c.P2P || e.done != 0 || e.win.on || len(p.copies) != 0 {
		return false
	}
	for _, peer := range p.peers {
		l := e.Links[peer]
		if len(p.sends[peer]) != 0 || l == nil || l.arrived != 0 || l.deferred {
			return false
		}
	}
	return true
}

// SendRoom reports how many chunks a run could send to peer now without
// waiting for the peer to take any (its free slots), and whether the link
// is one a run sends over as it is (up, not transient, no notice from the
// peer); 0 and false if there is no such link.
func (e *Executor) SendRoom(peer int) (int, bool) {
	if e.err != nil || uint(peer) >= uint(len(e.Links)) {
		return 0, false
	}
	l := e.Links[peer]
	if l == nil || l.Transient || l.down != nil || l.notice != 0 || l.postErr != nil {
		return 0, false
	}
	return l.credits, true
}

// stall notes that the completion queue refused a post to peer
// (ErrQueueFull): the peer is processed again after the next poll, which
// frees entries.
func (e *Executor) stall(peer int) {
	if !e.isStalled[peer] {
		e.isStalled[peer] = true
		e.stalled = append(e.stalled, peer)
	}
}

// unstall marks the stalled peers for processing, after a poll.
func (e *Executor) unstall() {
	for _, peer := range e.stalled {
		e.isStalled[peer] = false
		e.markDirty(peer)
	}
	e.stalled = e.stalled[:0]
}

// repay makes the posts to l's peer that the completion queue refused
// earlier: receive tokens and returned credits. A post that fails for
// another reason is dropped: the connection is gone, which the flushed
// tokens report (see checkDown).
func (e *Executor) repay(l *Link) {
	for l.owedTokens > 0 {
		err := l.EP.PostRecv(makeID(idToken, l.Peer, 0), l.Staging, 0, 0)
		if errors.Is(err, transport.ErrQueueFull) {
			e.stall(l.Peer)
			return
		}
		l.owedTokens--
	}
	if l.owedCredits > 0 {
		l.imm = creditImm(l.owedCredits)
		err := l.postCredit(false)
		if errors.Is(err, transport.ErrQueueFull) {
			e.stall(l.Peer)
			return
		}
		l.owedCredits = 0
	}
}

// Drain waits until every inline send has been acknowledged by its peer,
// so that closing the endpoints afterwards loses nothing the peers still
// need. Other completions are only recorded (credits, notices, links
// down; see record): the links are about to close. It returns the first
// error completion of a send, or ctx's error.
func (e *Executor) Drain(ctx context.Context) error {
	for e.inflight > 0 && e.err == nil {
		n, err := e.CQ.Wait(ctx, e.compBuf())
		if err != nil {
			if peers := e.Unacked(); len(peers) > 0 {
				sends := "a send"
				if e.inflight > 1 {
					sends = strconv.Itoa(e.inflight) + " sends"
				}
				return fmt.Errorf("rank %d: %s did not acknowledge %s of the last calls (stopped, hung, or too slow to take them): %w",
					e.Rank, RankList(peers), sends, err)
			}
			return fmt.Errorf("rank %d: waiting for %d sends to be acknowledged: %w", e.Rank, e.inflight, err)
		}
		for i := range n {
			comp := &e.comps[i]
			if comp.ID&idKind != idData {
				e.recordOne(comp) // credits and notices: Confirm needs them
				continue
			}
			if e.stale(comp) {
				continue
			}
			if comp.Err != nil {
				p := idPeer(comp.ID)
				return fmt.Errorf("rank %d -> %d: a send of the last calls was not acknowledged: rank %d's connection ended first (it left without closing the communicator, or died): %w", e.Rank, p, p, comp.Err)
			}
			e.inflight--
			if l := e.Links[idPeer(comp.ID)]; l != nil {
				l.inline--
			}
		}
	}
	return nil
}

// Unacked are the peers with inline sends not yet acknowledged (Drain).
func (e *Executor) Unacked() []int {
	var peers []int
	for p, l := range e.Links {
		if l != nil && l.inline > 0 {
			peers = append(peers, p)
		}
	}
	return peers
}

// Settled is, for any goroutine, the number (Call.Seq) of the last
// collective this executor completed after which every message it sent
// is known to have reached its peer (0: none since SetSettled). A run
// completes once its sends are placed at the peers, except inline sends,
// which are done when the transport took them: a peer that waits for one
// may still get it, however far this rank went on. The stall diagnosis
// asks for it before it calls a peer that went on a disagreement.
func (e *Executor) Settled() uint32 { return e.settled.Load() }

// SetSettled resets Settled to seq (a communicator that renumbers its
// calls).
func (e *Executor) SetSettled(seq uint32) { e.settled.Store(seq) }

// ForgetProofs drops the proofs Confirm would wait for (noteUnconfirmed)
// of the calls run so far: calls that cannot disagree, such as a
// communicator's own measurement at its creation (whose last broadcast's
// proof, held back by a peer that died later, made Close wait out the
// stall timeout and name the measurement's internal call number). Not
// while a run goes on.
func (e *Executor) ForgetProofs() {
	for _, l := range e.Links {
		if l != nil {
			l.proveAt = 0
		}
	}
}

// settle records that the last completed collective is settled if no
// inline send is waiting for its acknowledgement.
func (e *Executor) settle() {
	if e.inflight == 0 && e.lastColl != 0 {
		e.settled.Store(e.lastColl)
	}
}

func (e *Executor) wait(ctx context.Context) (int, error) {
	e.unflushed = false
	for i := 0; i <= e.SpinPolls; i++ {
		if n := e.CQ.Poll(e.comps); n > 0 {
			e.progressed()
			return n, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if i < e.SpinPolls {
			// Between two polls, not after the last: a Gosched wakes
			// another thread to look for work (a futex wake-up per wait).
			runtime.Gosched()
		}
	}
	n, err := e.CQ.Wait(ctx, e.comps)
	if n > 0 {
		e.progressed()
	}
	return n, err
}

func (e *Executor) progressed() {
	if e.OnProgress != nil {
		e.OnProgress()
	}
}

// placing reports whether chunk idx of p is a send to peer that this run
// posted and whose completion it waits for (not inline, not completed).
func (e *Executor) placing(p *Plan, idx int32, peer int) bool {
	if idx < 0 || int(idx) >= len(p.chunks) || int(idx) >= len(e.released) || e.released[idx] {
		return false
	}
	ch := &p.chunks[idx]
	return ch.kind == Send && int(ch.peer) == peer
}

func (e *Executor) markDirty(peer int) {
	if !e.dirty[peer] {
		e.dirty[peer] = true
		e.dirtyList = append(e.dirtyList, peer)
	}
}

func (e *Executor) finish(p *Plan, idx int32) {
	e.done++
	if e.win.on && p.chunks[idx].peer >= 0 {
		e.win.chunkDone(p, int(p.chunks[idx].peer))
	}
	for _, o := range p.dependents(idx) {
		e.remaining[o]--
		if e.remaining[o] == 0 {
			if p.chunks[o].kind == Copy {
				e.copyReady = append(e.copyReady, o) // at most once each: fits in len(p.copies)
			} else {
				e.markDirty(int(p.chunks[o].peer))
			}
		}
	}
}

// copyBatch is how many bytes of ready local copies progress makes in a
// row while nothing posted waits for the next poll: a poll of the links
// between two copies of a few bytes each (Bruck's all-to-all makes
// 6 copies per call on 2 ranks, 12 on 4) cost more than the copies, 1.4
// us each here (2 ranks over TCP, 8 B: Bruck 20.4-21.6 us per call,
// pairwise 13.6-14.1); 32 KiB is 1-2 us of copying.
const copyBatch = 32 << 10

// progress posts and consumes everything that can go, then makes ready
// local copies (and posts and consumes what they made ready), until
// nothing more can go on the links. After copyBatch bytes of copies, or
// once a post waits for the next poll to leave, copies left ready are made
// by the next calls: Run polls the links between them instead of
// blocking, so that local copies fill the waits for the peers instead of
// holding back the first sends.
func (e *Executor) progress(c *Call) error {
	p := c.Plan
	budget := copyBatch
	for {
		if len(e.dirtyList) == 0 {
			if e.copyHead == len(e.copyReady) {
				return nil
			}
			idx := e.copyReady[e.copyHead]
			e.copyHead++
			if ch := &p.chunks[idx]; ch.len > 0 {
				src, dst := &c.Bufs[ch.srcBuf], &c.Bufs[ch.buf]
				copy(dst.Region.Bytes()[dst.Off+ch.off:dst.Off+ch.off+ch.len], src.Region.Bytes()[src.Off+ch.srcOff:src.Off+ch.srcOff+ch.len])
				budget -= ch.len
			}
			e.finish(p, idx)
			if len(e.dirtyList) == 0 {
				if budget <= 0 || e.unflushed {
					return nil
				}
				continue
			}
		}
		peer := e.dirtyList[len(e.dirtyList)-1]
		e.dirtyList = e.dirtyList[:len(e.dirtyList)-1]
		e.dirty[peer] = false
		l := e.Links[peer]
		if l == nil || (e.win.on && !e.win.admitted(peer)) {
			continue // released, or not in the window yet (window.go)
		}
		if l.owedTokens > 0 || l.owedCredits > 0 {
			e.repay(l)
		}
		sends, recvs := p.sends[peer], p.recvs[peer]
		for e.sendHead[peer] < len(sends) && l.credits > 0 && !e.isStalled[peer] {
			idx := sends[e.sendHead[peer]]
			if e.remaining[idx] > 0 {
				break
			}
			ch := &p.chunks[idx]
			region, off := e.source(c, ch)
			l.imm = c.chunkImm(c.P2P && e.sendHead[peer] == len(sends)-1)
			roff := uint64(l.sendSlot * e.SlotSize)
			inline := ch.len <= e.Inline // the transport copies it at post
			id := makeID(idData, peer, idx)
			if inline {
				id = makeID(idData, peer, inlineChunk)
			}
			if err := l.EP.PostWrite(withEpoch(id, e.epoch), region, off, ch.len, l.Remote, roff, &l.imm); err != nil {
				if errors.Is(err, transport.ErrQueueFull) {
					e.stall(peer) // posted again after the next poll
					break
				}
				err = fmt.Errorf("%s %s (%s): rank %d -> %d: post write: %w", c.Desc(), c.Num(), p.Name, e.Rank, peer, err)
				if errors.Is(err, transport.ErrInvalid) {
					return err // this rank's mistake, not the peer's
				}
				return &PeerError{Peer: peer, Err: err}
			}
			e.unflushed = true
			l.credits--
			l.sent++
			l.sendSlot = (l.sendSlot + 1) % e.NSlots
			e.sendHead[peer]++
			if inline {
				// The transport copied the bytes: done for this run.
				e.released[idx] = true
				e.inflight++
				l.inline++
				e.finish(p, idx)
			} else {
				l.unplaced++
			}
		}
		if c.P2P && len(l.strays) > 0 && e.recvHead[peer] == 0 && len(recvs) > 0 {
			if err := e.takeStray(c, l, recvs); err != nil {
				return err
			}
		}
		for e.recvHead[peer] < len(recvs) && l.arrived > 0 {
			idx := recvs[e.recvHead[peer]]
			if e.remaining[idx] > 0 {
				break
			}
			if (c.P2P && e.recvHead[peer] == 0) || (!c.P2P && !e.win.on && l.arrP2P[l.recvSlot]) {
				// Another tag's message first (or, in a collective, a
				// point-to-point message): set aside for its own
				// receive, which may be this one's (a message of its
				// tag that an earlier receive began setting aside).
				aside, err := e.setAside(c, l)
				if err != nil {
					return err
				}
				if aside {
					if err := e.takeStray(c, l, recvs); err != nil {
						return err
					}
					continue
				}
			}
			if err := e.consume(c, l, &p.chunks[idx]); err != nil {
				return err
			}
			e.recvHead[peer]++
			e.finish(p, idx)
		}
		if l.steer != nil && len(recvs) > 0 && !(c.P2P && e.recvHead[peer] == 0 && l.strayOf(c.Seq) >= 0) {
			e.steerAhead(c, l, recvs)
		}
	}
}

// steerMin is the smallest chunk the executor asks a transport to steer
// into its destination (transport.Steerer): below it, arming and disarming
// the steering (a lock each, and one on arrival) cost about what the copy
// out of the slot does.
const steerMin = 16 << 10

// steerAhead arms the steering of l's transport for the chunks the peer
// will write next into the free slots (those after the arrived ones) that
// are plain receives whose destination may be written now: each is then
// placed there on arrival, and consume makes no copy. The k-th write from
// the peer after the oldest arrived one lands in the k-th slot after it,
// and the k-th receive of the plan from that peer is that write (the
// arrival check fails the run otherwise); the transport places a write
// into a steered buffer only if its length and immediate are those of
// this call's chunk, so a point-to-point message or a later call's data
// goes into its slot as always. Point-to-point receives are steered alike
// (their immediate is the tag; 2 ranks over TCP, osu latency 256 KiB-4 MiB:
// 59-84, 170-218, 608-644 us -> 48-50, 138-145, 498-517).
func (e *Executor) steerAhead(c *Call, l *Link, recvs []int32) {
	p, head := c.Plan, e.recvHead[l.Peer]
	pos := max(l.steerPos, head+l.arrived)
	for ; pos < len(recvs) && pos < head+e.NSlots; pos++ {
		idx := recvs[pos]
		if e.remaining[idx] > 0 {
			break // its destination may still be read: looked at again once ready
		}
		ch := &p.chunks[idx]
		if ch.kind != Recv || ch.buf == BufToken || ch.len < steerMin {
			continue
		}
		slot := (l.recvSlot + pos - head) % e.NSlots
		t := &c.Bufs[ch.buf]
		dst := t.Region.Bytes()[t.Off+ch.off : t.Off+ch.off+ch.len]
		l.steered[slot] = l.steer.Steer(slot, l.Staging, slot*e.SlotSize, c.chunkImm(c.P2P && pos == len(recvs)-1), dst)
		if l.steerDst == nil {
			l.steerDst = make([][]byte, len(l.steered))
		}
		l.steerDst[slot] = dst
	}
	l.steerPos = pos
}

// unsteer disarms every armed steering entry, once a run failed or
// yielded: nothing may be placed into the caller's buffers after Run
// returns, and a write placed there already is in its slot too.
func (e *Executor) unsteer() {
	for _, l := range e.Links {
		if l == nil || l.steered == nil {
			continue
		}
		for slot, on := range l.steered {
			if !on {
				continue
			}
			l.steered[slot] = false
			if l.steer.Unsteer(slot) && l.steerDst != nil && l.steerDst[slot] != nil {
				// Placed into the run's buffer, its completion not taken
				// yet: the slot gets it too, for the run that takes it (a
				// run that yielded, run again; ErrYield).
				copy(l.Staging.Bytes()[slot*e.SlotSize:], l.steerDst[slot])
			}
			if l.steerDst != nil {
				l.steerDst[slot] = nil
			}
		}
	}
}

func (e *Executor) source(c *Call, ch *chunk) (transport.Region, int) {
	if ch.buf == BufToken || ch.len == 0 {
		return e.Links[ch.peer].Staging, 0 // nothing to read: any region does
	}
	t := &c.Bufs[ch.buf]
	return t.Region, t.Off + ch.off
}

// consume takes the oldest arrived chunk of link l into ch's destination
// and returns the slot's credit to the peer.
func (e *Executor) consume(c *Call, l *Link, ch *chunk) error {
	p := c.Plan
	slot := l.recvSlot
	n, seq, fp := l.arrLen[slot], l.arrSeq[slot], l.arrFP[slot]
	if c.P2P || l.arrP2P[slot] {
		if err := e.checkTag(c, l.Peer, seq, fp, l.arrP2P[slot]); err != nil {
			return err
		}
	} else if seq != uint16(c.Seq&seqMask) || fp != c.fingerprint() {
		return &MismatchError{Call: c.Desc(), Seq: c.Seq, Algo: p.Name, Rank: e.Rank, Peer: l.Peer,
			PeerSeq: seq, PeerFingerprint: fp, Fingerprint: c.fingerprint()}
	}
	if n != ch.len {
		if c.P2P {
			// Not collectives: a send and a receive whose lengths
			// differ within a chunk (the chunks before it matched).
			return fmt.Errorf("%s %s (%s): rank %d <- %d: received a chunk of %d bytes of the peer's message where this rank's receive expects %d: the ranks' point-to-point calls have different sizes",
				c.Desc(), c.Num(), p.Name, e.Rank, l.Peer, n, ch.len)
		}
		return fmt.Errorf("%s %s (%s): rank %d <- %d: received %d bytes where this rank expects %d: the ranks called collectives with different sizes",
			c.Desc(), c.Num(), p.Name, e.Rank, l.Peer, n, ch.len)
	}
	if c.P2P && l.arrP2P[slot] {
		if err := e.checkEnd(c, l.Peer, endsMessage(seq, fp), e.recvHead[l.Peer]+1 == len(p.recvs[l.Peer])); err != nil {
			return err
		}
	}
	steered := false
	if l.steered != nil && l.steered[slot] {
		// Disarmed before anything else: the slot's credit goes back
		// below, and the peer's next write to it is not this chunk.
		l.steered[slot] = false
		steered = l.steer.Unsteer(slot)
		if steered && ch.buf != BufToken && n > 0 {
			// Placed where the slot's entry said: this chunk's place
			// unless messages set aside moved the peer's writes on by
			// some slots (setAside), whose entries were armed for later
			// receives of the same length and immediate.
			t := &c.Bufs[ch.buf]
			if dst := t.Region.Bytes()[t.Off+ch.off : t.Off+ch.off+n]; len(l.steerDst[slot]) >= n && &dst[0] != &l.steerDst[slot][0] {
				copy(dst, l.steerDst[slot][:n])
			}
		}
		if l.steerDst != nil {
			l.steerDst[slot] = nil
		}
	}
	if ch.buf != BufToken && n > 0 && !steered {
		src := l.Staging.Bytes()[slot*e.SlotSize : slot*e.SlotSize+n]
		t := &c.Bufs[ch.buf]
		dst := t.Region.Bytes()[t.Off+ch.off : t.Off+ch.off+n]
		if ch.kind == RecvReduce {
			a, b := dst, src
			if ch.fused { // dst = input op received: see CompileFused
				in := &c.Bufs[BufInput]
				a = in.Region.Bytes()[in.Off+ch.off : in.Off+ch.off+n]
			}
			if l.Peer < e.Rank {
				// The lower rank's operand first: two ranks that reduce
				// each other's data (recursive doubling's partners) then
				// compute the same expression, and get the same bits even
				// where the result is a NaN, whose payload and sign come
				// from the first NaN operand (see reduce.go).
				a, b = b, a
			}
			if err := ReduceTo(c.Type, c.Op, dst, a, b); err != nil {
				return fmt.Errorf("%s %s (%s): rank %d <- %d: %w", c.Desc(), c.Num(), p.Name, e.Rank, l.Peer, err)
			}
		} else {
			copy(dst, src)
		}
	}
	l.recvSlot = (l.recvSlot + 1) % e.NSlots
	l.arrived--
	if e.deferCredit(c, l.Peer) {
		l.deferred = true
		return nil
	}
	if !l.returnCredit(e.lazyCredit(c, l, n) || e.batchCredit(c, l, n)) {
		e.stall(l.Peer) // returned with the next credit write or after the next poll
	}
	return nil
}

func (e *Executor) handle(c *Call, comp *transport.Completion) error {
	p := c.Plan
	peer := idPeer(comp.ID)
	if e.win.retired && e.stale(comp) {
		return nil // a released link's (window.go)
	}
	if comp.Err != nil {
		what := comp.Op.String()
		switch comp.ID & idKind {
		case idData:
			what = "write data"
		case idCredit:
			what = "return credit"
		case idToken:
			what = "receive"
		case idBye:
			what = "bye"
		}
		if comp.Op == transport.OpRemoteError || peer >= len(e.Links) || e.Links[peer] == nil {
			return fmt.Errorf("%s %s (%s): rank %d: %s: %w", c.Desc(), c.Num(), p.Name, e.Rank, what, comp.Err)
		}
		stale := comp.ID&idKind == idData && idEpoch(comp.ID) != e.epoch
		if kind := comp.ID & idKind; kind == idToken || kind == idCredit || kind == idBye || stale {
			// A flushed receive token or credit says the connection is
			// gone. A peer may close once it has all it needs, while this
			// rank still consumes what the peer sent: that is not an error
			// unless this collective needs more from or to the peer.
			l := e.Links[peer]
			if l.down == nil {
				l.down = fmt.Errorf("%s: %w", what, comp.Err)
			}
			e.win.note(peer)
			return e.checkDown(c, peer)
		}
		err := fmt.Errorf("%s %s (%s): rank %d <-> %d: %s: %w", c.Desc(), c.Num(), p.Name, e.Rank, peer, what, comp.Err)
		if errors.Is(comp.Err, transport.ErrRemoteAccess) || errors.Is(comp.Err, transport.ErrLength) {
			return err // a protocol error of this rank's or the peer's, not a lost peer
		}
		return &PeerError{Peer: peer, Err: err}
	}
	switch comp.ID & idKind {
	case idData:
		switch idx := idChunk(comp.ID); {
		case idx == inlineChunk:
			// An inline send finished at post time; its acknowledgement
			// (this run's or an earlier one's) only confirms it.
			e.inflight--
			e.Links[peer].inline--
			e.settle()
		case idEpoch(comp.ID) == e.epoch && e.placing(p, idx, peer):
			// This run's send of chunk idx, placed at the peer.
			e.Links[peer].unplaced--
			e.released[idx] = true
			e.finish(p, idx)
		}
		// Otherwise no run waits for it: a run waits for its sends that
		// are not inline, so none of an earlier run is left (a
		// windowed run's released links are filtered above).
	case idCredit:
	case idBye:
		e.Links[peer].byeDone = true
		e.win.note(peer)
	case idToken:
		if peer >= len(e.Links) || e.Links[peer] == nil {
			return fmt.Errorf("%s: rank %d: completion for unknown peer %d", c.Desc(), e.Rank, peer)
		}
		l := e.Links[peer]
		// If the repost fails the connection is gone; the flushed tokens
		// that follow in the queue say so (see checkDown), after everything
		// that arrived before. A full queue only delays it.
		if err := l.EP.PostRecv(comp.ID, l.Staging, 0, 0); errors.Is(err, transport.ErrQueueFull) {
			l.owedTokens++
			e.stall(peer)
		}
		if !comp.HasImm {
			return fmt.Errorf("%s %s (%s): rank %d <- %d: unexpected message without immediate", c.Desc(), c.Num(), p.Name, e.Rank, peer)
		}
		switch comp.Imm & immType {
		case immData, immP2P:
			if l.arrived >= e.NSlots {
				return fmt.Errorf("%s %s (%s): rank %d <- %d: peer overran the %d staging slots", c.Desc(), c.Num(), p.Name, e.Rank, peer, e.NSlots)
			}
			slot := (l.recvSlot + l.arrived) % e.NSlots
			fp, seq := uint16(comp.Imm), uint16(comp.Imm>>16&seqMask)
			l.arrFP[slot] = fp
			l.arrLen[slot] = comp.Bytes
			l.arrSeq[slot] = seq
			l.arrP2P[slot] = comp.Imm&immType == immP2P
			if err := e.checkArrival(c, l, seq, fp, l.arrP2P[slot]); err != nil {
				return err
			}
			l.arrived++
		case immCredit:
			if comp.Imm&noticeFlag != 0 {
				return e.noticed(c, l, comp.Imm)
			}
			if comp.Imm&byeFlag != 0 {
				l.byeIn = true
				e.win.note(peer)
				return nil
			}
			l.credit(comp.Imm)
			if l.credits > e.NSlots {
				return fmt.Errorf("%s %s (%s): rank %d <- %d: peer returned more credits than slots", c.Desc(), c.Num(), p.Name, e.Rank, peer)
			}
		default:
			return fmt.Errorf("%s %s (%s): rank %d <- %d: bad immediate %#x", c.Desc(), c.Num(), p.Name, e.Rank, peer, comp.Imm)
		}
		e.markDirty(peer)
	default:
		return fmt.Errorf("%s: rank %d: completion with unknown id %#x", c.Desc(), e.Rank, comp.ID)
	}
	return nil
}

// checkDown fails the call if it still needs the link to peer and the link
// is down. A link is known to be down from a flushed receive token or credit
// write: the transport queues those after every completion that came before
// the connection broke, so by then everything the peer sent is counted in
// l.arrived.
func (e *Executor) checkDown(c *Call, peer int) error {
	l, p := e.Links[peer], c.Plan
	if l == nil || l.down == nil {
		return nil
	}
	if e.sendHead[peer] < len(p.sends[peer]) || (e.recvHead[peer]+l.arrived < len(p.recvs[peer]) && !e.strayWaits(c, l)) || !e.confirmedPeer(c, peer) {
		if err := e.arrivedEnd(c, l); err != nil {
			return err // the peer's message ended early, then it closed
		}
		if n, ok := decodeNotice(l.notice, peer, e.Size); ok && n.Reason == NoticeClosed && !c.P2P {
			return &ClosedError{Call: c.Desc() + " " + c.Num(), Seq: c.Seq, Rank: e.Rank, Peer: peer, PeerSeq: n.Seq}
		}
		return &PeerError{Peer: peer, Err: fmt.Errorf("%s %s (%s): rank %d <-> %d: connection lost: %w", c.Desc(), c.Num(), p.Name, e.Rank, peer, l.down)}
	}
	return nil
}

// arrivedEnd checks the point-to-point chunks that arrived from l's peer
// and are not consumed yet for one that ends the peer's message before
// this rank's receive ends: a peer whose message was shorter may close
// before they are consumed, and its flushed receives must not hide the
// cause behind "connection lost".
func (e *Executor) arrivedEnd(c *Call, l *Link) error {
	if !c.P2P {
		return nil
	}
	n, j := len(c.Plan.recvs[l.Peer]), 0
	for k := 0; k < l.arrived; k++ {
		slot := (l.recvSlot + k) % e.NSlots
		seq, fp := l.arrSeq[slot], l.arrFP[slot]
		if !l.arrP2P[slot] || (e.recvHead[l.Peer] == 0 && (uint32(seq)<<16|uint32(fp))&MaxTag != c.Seq) {
			continue // not this receive's: another tag's, set aside when reached (stray.go)
		}
		j++
		if endsMessage(seq, fp) {
			return e.checkEnd(c, l.Peer, true, e.recvHead[l.Peer]+j == n)
		}
	}
	return nil
}

// pendingString says what the run still waits for, per peer, for timeout
// errors: which peer did not deliver is usually the one that failed.
func (e *Executor) pendingString(p *Plan) string {
	var b strings.Builder
	for _, peer := range p.peers {
		ns, nr := len(p.sends[peer]), len(p.recvs[peer])
		if e.sendHead[peer] == ns && e.recvHead[peer] == nr {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "waiting on rank %d: sent %d/%d chunks, received %d/%d", peer, e.sendHead[peer], ns, e.recvHead[peer], nr)
	}
	if b.Len() == 0 {
		return "waiting for write completions"
	}
	return b.String()
}
