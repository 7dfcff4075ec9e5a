package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

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
	devs      devices
	dev       transport.Device
	cq        transport.CompletionQueue
	links     []*collectives.Link
	linksOnce sync.Once
	staging   []ownedMem
	exec      *collectives.Executor
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
	all, err := c.rdv.Allgather(ctx, []byte(id))
	if err != nil {
		return fmt.Errorf("exchange host identities: %w", err)
	}
	if len(all) != c.size {
		return fmt.Errorf("exchange host identities: got %d entries for %d ranks", len(all), c.size)
	}
	c.hosts = make([]int, c.size)
	seen := map[string]int{}
	for r, b := range all {
		h, ok := seen[string(b)]
		if !ok {
			h = len(seen)
			seen[string(b)] = h
		}
		c.hosts[r] = h
	}
	c.nHosts = len(seen)
	return nil
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
		default:
			return fmt.Errorf("rank %d is on another host and only shared memory is in use (GOCCL_TRANSPORT=shm)", peer)
		}
	}
	switch {
	case usesNet && usesShm:
		d, err := multi.New(viaNet, c.devs.net, c.devs.shm)
		if err != nil {
			return err
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

// Hosts is the number of hosts the communicator's ranks are on (see
// Options.HostID).
func (c *Comm) Hosts() int {
	if c == nil {
		return 0
	}
	return c.nHosts
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
			parts = append(parts, fmt.Sprintf("%s: %s", c.PeerTransport(ranks[0]), rankList(ranks)))
		}
	}
	return strings.Join(parts, "; ")
}

// rankList writes ranks (sorted) as "rank 3" or "ranks 1-3, 5".
func rankList(ranks []int) string {
	var b strings.Builder
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j == i {
			fmt.Fprintf(&b, "%d", ranks[i])
		} else {
			fmt.Fprintf(&b, "%d-%d", ranks[i], ranks[j])
		}
		i = j + 1
	}
	if len(ranks) == 1 {
		return "rank " + b.String()
	}
	return "ranks " + b.String()
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
// creates an endpoint and staging slots per peer, exchanges their
// addresses through the rendezvous, connects every peer and waits until
// all ranks are ready.
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
	n, slot := c.opts.Slots, c.opts.ChunkSize
	// What the executor holds at most on each link (receive tokens, data
	// and credit writes): a device that cannot hold that many completions
	// fails here with ErrNotSupported rather than later at a post.
	depth := max(1, (c.size-1)*collectives.CQEntriesPerLink(n))
	cq, err := c.dev.NewCompletionQueue(depth)
	if err != nil {
		return fmt.Errorf("completion queue for %d peers with %d slots each: %w", c.size-1, n, err)
	}
	c.cq = cq
	c.links = make([]*collectives.Link, c.size)
	eps := make([]transport.Endpoint, c.size)
	regions := make([]transport.Region, c.size)
	md, _ := c.dev.(*multi.Device)
	var blob []byte
	for peer := range c.size {
		if peer == c.rank {
			blob = appendBlob(blob, nil, transport.RemoteRegion{})
			continue
		}
		// Staging lives where the peer's writes are cheapest: in memory
		// its transport allocates (mapped by a shared-memory peer).
		peerDev := c.devs.net
		if c.via[peer] == viaShm {
			peerDev = c.devs.shm
		}
		var ep transport.Endpoint
		if md != nil {
			ep, err = md.NewEndpointOn(c.via[peer], cq)
		} else {
			ep, err = c.dev.NewEndpoint(cq)
		}
		if err != nil {
			return fmt.Errorf("endpoint for rank %d: %w", peer, err)
		}
		eps[peer] = ep
		mem, err := allocFrom(peerDev, collectives.StagingSize(n, slot))
		if err != nil {
			return fmt.Errorf("staging for rank %d: %w", peer, err)
		}
		c.staging = append(c.staging, mem)
		const access = transport.AccessLocalWrite | transport.AccessRemoteWrite
		var r transport.Region
		if md != nil {
			r, err = md.RegisterOn(c.via[peer], mem.mem, access)
		} else {
			r, err = c.dev.Register(mem.mem, access)
		}
		if err != nil {
			return fmt.Errorf("register staging for rank %d: %w", peer, err)
		}
		regions[peer] = r
		blob = appendBlob(blob, ep.LocalAddress(), r.Remote())
	}
	all, err := c.rdv.Allgather(ctx, blob)
	if err != nil {
		return fmt.Errorf("exchange addresses: %w", err)
	}
	if len(all) != c.size {
		return fmt.Errorf("exchange addresses: got %d entries for %d ranks", len(all), c.size)
	}
	remote := make([]transport.RemoteRegion, c.size)
	addrs := make([][]byte, c.size)
	for peer := range c.size {
		if peer == c.rank {
			continue
		}
		a, r, err := parseBlobs(all[peer], c.size)
		if err != nil {
			return fmt.Errorf("address table of rank %d: %w", peer, err)
		}
		addrs[peer], remote[peer] = a[c.rank], r[c.rank]
	}
	errs := make([]error, c.size)
	var wg sync.WaitGroup
	for peer := range c.size {
		if peer == c.rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := eps[peer].Connect(ctx, addrs[peer]); err != nil {
				errs[peer] = fmt.Errorf("connect rank %d -> %d (%s): %w", c.rank, peer, c.PeerTransport(peer), err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for peer := range c.size {
		if peer == c.rank {
			continue
		}
		l, err := collectives.NewLink(peer, eps[peer], regions[peer], remote[peer], n)
		if err != nil {
			return err
		}
		c.links[peer] = l
	}
	spin := c.opts.SpinPolls
	if ws, ok := c.dev.(waitSpinner); ok && ws.WaitSpins() {
		spin = 0 // the queue's Wait spins on its sources itself
	}
	c.exec = &collectives.Executor{Rank: c.rank, Size: c.size, Links: c.links, CQ: cq,
		NSlots: n, SlotSize: slot, SpinPolls: spin,
		OnProgress: c.armStall, Stalled: c.onStall}
	if in, ok := c.dev.(transport.Inliner); ok {
		c.exec.Inline = in.MaxInline()
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
