// Package transporttest is the conformance suite of the transport contract:
// every backend (mem, tcp, verbs) runs Run from its own tests, so that one set
// of collective algorithms sees the same behaviour everywhere.
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t testing.TB) transport.Device { ... })
//	}
//
// Every subtest builds a fresh Pair (two devices, a completion queue and an
// endpoint on each, connected), checks data and completions, and closes
// everything with t.Cleanup. Every wait is bounded: a broken transport fails
// the test, it never hangs it. Subtests do not call t.Parallel, and Run must
// not be called concurrently (the large subtests share two 64 MiB buffers).
//
// The suite pins down points the contract leaves open, so that every backend
// behaves the same:
//
//   - A message longer than the posted receive completes the receive with an
//     error wrapping ErrLength and the send with an error wrapping ErrLength,
//     and moves both endpoints into the error state (as an RC queue pair).
//   - In the error state, Post* returns an error wrapping the cause
//     (ErrRemoteAccess, ErrLength, ErrPeerClosed or ErrLink, ErrClosed);
//     requests that were pending complete with an error wrapping both
//     ErrFlushed and the cause. The request that hit a remote access
//     violation completes with ErrRemoteAccess (not ErrFlushed); the target
//     reports one OpRemoteError completion (ID 0) wrapping ErrRemoteAccess.
//   - The target of a refused access is left untouched, and so is the local
//     buffer of a refused read.
//   - Zero-byte send, write, write-with-immediate and read are valid and
//     complete with Bytes 0 (with a valid key; the suite does not test a
//     zero-byte access with an invalid key, which verbs does not check).
//   - Local misuse is refused by Post* with ErrInvalid and produces no
//     completion and no traffic, and the endpoint stays usable: offset or
//     length negative or past the region, a receive or read into a region
//     without AccessLocalWrite, a deregistered region, a region of another
//     device, a post on an endpoint that was never connected.
//   - Pending requests are flushed when the peer closes its endpoint or its
//     device (ErrPeerClosed or ErrLink) and when the local endpoint is closed
//     (ErrClosed); completions of a locally closed endpoint still reach its
//     completion queue if that queue is open.
//   - A message or write-with-immediate that arrives before a receive is
//     posted waits for one; the sender's completion may come before or after
//     the receive is posted.
//   - A completion queue of depth d holds d entries: each posted request
//     holds one until its completion is taken out; a post beyond that is
//     refused with ErrQueueFull (not ErrInvalid), posts nothing and leaves
//     the endpoint usable; OpRemoteError holds none and is never dropped.
//     A depth below 1 is ErrInvalid; one the device cannot hold is
//     ErrNotSupported, never a smaller queue.
//
// Apart from the QueueDepth subtests, the suite creates completion queues of
// depth CQDepth and never has more requests posted and not taken out on one
// queue than that.
package transporttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

// Factory returns a fresh device. Run calls it twice per subtest, once per
// side; the suite closes the devices it gets.
type Factory func(t testing.TB) transport.Device

// Timeouts of the suite's waits. They bound how long a broken transport can
// hold a test, not how fast a correct one must be.
const (
	ShortTimeout = 5 * time.Second
	LargeTimeout = 20 * time.Second
	// quiet is how long a check that nothing happens waits.
	quiet = 50 * time.Millisecond
)

// CQDepth is the depth of the completion queues the suite creates.
const CQDepth = 4096

// Run runs the conformance suite against devices from newDevice.
func Run(t *testing.T, newDevice Factory) {
	type check struct {
		name string
		fn   func(t *testing.T, f Factory)
	}
	tests := []check{
		{"SendRecvOrder", testSendRecvOrder},
		{"MixedRecvConsumers", testMixedRecvConsumers},
		{"RecvPostedLate", testRecvPostedLate},
		{"RecvTooShort", testRecvTooShort},
		{"ZeroByte", testZeroByte},
		{"WriteImm", testWriteImm},
		{"WriteImmBeforeRecv", testWriteImmBeforeRecv},
		{"WriteAtOffset", testWriteAtOffset},
		{"ReadAtOffset", testReadAtOffset},
		{"WriteThenSendVisible", testWriteThenSendVisible},
		{"WriteThenReadOrdered", testWriteThenReadOrdered},
		{"ManyOutstanding", testManyOutstanding},
		{"Large", testLarge},
		{"RemoteAccessError", testRemoteAccessErrors},
		{"LocalInvalid", testLocalInvalid},
		{"PeerClosed", testPeerClosed},
		{"LocalClose", testLocalClose},
		{"CompletionQueue", testCompletionQueue},
		{"QueueDepth", testQueueDepth},
		{"Concurrent", testConcurrent},
		{"Bidirectional", testBidirectional},
	}
	// Optional: only the completion queues and endpoints that implement
	// them.
	readier, quiet := optional(t, newDevice)
	if readier {
		tests = append(tests, check{"ReadyWithoutPoll", testReadyWithoutPoll})
	}
	if quiet {
		tests = append(tests, check{"QuietWrite", testQuietWrite})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newDevice) })
	}
}

