// Package transport is goccl's transport contract: RDMA semantics that every
// backend (verbs, tcp, the in-memory loopback used by tests) implements, so
// that one set of collective algorithms runs on all of them.
//
// The model is the verbs one:
//
//   - Memory is registered before use. A Region has a local view (Bytes), a
//     remote descriptor (Remote: key, length) that a peer needs to touch it,
//     and the Access it grants. A peer may touch only a region whose key it
//     holds, only inside its bounds, only with the access granted. Deregister
//     revokes the key: later remote accesses with it are refused.
//   - Work is posted, not performed: PostSend, PostRecv, PostWrite (optionally
//     with 32-bit immediate data) and PostRead return at once. Each finished
//     work request appears later as one Completion on the completion queue the
//     endpoint was created with. Many requests may be in flight at once, as
//     many as the completion queue's depth (ErrQueueFull beyond it).
//   - An Endpoint is one side of a reliable, ordered connection to one peer.
//     It is created unconnected, publishes an address blob (LocalAddress) that
//     travels to the peer over a trusted control path (bootstrap), and is
//     connected with the peer's blob. The transport never learns how the blob
//     travelled.
//   - Errors behave as on an RC queue pair: a remote access violation (wrong
//     or revoked key, out of bounds, missing access right) is refused by the
//     target before it touches memory, is reported as an error completion on
//     both sides, and moves both endpoints into the error state. An endpoint
//     in the error state (also after the peer closed or the link failed)
//     completes every pending request with an error and refuses later posts
//     with the same cause.
//
// This package holds the interfaces, sentinel errors and small helpers
// (pinned allocation) and nothing else; its conformance suite lives in
// transport/transporttest. It may import only the standard library and
// golang.org/x/sys. Algorithms import it; it never imports a backend.
package transport

import (
	"context"
	"errors"
	"fmt"
)

// Access is the set of rights a registered region grants.
type Access uint32

const (
	// AccessLocalWrite lets the local side receive into the region (PostRecv,
	// the local buffer of PostRead).
	AccessLocalWrite Access = 1 << iota
	// AccessRemoteWrite lets a peer holding the key PostWrite into the region.
	AccessRemoteWrite
	// AccessRemoteRead lets a peer holding the key PostRead from the region.
	AccessRemoteRead
)

// AccessAll grants every right.
const AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead

func (a Access) String() string {
	s := ""
	add := func(n string) {
		if s != "" {
			s += "|"
		}
		s += n
	}
	if a&AccessLocalWrite != 0 {
		add("local-write")
	}
	if a&AccessRemoteWrite != 0 {
		add("remote-write")
	}
	if a&AccessRemoteRead != 0 {
		add("remote-read")
	}
	if s == "" {
		return "none"
	}
	return s
}

// RemoteRegion is what a peer needs to address a registered region with
// PostWrite or PostRead: the key and the region's length. Addr is the
// backend's base address (the virtual address for verbs, zero where the key
// alone names the region); offsets passed to PostWrite/PostRead are relative
// to the start of the region, never absolute. A RemoteRegion is plain data
// that may be sent to a peer over bootstrap or in a message.
type RemoteRegion struct {
	Key  uint64
	Addr uint64
	Len  uint64
}

// Region is registered memory.
type Region interface {
	// Bytes is the registered memory. It stays valid (and, for hardware
	// backends, pinned) until Deregister.
	Bytes() []byte
	// Remote is the descriptor a peer needs to address this region.
	Remote() RemoteRegion
	// Access is the set of rights granted at registration.
	Access() Access
}

// Op names the kind of work request a Completion reports.
type Op uint8

const (
	OpSend Op = iota + 1
	OpRecv
	OpWrite
	OpRead
	// OpRemoteError reports, on the target side, a remote access that was
	// refused (wrong or revoked key, out of bounds, missing right). It carries
	// no work request id of the local side (ID is 0).
	OpRemoteError
)

