package verbs

// Tests of devices, endpoints and completion queues. Each runs on two
// backends (onBackends): the in-memory fabric of internal/ibvfake, on every
// machine, and the RDMA device the environment selects (hardware or
// Soft-RoCE). Without a device the second skips with the reason, unless
// GOCCL_REQUIRE_VERBS=1 (set by scripts/softroce-test.sh inside the guest),
// which turns the skip into a failure.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibvfake"
)

// SkipIfNotSupported skips (or, with GOCCL_REQUIRE_VERBS=1, fails) a test
// whose err says the verbs transport is not available here.
func SkipIfNotSupported(tb testing.TB, err error) {
	tb.Helper()
	if err == nil || !errors.Is(err, transport.ErrNotSupported) {
		return
	}
	if os.Getenv("GOCCL_REQUIRE_VERBS") == "1" {
		tb.Fatalf("GOCCL_REQUIRE_VERBS=1 but no RDMA device: %v", err)
	}
	tb.Skipf("skipping: %v", err)
}

// envConfig is the Config the environment selects for the tests, read
// as comm reads GOCCL_IB_HCA and GOCCL_IB_GID_INDEX (the package itself
// reads no environment).
func envConfig() (Config, error) {
	cfg := Config{HCA: os.Getenv("GOCCL_IB_HCA"), GIDIndex: -1}
	if s := os.Getenv("GOCCL_IB_GID_INDEX"); s != "" {
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 {
			return cfg, fmt.Errorf("GOCCL_IB_GID_INDEX=%q: want a non-negative integer", s)
		}
		cfg.GIDIndex = i
	}
	return cfg, nil
}

// openDevice opens the device the environment selects, closed by Cleanup.
func openDevice(tb testing.TB) *Device {
	tb.Helper()
	cfg, err := envConfig()
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Logger = logtest.New(tb)
	d, err := OpenConfig(cfg)
	SkipIfNotSupported(tb, err)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(func() { d.Close() })
	return d
}

// opener opens a fresh device, closed by Cleanup.
type opener func(tb testing.TB) *Device

// onBackends runs fn as subtest "fake", with devices of a fresh in-memory
// fabric, and as subtest "device", with the RDMA device the environment
// selects (skipped without one).
func onBackends(t *testing.T, fn func(t *testing.T, open opener)) {
	t.Run("fake", func(t *testing.T) { fn(t, fakeOpener(ibvfake.New(), ibvfake.DeviceConfig{}, Config{GIDIndex: -1})) })
	t.Run("device", func(t *testing.T) { fn(t, openDevice) })
}

type pair struct {
	da, db *Device
	qa, qb transport.CompletionQueue
	a, b   transport.Endpoint
}

// newPair connects two endpoints on two devices of the environment's
// adapter.
func newPair(tb testing.TB) *pair { return newPairOn(tb, openDevice) }

// newPairOn connects two endpoints on two devices from open, each with a
// completion queue of depth 1024.
func newPairOn(tb testing.TB, open opener) *pair {
	tb.Helper()
	p := &pair{da: open(tb), db: open(tb)}
	var err error
	if p.qa, err = p.da.NewCompletionQueue(1024); err != nil {
		tb.Fatal(err)
	}
	if p.qb, err = p.db.NewCompletionQueue(1024); err != nil {
		tb.Fatal(err)
	}
	if p.a, err = p.da.NewEndpoint(p.qa); err != nil {
		tb.Fatal(err)
	}
	if p.b, err = p.db.NewEndpoint(p.qb); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.a.Connect(ctx, p.b.LocalAddress()); err != nil {
		tb.Fatal(err)
	}
	if err := p.b.Connect(ctx, p.a.LocalAddress()); err != nil {
		tb.Fatal(err)
	}
	return p
}

// waitN takes exactly n completions from q within 10 s.
func waitN(tb testing.TB, q transport.CompletionQueue, n int) []transport.Completion {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []transport.Completion
	buf := make([]transport.Completion, 64)
	for len(got) < n {
		k, err := q.Wait(ctx, buf[:min(len(buf), n-len(got))])
		if err != nil {
			tb.Fatalf("wait: got %d of %d completions %+v: %v", len(got), n, got, err)
		}
		got = append(got, buf[:k]...)
	}
	return got
}

