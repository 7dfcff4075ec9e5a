package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newTestServer(t *testing.T) (*Server, *logBuffer) {
	t.Helper()
	lb := &logBuffer{}
	s, err := NewServer("127.0.0.1:0", testSecret, WithLogger(slog.New(slog.NewTextHandler(lb, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, lb
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dialTest(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(testCtx(t, 5*time.Second), addr, testSecret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStoreSetGetAddWait(t *testing.T) {
	s, _ := newTestServer(t)
	c := dialTest(t, s.Addr())
	ctx := testCtx(t, 5*time.Second)

	if err := c.Set(ctx, "a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctx, "a")
	if err != nil || string(v) != "hello" {
		t.Fatalf("Get = %q, %v; want hello", v, err)
	}
	if err := c.Set(ctx, "empty", nil); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "empty"); err != nil || len(v) != 0 {
		t.Fatalf("Get(empty) = %q, %v", v, err)
	}
	for i, want := range []int64{5, 3, 103} {
		n, err := c.Add(ctx, "n", []int64{5, -2, 100}[i])
		if err != nil || n != want {
			t.Fatalf("Add #%d = %d, %v; want %d", i, n, err, want)
		}
	}
	if v, _ := c.Get(ctx, "n"); string(v) != "103" {
		t.Fatalf("counter reads %q, want 103", v)
	}
	if _, err := c.Add(ctx, "a", 1); err == nil || !strings.Contains(err.Error(), "not an integer") {
		t.Fatalf("Add on a non-integer: err = %v", err)
	}
	if err := c.Wait(ctx, "a", "n", "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "a", "absent"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Get(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of a deleted key: err = %v, want to block until the deadline", err)
	}
	if err := c.Set(ctx, strings.Repeat("k", MaxKeyLen+1), nil); err == nil {
		t.Fatal("Set with an oversized key succeeded")
	}
	if ip := c.LocalIP(); !ip.IsLoopback() {
		t.Fatalf("LocalIP = %v, want loopback", ip)
	}
}

func TestStoreLargeValue(t *testing.T) {
	s, _ := newTestServer(t)
	c := dialTest(t, s.Addr())
	ctx := testCtx(t, 20*time.Second)
	big := bytes.Repeat([]byte{0xAB}, 8<<20)
	if err := c.Set(ctx, "big", big); err != nil {
		t.Fatal(err)
	}
	v, err := c.Get(ctx, "big")
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("Get(big): %d bytes, %v", len(v), err)
	}
	if err := c.Set(ctx, "huge", make([]byte, MaxValueLen+1)); err == nil {
		t.Fatal("Set of an oversized value succeeded")
	}
}

func TestStoreGetBlocksUntilSet(t *testing.T) {
	s, _ := newTestServer(t)
	a, b := dialTest(t, s.Addr()), dialTest(t, s.Addr())
	ctx := testCtx(t, 5*time.Second)

	got := make(chan string, 1)
	waited := make(chan error, 1)
	go func() {
		v, err := a.Get(ctx, "late")
		if err != nil {
			v = []byte("error: " + err.Error())
		}
		got <- string(v)
	}()
	go func() { waited <- a.Wait(ctx, "late", "later") }()

	time.Sleep(50 * time.Millisecond)
	select {
	case v := <-got:
		t.Fatalf("Get returned %q before the key was set", v)
	default:
	}
	if err := b.Set(ctx, "late", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != "v1" {
		t.Fatalf("Get = %q, want v1", v)
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned %v with a key missing", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := b.Set(ctx, "later", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

func TestStoreGetCancelled(t *testing.T) {
	s, _ := newTestServer(t)
	c := dialTest(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Get(ctx, "never")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Get took %v after its context ended", d)
	}
	// The cancel reaches the server and the connection stays usable.
	waitFor(t, 2*time.Second, "the server to drop the cancelled waiter", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.waiters) == 0
	})
	ctx2 := testCtx(t, 5*time.Second)
	if err := c.Set(ctx2, "never", []byte("x")); err != nil {
		t.Fatal(err)
	}
}

func TestStoreConcurrentClients(t *testing.T) {
	s, _ := newTestServer(t)
	const n = 32
	ctx := testCtx(t, 20*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(ctx, s.Addr(), testSecret)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if _, err := c.Add(ctx, "count", 1); err != nil {
				errs <- err
				return
			}
			if err := c.Set(ctx, fmt.Sprint("k", i), []byte(fmt.Sprint(i))); err != nil {
				errs <- err
				return
			}
			for j := range n {
				v, err := c.Get(ctx, fmt.Sprint("k", j))
				if err != nil {
					errs <- err
					return
				}
				if string(v) != fmt.Sprint(j) {
					errs <- fmt.Errorf("client %d: k%d = %q", i, j, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c := dialTest(t, s.Addr())
	if v, err := c.Get(ctx, "count"); err != nil || string(v) != fmt.Sprint(n) {
		t.Fatalf("count = %q, %v; want %d", v, err, n)
	}
}

func TestDialWrongSecret(t *testing.T) {
	s, logs := newTestServer(t)
	_, err := Dial(testCtx(t, 5*time.Second), s.Addr(), []byte("not the secret"))
	want := fmt.Sprintf("bootstrap: store %s refused authentication: wrong secret", s.Addr())
	if err == nil || err.Error() != want {
		t.Fatalf("Dial err = %v, want %q", err, want)
	}
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("err %v does not wrap ErrAuth", err)
	}
	waitFor(t, 2*time.Second, "the refusal in the server log", func() bool {
		return strings.Contains(logs.String(), "wrong secret")
	})
	// The server keeps serving good clients.
	c := dialTest(t, s.Addr())
	if err := c.Set(testCtx(t, 5*time.Second), "k", nil); err != nil {
		t.Fatal(err)
	}
}

func TestDialNoSecret(t *testing.T) {
	s, _ := newTestServer(t)
	if _, err := Dial(testCtx(t, time.Second), s.Addr(), nil); err == nil || !strings.Contains(err.Error(), "no secret") {
		t.Fatalf("Dial without a secret: err = %v", err)
	}
	if _, err := NewServer("127.0.0.1:0", nil); err == nil {
		t.Fatal("NewServer without a secret succeeded")
	}
}

// A client that skips authentication and sends a command is refused and
// disconnected; it never gets an answer.
func TestUnauthenticatedCommandRefused(t *testing.T) {
	s, logs := newTestServer(t)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := writeFrame(conn, encodeRequest(request{typ: typeGet, id: 1, key: "k"})); err != nil {
		t.Fatal(err)
	}
	f, err := readFrame(conn, 1<<16)
	if err != nil {
		t.Fatalf("read refusal: %v", err)
	}
	if f.typ != typeError {
		t.Fatalf("got frame type %d, want an error", f.typ)
	}
	if _, err := readFrame(conn, 1<<16); err == nil {
		t.Fatal("connection still open after the refusal")
	}
	waitFor(t, 2*time.Second, "the drop in the server log", func() bool {
		return strings.Contains(logs.String(), "dropped unauthenticated connection")
	})
}

func TestGarbageAndSilentConnectionsDropped(t *testing.T) {
	old := handshakeTimeout
	handshakeTimeout = 300 * time.Millisecond
	t.Cleanup(func() { handshakeTimeout = old })
	s, _ := newTestServer(t)

	good := dialTest(t, s.Addr())
	ctx := testCtx(t, 5*time.Second)

	garbage, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer garbage.Close()
	garbage.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	huge := appendFrame(nil, frame{typ: typeHello})
	huge[8], huge[9] = 0x7f, 0xff // claims a 2 GiB payload
	bigClaim, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer bigClaim.Close()
	bigClaim.Write(huge)
	silent, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	// The good client is unaffected meanwhile.
	if err := good.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]net.Conn{"garbage": garbage, "oversized": bigClaim, "silent": silent} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() { // EOF or a reset both mean closed
			t.Errorf("%s connection: not closed by the server: %v", name, err)
		}
	}
	waitFor(t, 5*time.Second, "the server to forget the dropped connections", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.conns) == 1
	})
	if v, err := good.Get(ctx, "k"); err != nil || string(v) != "v" {
		t.Fatalf("good client after garbage: %q, %v", v, err)
	}
}

// A fake store that does not know the secret is detected by the client.
func TestDialFakeServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := readFrame(c, nonceLen); err != nil {
			return
		}
		writeFrame(c, frame{typ: typeChallenge, payload: nonce()})
		if _, err := readFrame(c, nonceLen); err != nil {
			return
		}
		writeFrame(c, frame{typ: typeWelcome, payload: nonce()})
		io.Copy(io.Discard, c)
	}()
	_, err = Dial(testCtx(t, 5*time.Second), ln.Addr().String(), testSecret)
	if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "did not prove") {
		t.Fatalf("Dial to a fake store: err = %v", err)
	}
}

// TestDialForeignServer: a server on the store's port that is not a goccl
// store and never answers in goccl's protocol (it stays silent, or closes
// every connection) failed Dial at its deadline with a bare read error
// ("context deadline exceeded (last error: EOF)", a launchers' hunt, with
// another program on MASTER_PORT); now the error says a server there
// accepted the connections but did not answer, or closed them, and that it
// is not a goccl store.
func TestDialForeignServer(t *testing.T) {
	old := handshakeTimeout
	handshakeTimeout = 300 * time.Millisecond
	t.Cleanup(func() { handshakeTimeout = old })
	for _, mode := range []string{"silent", "closing"} {
		t.Run(mode, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan struct{})
			defer func() { ln.Close(); <-served }()
			go func() {
				defer close(served)
				var conns []net.Conn // held open, unanswered, until the test ends
				defer func() {
					for _, c := range conns {
						c.Close()
					}
				}()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					if mode == "closing" {
						c.Close()
						continue
					}
					conns = append(conns, c)
				}
			}()
			want := map[string]string{"silent": "did not answer goccl's handshake", "closing": "closed them during goccl's handshake"}[mode]
			_, err = Dial(testCtx(t, time.Second), ln.Addr().String(), testSecret)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "not a goccl store") {
				t.Fatalf("Dial to a %s foreign server: %v; want %q and not a goccl store", mode, err, want)
			}
			t.Log(err)
		})
	}
}

func TestDialRetriesUntilServerUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv := make(chan *Server, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		s, err := NewServer(addr, testSecret, WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Error(err)
		}
		srv <- s
	}()
	c, err := Dial(testCtx(t, 5*time.Second), addr, testSecret)
	if s := <-srv; s != nil {
		defer s.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, "127.0.0.1:1", testSecret); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to nothing: err = %v, want deadline exceeded", err)
	}
}

func TestServerDeathFailsClientsPromptly(t *testing.T) {
	s, _ := newTestServer(t)
	c := dialTest(t, s.Addr())
	ctx := testCtx(t, time.Minute) // the failure must come from the connection, not ctx
	errc := make(chan error, 2)
	go func() { _, err := c.Get(ctx, "never"); errc <- err }()
	go func() { errc <- c.Wait(ctx, "never", "either") }()
	waitFor(t, 2*time.Second, "both calls to be pending", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.waiters) == 2
	})
	start := time.Now()
	s.Close()
	for range 2 {
		select {
		case err := <-errc:
			if err == nil || !strings.Contains(err.Error(), "connection to store") {
				t.Fatalf("pending call err = %v, want a lost connection", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("pending call still blocked 5 s after the server closed")
		}
	}
	t.Logf("pending calls failed %v after server close", time.Since(start))
	if err := c.Set(ctx, "k", nil); err == nil || !strings.Contains(err.Error(), "connection to store") {
		t.Fatalf("later call err = %v, want a lost connection", err)
	}
}

func TestClientCloseWakesWaiters(t *testing.T) {
	s, _ := newTestServer(t)
	c, err := Dial(testCtx(t, 5*time.Second), s.Addr(), testSecret)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := c.Get(testCtx(t, time.Minute), "never"); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Get still blocked 5 s after Close")
	}
	if err := c.Set(testCtx(t, time.Second), "k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close: err = %v", err)
	}
}

