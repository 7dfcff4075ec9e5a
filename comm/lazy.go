package comm

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/multi"
)

// Connections on demand. A communicator connects a peer, and gives it
// staging slots, only when a plan first moves data to or from it (as NCCL
// connects the peers of its rings and trees): a ring or tree job connects
// two or three peers per rank, a job that also runs recursive doubling
// adds log2(n), and only all-to-all style collectives connect every peer.
//
// Agreement. Both sides of a pair must set the pair up together. They do,
// without any extra message: a plan's peer relation is symmetric (every
// chunk one rank sends is one its peer receives, in the same call), and
// every rank runs the same calls in the same order, so by induction over
// the calls the link to a peer exists on both ranks of the pair or on
// neither when a call starts, and a call that needs a new pair needs it on
// both sides. Point-to-point calls need it on both sides too (the send and
// its receive), in whatever order they come: the set-up is keyed by the
// pair, never by a call number.
//
// Set-up of a pair (r, p), on r: create the endpoint and the staging
// slots, publish their address blob under the store key
// goccl/<comm>/link/<r>/<p>/<g>, read goccl/<comm>/link/<p>/<r>/<g> (p
// publishes it at the same point of its own call), delete it, connect. g
// counts the pair's earlier links (both ranks release a link together,
// see below), so a set-up never reads an earlier one's blob. Every new
// peer of a call is published before any is read, so two ranks that need
// each other (and others) never wait on each other. The store holds each
// key until its reader has read it: O(links) keys at a time, and each rank
// publishes and reads only what its own links need (see
// bootstrap.Bootstrap for the O(n) part of Init: the host identities).
//
// All-to-all. The pairwise all-to-all goes through a window of
// Options.PeerWindow peers at a time in a larger job (collectives/
// window.go): the executor asks connectBatch for each batch's new peers
// (both ranks of a pair reach the pair in the same batch). In a job of
// more than Options.MaxPeers+1 ranks those links are transient: the
// executor releases each (releaseLink: endpoint closed, staging freed)
// once both ranks said bye on it, within the call, so that the invariant
// above holds again when the call ends.
//
// Waiting. A rank that waits for a peer's blob is in the call, as far as
// the stall diagnosis goes (stall.go): it waits on that peer, answers
// questions about it, compares its call with the peer's when poked, and
// the stall timeout ends the wait and blames the rank at the root. A peer
// that fails, or closes the communicator, before it reaches the set-up
// says so in the store (see report.go: publish and the closed marker), and
// the waiting rank fails at once with the peer's cause instead of waiting
// out the stall timeout.

// linkKey is the store key under which rank from publishes its blob for
// its link to rank to.
// The set-up's generation gen tells the pair's successive links apart.
func (c *Comm) linkKey(from, to int, gen uint32) string {
	return "goccl/" + c.id + "/link/" + strconv.Itoa(from) + "/" + strconv.Itoa(to) + "/" + strconv.FormatUint(uint64(gen), 10)
}

// failedKey is set (to the rank's number) by a rank that failed, once its
// report is published: ranks waiting to connect to anyone learn that the
// communicator is broken.
func (c *Comm) failedKey() string { return "goccl/" + c.id + "/failed" }

// closedKey is set (to the number of collectives it made) by a rank that
// closed the communicator normally.
func (c *Comm) closedKey(rank int) string { return "goccl/" + c.id + "/closed/" + strconv.Itoa(rank) }

// halfLink is this side of a link being set up: endpoint and registered
// staging, not yet connected.
type halfLink struct {
	peer   int
	ep     transport.Endpoint
	region transport.Region
	mem    ownedMem // the staging region's memory (in c.staging)
}

