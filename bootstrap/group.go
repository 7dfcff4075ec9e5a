package bootstrap

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// shutdownLinger bounds how long the rank hosting the store waits, in
// Close, for the other ranks to disconnect before it stops the store.
const shutdownLinger = 10 * time.Second

// abortLook bounds the look for rank 0's abort of an allgather once its
// gone marker is set (see Allgather).
const abortLook = 10 * time.Millisecond

// joinLinger bounds how long the rank hosting the store waits, in Close,
// for ranks that never connected (see Close).
const joinLinger = 3 * time.Second

// Bootstrap is one rank's membership in a group that meets at a store:
// its rank and size and the group operations the communicator needs before
// any transport is up (exchanging address blobs, barriers).
//
// Every operation is collective: all ranks of the group call it in the same
// order. Keys live under a prefix, so a sub-group (WithPrefix) has its own
// namespace over the same connection.
type Bootstrap struct {
	info   Info
	client *Client
	server *Server // non-nil on the rank that hosts the store
	prefix string
	ns     *namespace
	owner  bool // Close closes client and server
	// gone is the key prefix of the ranks' gone markers (GoneKey), on
	// the group Connect made; "" on views, whose waits do not watch them.
	gone string
}

// goneMark is the value of a rank's gone marker when its connection to
// the store ended without Close: its will.
func goneMark(rank int) []byte {
	host, _ := os.Hostname()
	return fmt.Appendf(nil, "rank %d (pid %d on %s) lost the store without closing goccl (killed, exited, or its host or link failed)", rank, os.Getpid(), host)
}

// namespace numbers a view's calls and remembers the keys each call left,
// to delete them two calls later. By then every rank has finished the call:
// finishing call n+1 needs every rank to have entered it.
type namespace struct {
	mu      sync.Mutex
	seq     uint64
	garbage map[uint64][]string
}

// gatherWindow is how many Gets the assembling rank keeps in flight.
const gatherWindow = 64

// Connect joins the group described by info. If info.HostRoot, it first
// starts the store on info.Addr's port (on info.Addr's host when that is a
// loopback address, else on every interface); then it dials the store,
// retrying until ctx is done.
func Connect(ctx context.Context, info Info, opts ...ServerOption) (*Bootstrap, error) {
	if info.Size < 1 || info.Rank < 0 || info.Rank >= info.Size {
		return nil, fmt.Errorf("bootstrap: connect: rank %d out of range for size %d", info.Rank, info.Size)
	}
	b := &Bootstrap{info: info, prefix: "goccl/", ns: newNamespace(), owner: true}
	addr := info.Addr
	if info.HostRoot {
		host, port, err := net.SplitHostPort(info.Addr)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: connect: store address %q: %w", info.Addr, err)
		}
		listen := net.JoinHostPort("", port)
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			listen = info.Addr
		}
		srv, err := NewServer(listen, info.Secret, opts...)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank %d hosts the store: %w", info.Rank, err)
		}
		b.server = srv
		if port == "0" {
			_, p, _ := net.SplitHostPort(srv.Addr())
			addr = net.JoinHostPort(host, p)
			b.info.Addr = addr
		}
	}
	c, err := Dial(ctx, addr, info.Secret)
	if err != nil {
		if b.server != nil {
			b.server.Close()
		}
		return nil, fmt.Errorf("bootstrap: rank %d: %w", info.Rank, err)
	}
	b.client = c
	// One process per rank: a second one that claims a rank taken
	// already (a second job whose ranks found this store at the same
	// address with the same secret, its own rank 0 having failed to host
	// one there; or a RANK given twice) is refused before it leaves any
	// mark in the group, its will included: it would otherwise run the
	// first job's calls in place of one of its ranks.
	if n, err := c.Add(ctx, claimPrefix+strconv.Itoa(info.Rank), 1); err != nil {
		b.closeConn()
		return nil, fmt.Errorf("bootstrap: rank %d: claiming the rank at the store %s: %w", info.Rank, addr, err)
	} else if n != 1 {
		b.closeConn()
		return nil, fmt.Errorf("bootstrap: rank %d: rank %d joined the store at %s already: two jobs that share a store address and secret (MASTER_ADDR and MASTER_PORT, say), a rank given twice (RANK), or a second Init of the job's world in one process", info.Rank, info.Rank, addr)
	}
	// A rank that dies from here on is known at once to the ranks that
	// wait for it (see GoneKey). A store that refuses the will still
	// serves the group: its waits then end at their timeout.
	if err := c.Will(ctx, b.GoneKey(info.Rank), goneMark(info.Rank)); err == nil {
		b.gone = gonePrefix
	}
	return b, nil
}

