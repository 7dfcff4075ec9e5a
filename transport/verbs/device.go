package verbs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// Config chooses and tunes a device. The zero value is usable: the first
// device with an active port, the default GID, default queue depth, no
// logging.
type Config struct {
	// HCA selects devices and ports (comm: GOCCL_IB_HCA) with NCCL's
	// NCCL_IB_HCA syntax: a comma-separated list of name[:port] entries that match
	// device names by prefix ("mlx5" matches mlx5_0 and mlx5_1); a leading
	// "=" makes the match exact, a leading "^" turns the list into an
	// exclusion list ("^mlx5_1", "^=rxe0"). Empty selects every device.
	HCA string
	// GIDIndex forces the GID table index (comm: GOCCL_IB_GID_INDEX). Negative
	// selects automatically: on RoCE the RoCE v2 GID of an IPv4 address
	// (::ffff:a.b.c.d), else the first RoCE v2 GID, else the first RoCE v1
	// GID; on InfiniBand index 0.
	GIDIndex int
	// QueueDepth is the number of send and of receive requests that may be
	// in flight on one endpoint (at most the device's limit): beyond it a
	// post is refused with ErrQueueFull, as beyond the completion queue's
	// depth. Zero sizes each endpoint's queues to its completion queue's
	// depth (or the device's max_qp_wr if smaller), the only bound the
	// contract sets.
	QueueDepth int
	// Spin is how long a completion queue's Wait busy-polls before it
	// sleeps on the completion channel: zero means 20us, negative none
	// (for more ranks than cores on a host, where a spinning rank takes
	// the core its peer needs).
	Spin time.Duration
	// Logger, if set, receives debug lines (slog.LevelDebug): one per
	// device opened and per connection (device, port, GID, queue pair
	// numbers, path MTU), and the errors of the device's control queue
	// pairs, completion channel and completion queues. Nil: no logging.
	// (comm passes its logger: the lines show with GOCCL_DEBUG.)
	Logger *slog.Logger
}

// Device is a verbs device: one opened adapter port with its protection
// domain. It implements transport.Device and is safe for concurrent use.
type Device struct {
	log   *slog.Logger // nil: none
	ctx   ibv.Context
	pd    ibv.PD
	name  string
	port  int
	pattr ibv.PortAttr
	dattr ibv.DeviceAttr
	gid   ibv.GIDEntry
	depth int
	rdAtm int
	spin  time.Duration

	ctl *ctlPlane

	mu     sync.Mutex
	closed bool
	regs   map[regKey]*mrEntry
	nreg   int // ibv_reg_mr calls, for tests of the registration cache
	cqs    map[*cq]struct{}
	eps    map[*endpoint]struct{}
}

var _ transport.Device = (*Device)(nil)

// OpenConfig opens the first device and port that cfg selects whose port is
// ACTIVE. Without one the error wraps transport.ErrNotSupported and says
// what was found.
func OpenConfig(cfg Config) (*Device, error) {
	lib, err := ibv.Open()
	if err != nil {
		return nil, fmt.Errorf("verbs: %w", err)
	}
	return openLib(lib, cfg)
}

// openLib is OpenConfig on a given verbs library (the real one, or the
// tests' in-memory fabric).
func openLib(lib ibv.Lib, cfg Config) (*Device, error) {
	filter, err := parseHCA(cfg.HCA)
	if err != nil {
		return nil, err
	}
	names, err := lib.DeviceNames()
	if errors.Is(err, syscall.ENOSYS) {
		// libibverbs says so when the kernel has no RDMA subsystem
		// (no /sys/class/infiniband): no driver, no device, ever.
		return nil, fmt.Errorf("verbs: no RDMA device: this kernel has no RDMA support (%w); use the tcp or shm transport: %w", err, transport.ErrNotSupported)
	}
	if err != nil {
		return nil, fmt.Errorf("verbs: no RDMA device: %w: %w", err, transport.ErrNotSupported)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("verbs: no RDMA device (ibv_get_device_list is empty; is a driver such as rdma_rxe loaded and a link added?): %w", transport.ErrNotSupported)
	}
	var reasons []string
	for _, name := range names {
		if !filter.device(name) {
			reasons = append(reasons, name+": excluded by GOCCL_IB_HCA="+cfg.HCA)
			continue
		}
		d, why := tryOpen(lib, name, filter, cfg)
		if d != nil {
			return d, nil
		}
		reasons = append(reasons, why)
	}
	return nil, fmt.Errorf("verbs: no usable RDMA device: %s: %w", strings.Join(reasons, "; "), transport.ErrNotSupported)
}

// tryOpen opens name and returns a device on its first selected ACTIVE
// port, or why there is none.
func tryOpen(lib ibv.Lib, name string, filter hcaFilter, cfg Config) (*Device, string) {
	ctx, err := lib.Open(name)
	if err != nil {
		return nil, err.Error()
	}
	dattr, err := ctx.QueryDevice()
	if err != nil {
		ctx.Close()
		return nil, err.Error()
	}
	var why []string
	for port := 1; port <= dattr.PhysPortCnt; port++ {
		if !filter.port(name, port) {
			continue
		}
		pattr, err := ctx.QueryPort(port)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		if pattr.State != ibv.PortActive {
			why = append(why, fmt.Sprintf("%s:%d: port state %d, not ACTIVE", name, port, pattr.State))
			continue
		}
		gid, err := chooseGID(ctx, port, pattr, cfg.GIDIndex)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		d, err := newDevice(ctx, name, port, dattr, pattr, gid, cfg)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		return d, ""
	}
	ctx.Close()
	if len(why) == 0 {
		why = append(why, name+": no port selected")
	}
	return nil, strings.Join(why, "; ")
}