func alloc(tb testing.TB, n int) []byte {
	tb.Helper()
	b, err := transport.Alloc(n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { transport.Free(b) })
	return b
}

func register(tb testing.TB, d *Device, b []byte, a transport.Access) transport.Region {
	tb.Helper()
	r, err := d.Register(b, a)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func TestDevice(t *testing.T) {
	d := openDevice(t)
	i, g, typ := d.GID()
	// The guest script greps this line to prove which device ran.
	t.Logf("DEVICE %s port %d GID[%d] %s %s active MTU %d", d.Name(), d.Port(), i, g, typ, d.ActiveMTU())
	if d.Name() != "verbs:"+d.name || d.ActiveMTU() < 256 {
		t.Fatalf("device %q active MTU %d", d.Name(), d.ActiveMTU())
	}
}

func TestRegistrationCache(t *testing.T) { onBackends(t, testRegistrationCache) }

func testRegistrationCache(t *testing.T, open opener) {
	d := open(t)
	buf := alloc(t, 1<<16)
	r1 := register(t, d, buf, transport.AccessAll)
	r2 := register(t, d, buf, transport.AccessAll)
	if d.nreg != 1 || r1.Remote() != r2.Remote() {
		t.Fatalf("second registration of the same range: %d ibv_reg_mr calls, keys %+v %+v; want 1 call, same key", d.nreg, r1.Remote(), r2.Remote())
	}
	r3 := register(t, d, buf, transport.AccessLocalWrite)
	r4 := register(t, d, buf[:4096], transport.AccessAll)
	if d.nreg != 3 || r3.Remote().Key == r1.Remote().Key || r4.Remote().Len != 4096 {
		t.Fatalf("other access or range must register anew: %d calls, keys %#x %#x %#x", d.nreg, r1.Remote().Key, r3.Remote().Key, r4.Remote().Key)
	}
	for _, r := range []transport.Region{r1, r3, r4} {
		if err := d.Deregister(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Deregister(r1); !errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("second deregister of one handle: %v, want ErrInvalid", err)
	}
	d.mu.Lock()
	live := len(d.regs)
	d.mu.Unlock()
	if live != 1 {
		t.Fatalf("%d live registrations, want 1 (r2 still holds the range)", live)
	}
	if err := d.Deregister(r2); err != nil {
		t.Fatal(err)
	}
	if len(d.regs) != 0 {
		t.Fatalf("%d live registrations after the last deregister", len(d.regs))
	}
	if r := register(t, d, buf, transport.AccessAll); d.nreg != 4 {
		t.Fatalf("registering after the last deregister must call ibv_reg_mr: %d calls (key %#x)", d.nreg, r.Remote().Key)
	}
}

func TestMTUNegotiated(t *testing.T) { onBackends(t, testMTUNegotiated) }

func testMTUNegotiated(t *testing.T, open opener) {
	p := newPairOn(t, open)
	want := min(p.da.ActiveMTU(), p.db.ActiveMTU())
	for _, ep := range []transport.Endpoint{p.a, p.b} {
		if got := ep.(*endpoint).PathMTU(); got != want {
			t.Fatalf("path MTU %d, want %d", got, want)
		}
	}
}

func TestSendRecvWriteRead(t *testing.T) { onBackends(t, testSendRecvWriteRead) }

func testSendRecvWriteRead(t *testing.T, open opener) {
	p := newPairOn(t, open)
	src, dst := alloc(t, 8192), alloc(t, 8192)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	rs := register(t, p.da, src, transport.AccessRemoteRead)
	rd := register(t, p.db, dst, transport.AccessAll)

	if err := p.b.PostRecv(1, rd, 0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostSend(2, rs, 100, 3000); err != nil {
		t.Fatal(err)
	}
	c := waitN(t, p.qb, 1)[0]
	if c.Err != nil || c.Op != transport.OpRecv || c.ID != 1 || c.Bytes != 3000 || !bytes.Equal(dst[:3000], src[100:3100]) {
		t.Fatalf("recv completion %+v", c)
	}
	if c := waitN(t, p.qa, 1)[0]; c.Err != nil || c.Op != transport.OpSend || c.ID != 2 || c.Bytes != 3000 {
		t.Fatalf("send completion %+v", c)
	}

	imm := uint32(0xdeadbeef)
	if err := p.b.PostRecv(3, rd, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostWrite(4, rs, 0, 8192, rd.Remote(), 0, &imm); err != nil {
		t.Fatal(err)
	}
	c = waitN(t, p.qb, 1)[0]
	if c.Err != nil || c.ID != 3 || !c.HasImm || c.Imm != imm || c.Bytes != 8192 || !bytes.Equal(dst, src) {
		t.Fatalf("write-with-imm receive %+v", c)
	}
	waitN(t, p.qa, 1)

	// Read back from a's region into b.
	clear(dst)
	if err := p.b.PostRead(5, rd, 10, 500, rs.Remote(), 20); err != nil {
		t.Fatal(err)
	}
	if c := waitN(t, p.qb, 1)[0]; c.Err != nil || c.Op != transport.OpRead || c.Bytes != 500 || !bytes.Equal(dst[10:510], src[20:520]) {
		t.Fatalf("read completion %+v", c)
	}
}

func TestGoHeapMemory(t *testing.T) { onBackends(t, testGoHeapMemory) }

func testGoHeapMemory(t *testing.T, open opener) {
	p := newPairOn(t, open)
	src := make([]byte, 1<<20)
	dst := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i >> 3)
	}
	rs := register(t, p.da, src, 0)
	rd := register(t, p.db, dst, transport.AccessRemoteWrite)
	runtime.GC()
	if err := p.a.PostWrite(1, rs, 0, len(src), rd.Remote(), 0, nil); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	if c := waitN(t, p.qa, 1)[0]; c.Err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("write from pinned Go memory: %+v", c)
	}
}

func TestRemoteAccessError(t *testing.T) { onBackends(t, testRemoteAccessError) }

func testRemoteAccessError(t *testing.T, open opener) {
	p := newPairOn(t, open)
	src, win := alloc(t, 4096), alloc(t, 4096)
	src[0] = 1
	rs := register(t, p.da, src, 0)
	rw := register(t, p.db, win, transport.AccessRemoteRead) // no remote write
	rr := register(t, p.db, alloc(t, 64), transport.AccessLocalWrite)
	if err := p.b.PostRecv(7, rr, 0, 64); err != nil {
		t.Fatal(err)
	}
	if err := p.a.PostWrite(9, rs, 0, 16, rw.Remote(), 0, nil); err != nil {
		t.Fatal(err)
	}
	c := waitN(t, p.qa, 1)[0]
	if c.ID != 9 || !errors.Is(c.Err, transport.ErrRemoteAccess) || errors.Is(c.Err, transport.ErrFlushed) {
		t.Fatalf("initiator completion %+v, want ErrRemoteAccess", c)
	}
	t.Logf("initiator: %v", c.Err)
	got := waitN(t, p.qb, 2)
	if got[0].Op != transport.OpRemoteError || got[0].ID != 0 || !errors.Is(got[0].Err, transport.ErrRemoteAccess) {
		t.Fatalf("target's first completion %+v, want OpRemoteError", got[0])
	}
	if got[1].ID != 7 || !errors.Is(got[1].Err, transport.ErrFlushed) || !errors.Is(got[1].Err, transport.ErrRemoteAccess) {
		t.Fatalf("target's receive %+v, want flushed with the remote access cause", got[1])
	}
	t.Logf("target: %v; %v", got[0].Err, got[1].Err)
	if win[0] != 0 {
		t.Fatal("target memory touched by a refused write")
	}
	if err := p.a.PostSend(10, rs, 0, 1); !errors.Is(err, transport.ErrRemoteAccess) {
		t.Fatalf("post after the error: %v, want the cause", err)
	}
	if err := p.b.PostRecv(11, rr, 0, 1); !errors.Is(err, transport.ErrRemoteAccess) {
		t.Fatalf("target post after the error: %v, want the cause", err)
	}
}

func TestPeerClose(t *testing.T) { onBackends(t, testPeerClose) }

func testPeerClose(t *testing.T, open opener) {
	p := newPairOn(t, open)
	rr := register(t, p.db, alloc(t, 64), transport.AccessLocalWrite)
	if err := p.b.PostRecv(1, rr, 0, 64); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.a.Close(); err != nil {
		t.Fatal(err)
	}
	c := waitN(t, p.qb, 1)[0]
	if !errors.Is(c.Err, transport.ErrPeerClosed) || !errors.Is(c.Err, transport.ErrFlushed) {
		t.Fatalf("pending receive %+v, want flushed with ErrPeerClosed", c)
	}
	t.Logf("peer close seen after %v: %v", time.Since(start), c.Err)
}

func TestQueueFull(t *testing.T) { onBackends(t, testQueueFull) }

func testQueueFull(t *testing.T, open opener) {
	d := open(t)
	d2 := open(t)
	q, err := d.NewCompletionQueue(8)
	if err != nil {
		t.Fatal(err)
	}
	q2, _ := d2.NewCompletionQueue(64)
	a, _ := d.NewEndpoint(q)
	b, _ := d2.NewEndpoint(q2)
	ctx := context.Background()
	if err := a.Connect(ctx, b.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx, a.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	r := register(t, d, alloc(t, 4096), transport.AccessLocalWrite)
	for i := range 8 {
		if err := a.PostRecv(uint64(i), r, 0, 16); err != nil {
			t.Fatal(err)
		}
	}
	err = a.PostRecv(8, r, 0, 16)
	if !errors.Is(err, transport.ErrQueueFull) || errors.Is(err, transport.ErrInvalid) {
		t.Fatalf("ninth request on a queue of depth 8: %v, want ErrQueueFull", err)
	}
	t.Logf("overflow: %v", err)
	// A message completes one receive; once it is taken out, one more
	// request may be posted.
	rb := register(t, d2, alloc(t, 64), 0)
	if err := b.PostSend(1, rb, 0, 16); err != nil {
		t.Fatal(err)
	}
	if c := waitN(t, q, 1)[0]; c.Err != nil || c.ID != 0 {
		t.Fatalf("first receive %+v", c)
	}
	if err := a.PostRecv(8, r, 0, 16); err != nil {
		t.Fatalf("post after a completion was taken out: %v", err)
	}
}

// kill destroys ep's queue pairs without telling the peer, as the kernel
// does when a process dies.
func kill(ep *endpoint) {
	ep.mu.Lock()
	ep.state = epClosed
	if ep.cause == nil {
		ep.cause = errors.New("killed by the test")
	}
	ep.mu.Unlock()
	ep.cq.mu.Lock()
	delete(ep.cq.eps, ep.qpn)
	ep.cq.mu.Unlock()
	ep.qp.Close()
	ep.ctl.close()
	ep.dev.forgetEndpoint(ep)
}

func TestPeerDied(t *testing.T) {
	defer func(d time.Duration) { keepaliveInterval = d }(keepaliveInterval)
	keepaliveInterval = 100 * time.Millisecond
	onBackends(t, testPeerDied)
}

func testPeerDied(t *testing.T, open opener) {
	p := newPairOn(t, open)
	ra := register(t, p.da, alloc(t, 64), transport.AccessLocalWrite)
	if err := p.a.PostRecv(1, ra, 0, 64); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kill(p.b.(*endpoint))
	c := waitN(t, p.qa, 1)[0]
	if !errors.Is(c.Err, transport.ErrFlushed) || !errors.Is(c.Err, transport.ErrLink) || !errors.Is(c.Err, transport.ErrPeerClosed) {
		t.Fatalf("pending receive %+v, want flushed with ErrLink and ErrPeerClosed", c)
	}
	t.Logf("dead peer noticed after %v: %v", time.Since(start), c.Err)
}

// TestMTUAdvertisedSmaller connects two endpoints whose blobs advertise
// half the port's active MTU (as a peer on a port with a smaller MTU does):
// both sides must use it as the path MTU, and multi-packet transfers must
// arrive intact.
func TestMTUAdvertisedSmaller(t *testing.T) { onBackends(t, testMTUAdvertisedSmaller) }

func testMTUAdvertisedSmaller(t *testing.T, open opener) {
	da, db := open(t), open(t)
	small := da.ActiveMTU() / 2
	if small < 256 {
		t.Skipf("active MTU %d: nothing smaller to negotiate", da.ActiveMTU())
	}
	qa, _ := da.NewCompletionQueue(64)
	qb, _ := db.NewCompletionQueue(64)
	a, _ := da.NewEndpoint(qa)
	b, _ := db.NewEndpoint(qb)
	shrink := func(blob []byte) []byte {
		ad, err := decodeAddress(blob)
		if err != nil {
			t.Fatal(err)
		}
		ad.MTU = small
		return ad.encode()
	}
	ctx := context.Background()
	if err := a.Connect(ctx, shrink(b.LocalAddress())); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx, shrink(a.LocalAddress())); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []transport.Endpoint{a, b} {
		if got := ep.(*endpoint).PathMTU(); got != small {
			t.Fatalf("path MTU %d, want %d", got, small)
		}
	}
	const n = 100<<10 + 7
	src, dst := alloc(t, n), alloc(t, n)
	for i := range src {
		src[i] = byte(i * 13)
	}
	rs := register(t, da, src, 0)
	rd := register(t, db, dst, transport.AccessAll)
	if err := b.PostRecv(1, rd, 0, n); err != nil {
		t.Fatal(err)
	}
	if err := a.PostSend(2, rs, 0, n); err != nil {
		t.Fatal(err)
	}
	if c := waitN(t, qb, 1)[0]; c.Err != nil || c.Bytes != n || !bytes.Equal(dst, src) {
		t.Fatalf("send of %d bytes at path MTU %d: %+v", n, small, c)
	}
	clear(dst)
	if err := a.PostWrite(3, rs, 0, n, rd.Remote(), 0, nil); err != nil {
		t.Fatal(err)
	}
	if c := waitN(t, qa, 2)[1]; c.Err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("write of %d bytes at path MTU %d: %+v", n, small, c)
	}
}