// open creates the endpoint and staging slots for peer and returns them
// with the blob to publish. The staging memory joins c.staging at once, so
// Close frees it whatever happens next; close releases the rest if the
// set-up fails.
func (c *Comm) openHalf(peer int) (*halfLink, []byte, error) {
	md, _ := c.dev.(*multi.Device)
	// Staging lives where the peer's writes are cheapest: in memory its
	// transport allocates (mapped by a shared-memory peer).
	peerDev := c.devs.net
	if c.via[peer] == viaShm {
		peerDev = c.devs.shm
	}
	h := &halfLink{peer: peer}
	var err error
	if md != nil {
		h.ep, err = md.NewEndpointOn(c.via[peer], c.cq)
	} else {
		h.ep, err = c.dev.NewEndpoint(c.cq)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("endpoint for rank %d: %w", peer, err)
	}
	mem, err := allocFrom(peerDev, collectives.StagingSize(c.opts.Slots, c.opts.ChunkSize))
	if err != nil {
		h.ep.Close()
		return nil, nil, fmt.Errorf("staging for rank %d: %w", peer, err)
	}
	c.staging = append(c.staging, mem)
	c.stagingBytes.Add(int64(len(mem.mem)))
	h.mem = mem
	const access = transport.AccessLocalWrite | transport.AccessRemoteWrite
	if md != nil {
		h.region, err = md.RegisterOn(c.via[peer], mem.mem, access)
	} else {
		h.region, err = c.dev.Register(mem.mem, access)
	}
	if err != nil {
		h.ep.Close()
		return nil, nil, fmt.Errorf("register staging for rank %d: %w", peer, err)
	}
	return h, appendBlob(nil, h.ep.LocalAddress(), h.region.Remote()), nil
}

// close releases a half link whose set-up failed.
func (h *halfLink) close(dev transport.Device) {
	h.ep.Close()
	dev.Deregister(h.region)
}

// finish connects h with the peer's blob (as parseBlobs reads it) and
// makes the link.
func (c *Comm) finish(ctx context.Context, h *halfLink, addr []byte, remote transport.RemoteRegion) (*collectives.Link, error) {
	if err := h.ep.Connect(ctx, addr); err != nil {
		return nil, &collectives.PeerError{Peer: h.peer,
			Err: fmt.Errorf("connect rank %d -> %d (%s): %w", c.rank, h.peer, c.PeerTransport(h.peer), err)}
	}
	l, err := collectives.NewLink(h.peer, h.ep, h.region, remote, c.opts.Slots)
	if err != nil {
		// Connected, and then the peer closed its side (it failed, say):
		// the peer's doing, as a refused connect is.
		return nil, &collectives.PeerError{Peer: h.peer, Err: err}
	}
	return l, nil
}

