package shm

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// endpoint is one side of a connection.
//
// Each side owns a transmit segment holding the ring it produces; the peer
// maps it and consumes the ring. Sends, immediates, staged writes and read
// requests travel as records in the ring; a write or read whose target is
// in a shared mapping (or reachable by cross-memory attach) is one copy by
// the initiator, straight between the two regions.
//
// Locks: txMu is held while executing posted requests (copies, producing
// records), rxMu while consuming the peer's ring, mu (innermost, short)
// for the request FIFOs and the state. Order: rxMu or txMu, then mu, then
// the completion queue's lock.
//
// A posted send, write or read is pushed into the FIFO of its kind and
// executed at once by the posting goroutine if nothing is queued before
// it; otherwise it waits in txq and is executed by whoever drives progress
// next (Poll, Wait, a post, or a nudge from the peer). A request is done
// when its copy is done (direct write or read without immediate), when
// the peer has consumed its last record (send, write with immediate,
// staged write: the ring's head passed it), or when the last chunk of the
// answer arrived (staged read). Completions leave each FIFO in post order.
type endpoint struct {
	dev   *Device
	cq    *cq
	token [16]byte // also the probe the peer reads to detect CMA
	blob  []byte

	// Set by Connect before live; constant afterwards.
	peer     address
	peerName string
	conn     *net.UnixConn
	self     *Device // the peer's device when it lives in this process
	cma      bool
	txFD     int
	tx       []byte // my transmit segment
	peerTx   []byte
	peerCtl  []byte   // part 1 of the peer's control segment (bells)
	peerTab  []byte   // part 2: the peer's region table (read only)
	peerBell bell     // the bell of the peer endpoint's completion queue
	out      producer // my request ring
	outAns   producer // my answer ring
	in       consumer // the peer's request ring
	inAns    consumer // the peer's answer ring
	maxChunk int
	// Flags in the transmit segments (see ctl.go).
	myBusy, peerBusy       *atomic.Uint64
	myNudge, peerNudge     *atomic.Uint32
	myBlocked, peerBlocked *atomic.Uint32
	myOpen, peerOpen       *atomic.Uint32
	myClock, peerClock     *atomic.Uint64 // race builds (raceclock.go)

	// paths counts the writes and reads by the path they took (pathDirect,
	// pathCMA, pathStaged), for tests and diagnostics.
	paths [4]atomic.Uint64

	live atomic.Bool // connected and mapped; cleared by Close before unmapping
	// Hints for progress's fast path, kept under mu: requests queued or
	// answers pending (txWork), requests posted and not yet handed to the
	// queue (inflight), a request became done outside complete (doneDirty),
	// the head complete last saw (lastHead).
	txWork    atomic.Int32
	txqLen    atomic.Int32
	inflight  atomic.Int32
	doneDirty atomic.Bool
	lastHead  atomic.Uint64
	failed    atomic.Bool // in the error state
	peerGone  atomic.Bool // the peer will never touch our memory again (hung up)
	reader    sync.WaitGroup
	incoming  chan *offer // a dialer's connection, for the accepting side

	segMu sync.Mutex
	segs  map[uint64][]byte // the peer's Alloc segments, mapped here

	// ctlMu orders the segment and forget frames to the peer and guards
	// sent, the device's segments the peer was given (on its want).
	ctlMu sync.Mutex
	sent  map[uint64]struct{}

	txMu         sync.Mutex
	txAgain      atomic.Bool
	seqs         [opKinds]uint64 // the number of the next request of each kind
	published    uint64          // the request ring's tail last stored
	publishedAns uint64          // the answer ring's
	// watchPeer's state: since when the peer leaves work undone, and the
	// delay before the next nudge.
	stuckSince, nudgeDelay time.Duration
	// awaitSegment's state: the segment waited for, since when.
	segWaitID    uint64
	segWaitSince time.Duration
	// The last segment looked up, under txMu.
	lastSegID uint64
	lastSeg   []byte
	// asked holds the peer's segments this side sent a want for and was
	// not told to forget (under txMu).
	asked     map[uint64]struct{}
	watchTick atomic.Uint32 // watchPeer runs every 32nd time
	liov      [1]unix.Iovec // CMA vectors, under txMu
	riov      [1]unix.RemoteIovec

	rxMu    sync.Mutex
	rxAgain atomic.Bool

	mu         sync.Mutex
	connecting bool
	dialer     bool // this side dials (Connect was called)
	closed     bool
	err        error // the error state's cause
	sends      fifo[req]
	writes     fifo[req]
	reads      fifo[req]
	recvs      fifo[recv]
	txq        fifo[qop]                  // requests waiting to be executed, in post order
	answers    fifo[readTask]             // the peer's staged reads to answer
	done       fifo[transport.Completion] // completions for the queue to take
	ndone      atomic.Int32               // done.len(), for Poll's fast path
	spare      []byte                     // a snapshot buffer to reuse
	inlFree    []*[]byte                  // MaxInline buffers to reuse
	staged     atomic.Int32               // staged writes and reads not done (changed under mu)
	rcvActive  bool                       // a message is being placed into recvs' head
	rcvTotal   uint64
	rcvGot     uint64
}

