// Package ibvfake is an in-memory RDMA fabric that implements package ibv's
// interfaces (Lib, Context, PD, MR, CQ, QP) in Go, so that the verbs
// transport's endpoint, completion-queue and control-plane logic is tested
// by the ordinary `go test` on any machine, with or without cgo, as
// google/gousb tests its logic against a fake libusb.
//
// The fake follows RC semantics closely enough that the transport cannot
// tell it from an adapter, and strictly enough that it catches what an
// adapter would punish:
//
//   - Queue pairs move RESET -> INIT -> RTR -> RTS; posting sends before RTS
//     fails (EINVAL), posting beyond the queue pair's capacity fails
//     (ENOMEM), an inline send longer than granted fails (EINVAL). A queue
//     pair in the error state completes everything posted with
//     IBV_WC_WR_FLUSH_ERR.
//   - Work requests execute in order per queue pair when they are posted
//     (or when Release ends a Hold): a send or write-with-immediate waits
//     for the peer's receive (RNR, retried forever as with rnr_retry 7);
//     a peer queue pair that is gone or in the error state, a wrong
//     destination GID or a PSN that does not match fails the request with
//     IBV_WC_RETRY_EXC_ERR.
//   - Keys, bounds and rights are checked as an adapter does: a local sge
//     outside the memory region its lkey names fails with
//     IBV_WC_LOC_PROT_ERR; a remote access with a wrong key, out of bounds
//     or without the region's (and the target queue pair's) right fails the
//     initiator with IBV_WC_REM_ACCESS_ERR and moves the target queue pair
//     to the error state, flushing its receives (a refused
//     write-with-immediate completes the receive it consumed with the
//     responder's status, as rxe does); a message longer than the receive
//     fails both sides (IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR).
//     Zero-length accesses check no key.
//   - A completion queue holds exactly the depth it was created with; one
//     more completion is an overrun: the queue fails every later Poll and
//     the fabric counts it (Overruns), so a test notices.
//   - Completion channels are real non-blocking pipes: armed queues signal
//     the next completion, ConsumeEvent acknowledges and re-arms.
//   - Destroying a protection domain with live regions or queue pairs, or a
//     completion queue with live queue pairs, fails with EBUSY, so a test
//     notices a leak.
//
// Memory is addressed as the transport addresses it: by virtual address.
// The fake reads and writes only memory inside a registered region, which
// the transport keeps pinned while registered.
//
// Failure injection: Hold and Release delay execution (requests stay in
// flight), Device.Kill makes a device vanish as when its process dies,
// DeviceConfig.CQShortfall makes a device create completion queues smaller
// than asked (a driver bug), Fabric.FailNext makes the next call of a verb
// fail with a given errno.
package ibvfake

import (
	"fmt"
	"slices"
	"sync"
	"syscall"

	"github.com/goccl/goccl/transport/verbs/internal/ibv"
)

// DeviceConfig describes a fake adapter with one port. Zero fields take the
// defaults noted (those of rxe).
type DeviceConfig struct {
	Name      string
	PortState int // default ibv.PortActive
	LinkLayer int // default ibv.LinkLayerEthernet
	ActiveMTU int // bytes, default 1024
	// GIDs is the port's GID table; default: a link-local RoCE v2 GID at
	// index 0 and the RoCE v2 GID of ::ffff:10.0.0.<n> at index 1.
	GIDs        []ibv.GIDEntry
	LID         uint16
	MaxCQE      int // default 32767
	MaxQPWR     int // default 16384
	MaxInline   int // default 256, at most 1024
	MaxQPRdAtom int // default 128
	// CQShortfall makes every completion queue this many entries smaller
	// than asked: a device that lies about its depth.
	CQShortfall int
}

// Fabric is a set of fake adapters that reach each other. It implements
// ibv.Lib. It is safe for concurrent use.
type Fabric struct {
	mu       sync.Mutex
	devices  []*Device
	qps      map[uint32]*qp // live queue pairs, by number
	mrs      map[uint32]*mr // live memory regions, by key (lkey == rkey)
	nextQPN  uint32
	nextKey  uint32
	held     bool
	overruns int
	fail     map[string]syscall.Errno
}

var _ ibv.Lib = (*Fabric)(nil)

// New returns an empty fabric.
func New() *Fabric {
	return &Fabric{qps: map[uint32]*qp{}, mrs: map[uint32]*mr{}, nextQPN: 0x11, nextKey: 0x1000, fail: map[string]syscall.Errno{}}
}

// Device is a fake adapter.
type Device struct {
	f    *Fabric
	cfg  DeviceConfig
	dead bool
}