func newDevice(ctx ibv.Context, name string, port int, dattr ibv.DeviceAttr, pattr ibv.PortAttr, gid ibv.GIDEntry, cfg Config) (*Device, error) {
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d := &Device{
		log:   cfg.Logger,
		ctx:   ctx,
		pd:    pd,
		name:  name,
		port:  port,
		pattr: pattr,
		dattr: dattr,
		gid:   gid,
		depth: cfg.QueueDepth,
		regs:  make(map[regKey]*mrEntry),
		cqs:   make(map[*cq]struct{}),
		eps:   make(map[*endpoint]struct{}),
	}
	if d.depth < 0 {
		d.depth = 0
	}
	switch {
	case cfg.Spin == 0:
		d.spin = defaultSpin
	case cfg.Spin > 0:
		d.spin = cfg.Spin
	}
	if dattr.MaxQPWR > 0 && d.depth > dattr.MaxQPWR {
		d.depth = dattr.MaxQPWR
	}
	d.rdAtm = min(max(dattr.MaxQPRdAtom, 1), 16)
	if d.ctl, err = newCtlPlane(d); err != nil {
		pd.Close()
		return nil, fmt.Errorf("%s: control queue: %w", name, err)
	}
	d.logf("verbs: opened %s port %d: link layer %d, active MTU %d, GID[%d] %s (%s), LID %d",
		name, port, pattr.LinkLayer, pattr.ActiveMTU, gid.Index, gid.GID, gid.Type, pattr.LID)
	return d, nil
}

// logf logs a debug line, if the device has a logger that takes them.
func (d *Device) logf(format string, args ...any) {
	if d.log != nil && d.log.Enabled(context.Background(), slog.LevelDebug) {
		d.log.Debug(fmt.Sprintf(format, args...))
	}
}

// Name is "verbs:<device>", e.g. "verbs:rxe0".
func (d *Device) Name() string { return "verbs:" + d.name }

// ConnectsAlone reports that an endpoint's Connect does not wait for the
// peer's Connect (see Endpoint.Connect): comm runs a Send to a peer not
// connected yet ahead of a waiting Recv only over such a device.
func (d *Device) ConnectsAlone() bool { return true }

// Port is the port number in use.
func (d *Device) Port() int { return d.port }

// GID is the GID table entry in use.
func (d *Device) GID() (index int, gid string, typ string) {
	return d.gid.Index, d.gid.GID.String(), d.gid.Type.String()
}

// ActiveMTU is the port's active MTU in bytes.
func (d *Device) ActiveMTU() int { return d.pattr.ActiveMTU }

// Close closes every endpoint and completion queue of the device, revokes
// every registration and releases the adapter. Pending requests complete
// with errors wrapping ErrClosed on queues that are still open at that point
// (queues are closed after endpoints); the peers see ErrPeerClosed.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	eps := make([]*endpoint, 0, len(d.eps))
	for ep := range d.eps {
		eps = append(eps, ep)
	}
	d.mu.Unlock()

	closeEndpoints(eps)

	d.mu.Lock()
	cqs := make([]*cq, 0, len(d.cqs))
	for q := range d.cqs {
		cqs = append(cqs, q)
	}
	regs := d.regs
	d.regs = map[regKey]*mrEntry{}
	d.mu.Unlock()

	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, q := range cqs {
		keep(q.Close())
	}
	keep(d.ctl.close())
	for _, e := range regs {
		keep(e.release())
	}
	keep(d.pd.Close())
	keep(d.ctx.Close())
	if first != nil {
		return fmt.Errorf("verbs: close %s: %w", d.name, first)
	}
	return nil
}

// closeEndpoints closes endpoints concurrently: each Close may wait a
// bounded time for its goodbye to reach the peer.
func closeEndpoints(eps []*endpoint) {
	var wg sync.WaitGroup
	for _, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep.Close()
		}()
	}
	wg.Wait()
}

// NewCompletionQueue creates a completion queue of depth completions (see
// transport.CompletionQueue): at most depth requests may be posted on its
// endpoints and not yet taken out, beyond which a post is refused with
// ErrQueueFull. A depth beyond the device's max_cqe is refused with
// ErrNotSupported.
func (d *Device) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("verbs: new completion queue: depth %d: %w", depth, transport.ErrInvalid)
	}
	if d.dattr.MaxCQE > 0 && depth > d.dattr.MaxCQE {
		return nil, fmt.Errorf("verbs: new completion queue of depth %d: %s holds at most %d completions per queue (max_cqe): %w",
			depth, d.name, d.dattr.MaxCQE, transport.ErrNotSupported)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("verbs: new completion queue: %s: %w", d.name, transport.ErrClosed)
	}
	q, err := newCQ(d, depth)
	if err != nil {
		return nil, fmt.Errorf("verbs: new completion queue on %s: %w", d.name, err)
	}
	d.cqs[q] = struct{}{}
	return q, nil
}

func (d *Device) forgetCQ(q *cq) {
	d.mu.Lock()
	delete(d.cqs, q)
	d.mu.Unlock()
}

func (d *Device) forgetEndpoint(ep *endpoint) {
	d.mu.Lock()
	delete(d.eps, ep)
	d.mu.Unlock()
}