// TestRemoteAccessErrorNoRecv: a target without a posted receive learns of
// the access it refused from the control queue pair: one OpRemoteError.
func TestRemoteAccessErrorNoRecv(t *testing.T) { onBackends(t, testRemoteAccessErrorNoRecv) }

func testRemoteAccessErrorNoRecv(t *testing.T, open opener) {
	p := newPairOn(t, open)
	src, win := alloc(t, 4096), alloc(t, 4096)
	rs := register(t, p.da, src, transport.AccessLocalWrite)
	rw := register(t, p.db, win, transport.AccessRemoteWrite) // no remote read
	if err := p.a.PostRead(1, rs, 0, 64, rw.Remote(), 0); err != nil {
		t.Fatal(err)
	}
	if c := waitN(t, p.qa, 1)[0]; c.ID != 1 || !errors.Is(c.Err, transport.ErrRemoteAccess) {
		t.Fatalf("initiator completion %+v, want ErrRemoteAccess", c)
	}
	c := waitN(t, p.qb, 1)[0]
	if c.Op != transport.OpRemoteError || c.Endpoint != p.b || !errors.Is(c.Err, transport.ErrRemoteAccess) {
		t.Fatalf("target completion %+v, want one OpRemoteError", c)
	}
	t.Logf("target: %v", c.Err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if n, err := p.qb.Wait(ctx, make([]transport.Completion, 4)); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("target: %d more completions (%v), want none", n, err)
	}
}