// optional says whether the completion queues of newDevice's devices
// implement transport.Readier, and whether their endpoints implement
// transport.QuietWriter.
func optional(t *testing.T, newDevice Factory) (readier, quiet bool) {
	d := newDevice(t)
	defer d.Close()
	cq, err := d.NewCompletionQueue(1)
	if err != nil {
		t.Fatalf("%s: new completion queue: %v", d.Name(), err)
	}
	defer cq.Close()
	_, readier = cq.(transport.Readier)
	ep, err := d.NewEndpoint(cq)
	if err != nil {
		t.Fatalf("%s: new endpoint: %v", d.Name(), err)
	}
	defer ep.Close()
	_, quiet = ep.(transport.QuietWriter)
	return readier, quiet
}

// Pair is two connected endpoints on two devices, each with its own
// completion queue.
type Pair struct {
	DevA, DevB transport.Device
	CQA, CQB   transport.CompletionQueue
	A, B       transport.Endpoint
}

// NewPair creates two devices with newDevice, a completion queue of depth
// CQDepth and an endpoint on each, and connects the endpoints (both sides
// call Connect concurrently). Everything is closed by t.Cleanup.
func NewPair(t testing.TB, newDevice Factory) *Pair {
	t.Helper()
	p := &Pair{}
	p.DevA = newDevice(t)
	t.Cleanup(func() { p.DevA.Close() })
	p.DevB = newDevice(t)
	t.Cleanup(func() { p.DevB.Close() })
	p.CQA = NewCQ(t, p.DevA)
	p.CQB = NewCQ(t, p.DevB)
	p.A = NewEndpoint(t, p.DevA, p.CQA)
	p.B = NewEndpoint(t, p.DevB, p.CQB)
	ConnectPair(t, p.A, p.B)
	return p
}

// NewCQ creates a completion queue of depth CQDepth on dev, closed by
// t.Cleanup.
func NewCQ(t testing.TB, dev transport.Device) transport.CompletionQueue {
	t.Helper()
	return NewCQDepth(t, dev, CQDepth)
}

// NewCQDepth creates a completion queue of the given depth on dev, closed
// by t.Cleanup.
func NewCQDepth(t testing.TB, dev transport.Device, depth int) transport.CompletionQueue {
	t.Helper()
	cq, err := dev.NewCompletionQueue(depth)
	if err != nil {
		t.Fatalf("%s: new completion queue of depth %d: %v", dev.Name(), depth, err)
	}
	t.Cleanup(func() { cq.Close() })
	return cq
}

