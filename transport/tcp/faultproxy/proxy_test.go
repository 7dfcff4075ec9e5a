package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/logtest"
)

// target is a listener whose accepted connections the test gets.
type target struct {
	ln    net.Listener
	conns chan *net.TCPConn
}

func newTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln, conns: make(chan *net.TCPConn, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.conns <- c.(*net.TCPConn)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-tg.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return tg
}

func (tg *target) accept(t *testing.T) *net.TCPConn {
	t.Helper()
	select {
	case c := <-tg.conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("target: no connection within 5 s")
		return nil
	}
}

// setup starts a target and a proxy in front of it, dials the proxy and
// returns the client end, the target's end and the proxy's Conn.
func setup(t *testing.T, opts Options) (*Proxy, *net.TCPConn, *net.TCPConn, *Conn) {
	t.Helper()
	tg := newTarget(t)
	opts.Logger = logtest.New(t)
	p, err := Listen("127.0.0.1:0", tg.ln.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	client, server := dial(t, p), tg.accept(t)
	return p, client, server, waitConn(t, p, 1)[0]
}

func dial(t *testing.T, p *Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// waitConn waits until the proxy has n open connections.
func waitConn(t *testing.T, p *Proxy, n int) []*Conn {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if cs := p.Conns(); len(cs) >= n {
			return cs
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy has %d connections after 5 s, want %d", len(p.Conns()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// roundTrip writes msg on a and reads it on b, with a deadline.
func roundTrip(t *testing.T, a, b net.Conn, msg string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := a.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	b.SetReadDeadline(time.Now().Add(within))
	defer b.SetReadDeadline(time.Time{})
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatalf("read %q: %v", msg, err)
	}
	if string(got) != msg {
		t.Fatalf("read %q, want %q", got, msg)
	}
	return time.Since(start)
}

// expectNothing checks that nothing arrives on c for d.
func expectNothing(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	n, err := c.Read(b[:])
	if n > 0 || !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
		t.Fatalf("read %d bytes, %v; want nothing for %v", n, err, d)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestForward(t *testing.T) {
	_, client, server, c := setup(t, Options{})
	roundTrip(t, client, server, "ping", time.Second)
	roundTrip(t, server, client, "pong", time.Second)
	// A large transfer both ways at once.
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var wg sync.WaitGroup
	for _, w := range []*net.TCPConn{client, server} {
		wg.Add(1)
		go func() { defer wg.Done(); w.Write(data); w.CloseWrite() }()
	}
	for _, r := range []*net.TCPConn{server, client} {
		r.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(r) // to the propagated FIN
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes (%v), want %d", len(got), err, len(data))
		}
	}
	wg.Wait()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("connection not over after both FINs")
	}
	if s := c.Stats(); s.Forwarded[0] != int64(len(data))+4 || s.Forwarded[1] != int64(len(data))+4 {
		t.Errorf("stats %v", s)
	}
}

func TestDelay(t *testing.T) {
	const delay = 100 * time.Millisecond
	_, client, server, c := setup(t, Options{})
	c.Delay(Upstream, delay)
	if rtt := roundTrip(t, client, server, "slow", 2*time.Second); rtt < delay {
		t.Errorf("upstream took %v with a delay of %v", rtt, delay)
	}
	if rtt := roundTrip(t, server, client, "fast", time.Second); rtt > delay/2 {
		t.Errorf("downstream took %v without a delay", rtt)
	}
	// Latency, not a rate limit: 20 chunks in a row take about one delay.
	start := time.Now()
	for range 20 {
		roundTripAsync(t, client, "x")
		time.Sleep(time.Millisecond)
	}
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(server, make([]byte, 20)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < delay || took > 10*delay {
		t.Errorf("20 delayed chunks took %v; want about %v", took, delay)
	}
	c.Heal()
	if rtt := roundTrip(t, client, server, "healed", time.Second); rtt > delay/2 {
		t.Errorf("healed upstream took %v", rtt)
	}
}

func roundTripAsync(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func TestDrop(t *testing.T) {
	_, client, server, c := setup(t, Options{})
	c.Drop(Upstream)
	// The sender's writes succeed (the proxy acknowledges them) but nothing
	// arrives, while the other direction still works.
	if _, err := client.Write([]byte("into the void")); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, server, 200*time.Millisecond)
	roundTrip(t, server, client, "still here", time.Second)
	if s := c.Stats(); s.Dropped[0] != int64(len("into the void")) {
		t.Errorf("stats %v: want %d bytes dropped upstream", s, len("into the void"))
	}
	c.Heal()
	roundTrip(t, client, server, "back", time.Second)
}

func TestStall(t *testing.T) {
	_, client, server, c := setup(t, Options{})
	c.Stall(Upstream)
	// A writer that never gets its bytes read blocks once the buffers (the
	// proxy's queue and the sockets') are full.
	const total = 256 << 20
	var written int64
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for written < total {
			client.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
			n, err := client.Write(buf)
			written += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("writer neither finished nor blocked")
	}
	if !isTimeout(err) {
		t.Fatalf("writer: %v after %d bytes; want it blocked", err, written)
	}
	expectNothing(t, server, 100*time.Millisecond)
	t.Logf("writer blocked after %d bytes", written)
	// Healing delivers everything that was held, in order.
	c.Heal()
	client.SetWriteDeadline(time.Time{})
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.CopyN(io.Discard, server, written); err != nil {
		t.Fatalf("after heal: read %d of %d bytes: %v", n, written, err)
	}
	// The proxy counts a chunk once its write returns, which may be after
	// the server has read it: wait for the count.
	s := c.Stats()
	for deadline := time.Now().Add(5 * time.Second); s.Forwarded[0] != written && time.Now().Before(deadline); s = c.Stats() {
		time.Sleep(time.Millisecond)
	}
	if s.Forwarded[0] != written {
		t.Errorf("stats %v: want %d forwarded upstream", s, written)
	}
}

// readErr reads from c until an error, with a bound.
func readErr(t *testing.T, c net.Conn, within time.Duration) error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		err = io.EOF
	}
	if isTimeout(err) {
		t.Fatalf("no error within %v", within)
	}
	return err
}

func TestCut(t *testing.T) {
	p, client, server, c := setup(t, Options{})
	roundTrip(t, client, server, "ping", time.Second)
	start := time.Now()
	c.Cut()
	for name, end := range map[string]net.Conn{"client": client, "server": server} {
		err := readErr(t, end, 2*time.Second)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: %v, want a reset", name, err)
		}
	}
	t.Logf("both ends reset after %v", time.Since(start))
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("cut connection not done")
	}
	// A cut proxy resets new connections too, until healed.
	p.Cut()
	late, err := net.DialTimeout("tcp", p.Addr().String(), 5*time.Second)
	if err == nil { // the reset may come during or after the connect
		t.Cleanup(func() { late.Close() })
		err = readErr(t, late, 2*time.Second)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("connection to a cut proxy: %v, want a reset", err)
	}
	p.Heal()
	again := dial(t, p)
	if _, err := again.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitConn(t, p, 1)
}