// AddDevice adds an adapter (cfg's zero fields take their defaults).
func (f *Fabric) AddDevice(cfg DeviceConfig) *Device {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.devices) + 1
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("fake%d", n-1)
	}
	if cfg.PortState == 0 {
		cfg.PortState = ibv.PortActive
	}
	if cfg.LinkLayer == 0 {
		cfg.LinkLayer = ibv.LinkLayerEthernet
	}
	if cfg.ActiveMTU == 0 {
		cfg.ActiveMTU = 1024
	}
	if cfg.GIDs == nil {
		ll := ibv.GID{0xfe, 0x80, 14: byte(n >> 8), 15: byte(n)}
		v4 := ibv.GID{10: 0xff, 11: 0xff, 12: 10, 15: byte(n)}
		cfg.GIDs = []ibv.GIDEntry{{Index: 0, GID: ll, Type: ibv.GIDTypeRoCEv2}, {Index: 1, GID: v4, Type: ibv.GIDTypeRoCEv2}}
	}
	if cfg.MaxCQE == 0 {
		cfg.MaxCQE = 32767
	}
	if cfg.MaxQPWR == 0 {
		cfg.MaxQPWR = 16384
	}
	if cfg.MaxInline == 0 {
		cfg.MaxInline = 256
	}
	cfg.MaxInline = min(cfg.MaxInline, maxInline)
	if cfg.MaxQPRdAtom == 0 {
		cfg.MaxQPRdAtom = 128
	}
	d := &Device{f: f, cfg: cfg}
	f.devices = append(f.devices, d)
	return d
}

// Name is the device's name.
func (d *Device) Name() string { return d.cfg.Name }

// Kill makes the device vanish as when the process using it dies: its
// queue pairs are destroyed without a word to their peers, whose requests
// then fail with IBV_WC_RETRY_EXC_ERR, and its memory regions are gone.
// The device's objects refuse every later call with ENODEV.
func (d *Device) Kill() {
	f := d.f
	f.mu.Lock()
	defer f.mu.Unlock()
	d.dead = true
	for n, q := range f.qps {
		if q.pd.ctx.dev == d {
			delete(f.qps, n)
			q.destroyed = true
		}
	}
	for k, m := range f.mrs {
		if m.pd.ctx.dev == d {
			delete(f.mrs, k)
		}
	}
	f.pumpLocked()
}

// Hold stops executing work requests: they stay in flight until Release.
func (f *Fabric) Hold() {
	f.mu.Lock()
	f.held = true
	f.mu.Unlock()
}

// Release executes what Hold kept in flight and what is posted from now on.
func (f *Fabric) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = false
	f.pumpLocked()
}

// Overruns counts completions that did not fit their completion queue.
func (f *Fabric) Overruns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.overruns
}

// FailNext makes the next call of verb fail with errno. Verbs: "DeviceNames",
// "Open", "AllocPD", "NewCQ", "RegMR", "NewQP", "PostSend", "PostRecv".
func (f *Fabric) FailNext(verb string, errno syscall.Errno) {
	f.mu.Lock()
	f.fail[verb] = errno
	f.mu.Unlock()
}

// injected returns the error FailNext set for verb, once. f.mu is held.
func (f *Fabric) injected(verb string) error {
	if e, ok := f.fail[verb]; ok {
		delete(f.fail, verb)
		return fmt.Errorf("%s (injected): %w", verb, e)
	}
	return nil
}

// LiveQPs counts the queue pairs not destroyed, for leak checks.
func (f *Fabric) LiveQPs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.qps)
}

// LiveMRs counts the memory regions not deregistered, for leak checks.
func (f *Fabric) LiveMRs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.mrs)
}

// DeviceNames lists the live devices (ibv_get_device_list).
func (f *Fabric) DeviceNames() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.injected("DeviceNames"); err != nil {
		return nil, err
	}
	var names []string
	for _, d := range f.devices {
		if !d.dead {
			names = append(names, d.cfg.Name)
		}
	}
	return names, nil
}

// Open opens a device by name (ibv_open_device).
func (f *Fabric) Open(name string) (ibv.Context, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.injected("Open"); err != nil {
		return nil, err
	}
	for _, d := range f.devices {
		if d.cfg.Name == name && !d.dead {
			return &context{dev: d}, nil
		}
	}
	return nil, fmt.Errorf("ibv_open_device %s: %w", name, syscall.ENODEV)
}

// context is an opened device.
type context struct {
	dev    *Device
	closed bool
}

func (c *context) f() *Fabric { return c.dev.f }

// checkLocked fails the calls of a closed context or a dead device.
func (c *context) checkLocked(call string) error {
	if c.closed || c.dev.dead {
		return fmt.Errorf("%s on %s: %w", call, c.dev.cfg.Name, syscall.ENODEV)
	}
	return nil
}

func (c *context) Name() string { return c.dev.cfg.Name }

