package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// runRanks runs f for every rank of an n-rank group as goroutines, rank 0
// hosting the store on a free loopback port, and fails the test on any
// error.
func runRanks(t *testing.T, n int, f func(ctx context.Context, b *Bootstrap) error) {
	t.Helper()
	runRanksB(t, n, f)
}

func runRanksB(t testing.TB, n int, f func(ctx context.Context, b *Bootstrap) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr := freeAddr(t)
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info := Info{Rank: r, Size: n, LocalRank: r, LocalSize: n, Addr: addr, Secret: testSecret, Source: "test", HostRoot: r == 0}
			b, err := Connect(ctx, info, quiet)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = f(ctx, b)
			if err := b.Close(); err != nil && errs[r] == nil {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestGroupAllgatherBarrier(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8, 17} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			runRanks(t, n, func(ctx context.Context, b *Bootstrap) error {
				for call := range 3 {
					all, err := b.Allgather(ctx, fmt.Appendf(nil, "r%d-c%d", b.Rank(), call))
					if err != nil {
						return err
					}
					if len(all) != b.Size() {
						return fmt.Errorf("allgather #%d: %d entries, want %d", call, len(all), b.Size())
					}
					for r, v := range all {
						if want := fmt.Sprintf("r%d-c%d", r, call); string(v) != want {
							return fmt.Errorf("allgather #%d: entry %d = %q, want %q", call, r, v, want)
						}
					}
					if err := b.Barrier(ctx); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// Nobody leaves a barrier before everyone has entered it.
func TestGroupBarrierHolds(t *testing.T) {
	const n = 6
	var mu sync.Mutex
	entered := 0
	runRanks(t, n, func(ctx context.Context, b *Bootstrap) error {
		for round := range 3 {
			if b.Rank() == round {
				time.Sleep(50 * time.Millisecond) // a late rank
			}
			mu.Lock()
			entered++
			mu.Unlock()
			if err := b.Barrier(ctx); err != nil {
				return err
			}
			mu.Lock()
			got := entered
			mu.Unlock()
			if got < n*(round+1) {
				return fmt.Errorf("round %d: left the barrier after only %d entries", round, got)
			}
			if err := b.Barrier(ctx); err != nil { // keep rounds apart
				return err
			}
		}
		return nil
	})
}

func TestGroupWithPrefix(t *testing.T) {
	runRanks(t, 4, func(ctx context.Context, b *Bootstrap) error {
		sub := b.WithPrefix("sub")
		if sub.Client() != b.Client() || sub.Rank() != b.Rank() {
			return fmt.Errorf("view does not share the group")
		}
		// The same call sequence numbers in two namespaces do not collide.
		x, err := b.Allgather(ctx, []byte("outer"))
		if err != nil {
			return err
		}
		y, err := sub.Allgather(ctx, []byte("inner"))
		if err != nil {
			return err
		}
		for r := range 4 {
			if string(x[r]) != "outer" || string(y[r]) != "inner" {
				return fmt.Errorf("namespaces mixed: %q %q", x[r], y[r])
			}
		}
		if err := sub.Close(); err != nil {
			return err
		}
		return b.Barrier(ctx) // the connection survives the view's Close
	})
}

func TestConnectHostRootPortZero(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	b, err := Connect(ctx, Info{Rank: 0, Size: 1, LocalSize: 1, Addr: "127.0.0.1:0", Secret: testSecret, HostRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if strings.HasSuffix(b.Info().Addr, ":0") {
		t.Fatalf("Info().Addr = %q, want the bound port", b.Info().Addr)
	}
	if err := b.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(ctx, Info{Rank: 1, Size: 1}); err == nil {
		t.Fatal("Connect with rank >= size succeeded")
	}
}

// A rank whose peer never arrives fails when its context ends.
func TestGroupMissingRankBounded(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	b, err := Connect(ctx, Info{Rank: 0, Size: 2, LocalSize: 2, Addr: "127.0.0.1:0", Secret: testSecret, HostRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Nobody else is connected: Close waits joinLinger for rank 1 to
		// come (and learn why this rank gave up), not shutdownLinger.
		start := time.Now()
		b.Close()
		if d := time.Since(start); d > joinLinger+2*time.Second {
			t.Errorf("Close took %v with no other rank connected", d)
		}
	}()
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.Allgather(short, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "waiting for rank 1") {
		t.Fatalf("Allgather without rank 1: err = %v", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("Allgather without rank 1, no connection refused: err = %v", err)
	}
}

// A rank that waits for rank 0's gathered values names the rank that
// never came (rank 0 waits for it), not only rank 0: "waiting for rank 0:
// context deadline exceeded" sent users to rank 0.
func TestGroupTimeoutNamesMissingRank(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	addr := freeAddr(t)
	b0, err := Connect(ctx, Info{Rank: 0, Size: 3, LocalSize: 3, Addr: addr, Secret: testSecret, HostRoot: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b0.Close()
	b1, err := Connect(ctx, Info{Rank: 1, Size: 3, LocalSize: 3, Addr: addr, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	errs := make(chan error, 2)
	for _, b := range []*Bootstrap{b0, b1} {
		go func() {
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := b.Allgather(short, []byte("x"))
			errs <- err
		}()
	}
	for range 2 {
		err := <-errs
		if err == nil {
			t.Fatal("Allgather without rank 2 succeeded")
		}
		if !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("the error does not name rank 2: %v", err)
		}
	}
}

// The hosting rank's Close waits for the other ranks to leave, but not
// forever.
func TestServerShutdownWaitsForClients(t *testing.T) {
	s, _ := newTestServer(t)
	c := dialTest(t, s.Addr())
	// Dial returns once the client's side of the handshake is done; the
	// server counts the client a moment later (CI once shut down first).
	waitFor(t, 5*time.Second, "the server to count the client", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.authed == 1
	})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a client still connected", err)
	case <-time.After(100 * time.Millisecond):
	}
	// Still serving the connected client.
	if err := c.Set(testCtx(t, time.Second), "k", nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Shutdown still waiting 3 s after the last client left")
	}
}

// Keys of finished calls are deleted, so a long-lived group does not grow
// the store.
func TestGroupDeletesOldKeys(t *testing.T) {
	runRanks(t, 4, func(ctx context.Context, b *Bootstrap) error {
		sub := b.WithPrefix("sub")
		for range 20 {
			if _, err := b.Allgather(ctx, []byte("x")); err != nil {
				return err
			}
			if err := b.Barrier(ctx); err != nil {
				return err
			}
			if _, err := sub.Allgather(ctx, []byte("y")); err != nil {
				return err
			}
		}
		if err := b.Barrier(ctx); err != nil {
			return err
		}
		if b.server != nil {
			b.server.mu.Lock()
			keys := len(b.server.data)
			b.server.mu.Unlock()
			// At most the last two calls' keys per namespace remain.
			if keys > 12 {
				return fmt.Errorf("%d keys left in the store after 60 calls", keys)
			}
		}
		return b.Barrier(ctx)
	})
}

func TestGatheredRoundTrip(t *testing.T) {
	in := [][]byte{[]byte("a"), {}, []byte("ccc")}
	out, err := decodeGathered(encodeGathered(in), 3)
	if err != nil || len(out) != 3 || string(out[0]) != "a" || len(out[1]) != 0 || string(out[2]) != "ccc" {
		t.Fatalf("got %q, %v", out, err)
	}
	if _, err := decodeGathered(encodeGathered(in), 4); err == nil {
		t.Fatal("accepted the wrong count")
	}
	if _, err := decodeGathered(encodeGathered(in)[:9], 3); err == nil {
		t.Fatal("accepted a truncated value")
	}
}

// Two disjoint sub-groups run collectives in their own namespaces.
func TestGroupWithGroup(t *testing.T) {
	runRanks(t, 5, func(ctx context.Context, b *Bootstrap) error {
		color := b.Rank() % 2 // evens {0,2,4}, odds {1,3}
		size := 3 - color
		sub, err := b.WithGroup(fmt.Sprint("color", color), b.Rank()/2, size)
		if err != nil {
			return err
		}
		all, err := sub.Allgather(ctx, []byte(fmt.Sprint(b.Rank())))
		if err != nil {
			return err
		}
		if len(all) != size {
			return fmt.Errorf("sub-group of %d returned %d entries", size, len(all))
		}
		for i, v := range all {
			if want := fmt.Sprint(2*i + color); string(v) != want {
				return fmt.Errorf("sub-group %d entry %d = %q, want %q", color, i, v, want)
			}
		}
		if err := sub.Barrier(ctx); err != nil {
			return err
		}
		if _, err := b.WithGroup("bad", 3, 3); err == nil {
			return fmt.Errorf("WithGroup accepted rank 3 of 3")
		}
		return b.Barrier(ctx)
	})
}

// A rank whose secret differs is refused by the store and cannot tell the
// others: they wait for it until their deadline, and their error then
// says that the store refused a connection for a wrong secret, and from
// where (a rank started with another GOCCL_SECRET, or another
// $HOME/.goccl/secret on its host).
func TestGroupTimeoutNamesWrongSecret(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	addr := freeAddr(t)
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	info := func(r int, secret []byte) Info {
		return Info{Rank: r, Size: 3, LocalRank: r, LocalSize: 3, Addr: addr, Secret: secret, Source: "test", HostRoot: r == 0}
	}
	b0, err := Connect(ctx, info(0, testSecret), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b0.Close()
	b1, err := Connect(ctx, info(1, testSecret), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	if _, err := Connect(ctx, info(2, []byte("another secret")), quiet); err == nil || !strings.Contains(err.Error(), "wrong secret") {
		t.Fatalf("rank 2 with another secret: %v, want a refusal", err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, b := range []*Bootstrap{b0, b1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, errs[r] = b.Allgather(short, []byte("x"))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		msg := fmt.Sprint(err)
		if err == nil || !strings.Contains(msg, "refused 1 connection with a wrong secret, the last from 127.0.0.1:") {
			t.Errorf("rank %d: %v; want the store's refusal named", r, err)
		}
		t.Logf("rank %d: %v", r, err)
	}
}

// TestGetFirstPrefersTheEarlierKey: of keys that are all set, GetFirst
// returns the first. It returned whichever answer came first: a rank's
// value and its gone marker both set (it published, then died), a peer
// took the marker and failed a step the value completes (a
// sub-communicator's set-up, right before the rank was killed).
func TestGetFirstPrefersTheEarlierKey(t *testing.T) {
	s, _ := newTestServer(t)
	c := dialTest(t, s.Addr())
	ctx := testCtx(t, 10*time.Second)
	for _, k := range []string{"value", "gone", "other"} {
		if err := c.Set(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		i, v, err := GetFirst(ctx, c, "value", "gone", "other")
		if err != nil || i != 0 || string(v) != "value" {
			t.Fatalf("GetFirst = %d, %q, %v; want 0, value", i, v, err)
		}
	}
	i, _, err := GetFirst(ctx, c, "missing", "other", "gone")
	if err != nil || i != 1 {
		t.Fatalf("GetFirst with the first key missing = %d, %v; want 1", i, err)
	}
}

// TestConnectRefusesASecondClaim: a second process that joins the store
// as a rank taken already (a second job whose ranks found the first's
// store at the same address and secret, or a rank given twice) is
// refused at Connect, and leaves no mark: the first job's ranks run on,
// and the refused one's end is not taken for their rank's death. Before,
// the store served both: a foreign process ran the first job's calls in
// place of one of its ranks (a helper's hunt: two torchrun-style jobs on
// one MASTER_PORT).
func TestConnectRefusesASecondClaim(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	b0, err := Connect(ctx, Info{Rank: 0, Size: 2, LocalSize: 2, Addr: "127.0.0.1:0", Secret: testSecret, HostRoot: true}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b0.Close()
	addr := b0.Info().Addr
	b1, err := Connect(ctx, Info{Rank: 1, Size: 2, LocalSize: 2, Addr: addr, Secret: testSecret}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	_, err = Connect(ctx, Info{Rank: 1, Size: 2, LocalSize: 2, Addr: addr, Secret: testSecret}, quiet)
	if err == nil || !strings.Contains(err.Error(), "rank 1 joined the store at "+addr+" already") {
		t.Fatalf("a second rank 1: %v, want a refusal naming the rank and the store", err)
	}
	t.Log(err)
	var wg sync.WaitGroup
	got := make([][][]byte, 2)
	errs := make([]error, 2)
	for r, b := range []*Bootstrap{b0, b1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[r], errs[r] = b.Allgather(ctx, []byte{byte(r)})
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: allgather after the refused claim: %v", r, errs[r])
		}
		if len(got[r]) != 2 || got[r][0][0] != 0 || got[r][1][0] != 1 {
			t.Fatalf("rank %d: allgather: %v", r, got[r])
		}
	}
}

// TestGroupTimeoutSaysItsCause: an allgather that ends at its context's
// deadline says the deadline's cause (Init's: which bound it was), not
// only "context deadline exceeded" (a helper's hunt).
func TestGroupTimeoutSaysItsCause(t *testing.T) {
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	b, err := Connect(testCtx(t, 10*time.Second), Info{Rank: 0, Size: 2, LocalSize: 2, Addr: "127.0.0.1:0", Secret: testSecret, HostRoot: true}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, errors.New("not every rank joined within 300ms (GOCCL_INIT_TIMEOUT)"))
	defer cancel()
	_, err = b.Allgather(ctx, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "waiting for rank 1") || !strings.Contains(err.Error(), "not every rank joined within 300ms (GOCCL_INIT_TIMEOUT)") {
		t.Fatalf("allgather without rank 1: %v, want the wait and the deadline's cause named", err)
	}
	t.Log(err)
}