// ensureLinks connects the peers of call's plan that are not connected
// yet (see the top of this file), except those of a windowed run, which
// the executor connects batch by batch (connectBatch). It blocks until
// they are, or until the communicator's life ends (timeout, stall
// timeout, Abort, the caller's context), a peer turns out to have failed
// or closed, or the stall diagnosis finds that the ranks disagree. On an
// error the links made so far stay (Close releases them) and the executor
// is failed.
func (c *Comm) ensureLinks(call *collectives.Call) error {
	fp := c.callNo.Load()<<20 | uint64(call.Fingerprint())
	if call.P2P {
		fp |= 1 << 16
	}
	c.runFP.Store(fp)
	p := call.Plan
	windowed := p.Windowed(c.exec.Window)
	var missing []int
	for _, peer := range p.Peers() {
		if c.links[peer] == nil && !(windowed && p.Round(peer) >= 0) {
			missing = append(missing, peer)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := c.connectMissing(call, missing, false); err != nil {
		c.exec.Fail(err)
		return err
	}
	return nil
}

// connectBatch is the executor's Connect hook (collectives/window.go): it
// connects the peers of a windowed run's next batch, running on the
// executor's goroutine. In a job of more than MaxPeers+1 ranks the links
// are transient: the executor releases them when the batch is done.
func (c *Comm) connectBatch(call *collectives.Call, peers []int) error {
	transient := releasesLinks(c.size, c.opts.MaxPeers)
	return c.connectMissing(call, peers, transient)
}

// connectMissing connects peers (none connected) for call and logs it
// with GOCCL_DEBUG.
func (c *Comm) connectMissing(call *collectives.Call, missing []int, transient bool) error {
	kv := kvOf(c.rdv)
	if kv == nil {
		return fmt.Errorf("rank %d has no link to rank %d and no key-value store to set one up", c.rank, missing[0])
	}
	start := time.Now()
	err := c.connectPeers(call, kv, missing)
	if err != nil {
		return fmt.Errorf("%s: rank %d: connecting %s: %w", c.callName(call), c.rank, collectives.RankList(missing), err)
	}
	c.connecting = nil
	for _, peer := range missing {
		c.links[peer].Transient = transient
	}
	if c.debug {
		what := "on first use"
		if transient {
			what = "for one window"
		}
		c.debugf("connected %s (%s) %s, in %s: %v; %d peers connected, %d MiB of staging",
			collectives.RankList(missing), c.PeerTransport(missing[0]), what, c.callName(call), time.Since(start).Round(time.Microsecond),
			c.nLinks.Load(), c.stagingBytes.Load()>>20)
	}
	return nil
}

// releaseLink is the executor's Release hook: it closes the transient link
// to peer and frees its staging (both ranks do, when both are done with
// it), so the pair's next set-up is the next generation.
func (c *Comm) releaseLink(peer int) {
	l := c.links[peer]
	l.EP.Close()
	c.dev.Deregister(l.Staging)
	if m := c.linkMem[peer]; m.mem != nil {
		for i, s := range c.staging {
			if len(s.mem) > 0 && &s.mem[0] == &m.mem[0] {
				c.staging = slices.Delete(c.staging, i, i+1)
				break
			}
		}
		m.free()
		c.stagingBytes.Add(-int64(len(m.mem)))
		c.linkMem[peer] = ownedMem{}
	}
	c.links[peer] = nil
	c.nLinks.Add(-1)
	c.linkGen[peer]++
}

// connectPeers sets up the links to peers through kv.
func (c *Comm) connectPeers(call *collectives.Call, kv keyValue, peers []int) error {
	c.connecting = peers
	halves := make([]*halfLink, len(peers))
	defer func() { // what did not become a link
		var keys []string
		for _, h := range halves {
			if h != nil {
				keys = append(keys, c.linkKey(c.rank, h.peer, c.linkGen[h.peer]))
			}
		}
		if d, ok := kv.(deleter); ok && len(keys) > 0 {
			// Withdrawn first: a peer that reads the address of a closed
			// half and accepts (it does not dial) waits for a connection
			// that never comes, until its stall timeout; without the
			// address it waits in its set-up, which ends at this rank's
			// failure key (await).
			ctx, cancel := context.WithTimeout(context.Background(), queryWait)
			d.Delete(ctx, keys...)
			cancel()
		}
		for _, h := range halves {
			if h != nil {
				h.close(c.dev)
			}
		}
	}()
	for i, peer := range peers {
		if h := c.early[peer]; h != nil {
			// Published while an earlier call set up its links
			// (publishEarly): the peer may have connected its side.
			delete(c.early, peer)
			halves[i] = h
			continue
		}
		h, blob, err := c.openHalf(peer)
		if err != nil {
			return err
		}
		halves[i] = h
		if err := kv.Set(c.life, c.linkKey(c.rank, peer, c.linkGen[peer]), blob); err != nil {
			if c.life.Err() == nil {
				return fmt.Errorf("publish the address for rank %d: %w", peer, err)
			}
			// Given up meanwhile: the address may be in the store, and a
			// peer that read it may have connected its side. await's
			// grace connects the halves made so far whose peers'
			// addresses are there, for the notice of the failure.
			halves = halves[:i+1]
			break
		}
	}
	c.publishEarly(kv, halves)
	return c.lifeErr(c.await(call, kv, halves))
}

// earlyScan bounds the queued calls publishEarly looks at.
const earlyScan = 64

// publishEarly publishes this side's half of the link to each peer of the
// point-to-point calls queued behind the call that sets up its links
// (halves), if it has no link and no half yet. Calls run one at a time,
// and a set-up waits until the peer publishes its half, which it does in
// its own call that needs the pair: without this, ranks that each queue
// a Send to the next rank of a ring and then a Recv from the previous one
// (MPI's Isend and Recv) waited on one another in their first exchange
// until the stall timeout, each one's Send waiting for the next rank's
// half, published only by its Recv, queued behind its own Send
// (TestRingFirstExchange). Published early, the half lets the peer
// connect its side, which needs nothing more of this rank's (a transport's
// Connect does not wait for the peer's Connect; TCP parks the connection);
// the call that needs the pair takes the half over (connectPeers), and
// Close releases those no call took.
func (c *Comm) publishEarly(kv keyValue, halves []*halfLink) {
	if c.life.Err() != nil {
		return
	}
	var want []int
	c.mu.Lock()
	n := 0
	for r := c.qhead; r != nil && n < earlyScan; r, n = r.next, n+1 {
		if r.kind.IsP2P() && r.refused == nil {
			want = append(want, r.args.peer, r.args.src)
		}
	}
	c.mu.Unlock()
	for _, p := range want {
		if p == c.rank || uint(p) >= uint(c.size) || c.links[p] != nil || c.early[p] != nil ||
			slices.ContainsFunc(halves, func(h *halfLink) bool { return h != nil && h.peer == p }) {
			continue
		}
		h, blob, err := c.openHalf(p)
		if err != nil {
			return // the call that needs the pair sets it up, and says why it cannot
		}
		if err := kv.Set(c.life, c.linkKey(c.rank, p, c.linkGen[p]), blob); err != nil {
			h.close(c.dev)
			return
		}
		if c.early == nil {
			c.early = make(map[int]*halfLink)
		}
		c.early[p] = h
	}
}

// await reads the blobs the peers of halves published for this rank and
// connects each as its blob arrives; a connected half becomes a link (and
// its entry of halves nil). Meanwhile it watches the communicator's
// failure key and the peers' closed markers, and answers pokes of the
// stall watchdog with the stall diagnosis (the rank waits on the peers not
// connected yet).
func (c *Comm) await(call *collectives.Call, kv keyValue, halves []*halfLink) error {
	ctx, cancel := context.WithCancel(c.life)
	// A rank that gives up its call (its context ends) while it sets up
	// links goes on for up to notifyWait (grace): it reads the addresses
	// its peers published and finishes the connects, so that the notice
	// of its failure reaches the peers that connected their side, which
	// wait for data. (Cut at once, a dial left such a peer waiting for its
	// stall timeout: a peer that accepts does not wait for the dial in its
	// set-up.) The addresses and connects run under fctx, which outlives
	// ctx until await returns.
	fctx, fcancel := context.WithCancel(context.WithoutCancel(ctx))
	type got struct {
		i    int // index in halves; -1 the failure key, -2-i peer i closed
		v    []byte
		err  error
		link *collectives.Link // a finished connect
		conn bool
		gone bool // peer i's process is gone (holders.gone)
		addr bool // gone: its address is in the store
	}
	ch := make(chan got, 4*len(halves)+1) // at most 4 sends per peer, and the failure key
	var wg sync.WaitGroup
	watch := func(i int, key string) {
		defer wg.Done()
		wctx := ctx
		if i >= 0 {
			wctx = fctx // a peer's address: read in the grace too
		}
		v, err := kv.Get(wctx, key)
		if i >= 0 && err == nil && addrHook != nil {
			addrHook(c.rank, halves[i].peer)
		}
		ch <- got{i: i, v: v, err: err}
	}
	watchGone := func(i int, key, addr string) {
		defer wg.Done()
		v, err := kv.Get(ctx, key)
		if err != nil {
			return
		}
		// A peer that published its address before it went (an eager
		// root that sent and exited without Close, say): the address
		// watcher delivers it, and the connect tells.
		qctx, cancel := context.WithTimeout(ctx, goneLook)
		_, err = kv.Get(qctx, addr)
		cancel()
		if ctx.Err() == nil {
			ch <- got{i: i, v: v, gone: true, addr: err == nil}
		}
	}
	peers := make([]int, len(halves))
	for i, h := range halves {
		peers[i] = h.peer
		wg.Add(2)
		go watch(i, c.linkKey(h.peer, c.rank, c.linkGen[h.peer]))
		go watch(-2-i, c.closedKey(h.peer))
		if c.held.gone != nil {
			wg.Add(1)
			go watchGone(i, c.held.gone(c.worldRank(h.peer)), c.linkKey(h.peer, c.rank, c.linkGen[h.peer]))
		}
	}
	wg.Add(1)
	go watch(-1, c.failedKey())
	defer func() {
		cancel()
		fcancel()
		wg.Wait()
		close(ch)
		for g := range ch { // connects that finished meanwhile
			if g.conn && g.link != nil {
				c.adoptLink(halves, g.i, g.link)
			}
		}
	}()
	arrived := make([]bool, len(halves))
	var read []string // the keys read, deleted at the end
	left := len(halves)
	// Until the stall watchdog's first poke, look around early and often:
	// ranks that disagree on the call may need different pairs, and then
	// no data can show the difference (see compare).
	// (The rank counts as stalled for the peers that ask, and shows whom
	// it waits on, only once the stall watchdog says so, as in the
	// executor: a rank still in the previous call may wait on this one
	// for a while without any disagreement.)
	early := firstLook
	look := time.NewTimer(early)
	defer look.Stop()
	rounds := 0
	// A failed connect waits up to connSettle for the store to say why: a
	// peer that failed, or closed, drops its half of the connection, and
	// its failure key follows. A peer whose process is gone says no more.
	var connErr error
	connPeer := -1 // connErr's index in halves
	var settle <-chan time.Time
	// goneSeen[i]: the gone marker of peer i came.
	goneSeen := make([]bool, len(halves))
	var gaveUp error // the life's end, in the grace
	var grace <-chan time.Time
	lifeDone := c.life.Done()
	// A call queued meanwhile wakes the worker (signal): its peers' halves
	// are published now (publishEarly), and the wake-up passed on.
	woke := false
	defer func() {
		if woke {
			c.signal()
		}
	}()
	for left > 0 {
		poke := c.poke.Load()
		pokeDone := poke.ctx.Done()
		lookC := look.C
		if gaveUp != nil {
			pokeDone, lookC = nil, nil // only the links, in the grace
		}
		select {
		case <-c.wake:
			woke = true
			if gaveUp == nil {
				c.publishEarly(kv, halves)
			}
		case <-grace:
			return gaveUp
		case <-settle:
			if gaveUp != nil {
				settle = nil // the failure key came meanwhile: the grace ends it
				continue
			}
			return connErr
		case <-lookC:
			unseen := func(p int) bool {
				i := slices.Index(peers, p)
				return i >= 0 && !arrived[i]
			}
			if err := c.boardGone(unseen); err != nil {
				return err
			}
			if err := c.lookAround(call, rounds, unseen); err != nil {
				// Fail, in the grace: a peer whose calls differ may have
				// read this rank's address and connected its side (one
				// that accepts waits for the dial), and it learns of the
				// mismatch only from this rank's notice, over the link
				// (returned at once, the peer waited for its timeout and
				// took itself for the root of a stall).
				gaveUp, grace, lifeDone = err, time.After(notifyWait), nil
				continue
			}
			c.publishEarly(kv, halves) // for calls queued while the worker ran this one inline
			rounds++
			if early *= 2; early < c.stallStep {
				look.Reset(early)
			}
		case g := <-ch:
			switch {
			case g.gone:
				goneSeen[g.i] = true
				if arrived[g.i] || g.addr || gaveUp != nil {
					if connPeer == g.i && gaveUp == nil {
						return connErr // its connect failed: nothing more to learn
					}
					continue // its address is here: the connect tells
				}
				// Fail, in the grace: the other peers' connects go
				// on, so that the notice of the failure reaches them
				// (they would otherwise blame this rank, which exits).
				gaveUp = &collectives.PeerError{Peer: peers[g.i], Err: fmt.Errorf(
					"%s: rank %d: rank %d is gone before it connected: %s",
					c.callName(call), c.rank, peers[g.i], g.v)}
				grace, lifeDone = time.After(notifyWait), nil
				left--
			case g.conn:
				if g.err != nil {
					if connErr == nil {
						connErr, connPeer, settle = g.err, g.i, time.After(connSettle)
					}
					if goneSeen[g.i] && gaveUp == nil {
						return g.err // its process is gone: nothing more to learn
					}
					continue
				}
				c.adoptLink(halves, g.i, g.link)
				left--
				c.connecting = pendingPeers(halves)
				c.snapshot(call)
				// A peer connected: progress, as a completion is in a
				// run. (A set-up of many peers may take longer than the
				// stall timeout as a whole: an all-to-all's first call
				// at 128 ranks over shared memory took 55 s here.)
				c.armStall()
			case g.err != nil:
				if ctx.Err() != nil {
					continue // the life context's end is handled below
				}
				if gaveUp != nil {
					continue
				}
				return fmt.Errorf("waiting for the addresses of %s: %w", collectives.RankList(c.connecting), g.err)
			case g.i >= 0:
				addrs, regions, err := parseBlobs(g.v, 1)
				if err != nil {
					return fmt.Errorf("address of rank %d: %w", peers[g.i], err)
				}
				arrived[g.i] = true
				read = append(read, c.linkKey(peers[g.i], c.rank, c.linkGen[peers[g.i]]))
				wg.Add(1)
				go func() {
					defer wg.Done()
					l, err := c.finish(fctx, halves[g.i], addrs[0], regions[0])
					ch <- got{i: g.i, link: l, err: err, conn: true}
				}()
			case gaveUp != nil:
				continue // this rank failed first
			case g.i == -1:
				// Fail, in the grace (as for a gone peer): a peer that
				// read this rank's address and accepts (it does not dial)
				// waits for the connection, which must come, with the
				// notice of this failure; withdrawn at once, it waited
				// for its connect timeout (a duplicate communicator whose
				// rank 3 aborted, under load: its rank 0 waited 60 s for
				// rank 2).
				gaveUp = c.peerFailed(kv, call, g.v)
				grace, lifeDone = time.After(notifyWait), nil
			default:
				i := -2 - g.i
				if arrived[i] {
					continue // it closed after it published: its Connect tells
				}
				n, _ := strconv.ParseUint(string(g.v), 10, 32)
				gaveUp = &collectives.ClosedError{Call: c.callName(call), Seq: call.Seq, Rank: c.rank, Peer: peers[i], PeerSeq: uint16(n % collectives.SeqMod)}
				grace, lifeDone = time.After(notifyWait), nil
				left-- // it will not connect
			}
		case <-lifeDone:
			gaveUp, grace, lifeDone = context.Cause(c.life), time.After(notifyWait), nil
		case <-pokeDone:
			if c.life.Err() != nil {
				// The poke ends with the life: the grace, as above.
				gaveUp, grace, lifeDone = context.Cause(c.life), time.After(notifyWait), nil
				continue
			}
			if context.Cause(poke.ctx) == errHoist {
				// A Send queued behind a Recv: its peer's half now.
				c.publishEarly(kv, halves)
				if c.poke.Load() == poke {
					c.renewPoke()
				}
				continue
			}
			// The stall watchdog's poke: compare this call with the
			// unconnected peers' (stall.go); a disagreement fails the
			// call, in the grace (see the look-around above).
			if _, err := c.onStall(poke.ctx, call); err != nil {
				gaveUp, grace, lifeDone = err, time.After(notifyWait), nil
				continue
			}
			if c.poke.Load() == poke {
				c.renewPoke()
			}
		}
	}
	if gaveUp != nil {
		return gaveUp // with every link made, for the notice
	}
	if d, ok := kv.(deleter); ok {
		// The store need not keep what was read (best effort: a key left
		// over is never read again, see linkKey).
		if len(read) > 0 {
			d.Delete(c.life, read...)
		}
	}
	return nil
}

// addrHook, if set (tests only), runs as rank's set-up receives the address
// of peer's half of their link, before the set-up takes it.
var addrHook func(rank, peer int)

// goneLook bounds the look for the address of a peer whose will the
// store set (see watchGone).
const goneLook = 10 * time.Millisecond

// connSettle is how long a failed connect waits for the failure key: a
// rank that fails in its set-up closes its unfinished halves first, then
// notifies its peers (up to notifyWait) and publishes its failure.
const connSettle = notifyWait + settleWait

// firstLook is when a rank waiting for its peers' addresses first
// compares its call with theirs; it looks again at doubling intervals
// until the stall watchdog's pokes take over.
const firstLook = 20 * time.Millisecond

// earlyPeers is how many of the peers it waits for a rank asks in one
// early look-around: an all-to-all that connects every peer must not ask
// the store n questions per rank every few milliseconds (the stall
// watchdog's pokes ask all of them, from a second on).
const earlyPeers = 4

// lookAround compares call with those of up to earlyPeers of the peers
// this rank waits to connect to (a different few each time: round is the
// look-around's number), and returns their disagreement, if any. A peer
// whose half of the link has not arrived (unseen) and that has started a
// later collective completed this one without the link: a disagreement
// (see passed), found here without waiting for a stall.
func (c *Comm) lookAround(call *collectives.Call, round int, unseen func(peer int) bool) error {
	if c.tuning.Load() {
		return nil // see stateNow
	}
	kv := kvOf(c.rdv)
	st := c.snapshot(call)
	ask := st.waiting
	if len(ask) > earlyPeers {
		some := make([]int, earlyPeers)
		for i := range some {
			some[i] = ask[(round*earlyPeers+i)%len(ask)]
		}
		ask = some
	}
	ctx, cancel := context.WithTimeout(c.life, queryWait)
	defer cancel()
	for w, a := range c.query(ctx, kv, ask) {
		if err := c.compare(st, w, a); err != nil {
			return err
		}
		if unseen(w) {
			if err := c.passed(st, w, a); err != nil {
				return err
			}
		}
	}
	return nil
}

// boardGone reports an error if, on a host with a shared-memory board, a
// peer that has not published its address (unseen) marked its header
// closed, failed or mismatched: it will not connect. (A rank that found
// on the board that this rank runs the call off it, boardLook, fails
// without writing to the store.)
func (c *Comm) boardGone(unseen func(peer int) bool) error {
	b := c.board
	if b == nil {
		return nil
	}
	for p := range b.n {
		if p == c.rank || !unseen(p) {
			continue
		}
		switch b.stateOf(p).Load() {
		case boardMismatched:
			return fmt.Errorf("collective mismatch: rank %d found that the ranks called different collectives (its error names the calls)", p)
		case boardFailed:
			return c.reportedCause(p)
		case boardClosed:
			return fmt.Errorf("rank %d closed the communicator", p)
		}
	}
	return nil
}

// deleter is a store that can delete keys.
type deleter interface {
	Delete(ctx context.Context, keys ...string) error
}

// adoptLink makes l, connected from halves[i], the link to its peer.
func (c *Comm) adoptLink(halves []*halfLink, i int, l *collectives.Link) {
	h := halves[i]
	c.links[h.peer] = l
	c.linkMem[h.peer] = h.mem
	if n := c.nLinks.Add(1); n > c.peakLinks.Load() {
		c.peakLinks.Store(n)
	}
	halves[i] = nil
}

// pendingPeers lists the peers of the halves not connected yet.
func pendingPeers(halves []*halfLink) []int {
	var out []int
	for _, h := range halves {
		if h != nil {
			out = append(out, h.peer)
		}
	}
	return out
}

// lifeErr is err, or if the communicator's life ended meanwhile (the stall
// timeout, the timeout, Abort) the cause of that, by which the failure
// report blames.
func (c *Comm) lifeErr(err error) error {
	if err != nil && c.life.Err() != nil {
		return context.Cause(c.life)
	}
	return err
}

// peerFailed is the error of a set-up ended by the failure key: the failed
// rank's report, as a notice from it.
func (c *Comm) peerFailed(kv keyValue, call *collectives.Call, v []byte) error {
	r, err := strconv.Atoi(string(v))
	if err != nil || r < 0 || r >= c.size {
		return fmt.Errorf("the communicator failed (unreadable failure marker %q)", v)
	}
	reps := c.readReports(kv, []int{r}, reportWait)
	rep, ok := reps[r]
	if !ok {
		rep = report{reason: collectives.NoticeFailed, root: r}
	}
	if rep.root < 0 || rep.root >= c.size {
		rep.root = r
	}
	n := collectives.Notice{Reason: rep.reason, Rank: rep.root,
		Seq: uint16(collectives.Epoch(rep.seq, false) % collectives.NoticeSeqMod)}
	return &collectives.NoticeError{Call: c.callName(call), Rank: c.rank, Peer: r, Notice: n}
}