func (c *context) QueryDevice() (ibv.DeviceAttr, error) {
	c.f().mu.Lock()
	defer c.f().mu.Unlock()
	if err := c.checkLocked("ibv_query_device"); err != nil {
		return ibv.DeviceAttr{}, err
	}
	cfg := c.dev.cfg
	return ibv.DeviceAttr{PhysPortCnt: 1, MaxQPWR: cfg.MaxQPWR, MaxCQE: cfg.MaxCQE, MaxSGE: 1,
		MaxQPRdAtom: cfg.MaxQPRdAtom, MaxMRSize: 1 << 40}, nil
}

func (c *context) QueryPort(port int) (ibv.PortAttr, error) {
	c.f().mu.Lock()
	defer c.f().mu.Unlock()
	if err := c.checkLocked("ibv_query_port"); err != nil {
		return ibv.PortAttr{}, err
	}
	if port != 1 {
		return ibv.PortAttr{}, fmt.Errorf("ibv_query_port %s:%d: %w", c.dev.cfg.Name, port, syscall.EINVAL)
	}
	cfg := c.dev.cfg
	return ibv.PortAttr{State: cfg.PortState, MaxMTU: 4096, ActiveMTU: cfg.ActiveMTU, LID: cfg.LID,
		LinkLayer: cfg.LinkLayer, GIDTableLen: len(cfg.GIDs)}, nil
}

func (c *context) QueryGID(port, index int) (ibv.GIDEntry, error) {
	c.f().mu.Lock()
	defer c.f().mu.Unlock()
	if err := c.checkLocked("ibv_query_gid"); err != nil {
		return ibv.GIDEntry{}, err
	}
	i := slices.IndexFunc(c.dev.cfg.GIDs, func(e ibv.GIDEntry) bool { return e.Index == index })
	if port != 1 || i < 0 {
		return ibv.GIDEntry{}, fmt.Errorf("ibv_query_gid %s:%d[%d]: %w", c.dev.cfg.Name, port, index, syscall.EINVAL)
	}
	return c.dev.cfg.GIDs[i], nil
}

func (c *context) AllocPD() (ibv.PD, error) {
	c.f().mu.Lock()
	defer c.f().mu.Unlock()
	if err := c.checkLocked("ibv_alloc_pd"); err != nil {
		return nil, err
	}
	if err := c.f().injected("AllocPD"); err != nil {
		return nil, err
	}
	return &pd{ctx: c}, nil
}

func (c *context) Close() error {
	c.f().mu.Lock()
	defer c.f().mu.Unlock()
	c.closed = true
	return nil
}

// hasGID reports whether the device's GID table holds g.
func (d *Device) hasGID(g ibv.GID) bool {
	return slices.ContainsFunc(d.cfg.GIDs, func(e ibv.GIDEntry) bool { return e.GID == g })
}

// pd is a protection domain.
type pd struct {
	ctx    *context
	mrs    int
	qps    int
	closed bool
}

func (p *pd) f() *Fabric { return p.ctx.dev.f }

func (p *pd) Close() error {
	p.f().mu.Lock()
	defer p.f().mu.Unlock()
	if p.mrs > 0 || p.qps > 0 {
		return fmt.Errorf("ibv_dealloc_pd: %d memory regions and %d queue pairs still use it: %w", p.mrs, p.qps, syscall.EBUSY)
	}
	p.closed = true
	return nil
}

// mr is a memory region; its lkey and rkey are the same number.
type mr struct {
	pd     *pd
	key    uint32
	addr   uintptr
	n      int
	access ibv.Access
	dead   bool
}

func (p *pd) RegMR(addr uintptr, n int, access ibv.Access) (ibv.MR, error) {
	f := p.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := p.ctx.checkLocked("ibv_reg_mr"); err != nil {
		return nil, err
	}
	if err := f.injected("RegMR"); err != nil {
		return nil, err
	}
	if p.closed || n <= 0 || addr == 0 {
		return nil, fmt.Errorf("ibv_reg_mr(%d bytes): %w", n, syscall.EINVAL)
	}
	if access&ibv.AccessRemoteWrite != 0 && access&ibv.AccessLocalWrite == 0 {
		// Verbs requires local write with remote write.
		return nil, fmt.Errorf("ibv_reg_mr: remote write without local write: %w", syscall.EINVAL)
	}
	f.nextKey += 0x101
	m := &mr{pd: p, key: f.nextKey, addr: addr, n: n, access: access}
	f.mrs[m.key] = m
	p.mrs++
	return m, nil
}

func (m *mr) LKey() uint32 { return m.key }
func (m *mr) RKey() uint32 { return m.key }

func (m *mr) Dereg() error {
	f := m.pd.f()
	f.mu.Lock()
	defer f.mu.Unlock()
	if m.dead {
		return fmt.Errorf("ibv_dereg_mr: %w", syscall.EINVAL)
	}
	m.dead = true
	m.pd.mrs--
	if f.mrs[m.key] == m {
		delete(f.mrs, m.key)
	}
	return nil
}
