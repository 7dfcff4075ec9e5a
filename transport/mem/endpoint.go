package mem

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/goccl/goccl/transport"
)

// Endpoint is one side of an in-memory connection. It is safe for
// concurrent use.
//
// Post* never blocks. It refuses a request with an error wrapping
// transport.ErrInvalid if its local part is invalid or the endpoint was
// never connected, transport.ErrClosed after Close, and the cause of the
// error state (ErrRemoteAccess, ErrLength, ErrPeerClosed, ErrLink) after the
// connection failed, and transport.ErrQueueFull when the completion queue's
// depth is taken; a refused request produces no completion. When the
// peer closes or the link is cut, every pending request completes at once
// with an error wrapping transport.ErrFlushed and the cause.
type Endpoint struct {
	dev  *Device
	cq   *CompletionQueue
	id   uint64
	addr []byte
	rng  *rand.Rand // used by the run goroutine only

	// want is the endpoint Connect was called with; guarded by dev.net.mu.
	want *Endpoint

	mu        sync.Mutex
	peer      *Endpoint // set once, at connection
	conn      *conn
	connected bool
	closed    bool
	err       error         // the cause of the error state, nil while healthy
	sq        queue         // sends, writes and reads not yet taken by run
	rq        queue         // receives not yet taken by the peer's run
	rqBusy    bool          // the peer's run holds the receive it took last
	rqIdle    chan struct{} // closed by recvDone for a Close waiting on rqBusy
	done      chan struct{} // closed when run returns; nil until connected

	wake   chan struct{} // (1) sq has work
	rsig   chan struct{} // (1) rq has a receive
	up     chan struct{} // closed once connected
	failed chan struct{} // closed on entering the error state
}

var _ transport.Endpoint = (*Endpoint)(nil)

func newEndpoint(d *Device, cq *CompletionQueue) *Endpoint {
	return &Endpoint{
		dev:    d,
		cq:     cq,
		wake:   make(chan struct{}, 1),
		rsig:   make(chan struct{}, 1),
		up:     make(chan struct{}),
		failed: make(chan struct{}),
	}
}

// LocalAddress returns the blob that names this endpoint on its network.
func (e *Endpoint) LocalAddress() []byte {
	return append([]byte(nil), e.addr...)
}

func (e *Endpoint) String() string {
	return fmt.Sprintf("%s/ep%d", e.dev.name, e.id)
}

// Connect connects to the endpoint of the same network that published
// remote. It blocks until the peer has called Connect with this endpoint's
// address too, or ctx is done, or this endpoint is closed.
func (e *Endpoint) Connect(ctx context.Context, remote []byte) error {
	n := e.dev.net
	netID, epID, ok := decodeAddr(remote)
	if !ok || netID != n.id {
		return fmt.Errorf("mem: connect %v: address is not of this network: %w", e, transport.ErrInvalid)
	}
	n.mu.Lock()
	e.mu.Lock()
	closed, connected, cause := e.closed, e.connected, e.err
	e.mu.Unlock()
	switch {
	case closed:
		n.mu.Unlock()
		return fmt.Errorf("mem: connect %v: %w", e, transport.ErrClosed)
	case cause != nil:
		n.mu.Unlock()
		return fmt.Errorf("mem: connect %v: %w", e, cause)
	case connected || e.want != nil:
		n.mu.Unlock()
		return fmt.Errorf("mem: connect %v: already connected or connecting: %w", e, transport.ErrInvalid)
	}
	p := n.eps[epID]
	switch {
	case p == nil && epID < n.nextEP:
		n.mu.Unlock()
		return fmt.Errorf("mem: connect %v to ep%d: %w", e, epID, transport.ErrPeerClosed)
	case p == nil || p == e:
		n.mu.Unlock()
		return fmt.Errorf("mem: connect %v to ep%d: no such peer: %w", e, epID, transport.ErrInvalid)
	}
	e.want = p
	if p.want == e {
		n.link(e, p)
	}
	n.mu.Unlock()
	select {
	case <-e.up:
		return nil
	case <-e.failed:
		return fmt.Errorf("mem: connect %v: %w", e, e.cause())
	case <-ctx.Done():
		n.mu.Lock()
		defer n.mu.Unlock()
		select {
		case <-e.up:
			return nil
		default:
		}
		e.want = nil
		return fmt.Errorf("mem: connect %v to %v: %w", e, p, ctx.Err())
	}
}

