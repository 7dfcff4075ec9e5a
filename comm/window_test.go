package comm_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
	"github.com/goccl/goccl/transport/mem"
)

// An all-to-all in a job larger than its peer window, as users meet it:
// 64 ranks as goroutines, PeerWindow 8, MaxPeers 16. The pairwise
// all-to-all (twice: the second call connects every pair again) and an
// all-to-all-v deliver every block exactly, and while they run no rank
// holds more than 8 links, or their staging, beyond those it had before
// (sampled every millisecond, and PeakPeers); when they are done it holds
// just those again. The same over TCP, and over two transports at once
// (two hosts), with 12 ranks and a window of 4.
func TestAlltoallPeerWindow(t *testing.T) {
	for _, tc := range []struct {
		kind              string
		n, window, maxPer int
	}{
		{"mem", 64, 8, 16},
		{"tcp", 12, 4, 4},
		{"mem-hosts", 12, 4, 4}, // shared memory and network: a multi device
	} {
		t.Run(tc.kind, func(t *testing.T) {
			if raceEnabled && tc.n > 32 {
				tc.n = 32 // still twice MaxPeers; 64 goroutine ranks take 7 s raced
			}
			opts := testOptsFast
			opts.PeerWindow, opts.MaxPeers = tc.window, tc.maxPer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			comms, err := commtest.Connect(ctx, tc.kind, tc.n, opts)
			if err != nil {
				t.Fatal(err)
			}
			n := tc.n
			base := make([]int, n)
			most := make([]atomic.Int64, n)
			mostStaging := make([]atomic.Int64, n)
			stop := make(chan struct{})
			var sampler sync.WaitGroup
			sampler.Add(1)
			go func() {
				defer sampler.Done()
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					for r, c := range comms {
						if p := int64(c.ConnectedPeers()); p > most[r].Load() {
							most[r].Store(p)
						}
						if s := StagingBytes(c); s > mostStaging[r].Load() {
							mostStaging[r].Store(s)
						}
					}
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					if err := c.Barrier(ctx); err != nil {
						errs[r] = err
						return
					}
					base[r] = c.ConnectedPeers()
					errs[r] = windowedAlltoalls(ctx, c)
					if got := c.ConnectedPeers(); errs[r] == nil && got != base[r] {
						errs[r] = fmt.Errorf("%d peers connected after the all-to-alls, %d before", got, base[r])
					}
					if peak := c.PeakPeers(); errs[r] == nil && peak > base[r]+tc.window {
						errs[r] = fmt.Errorf("up to %d peers connected at once, more than the %d before and the window of %d", peak, base[r], tc.window)
					}
				}()
			}
			wg.Wait()
			close(stop)
			sampler.Wait()
			link := LinkStagingBytes(comms[0])
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if m := int(most[r].Load()); m > base[r]+tc.window {
					t.Errorf("rank %d: %d peers connected at once, more than the %d before and the window of %d", r, m, base[r], tc.window)
				}
				if m := mostStaging[r].Load(); m > int64(base[r]+tc.window)*link {
					t.Errorf("rank %d: %d bytes of staging, more than %d links' worth", r, m, base[r]+tc.window)
				}
			}
			t.Logf("rank 0: %d peers before, up to %d during, %d KiB of staging at most", base[0], most[0].Load(), mostStaging[0].Load()>>10)
		})
	}
}