// NewEndpoint creates an unconnected endpoint on dev, closed by t.Cleanup.
func NewEndpoint(t testing.TB, dev transport.Device, cq transport.CompletionQueue) transport.Endpoint {
	t.Helper()
	ep, err := dev.NewEndpoint(cq)
	if err != nil {
		t.Fatalf("%s: new endpoint: %v", dev.Name(), err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

// ConnectPair connects a and b, both sides calling Connect concurrently with
// the other's LocalAddress, within ShortTimeout.
func ConnectPair(t testing.TB, a, b transport.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ShortTimeout)
	defer cancel()
	addrA, addrB := a.LocalAddress(), b.LocalAddress()
	errs := make(chan error, 1)
	go func() { errs <- b.Connect(ctx, addrA) }()
	errA := a.Connect(ctx, addrB)
	errB := <-errs
	if errA != nil || errB != nil {
		t.Fatalf("connect: side A: %v; side B: %v", errA, errB)
	}
}

// Register registers buf on dev with access; t.Cleanup deregisters it
// (ignoring the error of a region the test already deregistered).
func Register(t testing.TB, dev transport.Device, buf []byte, access transport.Access) transport.Region {
	t.Helper()
	r, err := dev.Register(buf, access)
	if err != nil {
		t.Fatalf("%s: register %d bytes %v: %v", dev.Name(), len(buf), access, err)
	}
	t.Cleanup(func() { dev.Deregister(r) })
	return r
}

// WaitN waits until exactly n completions have been taken from cq and
// returns them in the order the queue gave them. It fails the test (from the
// calling goroutine, which must be the test's) if they do not all arrive
// within timeout, or if the queue reports an error.
func WaitN(t testing.TB, cq transport.CompletionQueue, n int, timeout time.Duration) []transport.Completion {
	t.Helper()
	got, err := CollectN(cq, n, timeout)
	if err != nil {
		t.Fatalf("%v; got %d of %d completions:\n%s", err, len(got), n, Describe(got))
	}
	return got
}

// CollectN is WaitN without a testing.TB, for use from other goroutines: it
// returns what it collected and an error if fewer than n arrived in time.
func CollectN(cq transport.CompletionQueue, n int, timeout time.Duration) ([]transport.Completion, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := make([]transport.Completion, 0, n)
	buf := make([]transport.Completion, 64)
	for len(got) < n {
		want := min(n-len(got), len(buf))
		k, err := cq.Wait(ctx, buf[:want])
		if k < 0 || k > want {
			return got, fmt.Errorf("completion queue Wait returned %d for a buffer of %d", k, want)
		}
		got = append(got, buf[:k]...)
		if err != nil {
			if len(got) >= n {
				break
			}
			return got, fmt.Errorf("waiting for completions after %v: %w", timeout, err)
		}
	}
	return got, nil
}

// WaitOne waits for one completion.
func WaitOne(t testing.TB, cq transport.CompletionQueue, timeout time.Duration) transport.Completion {
	t.Helper()
	return WaitN(t, cq, 1, timeout)[0]
}

// ExpectQuiet fails the test if a completion arrives on cq within d.
func ExpectQuiet(t testing.TB, cq transport.CompletionQueue, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var buf [8]transport.Completion
	n, _ := cq.Wait(ctx, buf[:])
	if n > 0 {
		t.Fatalf("unexpected completions:\n%s", Describe(buf[:n]))
	}
}

// ExpectEmpty fails the test if cq holds a completion now (Poll).
func ExpectEmpty(t testing.TB, cq transport.CompletionQueue) {
	t.Helper()
	var buf [8]transport.Completion
	if n := cq.Poll(buf[:]); n > 0 {
		t.Fatalf("unexpected completions:\n%s", Describe(buf[:n]))
	}
}

// ExpectOK checks that c is a successful completion of op with id, bytes.
func ExpectOK(t testing.TB, c transport.Completion, op transport.Op, id uint64, bytes int) {
	t.Helper()
	if c.Err != nil || c.Op != op || c.ID != id || c.Bytes != bytes {
		t.Fatalf("completion %s; want %v id=%d bytes=%d ok", describe(c), op, id, bytes)
	}
}

// ExpectErr checks that c is a failed completion of op with id whose error
// wraps every one of want.
func ExpectErr(t testing.TB, c transport.Completion, op transport.Op, id uint64, want ...error) {
	t.Helper()
	if c.Op != op || c.ID != id || c.Err == nil {
		t.Fatalf("completion %s; want %v id=%d failing with %v", describe(c), op, id, want)
	}
	for _, w := range want {
		if !errors.Is(c.Err, w) {
			t.Fatalf("completion %s: error does not wrap %q", describe(c), w)
		}
	}
}

// ByID indexes completions by ID and fails on a duplicate.
func ByID(t testing.TB, cs []transport.Completion) map[uint64]transport.Completion {
	t.Helper()
	m := make(map[uint64]transport.Completion, len(cs))
	for _, c := range cs {
		if _, dup := m[c.ID]; dup {
			t.Fatalf("two completions with id %d:\n%s", c.ID, Describe(cs))
		}
		m[c.ID] = c
	}
	return m
}

// Describe formats completions one per line, for failure messages.
func Describe(cs []transport.Completion) string {
	var b strings.Builder
	for i, c := range cs {
		if i == 20 && len(cs) > 25 {
			fmt.Fprintf(&b, "  ... %d more\n", len(cs)-i)
			break
		}
		b.WriteString("  " + describe(c) + "\n")
	}
	return b.String()
}

func describe(c transport.Completion) string {
	s := fmt.Sprintf("%v id=%d bytes=%d", c.Op, c.ID, c.Bytes)
	if c.HasImm {
		s += fmt.Sprintf(" imm=%#x", c.Imm)
	}
	if c.Err != nil {
		s += fmt.Sprintf(" err=%q", c.Err)
	}
	return s
}

// anyOf reports whether err wraps one of targets.
func anyOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// big is the pair of 64 MiB buffers the large subtests share, allocated once
// per process with transport.Alloc (never freed: the process ends soon).
var big struct {
	once sync.Once
	mu   sync.Mutex
	x, y []byte
	err  error
}

// BigSize is the size of the large transfers.
const BigSize = 64 << 20

// bigBuffers returns the two shared 64 MiB buffers, locked for the caller's
// test until its cleanup.
func bigBuffers(t testing.TB) (x, y []byte) {
	t.Helper()
	big.once.Do(func() {
		if big.x, big.err = transport.Alloc(BigSize); big.err != nil {
			return
		}
		big.y, big.err = transport.Alloc(BigSize)
	})
	if big.err != nil {
		t.Fatalf("alloc: %v", big.err)
	}
	big.mu.Lock()
	t.Cleanup(big.mu.Unlock)
	return big.x, big.y
}