// cause returns the cause of the error state, or nil.
func (e *Endpoint) cause() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// checkLocal validates the local part of a request and returns its bytes.
func (e *Endpoint) checkLocal(op transport.Op, reg transport.Region, off, n int, write bool) ([]byte, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("mem: post %v on %v: %s: %w", op, e, fmt.Sprintf(format, a...), transport.ErrInvalid)
	}
	r, ok := reg.(*Region)
	if !ok || r == nil {
		return nil, bad("region %T is not a mem region", reg)
	}
	if r.dev != e.dev {
		return nil, bad("region of %s, endpoint of %s", r.dev.name, e.dev.name)
	}
	if r.dead.Load() {
		return nil, bad("region deregistered")
	}
	if write && r.access&transport.AccessLocalWrite == 0 {
		return nil, bad("region lacks local-write access")
	}
	if off < 0 || n < 0 || off > len(r.buf) || n > len(r.buf)-off {
		return nil, bad("[%d, +%d) out of the %d-byte region", off, n, len(r.buf))
	}
	return r.buf[off : off+n], nil
}

// enqueue queues r on sq (or rq for a receive) unless the endpoint cannot
// take requests; then it returns why and recycles r.
func (e *Endpoint) enqueue(r *request) error {
	e.mu.Lock()
	var err error
	switch {
	case e.closed:
		err = fmt.Errorf("mem: post %v on %v: %w", r.op, e, transport.ErrClosed)
	case e.err != nil:
		err = fmt.Errorf("mem: post %v on %v: endpoint in error state: %w", r.op, e, e.err)
	case !e.connected:
		err = fmt.Errorf("mem: post %v on %v: endpoint not connected: %w", r.op, e, transport.ErrInvalid)
	}
	if err == nil {
		if qerr := e.cq.reserve(); qerr != nil {
			err = fmt.Errorf("mem: post %v on %v: %w", r.op, e, qerr)
		}
	}
	if err != nil {
		e.mu.Unlock()
		freeRequest(r)
		return err
	}
	sig := e.wake
	if r.op == transport.OpRecv {
		e.rq.push(r)
		sig = e.rsig
	} else {
		e.sq.push(r)
	}
	e.mu.Unlock()
	select {
	case sig <- struct{}{}:
	default:
	}
	return nil
}

// PostSend queues a send of r.Bytes()[off:off+n]. It does not block; the
// buffer belongs to the transport until the completion. The send completes
// once the peer's receive holds the data.
func (e *Endpoint) PostSend(id uint64, r transport.Region, off, n int) error {
	b, err := e.checkLocal(transport.OpSend, r, off, n, false)
	if err != nil {
		return err
	}
	req := newRequest(id, transport.OpSend, b)
	return e.enqueue(req)
}

// PostRecv queues a receive into r.Bytes()[off:off+n] (r needs
// AccessLocalWrite). It does not block; the buffer belongs to the transport
// until the completion.
func (e *Endpoint) PostRecv(id uint64, r transport.Region, off, n int) error {
	b, err := e.checkLocal(transport.OpRecv, r, off, n, true)
	if err != nil {
		return err
	}
	return e.enqueue(newRequest(id, transport.OpRecv, b))
}

// PostWrite queues a write of local.Bytes()[off:off+n] into the peer's
// region at roff, with an immediate if imm is non-nil. It does not block;
// the buffer belongs to the transport until the completion, which comes
// once the data is placed.
func (e *Endpoint) PostWrite(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64, imm *uint32) error {
	b, err := e.checkLocal(transport.OpWrite, local, off, n, false)
	if err != nil {
		return err
	}
	req := newRequest(id, transport.OpWrite, b)
	req.remote, req.roff = remote, roff
	if imm != nil {
		req.imm, req.hasImm = *imm, true
	}
	return e.enqueue(req)
}

// PostRead queues a read of n bytes of the peer's region at roff into
// local.Bytes()[off:off+n] (local needs AccessLocalWrite). It does not
// block; the buffer belongs to the transport until the completion.
func (e *Endpoint) PostRead(id uint64, local transport.Region, off, n int, remote transport.RemoteRegion, roff uint64) error {
	b, err := e.checkLocal(transport.OpRead, local, off, n, true)
	if err != nil {
		return err
	}
	req := newRequest(id, transport.OpRead, b)
	req.remote, req.roff = remote, roff
	return e.enqueue(req)
}

