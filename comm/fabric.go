package comm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/multi"
)

// devices are the transports a communicator may use: net reaches any
// peer (TCP, verbs, or an in-process network in tests), shm only the peers
// on this host. Either may be nil (but not both).
type devices struct {
	net, shm transport.Device
	own      bool // Close closes them
}

// holders counts the communicators that share one set of devices and one
// root rendezvous (with its store): the communicator built by New, Init
// or NewWith and every communicator split from it or from those. The last
// to leave closes them (the devices only if owned), so that a split
// communicator outlives its parent, as in MPI.
type holders struct {
	mu   sync.Mutex
	n    int
	devs devices
	rdv  Rendezvous
	// gone is the store key that says world rank w is gone
	// (bootstrap.Bootstrap.GoneKey: set when its process died, or exited
	// without closing goccl, or its Init failed), nil when the store
	// keeps no such markers. A rank waiting for a peer's address watches
	// it (await) and fails at once, under any launcher, instead of at its
	// stall timeout.
	gone func(w int) string
	// storeHost is the world rank that hosts the bootstrap store, -1 if
	// none does (bootstrap.Bootstrap.StoreHost).
	storeHost int
	// failed is why the communicator over rdv itself (Init's, New's)
	// could not be made: the last leave marks this rank gone with it
	// (goneMarker.Fail) before it closes rdv.
	failed error
	// comms are the live communicators over devs (the one made over rdv
	// and those split from it): Free and Deregister on one refuse a
	// buffer that a call of another still uses (see deregister).
	comms map[*Comm]struct{}
	// blamed: a communicator of the family published this process's
	// bootstrap.Blame (its first failure's root; see publish), whose
	// world rank and words are famRoot and famWhy (under mu).
	blamed    atomic.Bool
	famRoot   int
	famReason collectives.NoticeReason
	famWhy    string
	// famCalls are the family's communicators' callNo when it failed: one
	// that made calls since works, and closes as usual.
	famCalls map[*Comm]uint64
}

// familyFailure is, for c, the world rank at the root of the first
// failure of a communicator of the family, why in a notice's terms and in
// words; root -1 if none failed, or if c made calls since (or was made
// after).
func (h *holders) familyFailure(c *Comm) (root int, reason collectives.NoticeReason, why string) {
	if !h.blamed.Load() {
		return -1, 0, ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := h.famCalls[c]; !ok || n != c.callNo.Load() {
		return -1, 0, ""
	}
	return h.famRoot, h.famReason, h.famWhy
}

// add records c as a live communicator of h's family.
func (h *holders) add(c *Comm) {
	h.mu.Lock()
	if h.comms == nil {
		h.comms = map[*Comm]struct{}{}
	}
	h.comms[c] = struct{}{}
	h.mu.Unlock()
}

// remove forgets c (its teardown).
func (h *holders) remove(c *Comm) {
	if h == nil {
		return
	}
	h.mu.Lock()
	delete(h.comms, c)
	h.mu.Unlock()
}

// others returns the live communicators of h's family but c.
func (h *holders) others(c *Comm) []*Comm {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Comm, 0, len(h.comms))
	for o := range h.comms {
		if o != c {
			out = append(out, o)
		}
	}
	return out
}

// goneMarker is a rendezvous whose store marks gone ranks
// (bootstrap.Bootstrap).
type goneMarker interface {
	StoreHost() int
	Watching() bool
	GoneKey(rank int) string
	Fail(ctx context.Context, err error) error
}

// join adds a holder: a communicator about to be split off.
func (h *holders) join() {
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
}

// leave removes a holder and, for the last, closes the rendezvous and the
// devices.
func (h *holders) leave() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	h.n--
	last := h.n == 0
	h.mu.Unlock()
	if !last {
		return nil
	}
	var err error
	if g, ok := h.rdv.(goneMarker); ok && h.failed != nil {
		ctx, cancel := context.WithTimeout(context.Background(), notifyWait)
		g.Fail(ctx, h.failed)
		cancel()
	}
	if h.rdv != nil {
		err = h.rdv.Close()
	}
	return errors.Join(err, h.devs.close())
}

