package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Rendezvous is what a communicator needs from bootstrap: its place in the
// job and a way to exchange small blobs with every rank. bootstrap's
// Bootstrap implements it; tests may use an in-process one.
type Rendezvous interface {
	Rank() int
	Size() int
	Allgather(ctx context.Context, data []byte) ([][]byte, error)
	Barrier(ctx context.Context) error
	Close() error
}

// ErrClosed is returned by calls on a closed communicator.
var ErrClosed = errors.New("communicator closed")

// Comm is a communicator: the ranks of a job, connected.
//
// Its methods are safe for concurrent use, but the order in which collectives
// are called must be the same on every rank; calls from several goroutines
// are ordered by the time they are made.
type Comm struct {
	rank, size int
	id         string // names the communicator in bootstrap keys
	splits     int    // Split calls so far (names the children)
	opts       Options
	rdv        Rendezvous
	dev        transport.Device
	ownDev     bool
	cq         transport.CompletionQueue
	links      []*collectives.Link
	linksOnce  sync.Once
	staging    [][]byte // Alloc'd staging memory, freed on Close
	exec       *collectives.Executor

	queue chan *Request
	stop  chan struct{}
	wg    sync.WaitGroup
	// Ordering of calls: pending counts requests submitted and not yet
	// finished; a blocking call finding it zero runs inline (see submit).
	// runMu is held by whoever runs a request; inline counts inline runs
	// so Close can wait for them.
	pending atomic.Int64
	runMu   sync.Mutex
	inline  sync.WaitGroup

	// life is cancelled (with the cause) by Abort, by the watchdog when a
	// collective outlives Options.Timeout, and when a caller's context ends
	// during its collective; collectives run under it.
	life       context.Context
	lifeCancel context.CancelCauseFunc
	watchdog   *time.Timer
	stallDog   *time.Timer // fires when a running collective sees no completion for StallTimeout

	mu     sync.Mutex // guards closed, err, regs
	closed bool
	err    error
	regs   []registration

	// Owned by the worker goroutine.
	seq     uint32
	plans   map[planKey]planEntry
	scratch [numScratch]scratchBuf
	wide    []byte // registered float32 buffer of half-type reductions

	// Algorithm selection: GOCCL_ALGO's choices, and the α-β cost model's
	// parameters (agreed by all ranks at New).
	algoEnv     map[collKind]string
	choices     map[choiceKey]string
	alpha, beta float64
	gamma       float64 // seconds per byte reduced
	debug       bool
}

// Rank is this process's rank, 0 <= Rank < Size.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Transport names the transport in use ("tcp", "mem", "verbs:rxe0", ...).
func (c *Comm) Transport() string { return c.dev.Name() }

// New builds a communicator over a rendezvous and a transport device: it
// creates an endpoint and staging slots per peer, exchanges their addresses
// through rdv, connects every peer and waits until all ranks are ready.
// The communicator owns rdv (closed by Close); dev is closed by Close only
// if opts.OwnDevice is set.
func New(ctx context.Context, rdv Rendezvous, dev transport.Device, opts Options) (*Comm, error) {
	return newComm(ctx, rdv, dev, opts, "world")
}

// newComm is New with the communicator's id (its prefix in the store).
func newComm(ctx context.Context, rdv Rendezvous, dev transport.Device, opts Options, id string) (*Comm, error) {
	if err := opts.fill(); err != nil {
		rdv.Close()
		if opts.OwnDevice {
			dev.Close()
		}
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", rdv.Rank(), rdv.Size(), err)
	}
	algoEnv, err := parseAlgoEnv(os.Getenv("GOCCL_ALGO"))
	if err != nil {
		rdv.Close()
		if opts.OwnDevice {
			dev.Close()
		}
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", rdv.Rank(), rdv.Size(), err)
	}
	c := &Comm{id: id, rank: rdv.Rank(), size: rdv.Size(), opts: opts, rdv: rdv, dev: dev, ownDev: opts.OwnDevice,
		queue: make(chan *Request, 1024), stop: make(chan struct{}), plans: map[planKey]planEntry{}, debug: debugEnabled(), algoEnv: algoEnv, choices: map[choiceKey]string{}}
	c.life, c.lifeCancel = context.WithCancelCause(context.Background())
	c.watchdog = time.AfterFunc(time.Hour, func() {
		c.lifeCancel(fmt.Errorf("collective exceeded the communicator timeout %v (GOCCL_TIMEOUT)", c.opts.Timeout))
	})
	c.watchdog.Stop()
	c.stallDog = time.AfterFunc(time.Hour, func() {
		c.lifeCancel(fmt.Errorf("no progress for %v (GOCCL_STALL_TIMEOUT): a peer or link stopped without an error", c.opts.StallTimeout))
	})
	c.stallDog.Stop()
	if err := c.connect(ctx); err != nil {
		c.teardown()
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", c.rank, c.size, err)
	}
	c.wg.Add(1)
	go c.worker()
	if err := c.tune(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("comm: init rank %d of %d: measuring the transport: %w", c.rank, c.size, err)
	}
	return c, nil
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

func (c *Comm) connect(ctx context.Context) error {
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
	var blob []byte
	for peer := range c.size {
		if peer == c.rank {
			blob = appendBlob(blob, nil, transport.RemoteRegion{})
			continue
		}
		ep, err := c.dev.NewEndpoint(cq)
		if err != nil {
			return fmt.Errorf("endpoint for rank %d: %w", peer, err)
		}
		eps[peer] = ep
		mem, err := transport.Alloc(collectives.StagingSize(n, slot))
		if err != nil {
			return err
		}
		c.staging = append(c.staging, mem)
		r, err := c.dev.Register(mem, transport.AccessLocalWrite|transport.AccessRemoteWrite)
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
				errs[peer] = fmt.Errorf("connect rank %d -> %d: %w", c.rank, peer, err)
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
		OnProgress: func() { c.stallDog.Reset(c.opts.StallTimeout) }}
	if in, ok := c.dev.(transport.Inliner); ok {
		c.exec.Inline = in.MaxInline()
	}
	if err := c.rdv.Barrier(ctx); err != nil {
		return fmt.Errorf("barrier after connect: %w", err)
	}
	return nil
}

// waitSpinner is implemented by devices whose completion queues poll their
// sources in Wait, spinning before they sleep (transport/tcp): the executor
// then calls Wait at once instead of spinning on Poll, whose polls the
// device could not tell from a caller that went away.
type waitSpinner interface{ WaitSpins() bool }

// Close ends the communicator: it waits for queued collectives to finish (or
// fail), then releases endpoints, registrations and the rendezvous. Close
// does not synchronise with other ranks; a rank that closes while peers still
// run collectives with it makes those collectives fail on the peers.
func (c *Comm) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.wg.Wait()
	c.inline.Wait()
	// Sends the transport copied at post time may still be on their way:
	// let them reach the peers before the connections close.
	var drainErr error
	if c.exec != nil && c.exec.Err() == nil && c.life.Err() == nil {
		ctx, cancel := context.WithTimeout(c.life, 10*time.Second)
		drainErr = c.exec.Drain(ctx)
		cancel()
	}
	c.lifeCancel(ErrClosed)
	return errors.Join(drainErr, c.teardown())
}