// GoneKey is the store key that says rank is gone: set by the store when
// the rank's connection ends without Close (its will: the process was
// killed or exited, or its host or link failed) and by Fail. Its value
// says why. The group's own waits (Allgather, Barrier) watch the markers
// of the ranks they wait for; the communicator's link set-up watches them
// too.
func (b *Bootstrap) GoneKey(rank int) string { return gonePrefix + strconv.Itoa(rank) }

const gonePrefix = "goccl/gone/"

// claimPrefix is the store keys' prefix of the ranks' claims (Connect).
const claimPrefix = "goccl/claim/"

// closeConn closes what Connect opened, for a Connect that fails.
func (b *Bootstrap) closeConn() {
	b.client.Close()
	if b.server != nil {
		b.server.Close()
	}
}

// StoreHost is the rank that hosts the store, or -1 when none does (gorun
// hosts it, or the store is the caller's): rank 0 under torchrun's, Open
// MPI's and Slurm's variables. A rank that loses the store knows whom to
// blame.
func (b *Bootstrap) StoreHost() int {
	switch b.info.Source {
	case "torchrun", "ompi", "slurm":
		return 0
	}
	return -1
}

// Watching reports whether the group's waits watch the gone markers (the
// group Connect made, on a store that took its will).
func (b *Bootstrap) Watching() bool { return b.gone != "" }

// Fail marks this rank gone with err as the reason (see GoneKey), for a
// rank that will not take part: its Init failed. The ranks waiting for it
// fail at once with the reason instead of at their timeout.
func (b *Bootstrap) Fail(ctx context.Context, err error) error {
	return b.client.Set(ctx, b.GoneKey(b.info.Rank), fmt.Appendf(nil, "rank %d failed to join: %v", b.info.Rank, err))
}

// Announce tells the group described by info that this rank failed to
// join with err, for a rank whose start failed before it connected: it
// connects (hosting the store if info says so), marks itself gone (Fail)
// and closes (see Close: the rank hosting the store keeps it up for the
// others). Best effort: it gives up when ctx ends.
func Announce(ctx context.Context, info Info, err error, opts ...ServerOption) {
	b, cerr := Connect(ctx, info, opts...)
	if cerr != nil {
		return
	}
	_ = b.Fail(ctx, err)
	b.Close()
}

// getFirst is GetFirst on b's store.
func (b *Bootstrap) getFirst(ctx context.Context, keys ...string) (int, []byte, error) {
	return GetFirst(ctx, b.client, keys...)
}

// GetFirst returns the index and value of the first of keys that store
// has, waiting until one is set, ctx ends or the store fails (a Client,
// or anything with its Get). Of keys set at once, the earliest in keys
// wins.
func GetFirst(ctx context.Context, store interface {
	Get(ctx context.Context, key string) ([]byte, error)
}, keys ...string) (int, []byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type got struct {
		i   int
		v   []byte
		err error
	}
	ch := make(chan got, len(keys))
	for i, k := range keys {
		go func() {
			v, err := store.Get(ctx, k)
			ch <- got{i, v, err}
		}()
	}
	errs := make([]error, len(keys))
	var grace <-chan time.Time
	best := got{i: -1}
	for left := len(keys); left > 0; {
		select {
		case g := <-ch:
			left--
			switch {
			case g.err == nil && g.i == 0:
				return g.i, g.v, nil
			case g.err == nil:
				// A later key is there: the first may be too (its answer
				// on its way), and it comes first (a rank's value and its
				// gone marker, both set: it published, then died).
				if best.i < 0 || g.i < best.i {
					best = g
				}
				if grace == nil {
					grace = time.After(firstGrace)
				}
			case best.i >= 0:
			case ctx.Err() == nil:
				return -1, nil, g.err // the connection ended
			default:
				errs[g.i] = g.err
			}
		case <-grace:
			return best.i, best.v, nil
		}
	}
	if best.i >= 0 {
		return best.i, best.v, nil
	}
	// The wait ended: the error of the key waited for, which names it,
	// not the first to return ("waiting for rank 2: get goccl/gone/2").
	return -1, nil, errs[0]
}