func (d devices) close() error {
	if !d.own {
		return nil
	}
	var errs []error
	if d.net != nil {
		errs = append(errs, d.net.Close())
	}
	if d.shm != nil {
		errs = append(errs, d.shm.Close())
	}
	return errors.Join(errs...)
}

// Which transport reaches a peer.
const (
	viaNet = iota // the network device (member 0 of a multi device)
	viaShm        // shared memory (member 1)
)

// fabric is how a communicator reaches its peers: the device the links
// use (one transport, or a multi.Device when some peers are on this host
// and others not), one completion queue, a link per peer with its staging
// slots, and the executor that runs plans over them.
type fabric struct {
	devs devices
	// held counts the communicators using devs and the root rendezvous.
	held *holders
	dev  transport.Device
	cq   transport.CompletionQueue
	// readier is cq's transport.Readier, if it is one (set once, read by
	// the stall responder: see unpolled).
	readier atomic.Pointer[transport.Readier]
	// links has an entry per rank, nil until the peer is first used
	// (lazy.go) and after a windowed all-to-all released it; nLinks
	// counts the others. linkGen counts, per peer, the links to it made
	// and released (the same on both ranks of the pair: it names the
	// store keys of the next set-up); linkMem is each link's staging
	// memory (also in staging).
	links   []*collectives.Link
	nLinks  atomic.Int64
	linkGen []uint32
	linkMem []ownedMem
	// early are this side's halves of links published ahead of the call
	// that needs them, for point-to-point calls queued behind a set-up
	// (lazy.go, publishEarly); the runner only.
	early map[int]*halfLink
	// stagingBytes is the staging memory allocated now; peakLinks the
	// most links held at once.
	stagingBytes atomic.Int64
	peakLinks    atomic.Int64
	linksOnce    sync.Once
	staging      []ownedMem
	exec         *collectives.Executor
	// connecting lists the peers whose set-up this rank waits for, while
	// it does (the stall diagnosis asks them).
	connecting []int
	// runFP is the running call's fingerprint (low 16 bits), with bit 16
	// set for a point-to-point call, above bit 20 the callNo of the run,
	// for the responder (answer.go).
	runFP atomic.Uint64
	// tuning is set while New measures the transport (tune.go).
	tuning atomic.Bool
	// hosts numbers the ranks' hosts (ranks with equal host identities
	// share a number, in order of first appearance); via says which
	// transport reaches each peer.
	hosts  []int
	nHosts int
	via    []int
}

// ownedMem is memory the communicator allocated, with the allocator that
// frees it.
type ownedMem struct {
	mem   []byte
	alloc transport.Allocator
}

// alloc allocates n bytes with the device's allocator when it has one
// (shared memory peers can map), else with transport.Alloc.
func allocFrom(dev transport.Device, n int) (ownedMem, error) {
	a, ok := dev.(transport.Allocator)
	if !ok {
		a = plainAlloc{}
	}
	mem, err := a.Alloc(n)
	return ownedMem{mem: mem, alloc: a}, err
}

func (m ownedMem) free() error {
	if m.mem == nil {
		return nil
	}
	return m.alloc.Free(m.mem)
}

type plainAlloc struct{}

func (plainAlloc) Alloc(n int) ([]byte, error) { return transport.Alloc(n) }
func (plainAlloc) Free(b []byte) error         { return transport.Free(b) }

// hostIdentity says which host this process is on: processes with equal
// identities share memory (see transport/shm.HostID). Tests replace it.
var hostIdentity = shmHostID