var _ transport.Endpoint = (*endpoint)(nil)

// Request states.
const (
	stQueued = iota // waiting in txq (maybe partly executed: moved > 0)
	stRing          // records pushed; done when the peer's head passes end
	stData          // staged read asked for; done when all data arrived
	stDone          // finished (err says how), waiting for its turn
)

// req is a posted send, write or read.
type req struct {
	id     uint64
	r      *region
	off, n int
	rkey   uint64
	roff   uint64
	imm    uint32
	hasImm bool
	state  uint8
	err    error
	end    uint64  // ring position after the last record (stRing)
	moved  int     // payload pushed (send, staged write) or received (staged read)
	staged bool    // counted in endpoint.staged
	inl    *[]byte // the payload, copied at post (MaxInline), if not executed then
}

// src is the payload of a send or write.
func (q *req) src() []byte {
	if q.inl != nil {
		return (*q.inl)[:q.n]
	}
	return q.r.buf[q.off : q.off+q.n]
}

// pin pins the local region for a copy; a payload copied at post needs
// none. A true result must be paired with unpin.
func (q *req) pin() bool { return q.inl != nil || q.r.acquire() }

func (q *req) unpin() {
	if q.inl == nil {
		q.r.release()
	}
}

// recv is a posted receive.
type recv struct {
	id     uint64
	r      *region
	off, n int
}

// qop names a queued request: its kind and its number in the kind's FIFO.
type qop struct {
	kind uint8
	seq  uint64
}

// readTask is a peer's staged read this side answers chunk by chunk.
type readTask struct {
	key, off, n, moved, seq uint64
	snap                    []byte // the bytes [moved, n) as the request found them
	done                    bool
}

func newEndpoint(d *Device, q *cq, tok [16]byte) *endpoint {
	e := &endpoint{dev: d, cq: q, token: tok, txFD: -1, incoming: make(chan *offer, 1), segs: map[uint64][]byte{}}
	a := address{pid: uint32(d.pid), host: d.host, device: d.token, token: tok}
	e.blob = a.encode()
	e.maxChunk = d.maxChunk()
	q.addEndpoint(e)
	return e
}

// LocalAddress returns the endpoint's address blob (a copy).
func (e *endpoint) LocalAddress() []byte { return append([]byte(nil), e.blob...) }

func (e *endpoint) String() string { return e.peerName }

func (e *endpoint) fifoOf(kind uint8) *fifo[req] {
	switch kind {
	case opSend:
		return &e.sends
	case opWrite:
		return &e.writes
	}
	return &e.reads
}

func opOf(kind uint8) transport.Op {
	switch kind {
	case opSend:
		return transport.OpSend
	case opWrite:
		return transport.OpWrite
	}
	return transport.OpRead
}