// firstGrace is how long GetFirst waits, once a later key is found, for
// the answer about an earlier one: its Get's goroutine may not have run
// yet (10 ms was too short for 1 call in 600 under -race on a loaded
// host). Only a wait that ends on a later key (a gone marker, an abort)
// pays it.
const firstGrace = 100 * time.Millisecond

// goneErr is the error of a wait that found a rank's gone marker (why
// is the marker's value, which names the rank).
type goneErr struct{ why string }

func (e *goneErr) Error() string { return e.why }

// Rank is this rank's index in the group.
func (b *Bootstrap) Rank() int { return b.info.Rank }

// Size is the number of ranks in the group.
func (b *Bootstrap) Size() int { return b.info.Size }

// Info is what the group was created from. On the hosting rank with port 0,
// Addr holds the port actually bound.
func (b *Bootstrap) Info() Info { return b.info }

// Client is the store connection, for callers that need raw keys.
func (b *Bootstrap) Client() *Client { return b.client }

// WithPrefix returns a view of the same group and connection whose keys
// live under the namespace p (nested inside b's). Every rank creates the
// view with the same p, once: its call counter is its own, so two views of
// one namespace would collide. Closing the view does not close the
// connection.
func (b *Bootstrap) WithPrefix(p string) *Bootstrap {
	return &Bootstrap{
		info:   b.info,
		client: b.client,
		prefix: b.prefix + "ns/" + p + "/", // apart from b's own "ag/", "barrier/"
		ns:     newNamespace(),
	}
}

// WithGroup is WithPrefix for a sub-group: the members of the namespace p
// (which must name this sub-group alone) are the ranks 0..size-1 of the
// sub-group, and this process is its member rank. Collectives on the view
// involve only the sub-group's members. Info().Rank and Info().Size are the
// sub-group's; the local fields and the store are b's.
func (b *Bootstrap) WithGroup(p string, rank, size int) (*Bootstrap, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("bootstrap: sub-group %q: rank %d out of range for size %d", p, rank, size)
	}
	v := b.WithPrefix(p)
	v.info.Rank, v.info.Size = rank, size
	return v, nil
}

func newNamespace() *namespace { return &namespace{garbage: make(map[uint64][]string)} }

// begin numbers a new call and deletes the keys left two calls ago.
func (b *Bootstrap) begin(ctx context.Context) (uint64, error) {
	b.ns.mu.Lock()
	b.ns.seq++
	n := b.ns.seq
	old := b.ns.garbage[n-2]
	delete(b.ns.garbage, n-2)
	b.ns.mu.Unlock()
	if len(old) > 0 {
		if err := b.client.Delete(ctx, old...); err != nil {
			return n, err
		}
	}
	return n, nil
}

// leave records keys that call n left, for deletion two calls later.
func (b *Bootstrap) leave(n uint64, keys ...string) {
	b.ns.mu.Lock()
	b.ns.garbage[n] = append(b.ns.garbage[n], keys...)
	b.ns.mu.Unlock()
}