// windowedAlltoalls runs two pairwise all-to-alls and an all-to-all-v on
// c and checks every block.
func windowedAlltoalls(ctx context.Context, c *Comm) error {
	n, me := c.Size(), c.Rank()
	const count = 3
	val := func(from, to, i int) int32 { return int32(from*100000 + to*100 + i) }
	for call := range 2 {
		send, recv := make([]int32, n*count), make([]int32, n*count)
		for j := range n {
			for i := range count {
				send[j*count+i] = val(me, j, i+call)
			}
		}
		if err := Alltoall(ctx, c, send, recv, WithAlgorithm("pairwise")); err != nil {
			return err
		}
		for j := range n {
			for i := range count {
				if got, want := recv[j*count+i], val(j, me, i+call); got != want {
					return fmt.Errorf("all-to-all %d: block %d element %d is %d, want %d", call, j, i, got, want)
				}
			}
		}
	}
	// Rank r sends (r+j)%4 elements to rank j: some pairs exchange
	// nothing at all, some one way only.
	cnt := func(from, to int) int { return (from + 2*to) % 4 }
	sc, rc := make([]int, n), make([]int, n)
	for j := range n {
		sc[j], rc[j] = cnt(me, j), cnt(j, me)
	}
	var send []int32
	for j := range n {
		for i := range sc[j] {
			send = append(send, val(me, j, i))
		}
	}
	total := 0
	for _, k := range rc {
		total += k
	}
	recv := make([]int32, total)
	if err := Alltoallv(ctx, c, send, sc, nil, recv, rc, nil); err != nil {
		return err
	}
	off := 0
	for j := range n {
		for i := range rc[j] {
			if got, want := recv[off+i], val(j, me, i); got != want {
				return fmt.Errorf("all-to-all-v: block %d element %d is %d, want %d", j, i, got, want)
			}
		}
		off += rc[j]
	}
	return nil
}

// slowLinks is a rank's rendezvous whose store answers a read of a link
// set-up key (link/<from>/<to>/...) only after delay times the pair's
// distance on the ring: a job whose connections come slowly but steadily,
// as those of an all-to-all's first call at 128 ranks over shared memory
// did (55 s for 127 peers, under load).
type slowLinks struct {
	Rendezvous
	kv interface {
		Set(context.Context, string, []byte) error
		Get(context.Context, string) ([]byte, error)
		Delete(context.Context, ...string) error
	}
	delay time.Duration
}

func (s slowLinks) Set(ctx context.Context, key string, v []byte) error { return s.kv.Set(ctx, key, v) }
func (s slowLinks) Delete(ctx context.Context, keys ...string) error {
	return s.kv.Delete(ctx, keys...)
}

func (s slowLinks) Get(ctx context.Context, key string) ([]byte, error) {
	if _, rest, ok := strings.Cut(key, "/link/"); ok {
		parts := strings.Split(rest, "/")
		from, _ := strconv.Atoi(parts[0])
		to, _ := strconv.Atoi(parts[1])
		n := s.Size()
		d := (from - to + n) % n
		select {
		case <-time.After(s.delay * time.Duration(min(d, n-d))):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.kv.Get(ctx, key)
}

// A call whose link set-up takes longer than the stall timeout, while
// peers keep connecting, is not a stall: every link that comes up counts
// as progress (before, an all-to-all's first call at 128 ranks failed
// with "no progress for 60s" while its peers were still connecting one
// after the other). Here 8 ranks connect their all-to-all peers 0.4 s
// apart, 1.6 s in all, under a stall timeout of 1 s.
func TestSlowLinkSetupIsProgress(t *testing.T) {
	const n = 8
	opts := testOptsFast
	opts.StallTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := NewLocalGroup(n)
	net := mem.NewNetwork(mem.Options{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := g.Member(r)
			kv, ok := m.(interface {
				Set(context.Context, string, []byte) error
				Get(context.Context, string) ([]byte, error)
				Delete(context.Context, ...string) error
			})
			if !ok {
				errs[r] = fmt.Errorf("the local group's member %T has no key-value store", m)
				return
			}
			o := opts
			o.OwnDevice = true
			c, err := New(ctx, slowLinks{Rendezvous: m, kv: kv, delay: 400 * time.Millisecond}, net.NewDevice(), o)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			send, recv := make([]int32, n), make([]int32, n)
			for j := range send {
				send[j] = int32(r*n + j)
			}
			start := time.Now()
			if err := Alltoall(ctx, c, send, recv, WithAlgorithm("pairwise")); err != nil {
				errs[r] = fmt.Errorf("after %v: %w", time.Since(start).Round(time.Millisecond), err)
				return
			}
			for j, v := range recv {
				if want := int32(j*n + r); v != want {
					errs[r] = fmt.Errorf("block %d is %d, want %d", j, v, want)
					return
				}
			}
			if took := time.Since(start); took < opts.StallTimeout {
				errs[r] = fmt.Errorf("the all-to-all took %v, not longer than the stall timeout %v: the test tests nothing", took, opts.StallTimeout)
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