// exchangeHosts numbers every rank's host.
func (c *Comm) exchangeHosts(ctx context.Context) error {
	id := c.opts.HostID
	if id == "" {
		var err error
		if id, err = hostIdentity(); err != nil {
			id = fmt.Sprintf("rank %d (%v)", c.rank, err) // a host of its own
		}
	}
	// With it, the settings every rank must share (agreedSettings): a
	// difference fails every rank here, naming the setting, where it
	// made ranks wait on one another in their first call until the stall
	// timeout, or fail there blaming a transport's bounds.
	all, err := c.rdv.Allgather(ctx, append([]byte(id+"\x00"), c.opts.agreedSettings()...))
	if err != nil {
		return fmt.Errorf("exchange host identities: %w", err)
	}
	if len(all) != c.size {
		return fmt.Errorf("exchange host identities: got %d entries for %d ranks", len(all), c.size)
	}
	// (all may be the rendezvous's own, shared with other ranks: read only.)
	ids, settings := make([]string, c.size), make([]string, c.size)
	for r, b := range all {
		i := bytes.LastIndexByte(b, 0)
		if i < 0 {
			return fmt.Errorf("exchange host identities: rank %d sent no settings", r)
		}
		ids[r], settings[r] = string(b[:i]), string(b[i+1:])
	}
	c.hosts = make([]int, c.size)
	seen := map[string]int{}
	for r, id := range ids {
		h, ok := seen[id]
		if !ok {
			h = len(seen)
			seen[id] = h
		}
		c.hosts[r] = h
	}
	c.nHosts = len(seen)
	if err := settingsDiffer(settings, yieldEffect(c.nHosts, c.size, onlineCPUs())); err != nil {
		return err
	}
	// Crowded across hosts only when told (YieldWhenIdle "1", the same on
	// every rank as the job's environment): each host knows only its own
	// ranks and processors, and the ranks must choose alike. 2 hosts of 2
	// ranks sharing 2 processors (network namespaces), 64 B: after the
	// recursive-doubling barrier a binomial broadcast from rank 0 took
	// 57-60 us (its root was often the last to leave the barrier and
	// run), after the linear one 25.6-25.8; recursive doubling's
	// allreduce 74-79 either way.
	c.selection.crowded = c.opts.YieldWhenIdle == "1" || (c.nHosts <= 1 && c.opts.crowded(c.size))
	c.passedAfter = passedAfter(c.stallStep, c.localRanks(), onlineCPUs())
	return nil
}

// localRanks is the number of ranks on this rank's host, itself included.
func (c *Comm) localRanks() int {
	n := 0
	for _, h := range c.hosts {
		if h == c.hosts[c.rank] {
			n++
		}
	}
	return n
}

// route chooses the transport of every peer and the device the links use:
// shared memory for peers on this host when there is a shm device, the
// network device for the others.
func (c *Comm) route() error {
	c.via = make([]int, c.size)
	usesNet, usesShm := false, false
	for peer := range c.size {
		if peer == c.rank {
			continue
		}
		local := c.hosts[peer] == c.hosts[c.rank]
		switch {
		case local && c.devs.shm != nil:
			c.via[peer], usesShm = viaShm, true
		case c.devs.net != nil:
			c.via[peer], usesNet = viaNet, true
		case c.opts.Transport == "auto":
			// auto opens no network device when the launcher says every
			// rank is on this host (its local size); the host identities
			// disagree (Options.HostID, or a launcher's wrong local size).
			return fmt.Errorf("rank %d is on another host, but the launcher's local size said every rank is on this one, so only shared memory was opened (GOCCL_TRANSPORT=auto): correct the local size (LOCAL_SIZE, GOCCL_LOCAL_SIZE) or set GOCCL_TRANSPORT=tcp", peer)
		default:
			return fmt.Errorf("rank %d is on another host and only shared memory is in use (GOCCL_TRANSPORT=%s)", peer, c.opts.Transport)
		}
	}
	switch {
	case usesNet && usesShm:
		d, err := multi.New(viaNet, c.devs.net, c.devs.shm)
		if err != nil {
			return err
		}
		if c.opts.crowded(c.localRanks()) {
			d.Spin = 0 // the ranks of this host outnumber its cores: yield at once
		}
		c.dev = d
	case usesShm:
		c.dev = c.devs.shm
	case c.devs.net != nil:
		c.dev = c.devs.net
	default:
		c.dev = c.devs.shm
	}
	return nil
}