// Allgather publishes data under this rank's name and returns every rank's
// data, indexed by rank. It blocks until all ranks have called it, ctx is
// done or the store connection ends.
//
// Every rank sets its own key; rank 0 reads them all (several Gets in
// flight), deletes them and publishes one combined value that every other
// rank reads, so the store handles O(size) requests per call. The combined
// value must fit MaxValueLen.
func (b *Bootstrap) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	n, err := b.begin(ctx)
	fail := func(format string, a ...any) ([][]byte, error) {
		return nil, fmt.Errorf("bootstrap: allgather #%d: rank %d: "+format, append([]any{n, b.info.Rank}, a...)...)
	}
	if err != nil {
		return fail("%w", err)
	}
	base := b.prefix + "ag/" + strconv.FormatUint(n, 10) + "/"
	all := base + "all"
	if b.info.Rank != 0 {
		if err := b.client.Set(ctx, base+strconv.Itoa(b.info.Rank), data); err != nil {
			return fail("%w", err)
		}
		var v []byte
		if b.gone == "" {
			v, err = b.client.Get(ctx, all)
		} else {
			// Rank 0 gathers and publishes all, or says which rank it
			// found gone (abort); or is gone itself.
			var i int
			i, v, err = b.getFirst(ctx, all, base+"abort", b.GoneKey(0))
			switch i {
			case 1:
				return fail("%w", &goneErr{why: string(v)})
			case 2:
				// Rank 0 is gone; if for a rank it found gone, it said
				// so under abort first: name that rank and its reason,
				// not rank 0 relaying it.
				actx, cancel := context.WithTimeout(ctx, abortLook)
				if a, aerr := b.client.Get(actx, base+"abort"); aerr == nil {
					v = a
				}
				cancel()
				return fail("%w", &goneErr{why: string(v)})
			}
		}
		if err != nil {
			return fail("waiting for rank 0: %w%s%s", err, b.missing(err, base), b.refusals(err))
		}
		out, err := decodeGathered(v, b.info.Size)
		if err != nil {
			return fail("from rank 0: %w", err)
		}
		return out, nil
	}

	keys := make([]string, b.info.Size)
	for r := range keys {
		keys[r] = base + strconv.Itoa(r)
	}
	out := make([][]byte, b.info.Size)
	out[0] = append([]byte(nil), data...)
	if err := b.getAll(ctx, keys[1:], out[1:]); err != nil {
		var g *goneErr
		if errors.As(err, &g) {
			// Tell the ranks that wait for the gathered values.
			_ = b.client.Set(ctx, base+"abort", []byte(g.why))
			b.leave(n, base+"abort")
		}
		return fail("%w", err)
	}
	enc := encodeGathered(out)
	if len(enc) > MaxValueLen {
		return fail("gathered %d bytes, more than the store's %d-byte value limit", len(enc), MaxValueLen)
	}
	if err := b.client.Set(ctx, all, enc); err != nil {
		return fail("%w", err)
	}
	if err := b.client.Delete(ctx, keys[1:]...); err != nil {
		return fail("%w", err)
	}
	b.leave(n, all)
	return out, nil
}