// postableLocked says why a request cannot be posted now, or nil.
func (e *endpoint) postableLocked(op string) error {
	switch {
	case e.closed:
		return fmt.Errorf("shm: post %s: endpoint: %w", op, transport.ErrClosed)
	case e.err != nil:
		return fmt.Errorf("shm: post %s to %s: %w", op, e.peerName, e.err)
	case !e.live.Load():
		return fmt.Errorf("shm: post %s: endpoint not connected: %w", op, transport.ErrInvalid)
	}
	return nil
}

// checkLocal validates the local part of a request.
func (e *endpoint) checkLocal(op string, tr transport.Region, off, n int, need transport.Access) (*region, error) {
	r, ok := e.dev.localRegion(tr)
	if !ok {
		return nil, fmt.Errorf("shm: post %s: region of another device: %w", op, transport.ErrInvalid)
	}
	if off < 0 || n < 0 || !inBounds(uint64(off), uint64(n), uint64(len(r.buf))) {
		return nil, fmt.Errorf("shm: post %s: offset %d len %d out of bounds of local region (len %d): %w", op, off, n, len(r.buf), transport.ErrInvalid)
	}
	if r.access&need != need {
		return nil, fmt.Errorf("shm: post %s: local region grants %v, needs %v: %w", op, r.access, need, transport.ErrInvalid)
	}
	if r.isRevoked() {
		return nil, fmt.Errorf("shm: post %s: local region key %#x is deregistered: %w", op, r.key, transport.ErrInvalid)
	}
	return r, nil
}

// PostSend sends r.Bytes()[off:off+n] as one message. It never blocks: the
// payload is copied into the ring now (in chunks of at most RingSize/16
// bytes, the rest when the peer has made room). The buffer belongs to the
// transport until the completion, which arrives once the peer placed the
// message into a posted receive. If the peer dies or closes first, the send
// completes with ErrFlushed wrapping ErrPeerClosed. A full completion
// queue refuses the post with ErrQueueFull.
func (e *endpoint) PostSend(id uint64, tr transport.Region, off, n int) error {
	r, err := e.checkLocal("send", tr, off, n, 0)
	if err != nil {
		return err
	}
	return e.post("send", opSend, req{id: id, r: r, off: off, n: n})
}

// PostWrite writes local.Bytes()[off:off+n] into the peer's region at
// roff. It never blocks. If the target region is in the peer's shared
// memory (from Alloc) or cross-memory attach works, the caller copies the
// data into it before PostWrite returns, after checking key, bounds and
// access in the peer's table; otherwise the data goes through the ring and
// the peer checks and places it. A write without immediate completes once
// its data is placed; one with an immediate once the immediate consumed a
// receive on the peer. A refused access completes the write with
// ErrRemoteAccess and puts both endpoints into the error state.
func (e *endpoint) PostWrite(id uint64, tr transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	r, err := e.checkLocal("write", tr, off, n, 0)
	if err != nil {
		return err
	}
	q := req{id: id, r: r, off: off, n: n, rkey: remote.Key, roff: roff}
	if imm != nil {
		q.imm, q.hasImm = *imm, true
	}
	return e.post("write", opWrite, q)
}

// PostRead reads n bytes of the peer's region at roff into
// local.Bytes()[off:off+n]. It never blocks; as PostWrite, the read is one
// copy by the caller when the source is shared or reachable by
// cross-memory attach, else the peer answers it through the ring (copying
// the data when the request arrives, so the read sees every write posted
// before it).
func (e *endpoint) PostRead(id uint64, tr transport.Region, off, n int, remote transport.RemoteRegion, roff uint64) error {
	r, err := e.checkLocal("read", tr, off, n, transport.AccessLocalWrite)
	if err != nil {
		return err
	}
	return e.post("read", opRead, req{id: id, r: r, off: off, n: n, rkey: remote.Key, roff: roff})
}