// Transport names the transports in use: "tcp", "shm", "verbs:rxe0", or
// for a communicator whose peers are reached differently "shm+tcp"; ""
// for a nil *Comm.
func (c *Comm) Transport() string {
	if c == nil {
		return ""
	}
	return c.dev.Name()
}

// PeerTransport names the transport that reaches peer ("shm", "tcp",
// ...; "self" for this rank).
func (c *Comm) PeerTransport(peer int) string {
	if c == nil || peer < 0 || peer >= c.size {
		return ""
	}
	if peer == c.rank {
		return "self"
	}
	if c.via[peer] == viaShm {
		return c.devs.shm.Name()
	}
	return c.devs.net.Name()
}

// ConnectedPeers is the number of peers this rank has connected so far:
// peers are connected on first use (see Options.StagingBudget), so it
// grows with the algorithms the communicator has run, not with its size.
func (c *Comm) ConnectedPeers() int {
	if c == nil {
		return 0
	}
	return int(c.nLinks.Load())
}

// PeakPeers is the most peers this rank had connected at once. In a job
// of more than Options.MaxPeers+1 ranks an all-to-all connects and
// releases its peers a window at a time, so it stays near
// Options.PeerWindow plus the peers of the other algorithms.
func (c *Comm) PeakPeers() int {
	if c == nil {
		return 0
	}
	return int(c.peakLinks.Load())
}

// Hosts is the number of hosts the communicator's ranks are on (see
// Options.HostID).
func (c *Comm) Hosts() int {
	if c == nil {
		return 0
	}
	return c.nHosts
}

// Host is the index of this rank's host among the communicator's hosts,
// 0 to Hosts()-1, numbered in the order of their lowest ranks (see
// Options.HostID for what tells hosts apart: network namespaces and
// containers count as hosts of their own).
func (c *Comm) Host() int {
	if c == nil {
		return -1 // as Rank
	}
	if c.rank >= len(c.hosts) {
		return 0
	}
	return c.hosts[c.rank]
}

// LocalRank is this rank's index among the communicator's ranks on its
// host, in rank order, and LocalSize is their number (torchrun's
// LOCAL_RANK and LOCAL_WORLD_SIZE, for this communicator): the rank and
// size of this rank in its SplitByHost communicator with key 0.
func (c *Comm) LocalRank() int {
	if c == nil {
		return -1 // as Rank
	}
	n := 0
	for r := range min(c.rank, len(c.hosts)) {
		if c.hosts[r] == c.Host() {
			n++
		}
	}
	return n
}

// LocalSize is the number of the communicator's ranks on this rank's host,
// itself included (see LocalRank).
func (c *Comm) LocalSize() int {
	if c == nil {
		return 0 // as Size
	}
	if len(c.hosts) == 0 {
		return 1
	}
	return c.localRanks()
}

// SplitByHost splits c into one communicator per host, each holding the
// ranks on one host, ordered by key, then by rank: MPI_Comm_split_type
// with MPI_COMM_TYPE_SHARED (torch.distributed's new_subgroups, one group
// per node). Every rank of c must call it, as Split. Over those ranks the
// collectives take the shared-memory transport where there is one.
func (c *Comm) SplitByHost(ctx context.Context, key int) (*Comm, error) {
	if c == nil {
		return nil, errNilComm("split by host")
	}
	return c.Split(ctx, c.Host(), key)
}

