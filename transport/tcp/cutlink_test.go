package tcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// TestCutLink puts the two devices in two network namespaces joined by a
// veth pair, takes the link down mid-transfer, and checks that both sides'
// pending requests fail with ErrLink within a bounded time (notes/multihost:
// without TCP_USER_TIMEOUT and keepalive they would hang for ~15 minutes).
// It needs root and iproute2, and skips without them.
func TestCutLink(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	id := os.Getpid() % 100000
	nsA, nsB := fmt.Sprintf("gocclA%d", id), fmt.Sprintf("gocclB%d", id)
	vA, vB := fmt.Sprintf("gcva%d", id), fmt.Sprintf("gcvb%d", id)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Skipf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", nsA)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsA).Run() })
	ip("netns", "add", nsB)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsB).Run() })
	ip("link", "add", vA, "type", "veth", "peer", "name", vB)
	ip("link", "set", vA, "netns", nsA)
	ip("link", "set", vB, "netns", nsB)
	ip("-n", nsA, "addr", "add", "10.199.0.1/24", "dev", vA)
	ip("-n", nsB, "addr", "add", "10.199.0.2/24", "dev", vB)
	ip("-n", nsA, "link", "set", vA, "up")
	ip("-n", nsB, "link", "set", vB, "up")

	opts := func(host string) Options {
		return Options{
			ListenAddress:     host + ":0",
			UserTimeout:       2 * time.Second,
			KeepAliveIdle:     time.Second,
			KeepAliveInterval: time.Second,
			KeepAliveCount:    2,
			Logger:            logtest.New(t),
		}
	}
	var da, db *Device
	if err := inNetns(nsA, func() (err error) { da, err = NewDevice(opts("10.199.0.1")); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	if err := inNetns(nsB, func() (err error) { db, err = NewDevice(opts("10.199.0.2")); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p := &transporttest.Pair{DevA: da, DevB: db}
	p.CQA, p.CQB = transporttest.NewCQ(t, da), transporttest.NewCQ(t, db)
	p.A = transporttest.NewEndpoint(t, da, p.CQA)
	p.B = transporttest.NewEndpoint(t, db, p.CQB)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- inNetns(nsB, func() error { return p.B.Connect(ctx, p.A.LocalAddress()) }) }()
	errA := inNetns(nsA, func() error { return p.A.Connect(ctx, p.B.LocalAddress()) })
	if errB := <-done; errA != nil || errB != nil {
		t.Fatalf("connect: A: %v; B: %v", errA, errB)
	}
	pingPong(t, p)

	// A streams writes at B; B waits for a message. Then the link dies.
	const n = 4 << 20
	src := transporttest.Register(t, da, make([]byte, n), 0)
	dst := transporttest.Register(t, db, make([]byte, n), transport.AccessAll)
	rb := transporttest.Register(t, db, make([]byte, 8), transport.AccessLocalWrite)
	if err := p.B.PostRecv(100, rb, 0, 8); err != nil {
		t.Fatal(err)
	}
	const writes = 1024 // 4 GiB: still streaming when the link goes down
	for i := range writes {
		if err := p.A.PostWrite(uint64(i), src, 0, n, dst.Remote(), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	ip("-n", nsA, "link", "set", vA, "down")

	ca := transporttest.WaitN(t, p.CQA, writes, 15*time.Second)
	failed := 0
	for _, c := range ca {
		if c.Err != nil {
			failed++
			if !errors.Is(c.Err, transport.ErrLink) {
				t.Errorf("A: %v does not wrap ErrLink", c.Err)
			}
		}
	}
	if failed == 0 {
		t.Fatalf("A: all %d writes completed before the cut; nothing was tested", writes)
	}
	t.Logf("A: %d of %d writes failed after %v: %v", failed, writes, time.Since(start).Round(time.Millisecond), ca[len(ca)-1].Err)
	cb := transporttest.WaitOne(t, p.CQB, 15*time.Second)
	transporttest.ExpectErr(t, cb, transport.OpRecv, 100, transport.ErrFlushed, transport.ErrLink)
	t.Logf("B: receive failed after %v: %v", time.Since(start).Round(time.Millisecond), cb.Err)
	if err := p.A.PostSend(1, src, 0, 8); !errors.Is(err, transport.ErrLink) {
		t.Errorf("A: post after the cut: %v", err)
	}
}

// inNetns runs fn on a thread switched into the named network namespace
// (sockets created by fn live there), then switches the thread back.
func inNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open own netns: %w", err)
	}
	defer unix.Close(orig)
	target, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open netns %s: %w", name, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it is discarded when the goroutine exits.
		return fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}
