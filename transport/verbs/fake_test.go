package verbs

// The verbs transport over the in-memory fabric of internal/ibvfake: the
// conformance suite and the error paths that need the fabric's hooks (a
// device that lies about its completion queue, a device that vanishes,
// verbs that fail). They run on every machine, with or without cgo.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/internal/racetest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
	"github.com/goccl/goccl/transport/verbs/internal/ibvfake"
)

// fakeOpener returns an opener of new devices of fabric f, each configured
// with dc and opened with cfg (its HCA set to the device). Cleanup closes
// the device and fails the test if closing fails, which is how the fabric
// reports leaked queue pairs and memory regions.
func fakeOpener(f *ibvfake.Fabric, dc ibvfake.DeviceConfig, cfg Config) opener {
	return func(tb testing.TB) *Device {
		tb.Helper()
		fd := f.AddDevice(dc)
		c := cfg
		c.HCA = "=" + fd.Name()
		c.Logger = logtest.New(tb)
		d, err := openLib(f, c)
		if err != nil {
			tb.Fatalf("open %s: %v", fd.Name(), err)
		}
		tb.Cleanup(func() {
			if err := d.Close(); err != nil {
				tb.Errorf("close %s: %v", fd.Name(), err)
			}
		})
		return d
	}
}

// TestConformanceFake runs the transport contract's suite on the verbs
// transport over the in-memory fabric; afterwards no queue pair or memory
// region may be left and no completion queue may have overrun.
func TestConformanceFake(t *testing.T) {
	defer func(d time.Duration) { keepaliveInterval = d }(keepaliveInterval)
	keepaliveInterval = 50 * time.Millisecond
	f := ibvfake.New()
	transporttest.Run(t, func(tb testing.TB) transport.Device {
		fd := f.AddDevice(ibvfake.DeviceConfig{})
		d, err := openLib(f, Config{HCA: "=" + fd.Name(), GIDIndex: -1})
		if err != nil {
			tb.Fatalf("open %s: %v", fd.Name(), err)
		}
		return d
	})
	if n := f.Overruns(); n != 0 {
		t.Errorf("%d completions overran their adapter queue", n)
	}
	if q, m := f.LiveQPs(), f.LiveMRs(); q != 0 || m != 0 {
		t.Errorf("after every device was closed: %d queue pairs and %d memory regions left", q, m)
	}
}

// TestCQDepthBeyondDevice: a depth beyond max_cqe is refused with
// ErrNotSupported naming the maximum, never clamped.
func TestCQDepthBeyondDevice(t *testing.T) {
	d := fakeOpener(ibvfake.New(), ibvfake.DeviceConfig{MaxCQE: 100}, Config{GIDIndex: -1})(t)
	q, err := d.NewCompletionQueue(100)
	if err != nil {
		t.Fatalf("depth 100 on a device of max_cqe 100: %v", err)
	}
	q.Close()
	_, err = d.NewCompletionQueue(101)
	if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "at most 100") {
		t.Fatalf("depth 101 on a device of max_cqe 100: %v; want ErrNotSupported naming 100", err)
	}
	t.Logf("as expected: %v", err)
}

// TestQueuePairFull: with Config.QueueDepth below the completion queue's
// depth, the queue pair's own queue refuses posts with ErrQueueFull; the
// endpoint stays usable.
func TestQueuePairFull(t *testing.T) {
	p := newPairOn(t, fakeOpener(ibvfake.New(), ibvfake.DeviceConfig{}, Config{GIDIndex: -1, QueueDepth: 2}))
	r := register(t, p.da, alloc(t, 64), transport.AccessLocalWrite)
	for i := range 2 {
		if err := p.a.PostRecv(uint64(i), r, 0, 8); err != nil {
			t.Fatal(err)
		}
	}
	err := p.a.PostRecv(2, r, 0, 8)
	transporttest.ExpectQueueFull(t, "third receive on a receive queue of 2", err)
	t.Logf("as expected: %v", err)
	rb := register(t, p.db, alloc(t, 64), 0)
	if err := p.b.PostSend(9, rb, 0, 8); err != nil {
		t.Fatal(err)
	}
	waitN(t, p.qa, 1)
	if err := p.a.PostRecv(2, r, 0, 8); err != nil {
		t.Fatalf("receive after one completed: %v", err)
	}
}