// A client speaking another protocol version is told so instead of being
// dropped silently, and Dial does not retry.
func TestVersionMismatchRefused(t *testing.T) {
	s, _ := newTestServer(t)
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	hello := appendFrame(nil, frame{typ: typeHello, payload: nonce()})
	hello[2] = frameVersion + 1
	conn.Write(hello)
	f, err := readFrame(conn, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeResponse(f)
	if err != nil || r.typ != typeError || !strings.Contains(r.msg, "protocol version 2, want 1") {
		t.Fatalf("reply %+v, %v", r, err)
	}
}

// TestCloseWithAnswersInFlight: a client closed while the store's answers
// to it are on their way (the end of a job: a rank's watchers of other
// ranks' keys, answered as those ranks close) leaves no warning in the
// store's log. (Closing a socket with unread data resets the connection,
// which the store logged as a dropped connection: 8 warnings at the end of
// a verified 512-rank job.)
func TestCloseWithAnswersInFlight(t *testing.T) {
	s, logs := newTestServer(t)
	setter := dialTest(t, s.Addr())
	ctx := testCtx(t, 30*time.Second)
	for round := range 20 {
		c, err := Dial(ctx, s.Addr(), testSecret)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.Get(ctx, fmt.Sprintf("k%d/%d", round, i))
			}()
		}
		waitFor(t, 5*time.Second, "the gets to be pending", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			n := 0
			for k := range s.waiters {
				if strings.HasPrefix(k, fmt.Sprintf("k%d/", round)) {
					n++
				}
			}
			return n == 20
		})
		for i := range 20 {
			if err := setter.Set(ctx, fmt.Sprintf("k%d/%d", round, i), make([]byte, 4096)); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		wg.Wait()
	}
	setter.Close()
	s.Close()
	if strings.Contains(logs.String(), "dropped") {
		t.Fatalf("the store logged dropped connections:\n%s", logs.String())
	}
}