// Transports says which transport reaches which peers, e.g.
// "shm: ranks 1-3; tcp: ranks 4-7".
func (c *Comm) Transports() string {
	if c == nil {
		return ""
	}
	if c.size == 1 {
		return c.dev.Name()
	}
	var groups [2][]int
	for peer := range c.size {
		if peer != c.rank {
			groups[c.via[peer]] = append(groups[c.via[peer]], peer)
		}
	}
	var parts []string
	for _, v := range []int{viaShm, viaNet} { // this host's peers first
		if ranks := groups[v]; len(ranks) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", c.PeerTransport(ranks[0]), collectives.RankList(ranks)))
		}
	}
	return strings.Join(parts, "; ")
}

// blob layout, per peer: u16 address length, address, key, addr, len.
func appendBlob(b []byte, addr []byte, r transport.RemoteRegion) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(addr)))
	b = append(b, addr...)
	b = binary.LittleEndian.AppendUint64(b, r.Key)
	b = binary.LittleEndian.AppendUint64(b, r.Addr)
	return binary.LittleEndian.AppendUint64(b, r.Len)
}

// parseBlobs splits one rank's published blob into its per-peer entries.
func parseBlobs(b []byte, size int) (addrs [][]byte, regions []transport.RemoteRegion, err error) {
	for range size {
		if len(b) < 2 {
			return nil, nil, errors.New("truncated address table")
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n+24 {
			return nil, nil, errors.New("truncated address table")
		}
		addrs = append(addrs, b[2:2+n])
		b = b[2+n:]
		regions = append(regions, transport.RemoteRegion{
			Key: binary.LittleEndian.Uint64(b), Addr: binary.LittleEndian.Uint64(b[8:]), Len: binary.LittleEndian.Uint64(b[16:])})
		b = b[24:]
	}
	if len(b) != 0 {
		return nil, nil, errors.New("trailing bytes in address table")
	}
	return addrs, regions, nil
}

// connect learns where the ranks are, chooses each peer's transport,
// sizes the staging slots (see stagingGeometry) and makes the completion
// queue and the executor. The links themselves are made on first use
// (lazy.go); only a rendezvous without a key-value store, which cannot set
// up a pair on its own, connects every peer here.
func (c *Comm) connect(ctx context.Context) error {
	if err := c.exchangeHosts(ctx); err != nil {
		return err
	}
	if err := c.route(); err != nil {
		return err
	}
	if c.debug && c.size > 1 {
		c.debugf("peers: %s (%d hosts)", c.Transports(), c.nHosts)
	}
	links := c.size - 1
	slots, slot := stagingGeometry(links, c.opts.Slots, c.opts.ChunkSize, c.opts.StagingBudget)
	if c.debug && (slots != c.opts.Slots || slot != c.opts.ChunkSize) {
		c.debugf("staging: %d slots of %d KiB per peer instead of %d of %d KiB: %d peers fit the %d MiB budget (GOCCL_STAGING_BUDGET)",
			slots, slot>>10, c.opts.Slots, c.opts.ChunkSize>>10, links, c.opts.StagingBudget>>20)
	}
	c.opts.Slots, c.opts.ChunkSize = slots, slot
	// What the executor holds at most on each link (receive tokens, data
	// and credit writes), were every peer connected: a device that cannot
	// hold that many completions fails here with ErrNotSupported rather
	// than later at a post.
	depth := max(1, (c.size-1)*collectives.CQEntriesPerLink(slots))
	cq, err := c.dev.NewCompletionQueue(depth)
	if err != nil {
		return fmt.Errorf("completion queue for %d peers with %d slots each: %w", c.size-1, slots, err)
	}
	c.cq = cq
	if r, ok := cq.(transport.Readier); ok {
		c.readier.Store(&r)
	}
	c.links = make([]*collectives.Link, c.size)
	c.linkGen = make([]uint32, c.size)
	c.linkMem = make([]ownedMem, c.size)
	spin := c.opts.SpinPolls
	if ws, ok := c.dev.(waitSpinner); ok && ws.WaitSpins() {
		spin = 0 // the queue's Wait spins on its sources itself
	}
	c.exec = &collectives.Executor{Rank: c.rank, Size: c.size, Links: c.links, CQ: cq,
		NSlots: slots, SlotSize: slot, SpinPolls: spin,
		OnProgress: c.progressed, Stalled: c.onStall,
		Window: c.opts.PeerWindow, Connect: c.connectBatch, Release: c.releaseLink}
	if in, ok := c.dev.(transport.Inliner); ok {
		c.exec.Inline = in.MaxInline()
	}
	if kvOf(c.rdv) == nil && c.size > 1 {
		return c.connectAll(ctx)
	}
	return nil
}

// connectAll connects every peer at once, exchanging the address blobs
// with one Allgather (each rank's blob holds an entry per peer), and waits
// until all ranks are ready: for a rendezvous without a key-value store.
func (c *Comm) connectAll(ctx context.Context) error {
	halves := make([]*halfLink, c.size)
	defer func() {
		for _, h := range halves {
			if h != nil {
				h.close(c.dev)
			}
		}
	}()
	var blob []byte
	for peer := range c.size {
		if peer == c.rank {
			blob = appendBlob(blob, nil, transport.RemoteRegion{})
			continue
		}
		h, b, err := c.openHalf(peer)
		if err != nil {
			return err
		}
		halves[peer] = h
		blob = append(blob, b...)
	}
	all, err := c.rdv.Allgather(ctx, blob)
	if err != nil {
		return fmt.Errorf("exchange addresses: %w", err)
	}
	if len(all) != c.size {
		return fmt.Errorf("exchange addresses: got %d entries for %d ranks", len(all), c.size)
	}
	errs := make([]error, c.size)
	rem := make([]transport.RemoteRegion, c.size)
	var wg sync.WaitGroup
	for peer, h := range halves {
		if h == nil {
			continue
		}
		a, r, err := parseBlobs(all[peer], c.size)
		if err != nil {
			return fmt.Errorf("address table of rank %d: %w", peer, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.ep.Connect(ctx, a[c.rank]); err != nil {
				errs[peer] = err
			}
		}()
		rem[peer] = r[c.rank]
	}
	wg.Wait()
	for peer, h := range halves {
		if h != nil && errs[peer] == nil {
			c.links[peer], errs[peer] = collectives.NewLink(h.peer, h.ep, h.region, rem[peer], c.opts.Slots)
		}
	}
	for peer, l := range c.links {
		if l != nil {
			c.linkMem[peer] = halves[peer].mem
			halves[peer] = nil
			c.nLinks.Add(1)
		}
	}
	c.peakLinks.Store(c.nLinks.Load())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := c.rdv.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier after connect: %w", err)
	}
	return nil
}

// breakLinks closes every endpoint (once): peers' pending and later
// collectives with this rank fail promptly. The worker calls it when a
// collective fails.
func (c *Comm) breakLinks() error {
	var errs []error
	c.linksOnce.Do(func() {
		for _, l := range c.links {
			if l != nil {
				errs = append(errs, l.EP.Close())
			}
		}
		for _, h := range c.early {
			errs = append(errs, h.ep.Close())
		}
	})
	return errors.Join(errs...)
}

// closeLinks releases what connect made: endpoints, staging and the
// completion queue.
func (c *Comm) closeLinks() error {
	errs := []error{c.breakLinks()}
	for _, l := range c.links {
		if l != nil {
			errs = append(errs, c.dev.Deregister(l.Staging))
		}
	}
	for _, h := range c.early {
		errs = append(errs, c.dev.Deregister(h.region))
	}
	c.early = nil
	if c.cq != nil {
		c.cq.Close()
	}
	for _, m := range c.staging {
		errs = append(errs, m.free())
	}
	c.staging = nil
	return errors.Join(errs...)
}

// waitSpinner is implemented by devices whose completion queues poll their
// sources in Wait, spinning before they sleep (transport/tcp): the executor
// then calls Wait at once instead of spinning on Poll, whose polls the
// device could not tell from a caller that went away.
type waitSpinner interface{ WaitSpins() bool }