// getAll fetches keys into out, keeping up to gatherWindow Gets in flight.
func (b *Bootstrap) getAll(ctx context.Context, keys []string, out [][]byte) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, gatherWindow)
		// Once the gather stalls (see watchAfter): the gone markers of
		// the ranks whose values came are watched too.
		ww       sync.WaitGroup
		asked    = make([]bool, len(keys))
		got      = make([]bool, len(keys))
		watching bool
		dead     string
		deadCh   = make(chan struct{}, 1)
		done     = make(chan struct{})
	)
	defer func() { close(done); cancel(); ww.Wait() }()
	watch := func(i int) { // with mu held
		rank := keys[i][strings.LastIndexByte(keys[i], '/')+1:]
		ww.Add(1)
		go func() {
			defer ww.Done()
			if why, err := b.client.Get(ctx, b.gone+rank); err == nil {
				mu.Lock()
				if dead == "" {
					dead = string(why)
				}
				mu.Unlock()
				select {
				case deadCh <- struct{}{}:
				default:
				}
			}
		}()
	}
	if b.gone != "" {
		go func() {
			// A rank that dies after sending its value leaves the
			// gather unable to end while another is missing (no rank
			// completes the call it is in), which would otherwise be
			// waited for until ctx ends: a rank killed during Init
			// while another never started.
			sleep := func(d time.Duration) bool {
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-t.C:
					return true
				case <-done:
					return false
				}
			}
			if !sleep(watchAfter) {
				return
			}
			mu.Lock()
			watching = true
			for i := range got {
				if got[i] {
					watch(i)
				}
			}
			mu.Unlock()
			select {
			case <-deadCh:
			case <-done:
				return
			}
			if !sleep(deadGrace) {
				return
			}
			mu.Lock()
			var miss []string
			unasked := 0
			for i := range got {
				switch {
				case !asked[i]:
					unasked++
				case !got[i]:
					miss = append(miss, keys[i][strings.LastIndexByte(keys[i], '/')+1:])
				}
			}
			if first == nil && len(miss)+unasked > 0 {
				first = &goneErr{why: fmt.Sprintf("%s, after it joined, while %s", dead, notJoined(miss, unasked))}
			}
			mu.Unlock()
			cancel()
		}()
	}
	for i, k := range keys {
		sem <- struct{}{}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var v []byte
			var err error
			rank := k[strings.LastIndexByte(k, '/')+1:]
			mu.Lock()
			asked[i] = true
			mu.Unlock()
			if b.gone == "" {
				v, err = b.client.Get(ctx, k)
			} else {
				var j int
				j, v, err = b.getFirst(ctx, k, b.gone+rank)
				if j == 1 {
					err = &goneErr{why: string(v)}
				}
			}
			if err != nil {
				mu.Lock()
				var g *goneErr
				switch {
				case errors.As(err, &g) && (first == nil || !errors.As(first, new(*goneErr))):
					first = g // the cause, not the others' cancelled waits
				case first == nil:
					// The caller's cause of a deadline (Init's: "not every
					// rank joined within ..."), not only the bare deadline.
					cause := ""
					if c := context.Cause(ctx); c != nil && !errors.Is(err, c) && c != context.Canceled && c != context.DeadlineExceeded {
						cause = " (" + c.Error() + ")"
					}
					first = fmt.Errorf("waiting for rank %s: %w%s%s", rank, err, b.refusals(err), cause)
				}
				mu.Unlock()
				cancel()
				return
			}
			out[i] = v
			mu.Lock()
			got[i] = true
			if watching {
				watch(i)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// watchAfter is how long a gather waits before it watches the gone
// markers of the ranks whose values came, and deadGrace how long, once one
// of those ranks is gone, for the values still missing before it fails: a
// rank can only leave for good once every value of the gather was set, so
// one still missing by then (a Get answered in the meantime otherwise)
// will not come. Until the gather stalls it watches only the markers of
// the ranks it waits for (a Get each).
const (
	watchAfter = time.Second
	deadGrace  = 200 * time.Millisecond
)

// notJoined says which ranks (names) have not set their value, with
// unasked more not asked for yet.
func notJoined(ranks []string, unasked int) string {
	const most = 8
	more := unasked
	if len(ranks) > most {
		more += len(ranks) - most
		ranks = ranks[:most]
	}
	list := strings.Join(ranks, ", ")
	switch {
	case len(ranks) == 0:
		return fmt.Sprintf("%d ranks were not heard from yet", more)
	case more > 0:
		return fmt.Sprintf("ranks %s and %d more have not joined", list, more)
	case len(ranks) == 1:
		return "rank " + list + " has not joined"
	}
	return "ranks " + list + " have not joined"
}

// encodeGathered packs one value per rank: a count, then each value
// length-prefixed.
func encodeGathered(vals [][]byte) []byte {
	size := 4
	for _, v := range vals {
		size += 4 + len(v)
	}
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint32(b, uint32(len(vals)))
	for _, v := range vals {
		b = appendBytes(b, v)
	}
	return b
}

// decodeGathered unpacks encodeGathered's output, which must hold exactly
// size values.
func decodeGathered(b []byte, size int) ([][]byte, error) {
	r := payloadReader{p: b}
	n := r.uint32()
	if r.err == nil && uint64(n) != uint64(size) {
		return nil, fmt.Errorf("%w: %d values, want %d", errFrame, n, size)
	}
	out := make([][]byte, 0, size)
	for i := 0; i < size && r.err == nil; i++ {
		out = append(out, r.bytes(MaxValueLen, "value"))
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return out, nil
}

// Barrier returns once every rank has called it, or fails when ctx is done
// or the store connection ends.
func (b *Bootstrap) Barrier(ctx context.Context) error {
	if b.gone != "" {
		// An allgather of nothing, which watches the ranks it waits for.
		_, err := b.Allgather(ctx, nil)
		return err
	}
	n, err := b.begin(ctx)
	fail := func(err error) error {
		return fmt.Errorf("bootstrap: barrier #%d: rank %d: %w", n, b.info.Rank, err)
	}
	if err != nil {
		return fail(err)
	}
	count := b.prefix + "barrier/" + strconv.FormatUint(n, 10)
	done := count + "/done"
	v, err := b.client.Add(ctx, count, 1)
	if err != nil {
		return fail(err)
	}
	if v == int64(b.info.Size) { // the last to arrive
		if err := b.client.Set(ctx, done, nil); err != nil {
			return fail(err)
		}
		b.leave(n, count, done)
		return nil
	}
	if err := b.client.Wait(ctx, done); err != nil {
		return fail(fmt.Errorf("waiting for the others: %w%s", err, b.refusals(err)))
	}
	return nil
}

// refusals says, for a wait that ended at its deadline, how many
// connections the store refused for a wrong secret meanwhile, and the
// last one's address (see refusedKey): a rank whose secret differs is
// refused and cannot say so itself, and the others waited for it.
// missing says, after a wait for rank 0's gathered values of the
// allgather under base timed out, which ranks never published their part:
// rank 0 waits for them, and they, not rank 0, are whom to blame (the
// error named only rank 0, as if it had failed). "" if every part is
// there or the look fails.
func (b *Bootstrap) missing(err error, base string) string {
	if !errors.Is(err, context.DeadlineExceeded) {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), missingLook)
	defer cancel()
	var (
		mu   sync.Mutex
		miss []int
		wg   sync.WaitGroup
		sem  = make(chan struct{}, gatherWindow)
	)
	for r := 1; r < b.info.Size; r++ {
		if r == b.info.Rank {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := b.client.Get(ctx, base+strconv.Itoa(r)); err != nil && errors.Is(err, context.DeadlineExceeded) {
				mu.Lock()
				miss = append(miss, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(miss) == 0 {
		return ""
	}
	slices.Sort(miss)
	const show = 8
	list := make([]string, 0, show)
	for _, r := range miss[:min(len(miss), show)] {
		list = append(list, strconv.Itoa(r))
	}
	more := ""
	if len(miss) > show {
		more = fmt.Sprintf(" and %d more", len(miss)-show)
	}
	if len(miss) == 1 {
		return fmt.Sprintf(" (rank %s never reached this step: rank 0 waits for it)", list[0])
	}
	return fmt.Sprintf(" (ranks %s%s never reached this step: rank 0 waits for them)", strings.Join(list, ", "), more)
}

// missingLook bounds the look for the ranks that never reached an
// allgather (see missing).
const missingLook = 200 * time.Millisecond

func (b *Bootstrap) refusals(err error) string {
	if !errors.Is(err, context.DeadlineExceeded) {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), refusalLook)
	defer cancel()
	n, err := b.client.Add(ctx, refusedKey, 0)
	if err != nil || n <= 0 {
		return ""
	}
	from, err := b.client.Get(ctx, refusedFromKey) // set before the count
	if err != nil {
		return ""
	}
	s := ""
	if n > 1 {
		s = "s"
	}
	return fmt.Sprintf(" (the store refused %d connection%s with a wrong secret, the last from %s: a rank started with another GOCCL_SECRET, or another $HOME/.goccl/secret on its host, cannot join)", n, s, from)
}

// refusalLook bounds the look for the store's refusals (refusals).
const refusalLook = 200 * time.Millisecond

// Close leaves the group. On a view from WithPrefix it does nothing. On the
// rank hosting the store it first waits (at most 3 s) until every rank
// has connected once, so that a rank still starting when this one gave up
// (its Init failed) finds the store and learns why, and then (at most 10
// s) until they have disconnected, so that a rank finishing early does not
// cut the others off; then it stops the store.
func (b *Bootstrap) Close() error {
	if !b.owner {
		return nil
	}
	err := b.client.Close()
	if b.server != nil {
		for start := time.Now(); b.server.joined() < b.info.Size && time.Since(start) < joinLinger; {
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), shutdownLinger)
		defer cancel()
		err = errors.Join(err, b.server.Shutdown(ctx))
	}
	return err
}