// post executes q if nothing is queued before it, else queues it. The
// request enters its FIFO after executing, in one critical section with
// its outcome; txMu, held throughout, orders posts.
func (e *endpoint) post(op string, kind uint8, q req) error {
	if err := e.cq.reserve(); err != nil {
		return fmt.Errorf("shm: post %s to %s: %w", op, e.peerName, err)
	}
	e.txMu.Lock()
	if e.failed.Load() || !e.live.Load() {
		e.mu.Lock()
		err := e.postableLocked(op)
		e.mu.Unlock()
		if err != nil {
			e.txMu.Unlock()
			e.cq.unreserve()
			return err
		}
	}
	seq := e.seqs[kind] // == the kind's FIFO next(): pushes happen only here
	blocked := e.txqLen.Load() != 0 || e.execReq(kind, seq, &q)
	e.mu.Lock()
	if e.err != nil {
		// The endpoint failed meanwhile: the request was accepted and
		// completes now, as it finished or flushed.
		c := transport.Completion{ID: q.id, Op: opOf(kind), Err: q.err, Endpoint: e}
		if q.state != stDone {
			c.Err = e.flushErr(opOf(kind).String(), e.err)
		} else if q.err == nil {
			c.Bytes = q.n
		}
		e.pushLocked(c)
		e.mu.Unlock()
		e.txMu.Unlock()
		return nil
	}
	if blocked && kind != opRead && q.n <= maxInline && q.moved == 0 && q.inl == nil {
		e.inlineLocked(&q)
	}
	f := e.fifoOf(kind)
	f.push(q)
	e.seqs[kind]++
	e.inflight.Add(1)
	if q.staged {
		e.staged.Add(1)
	}
	if blocked {
		e.txq.push(qop{kind, seq})
		e.noteTxWorkLocked()
	} else if q.state == stDone {
		e.emitLocked(kind)
		if f.seq(seq) != nil {
			e.doneDirty.Store(true) // behind one not done
		}
	}
	e.mu.Unlock()
	e.flushTx()
	e.txMu.Unlock()
	return nil
}

// maxInline is the largest payload a post copies before it returns
// (transport.Inliner): one executed at once is copied then anyway; one that
// has to wait is copied aside.
const maxInline = 4096

// MaxInline implements transport.Inliner: sends and writes of at most
// 4 KiB are copied before PostSend and PostWrite return.
func (d *Device) MaxInline() int { return maxInline }

// inlineLocked copies the payload of a send or write that has to wait
// aside, into a reused buffer, so that the caller may reuse its own.
func (e *endpoint) inlineLocked(q *req) {
	var b *[]byte
	if k := len(e.inlFree); k > 0 {
		b, e.inlFree = e.inlFree[k-1], e.inlFree[:k-1]
	} else {
		b = new([]byte)
		*b = make([]byte, maxInline)
	}
	if !q.r.acquire() {
		e.inlFree = append(e.inlFree, b)
		return // executing it will find the region gone
	}
	copy(*b, q.r.buf[q.off:q.off+q.n])
	q.r.release()
	q.inl = b
}

// noteTxWorkLocked refreshes the txWork hint after txq or answers changed.
func (e *endpoint) noteTxWorkLocked() {
	if w := int32(e.txq.len() + e.answers.len()); e.txWork.Load() != w {
		e.txWork.Store(w)
	}
	if n := int32(e.txq.len()); e.txqLen.Load() != n {
		e.txqLen.Store(n)
	}
}

// PostRecv posts a receive. It never blocks; the buffer belongs to the
// transport until the completion. A message or immediate already waiting
// in the ring completes it at once (placed by this call). A message longer
// than n fails it with ErrLength and puts both endpoints into the error
// state. On a dead peer it completes with ErrFlushed wrapping
// ErrPeerClosed.
func (e *endpoint) PostRecv(id uint64, tr transport.Region, off, n int) error {
	r, err := e.checkLocal("recv", tr, off, n, transport.AccessLocalWrite)
	if err != nil {
		return err
	}
	if err := e.cq.reserve(); err != nil {
		return fmt.Errorf("shm: post recv from %s: %w", e.peerName, err)
	}
	e.mu.Lock()
	if err := e.postableLocked("recv"); err != nil {
		e.mu.Unlock()
		e.cq.unreserve()
		return err
	}
	e.recvs.push(recv{id: id, r: r, off: off, n: n})
	e.mu.Unlock()
	if e.in.tail.Load() != e.in.head.Load() { // a request may wait for it
		e.runRx()
	}
	return nil
}