// TestCQOverrun: a device whose completion queues hold fewer entries than
// asked overruns one; the transport notices when polling it, fails every
// endpoint of the queue and completes every pending request with an error
// naming the failure instead of losing them, and refuses later posts.
func TestCQOverrun(t *testing.T) {
	f := ibvfake.New()
	open := fakeOpener(f, ibvfake.DeviceConfig{CQShortfall: 2}, Config{GIDIndex: -1})
	p := newPairOn(t, open)
	q, err := p.da.NewCompletionQueue(8) // the adapter's holds 6
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	a, err := p.da.NewEndpoint(q)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.db.NewEndpoint(p.qb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Connect(ctx, b.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx, a.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	src := register(t, p.da, alloc(t, 64), 0)
	dst := register(t, p.db, alloc(t, 64), transport.AccessAll)
	for i := range 8 {
		if err := a.PostWrite(uint64(i), src, 0, 8, dst.Remote(), 0, nil); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	got := waitN(t, q, 8)
	for i, c := range got {
		if c.ID != uint64(i) || c.Op != transport.OpWrite || !errors.Is(c.Err, transport.ErrFlushed) || !errors.Is(c.Err, transport.ErrLink) {
			t.Fatalf("completion %d: %+v; want write %d flushed with ErrLink", i, c, i)
		}
	}
	t.Logf("after the overrun: %v", got[0].Err)
	if f.Overruns() == 0 {
		t.Fatal("the fake did not overrun: the test tests nothing")
	}
	if err := a.PostWrite(8, src, 0, 8, dst.Remote(), 0, nil); !errors.Is(err, transport.ErrLink) {
		t.Fatalf("post after the queue failed: %v; want its cause", err)
	}
	if _, err := p.da.NewEndpoint(q); !errors.Is(err, transport.ErrLink) {
		t.Fatalf("new endpoint on a failed queue: %v; want its cause", err)
	}
}

// TestPeerDeviceVanished: the peer's adapter disappears without a word (its
// process died); the keepalive notices and pending requests fail with
// ErrLink and ErrPeerClosed.
func TestPeerDeviceVanished(t *testing.T) {
	defer func(d time.Duration) { keepaliveInterval = d }(keepaliveInterval)
	keepaliveInterval = 20 * time.Millisecond
	f := ibvfake.New()
	da := fakeOpener(f, ibvfake.DeviceConfig{Name: "local"}, Config{GIDIndex: -1})(t)
	peer := f.AddDevice(ibvfake.DeviceConfig{Name: "peer"})
	db, err := openLib(f, Config{HCA: "=peer", GIDIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	qa, _ := da.NewCompletionQueue(16)
	qb, _ := db.NewCompletionQueue(16)
	a, _ := da.NewEndpoint(qa)
	b, _ := db.NewEndpoint(qb)
	ctx := context.Background()
	if err := a.Connect(ctx, b.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ctx, a.LocalAddress()); err != nil {
		t.Fatal(err)
	}
	r := register(t, da, alloc(t, 64), transport.AccessLocalWrite)
	if err := a.PostRecv(1, r, 0, 64); err != nil {
		t.Fatal(err)
	}
	peer.Kill()
	c := waitN(t, qa, 1)[0]
	if c.ID != 1 || !errors.Is(c.Err, transport.ErrFlushed) || !errors.Is(c.Err, transport.ErrLink) || !errors.Is(c.Err, transport.ErrPeerClosed) {
		t.Fatalf("pending receive %+v; want flushed with ErrLink and ErrPeerClosed", c)
	}
	t.Logf("as expected: %v", c.Err)
}

// TestOpenSelection: device choice and the reasons given when none fits.
func TestOpenSelection(t *testing.T) {
	f := ibvfake.New()
	f.AddDevice(ibvfake.DeviceConfig{Name: "mlx5_0", PortState: portDown})
	f.AddDevice(ibvfake.DeviceConfig{Name: "rxe0"})
	d, err := openLib(f, Config{GIDIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != "verbs:rxe0" {
		t.Fatalf("opened %s; want rxe0, the only device with an ACTIVE port", d.Name())
	}
	if i, g, typ := d.GID(); i != 1 || !strings.HasPrefix(g, "::ffff:10.0.0.") || typ != "RoCEv2" {
		t.Fatalf("GID[%d] %s %s; want the RoCE v2 IPv4 GID at index 1", i, g, typ)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = openLib(f, Config{HCA: "^rxe", GIDIndex: -1})
	if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "not ACTIVE") || !strings.Contains(err.Error(), "excluded by GOCCL_IB_HCA") {
		t.Fatalf("no usable device: %v; want ErrNotSupported giving each device's reason", err)
	}
	t.Logf("as expected: %v", err)
	_, err = openLib(ibvfake.New(), Config{GIDIndex: -1})
	if !errors.Is(err, transport.ErrNotSupported) || !strings.Contains(err.Error(), "ibv_get_device_list is empty") {
		t.Fatalf("no device at all: %v", err)
	}
}

const portDown = 1

// TestRegisterPinLimitHint: a registration the adapter refuses for lack of
// lockable memory says how to raise the limit.
func TestRegisterPinLimitHint(t *testing.T) {
	f := ibvfake.New()
	d := fakeOpener(f, ibvfake.DeviceConfig{}, Config{GIDIndex: -1})(t)
	f.FailNext("RegMR", syscall.ENOMEM)
	_, err := d.Register(make([]byte, 4096), transport.AccessAll)
	if err == nil || !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "ulimit -l") {
		t.Fatalf("register refused with ENOMEM: %v; want the locked-memory hint", err)
	}
	// The failed registration left nothing behind: the same buffer
	// registers now.
	buf := make([]byte, 4096)
	r := register(t, d, buf, transport.AccessAll)
	if err := d.Deregister(r); err != nil {
		t.Fatal(err)
	}
}

// TestPostRefusedByAdapter: a post the adapter itself refuses fails with
// ErrLink, gives its completion queue entry back and leaves no pending
// request behind.
func TestPostRefusedByAdapter(t *testing.T) {
	f := ibvfake.New()
	p := newPairOn(t, fakeOpener(f, ibvfake.DeviceConfig{}, Config{GIDIndex: -1}))
	r := register(t, p.da, alloc(t, 64), transport.AccessLocalWrite)
	f.FailNext("PostRecv", syscall.EIO)
	if err := p.a.PostRecv(1, r, 0, 8); !errors.Is(err, transport.ErrLink) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("post the adapter refused: %v; want ErrLink wrapping EIO", err)
	}
	q := p.qa.(*cq)
	if n := q.held.Load(); n != 0 {
		t.Fatalf("%d completion queue entries held after a refused post; want 0", n)
	}
	if err := p.a.PostRecv(2, r, 0, 8); err != nil {
		t.Fatalf("next post: %v", err)
	}
}

// TestWaitHasNoHelperGoroutine: completion queues start no goroutine: the
// goroutine that waits polls and sleeps on the completion channel itself.
func TestWaitHasNoHelperGoroutine(t *testing.T) {
	p := newPairOn(t, fakeOpener(ibvfake.New(), ibvfake.DeviceConfig{}, Config{GIDIndex: -1}))
	// Goroutines of earlier tests may still be ending (slowly, in an
	// emulated guest): count once the number holds still, and fail only
	// on more goroutines, not fewer.
	before := settledGoroutines()
	var qs []transport.CompletionQueue
	for range 10 {
		q, err := p.da.NewCompletionQueue(16)
		if err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("10 completion queues changed the goroutine count from %d to %d", before, after)
	}
	for _, q := range qs {
		q.Close()
	}
	// A waiter that blocks is woken by a completion posted later.
	src := register(t, p.da, alloc(t, 64), 0)
	dst := register(t, p.db, alloc(t, 64), transport.AccessAll)
	go func() {
		time.Sleep(10 * time.Millisecond)
		p.a.PostWrite(5, src, 0, 8, dst.Remote(), 0, nil)
	}()
	if c := waitN(t, p.qa, 1)[0]; c.ID != 5 || c.Err != nil {
		t.Fatalf("completion %+v", c)
	}
}

// settledGoroutines is the number of goroutines once it held still for
// 50 ms (at most 2 s).
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for deadline, still := time.Now().Add(2*time.Second), time.Now(); time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		if m := runtime.NumGoroutine(); m != n {
			n, still = m, time.Now()
		} else if time.Since(still) >= 50*time.Millisecond {
			break
		}
	}
	return n
}

// TestWaitBlockingAllocatesNothing: a Wait that sleeps on the completion
// channel (no spinning) and is woken by a completion allocates nothing when
// the caller passes the same context each time, as a communicator does.
func TestWaitBlockingAllocatesNothing(t *testing.T) {
	if racetest.Enabled { // the race detector allocates on its own
		t.Skip("skipping: the race detector allocates on its own")
	}
	p := newPairOn(t, fakeOpener(ibvfake.New(), ibvfake.DeviceConfig{}, Config{GIDIndex: -1, Spin: -1}))
	src := register(t, p.da, alloc(t, 64), 0)
	dst := register(t, p.db, alloc(t, 64), transport.AccessAll)
	kick, quit := make(chan struct{}), make(chan struct{})
	defer close(quit)
	go func() { // posts a write once Wait is asleep
		for {
			select {
			case <-kick:
			case <-quit:
				return
			}
			time.Sleep(200 * time.Microsecond)
			if err := p.a.PostWrite(1, src, 0, 8, dst.Remote(), 0, nil); err != nil {
				panic(err)
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make([]transport.Completion, 4)
	roundTrip := func() {
		kick <- struct{}{}
		if n, err := p.qa.Wait(ctx, out); n != 1 || err != nil || out[0].Err != nil {
			t.Fatalf("wait: %d, %v, %+v", n, err, out[0])
		}
	}
	for range 50 { // warm up: slices and maps reach their size
		roundTrip()
	}
	if allocs := testing.AllocsPerRun(200, roundTrip); allocs >= 0.1 {
		t.Fatalf("%.2f allocations per blocking wait and post; want none", allocs)
	}
}

// A kernel without RDMA makes ibv_get_device_list fail with ENOSYS: the
// error says so and names the other transports, instead of libibverbs'
// "function not implemented" alone; other failures keep their cause.
func TestNoRDMAKernel(t *testing.T) {
	f := ibvfake.New()
	f.AddDevice(ibvfake.DeviceConfig{})
	f.FailNext("DeviceNames", syscall.ENOSYS)
	_, err := openLib(f, Config{GIDIndex: -1})
	if !errors.Is(err, transport.ErrNotSupported) || !errors.Is(err, syscall.ENOSYS) ||
		!strings.Contains(err.Error(), "this kernel has no RDMA support") || !strings.Contains(err.Error(), "tcp or shm") {
		t.Fatalf("ENOSYS: %v", err)
	}
	f.FailNext("DeviceNames", syscall.EACCES)
	_, err = openLib(f, Config{GIDIndex: -1})
	if !errors.Is(err, transport.ErrNotSupported) || !errors.Is(err, syscall.EACCES) || strings.Contains(err.Error(), "kernel") {
		t.Fatalf("EACCES: %v", err)
	}
}