// TestWillSetWhenTheConnectionDies: a client's wills are set when its
// connection ends without Close (a killed process, a failed link), and
// dropped when it closes.
func TestWillSetWhenTheConnectionDies(t *testing.T) {
	s, _ := newTestServer(t)
	watcher := dialTest(t, s.Addr())
	ctx := testCtx(t, 10*time.Second)

	dying, err := Dial(ctx, s.Addr(), testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if err := dying.Will(ctx, "gone/1", []byte("rank 1 died")); err != nil {
		t.Fatal(err)
	}
	if err := dying.Will(ctx, "gone/1", []byte("rank 1 (pid 7) died")); err != nil { // replaces
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() { v, _ := watcher.Get(ctx, "gone/1"); got <- v }()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	dying.conn.Close() // as the kernel does for a killed process: no bye
	select {
	case v := <-got:
		if string(v) != "rank 1 (pid 7) died" {
			t.Fatalf("will = %q", v)
		}
		t.Logf("will set %v after the connection ended", time.Since(start).Round(time.Microsecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the will was not set 5 s after the connection ended")
	}

	// A new connection's will clears the key an earlier one's set.
	again := dialTest(t, s.Addr())
	if err := again.Will(ctx, "gone/1", []byte("rank 1 died again")); err != nil {
		t.Fatal(err)
	}
	short0, cancel0 := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel0()
	if v, err := watcher.Get(short0, "gone/1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a new will left the earlier one's value: %q, %v", v, err)
	}

	closing := dialTest(t, s.Addr())
	if err := closing.Will(ctx, "gone/2", []byte("rank 2 died")); err != nil {
		t.Fatal(err)
	}
	for i := range maxWills {
		if err := closing.Will(ctx, "k/"+strconv.Itoa(i), nil); err != nil && i < maxWills-1 {
			t.Fatalf("will %d: %v", i, err)
		}
	}
	if err := closing.Will(ctx, "one/too/many", nil); err == nil || !strings.Contains(err.Error(), "holds 64 wills") {
		t.Fatalf("will past the limit: %v", err)
	}
	closing.Close()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if v, err := watcher.Get(short, "gone/2"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after Close the will was set: %q, %v", v, err)
	}
}

func TestBlameRoundTrip(t *testing.T) {
	for _, b := range []Blame{{0, "failed"}, {17, "stalled (stopped, hung, or not in the call)"}, {3, ""}} {
		got, ok := DecodeBlame(b.Encode())
		if !ok || got != b {
			t.Errorf("DecodeBlame(Encode(%+v)) = %+v, %v", b, got, ok)
		}
	}
	// A reason with a newline is kept on one line.
	if got, ok := DecodeBlame(Blame{1, "a\nb"}.Encode()); !ok || got.Reason != "a b" {
		t.Errorf("got %+v, %v", got, ok)
	}
	for _, v := range []string{"", "x", "-1\nr", "1", "1 2\nr", "\nr", "99999999999999999999\nr", "2\n" + strings.Repeat("x", 513)} {
		if b, ok := DecodeBlame([]byte(v)); ok {
			t.Errorf("DecodeBlame(%q) = %+v, want refusal", v, b)
		}
	}
}

// FuzzDecodeBlame: a store value (any rank's program may write one) never
// panics the decoder, and what it accepts encodes back to itself.
func FuzzDecodeBlame(f *testing.F) {
	f.Add([]byte("3\nstalled"))
	f.Add([]byte("0\n"))
	f.Add([]byte("x\ny"))
	f.Fuzz(func(t *testing.T, v []byte) {
		b, ok := DecodeBlame(v)
		if !ok {
			return
		}
		if b.Root < 0 || strings.Contains(b.Reason, "\n") {
			t.Fatalf("accepted %q as %+v", v, b)
		}
		if again, ok := DecodeBlame(b.Encode()); !ok || again != b {
			t.Fatalf("%+v does not survive Encode: %+v, %v", b, again, ok)
		}
	})
}