// Close disconnects. Pending requests complete with errors wrapping
// transport.ErrFlushed and ErrClosed on this side, ErrFlushed and
// ErrPeerClosed on the peer. Close waits for the copy in progress from or
// into this endpoint's buffers, if any, so that when it returns the
// transport no longer touches them (except the buffers of requests whose
// completion is still to come). Closing twice does nothing.
func (e *Endpoint) Close() error {
	n := e.dev.net
	n.mu.Lock()
	if n.eps[e.id] == e {
		delete(n.eps, e.id)
	}
	e.want = nil
	n.mu.Unlock()

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	peer, done := e.peer, e.done
	e.mu.Unlock()

	e.fail(fmt.Errorf("mem: %v closed: %w", e, transport.ErrClosed))
	if peer != nil {
		peer.fail(fmt.Errorf("mem: peer %v closed the connection: %w", e, transport.ErrPeerClosed))
	}
	e.dev.forget(e)
	if done != nil {
		<-done
	}
	// The peer's goroutine may be copying into one of our receives; when
	// Close returns, no copy into this endpoint's buffers is in progress.
	e.mu.Lock()
	var idle chan struct{}
	if e.rqBusy {
		idle = make(chan struct{})
		e.rqIdle = idle
	}
	e.mu.Unlock()
	if idle != nil {
		<-idle
	}
	return nil
}

// fail moves e into the error state with cause, unless it is in it already,
// and flushes the receives nobody holds. The run goroutine flushes sq.
func (e *Endpoint) fail(cause error) {
	e.flush(e.enterError(cause), cause)
}

// enterError moves e into the error state with cause, unless it is in it
// already, and returns the receives nobody holds, for the caller to flush
// (fail does at once). A request whose failure moves its endpoint into
// the error state is completed after enterError and before the flush:
// whoever takes its completion finds the endpoint refusing posts, and the
// completions keep their order (the failed request's first).
func (e *Endpoint) enterError(cause error) []*request {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return nil
	}
	e.err = cause
	close(e.failed)
	if e.rqBusy {
		return nil
	}
	return e.rq.drain()
}

// flush completes requests that will not be carried out.
func (e *Endpoint) flush(rs []*request, cause error) {
	for _, r := range rs {
		e.complete(r, fmt.Errorf("mem: %v %d on %v flushed: %w: %w", r.op, r.id, e, transport.ErrFlushed, cause), 0)
	}
}

// complete reports r on e's queue and recycles it.
func (e *Endpoint) complete(r *request, err error, bytes int) {
	c := transport.Completion{ID: r.id, Op: r.op, Err: err, Endpoint: e}
	if err == nil {
		c.Bytes = bytes
	}
	e.cq.push(c)
	freeRequest(r)
	if err != nil && afterErrorCompletion != nil {
		afterErrorCompletion()
	}
}

// afterErrorCompletion, when set (by tests only), runs after a failed
// request's completion is on its queue: a slow engine goroutine there.
var afterErrorCompletion func()

// takeRecv waits for and takes the next receive posted on e (called by the
// peer's run goroutine, the only consumer). It returns nil if e, or the
// caller's endpoint from, enters the error state first.
func (e *Endpoint) takeRecv(from *Endpoint) *request {
	for {
		select {
		case <-from.failed:
			return nil
		default:
		}
		e.mu.Lock()
		if e.err == nil && e.rq.len() > 0 {
			r := e.rq.pop()
			e.rqBusy = true
			e.mu.Unlock()
			return r
		}
		e.mu.Unlock()
		select {
		case <-e.rsig:
		case <-from.failed:
			return nil
		case <-e.failed:
			// Whoever failed e fails from too, right after.
			<-from.failed
			return nil
		}
	}
}

// recvDone releases the receive taken by takeRecv, after its completion,
// and flushes the receives queued behind it if e failed meanwhile.
func (e *Endpoint) recvDone() {
	e.mu.Lock()
	e.rqBusy = false
	if e.rqIdle != nil {
		close(e.rqIdle)
		e.rqIdle = nil
	}
	var rq []*request
	cause := e.err
	if cause != nil {
		rq = e.rq.drain()
	}
	e.mu.Unlock()
	e.flush(rq, cause)
}