func TestProxyWideFaults(t *testing.T) {
	p, client, server, _ := setup(t, Options{})
	p.Drop(Both)
	client.Write([]byte("a"))
	server.Write([]byte("b"))
	expectNothing(t, server, 100*time.Millisecond)
	expectNothing(t, client, 10*time.Millisecond)
	p.Heal()
	roundTrip(t, client, server, "ok", time.Second)
	roundTrip(t, server, client, "ok", time.Second)
}

// TestRandom checks that random faults repeat with the seed: a ping-pong
// (one chunk per message) through a proxy with a per-chunk cut
// probability is cut at the same message every time.
func TestRandom(t *testing.T) {
	cutAt := func(seed uint64) int {
		_, client, server, _ := setup(t, Options{Random: &Random{Seed: seed, CutProb: 0.05, MaxDelay: 2 * time.Millisecond}})
		buf := make([]byte, 1)
		for i := range 1000 {
			if _, err := client.Write([]byte{byte(i)}); err != nil {
				return i
			}
			server.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.ReadFull(server, buf); err != nil {
				if isTimeout(err) {
					t.Fatalf("message %d: %v", i, err)
				}
				return i
			}
			if _, err := server.Write(buf); err != nil {
				return i
			}
			client.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.ReadFull(client, buf); err != nil {
				if isTimeout(err) {
					t.Fatalf("message %d: %v", i, err)
				}
				return i
			}
		}
		return -1
	}
	a, b, other := cutAt(42), cutAt(42), cutAt(7)
	t.Logf("seed 42 cut at message %d and %d; seed 7 at %d", a, b, other)
	if a < 0 || a != b {
		t.Errorf("seed 42: cut at message %d, then %d; want the same", a, b)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	p, client, _, c := setup(t, Options{})
	c.Stall(Both)
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on a stalled connection")
	}
	if err := readErr(t, client, 2*time.Second); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("client after Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr().String(), time.Second); err == nil {
		t.Error("closed proxy still accepts")
	}
}