func (o Op) String() string {
	switch o {
	case OpSend:
		return "send"
	case OpRecv:
		return "recv"
	case OpWrite:
		return "write"
	case OpRead:
		return "read"
	case OpRemoteError:
		return "remote-error"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Completion reports one finished work request.
type Completion struct {
	// ID is the id given when the request was posted.
	ID uint64
	// Op is the kind of request.
	Op Op
	// Err is nil on success. Otherwise it wraps one of the sentinel errors
	// below and names the cause.
	Err error
	// Bytes is the number of bytes transferred: for a receive, the length of
	// the message (or of the write-with-immediate) that completed it.
	Bytes int
	// Imm is the immediate data of a write-with-immediate; HasImm says a
	// receive was completed by a write-with-immediate rather than a send.
	Imm    uint32
	HasImm bool
	// Endpoint is the endpoint the request was posted on.
	Endpoint Endpoint
}

// CompletionQueue collects the completions of the endpoints created with it.
// It is safe for concurrent use.
//
// Depth. A queue created with depth d holds d completions, and the depth is
// enforced the same way on every backend: every request posted on one of
// its endpoints (send, receive, write, read) holds one entry of the queue
// from the moment Post* accepts it until Poll or Wait hands its completion
// to the caller. A post that would make the entries held exceed d is refused
// at once with an error wrapping ErrQueueFull: nothing is posted, no
// completion follows, and the endpoint stays usable; the caller takes
// completions out (Poll or Wait) and posts again. Completions that no local
// post caused (OpRemoteError on the target of a refused access) hold no
// entry and are never dropped. So an open queue never overflows and never
// loses a completion, and a caller that never has more than d requests
// posted and not yet taken out never sees ErrQueueFull.
type CompletionQueue interface {
	// Poll moves up to len(out) completions into out and returns how many.
	// It never blocks.
	Poll(out []Completion) int
	// Wait blocks until at least one completion is available, then behaves as
	// Poll. It returns early with ctx's error, or ErrClosed after Close.
	Wait(ctx context.Context, out []Completion) (int, error)
	// Close wakes every waiter. Completions still queued are dropped.
	Close() error
}

// Readier is implemented by completion queues that can tell, from any
// goroutine and without taking anything, whether completions wait to be
// taken out (Poll would return some). The stall diagnosis uses it: with
// many more ranks than processors, a rank's poller may not run for seconds
// after the transport queued what it waits for.
type Readier interface {
	Ready() bool
}

// Device is one transport instance of a process: it owns registrations,
// completion queues and endpoints. It is safe for concurrent use.
type Device interface {
	// Name names the backend and device, e.g. "tcp", "verbs:rxe0".
	Name() string
	// Register registers buf with the given access and returns its region.
	// buf must not be resized or reused for anything else until Deregister;
	// the device may read or write it whenever a request or a peer's access
	// targets it. Memory from Alloc is the fastest to register; hardware
	// backends pin other memory for the region's lifetime.
	Register(buf []byte, access Access) (Region, error)
	// Deregister revokes the region's key and releases it. Later remote
	// accesses with the key are refused; requests still in flight on it may
	// complete with an error.
	Deregister(r Region) error
	// NewCompletionQueue creates a queue of depth completions (see
	// CompletionQueue for how the depth bounds posts). A depth below 1 is
	// refused with ErrInvalid; a depth beyond what the device supports is
	// refused with an error wrapping ErrNotSupported that names the
	// device's maximum (it is never silently reduced).
	NewCompletionQueue(depth int) (CompletionQueue, error)
	// NewEndpoint creates an unconnected endpoint whose completions go to cq.
	NewEndpoint(cq CompletionQueue) (Endpoint, error)
	// Close closes every endpoint and completion queue of the device and
	// releases its resources.
	Close() error
}

// Endpoint is one side of a reliable ordered connection to one peer.
//
// Posting never blocks: a Post* call queues the request and returns; the
// request's Completion arrives later on the endpoint's completion queue.
// A post that would exceed the depth of that queue is refused with
// ErrQueueFull (see CompletionQueue) and leaves the endpoint usable.
// Until then the buffer of the request belongs to the transport: the caller
// must not write it (send, write) or read or write it (recv, read). Requests
// of the same kind complete in the order they were posted, and messages,
// writes and reads reach the peer in the order they were posted.
// A receive is completed by the next message (PostSend) or the next
// write-with-immediate from the peer, in arrival order; a message that
// arrives before a receive is posted waits for one. A message longer than
// the posted receive is an error on both sides.
type Endpoint interface {
	// LocalAddress is the blob the peer passes to its Connect.
	LocalAddress() []byte
	// Connect connects to the peer whose endpoint published remote. It blocks
	// until the connection is up on this side or ctx is done. Both sides call
	// Connect with each other's blob.
	Connect(ctx context.Context, remote []byte) error
	// PostSend sends r.Bytes()[off:off+n] as one message.
	PostSend(id uint64, r Region, off, n int) error
	// PostRecv posts a receive into r.Bytes()[off:off+n]. r needs
	// AccessLocalWrite (n may be zero for a receive that only takes an
	// immediate).
	PostRecv(id uint64, r Region, off, n int) error
	// PostWrite writes local.Bytes()[off:off+n] into the peer's region remote
	// at roff. With imm non-nil the write also consumes a receive on the
	// peer, which completes with the byte count and the immediate; *imm is
	// read before PostWrite returns, so the caller may reuse the variable.
	// The write completes on this side once the peer has placed the data.
	PostWrite(id uint64, local Region, off, n int, remote RemoteRegion, roff uint64, imm *uint32) error
	// PostRead reads n bytes of the peer's region remote at roff into
	// local.Bytes()[off:off+n]; local needs AccessLocalWrite.
	PostRead(id uint64, local Region, off, n int, remote RemoteRegion, roff uint64) error
	// Close disconnects. Pending requests on both sides complete with an
	// error wrapping ErrClosed (this side) or ErrPeerClosed (the peer).
	Close() error
}

// Inliner is implemented by devices whose endpoints copy the payload of a
// send or write of at most MaxInline() bytes before the post returns (as
// verbs' IBV_SEND_INLINE does): the caller may reuse that buffer at once.
// The request still completes later, when the peer has placed the data.
type Inliner interface {
	MaxInline() int
}

// LazyWriter is implemented by endpoints whose PostWrite of a message
// costs a system call of its own when it leaves alone (TCP). PostWriteLazy
// is PostWrite for a message the peer does not wait for (a returned flow
// control credit it will not need before this side writes to it again):
// the endpoint may hold it back to leave with its next message to the
// peer, and sends it anyway once its completion queue's callers find
// nothing else to do for a few polls, before they sleep, or when they
// leave the queue alone; so it is late by a few polls at most, never lost.
type LazyWriter interface {
	PostWriteLazy(id uint64, local Region, off, n int, remote RemoteRegion, roff uint64, imm *uint32) error
}

// QuietWriter is implemented by endpoints that can leave out the
// completion of a write that succeeds, as verbs' unsignaled work requests
// do. PostWriteQuiet is PostWrite (with lazy, LazyWriter's PostWriteLazy)
// for a write whose success the caller has no use for: a returned flow
// control credit. It holds an entry of the completion queue while in
// flight like any request; if it fails it completes with its error like
// any request, but once placed at the peer it completes nothing. Where
// each completion is a queue operation on the caller's path (TCP), a
// small call's credits no longer cost one each.
type QuietWriter interface {
	PostWriteQuiet(id uint64, local Region, off, n int, remote RemoteRegion, roff uint64, imm *uint32, lazy bool) error
}

// Steerer is implemented by endpoints that read the payloads of writes off
// the wire themselves (TCP), and can therefore place an expected one
// somewhere other than its target: the executor's chunks land in staging
// slots from which most are only copied once more into the caller's
// buffer, and a chunk steered into that buffer skips the copy. Steering is
// the target's local affair: the initiator and the wire see nothing of it,
// and the write's completion on both sides is as without it.
//
// Steer arms entry i (0 <= i < MaxSteer): the next write-with-immediate
// that targets the local region r at offset off, carries exactly len(dst)
// bytes and the immediate imm is placed into dst instead (r's bytes there
// are left as they were). It reports false, and arms nothing, if the
// endpoint cannot steer that write (i out of range or armed, r not its
// device's, the endpoint in the error state). dst must stay writable by
// the endpoint until Unsteer(i).
//
// Unsteer disarms entry i and reports whether a write was placed into dst
// (wholly: its receive completion is queued, or was taken). Nothing is
// placed into dst after Unsteer returns: a write being placed when
// Unsteer is called goes on into r, what it had put into dst copied there
// first, so that r holds all of it.
type Steerer interface {
	Steer(i int, r Region, off int, imm uint32, dst []byte) bool
	Unsteer(i int) bool
}

// MaxSteer is how many entries a Steerer has.
const MaxSteer = 64

// Allocator is implemented by devices that allocate the memory they serve
// best themselves (the shared-memory transport: memory its peers can map,
// so that their writes and reads are one copy). Memory from Alloc may be
// registered with other devices too. Free releases it; a device may refuse
// to free memory that is still registered.
type Allocator interface {
	Alloc(n int) ([]byte, error)
	Free(b []byte) error
}

// Sentinel errors. Backends wrap them with %w and add the operation, peer and
// cause, so callers test with errors.Is.
var (
	// ErrNotSupported: the backend is not available in this build or on this
	// machine (e.g. no RDMA device).
	ErrNotSupported = errors.New("not supported")
	// ErrClosed: the device, queue or endpoint was closed locally.
	ErrClosed = errors.New("closed")
	// ErrPeerClosed: the peer closed the connection or died.
	ErrPeerClosed = errors.New("peer closed the connection")
	// ErrLink: the link failed (timeout, reset, I/O error).
	ErrLink = errors.New("link failure")
	// ErrRemoteAccess: the target refused a remote access (wrong or revoked
	// key, out of bounds, missing access right).
	ErrRemoteAccess = errors.New("remote access error")
	// ErrLength: a message did not fit the posted receive.
	ErrLength = errors.New("message longer than posted receive")
	// ErrInvalid: a request's arguments are invalid locally (bounds, access,
	// unconnected endpoint); the request is refused at post time.
	ErrInvalid = errors.New("invalid request")
	// ErrFlushed: the request was pending when the endpoint entered the error
	// state; the wrapped cause says why.
	ErrFlushed = errors.New("request flushed")
	// ErrQueueFull: the post would exceed the depth of the endpoint's
	// completion queue (see CompletionQueue). The request was not posted and
	// the endpoint is unharmed: take completions out, then post again. It is
	// not an ErrInvalid: the same post succeeds once entries are free.
	ErrQueueFull = errors.New("completion queue full")
)