// Abort fails every pending and later collective with cause (ErrAborted if
// nil) and tears the communicator down without waiting for anything. It may
// be called from any goroutine, also while collectives are running.
func (c *Comm) Abort(cause error) {
	if cause == nil {
		cause = ErrAborted
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("comm: rank %d aborted: %w", c.rank, cause)
	}
	c.mu.Unlock()
	// Cancelling the life context wakes the executor, which fails the
	// running collective; Close below tears down the rest.
	c.lifeCancel(cause)
	c.Close()
}

// ErrAborted is the cause of collectives failed by Abort(nil).
var ErrAborted = errors.New("communicator aborted")

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

func (c *Comm) teardown() error {
	errs := []error{c.breakLinks()}
	for _, l := range c.links {
		if l != nil {
			errs = append(errs, c.dev.Deregister(l.Staging))
		}
	}
	c.mu.Lock()
	for _, r := range c.regs {
		errs = append(errs, c.dev.Deregister(r.region))
		if r.owned {
			errs = append(errs, transport.Free(r.mem))
		}
	}
	c.regs = nil
	c.mu.Unlock()
	for i := range c.scratch {
		if sb := &c.scratch[i]; sb.region != nil {
			errs = append(errs, c.dev.Deregister(sb.region), transport.Free(sb.mem))
			*sb = scratchBuf{}
		}
	}
	if c.cq != nil {
		c.cq.Close()
	}
	for _, m := range c.staging {
		errs = append(errs, transport.Free(m))
	}
	c.staging = nil
	if c.rdv != nil {
		errs = append(errs, c.rdv.Close())
	}
	if c.ownDev {
		errs = append(errs, c.dev.Close())
	}
	return errors.Join(errs...)
}

// Options tune a communicator. The zero value is the default.
type Options struct {
	// ChunkSize is the pipelining unit and staging slot size in bytes
	// (default 512 KiB, env GOCCL_CHUNK_SIZE).
	ChunkSize int
	// Slots is the number of staging slots per peer: chunks in flight per
	// link (default 8, env GOCCL_SLOTS).
	Slots int
	// Timeout bounds every collective that is not given a context deadline
	// (default 10 minutes, env GOCCL_TIMEOUT).
	Timeout time.Duration
	// StallTimeout fails a collective that sees no completion at all for
	// this long (default 60 s, env GOCCL_STALL_TIMEOUT): the liveness check
	// that holds whatever the transport, for a peer or link that stops
	// without an error (a stalled process, a black-holed path).
	StallTimeout time.Duration
	// SpinPolls is how many empty polls precede a blocking wait (default 64,
	// env GOCCL_SPIN_POLLS). Transports whose Wait spins itself (TCP: see
	// tcp.Options.SpinTime) ignore it.
	SpinPolls int
	// OwnDevice makes Close close the transport device.
	OwnDevice bool
	// Alpha (seconds per message step) and Beta (seconds per byte) set the
	// algorithm selector's cost model. Zero: measured at New on the
	// transport in use.
	Alpha, Beta float64
}

func (o *Options) fill() error {
	var err error
	if o.ChunkSize <= 0 {
		if o.ChunkSize, err = envInt("GOCCL_CHUNK_SIZE", 512<<10); err != nil {
			return err
		}
	}
	o.ChunkSize = max(64, o.ChunkSize&^63) // a multiple of every element size
	if o.Slots <= 0 {
		if o.Slots, err = envInt("GOCCL_SLOTS", 8); err != nil {
			return err
		}
	}
	o.Slots = min(o.Slots, 1<<15)
	if o.Timeout <= 0 {
		if o.Timeout, err = envDuration("GOCCL_TIMEOUT", 10*time.Minute); err != nil {
			return err
		}
	}
	if o.StallTimeout <= 0 {
		if o.StallTimeout, err = envDuration("GOCCL_STALL_TIMEOUT", time.Minute); err != nil {
			return err
		}
	}
	if o.SpinPolls <= 0 {
		if o.SpinPolls, err = envInt("GOCCL_SPIN_POLLS", 64); err != nil {
			return err
		}
	}
	return nil
}
