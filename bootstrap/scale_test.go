package bootstrap

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestRendezvousAtScale runs what comm.Init asks of the store, for 1,024
// ranks as goroutines of this process against the real TCP store: connect
// (authenticated), one Allgather of a host identity (the only O(n) value a
// rank fetches), then the on-demand link set-up of a ring allreduce and a
// binomial broadcast (each rank publishes one address blob per peer it
// connects and reads only those peers' blobs, then deletes them), and a
// Barrier. It checks every value and logs how long each phase took (the
// slowest rank's time; no timed assertion: the machine may be loaded).
func TestRendezvousAtScale(t *testing.T) {
	n := 1024
	if testing.Short() {
		n = 128
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(2*n+64) {
		t.Skipf("needs %d descriptors (a client and a server side per rank); RLIMIT_NOFILE is %d", 2*n+64, lim.Cur)
	}
	var (
		mu     sync.Mutex
		phases = map[string]time.Duration{} // slowest rank per phase
		fetch  = map[int]int{}              // blobs read per rank
	)
	note := func(phase string, d time.Duration) {
		mu.Lock()
		phases[phase] = max(phases[phase], d)
		mu.Unlock()
	}
	start := time.Now()
	runRanksB(t, n, func(ctx context.Context, b *Bootstrap) error {
		r := b.Rank()
		note("connect", time.Since(start))
		t0 := time.Now()
		host := fmt.Sprintf("host-%d", r/64) // 64 ranks per "host"
		all, err := b.Allgather(ctx, []byte(host))
		if err != nil {
			return err
		}
		for q, v := range all {
			if want := fmt.Sprintf("host-%d", q/64); string(v) != want {
				return fmt.Errorf("host of rank %d: got %q, want %q", q, v, want)
			}
		}
		note("allgather host ids", time.Since(t0))
		t1 := time.Now()
		peers := scalePeers(r, n)
		key := func(from, to int) string {
			return "link/" + strconv.Itoa(from) + "/" + strconv.Itoa(to)
		}
		for _, p := range peers {
			if err := b.Client().Set(ctx, key(r, p), []byte(fmt.Sprintf("addr %d->%d", r, p))); err != nil {
				return err
			}
		}
		var keys []string
		for _, p := range peers {
			v, err := b.Client().Get(ctx, key(p, r))
			if err != nil {
				return fmt.Errorf("blob of rank %d: %w", p, err)
			}
			if want := fmt.Sprintf("addr %d->%d", p, r); string(v) != want {
				return fmt.Errorf("blob of rank %d: got %q, want %q", p, v, want)
			}
			keys = append(keys, key(p, r))
		}
		if err := b.Client().Delete(ctx, keys...); err != nil {
			return err
		}
		mu.Lock()
		fetch[r] = len(peers)
		mu.Unlock()
		note("link set-up", time.Since(t1))
		t2 := time.Now()
		if err := b.Barrier(ctx); err != nil {
			return err
		}
		note("barrier", time.Since(t2))
		note("total", time.Since(start))
		return nil
	})
	most := 0
	for _, k := range fetch {
		most = max(most, k)
	}
	t.Logf("%d ranks against the TCP store: connect %v, allgather of host ids %v, link set-up %v (at most %d blobs read per rank), barrier %v; Init-equivalent rendezvous in %v",
		n, phases["connect"].Round(time.Millisecond), phases["allgather host ids"].Round(time.Millisecond),
		phases["link set-up"].Round(time.Millisecond), most, phases["barrier"].Round(time.Millisecond), phases["total"].Round(time.Millisecond))
}

// scalePeers are the peers rank r of n links to for a ring allreduce
// (its neighbours) and a binomial broadcast from rank 0 (its parent and
// children): the relation is symmetric, as the plans' is.
func scalePeers(r, n int) []int {
	var ps []int
	add := func(p int) {
		if p != r && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	add((r + 1) % n)
	add((r + n - 1) % n)
	for bit := 1; bit < n; bit <<= 1 {
		switch {
		case r&bit != 0 && r&(bit-1) == 0:
			add(r - bit) // parent: clear the lowest set bit
		case r&(2*bit-1) == 0 && r+bit < n:
			add(r + bit) // child
		}
	}
	return ps
}
