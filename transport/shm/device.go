package shm

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

// Options configures a Device. The zero value is usable.
type Options struct {
	// DisableCMA turns off cross-memory attach (process_vm_readv and
	// process_vm_writev): a peer's write or read of memory that is not in a
	// shared mapping (not from Alloc) then goes through the ring, one extra
	// copy, instead of one copy by the kernel. CMA is also off, per
	// connection, when the kernel refuses it (Yama ptrace_scope, a container
	// without CAP_SYS_PTRACE); Connect detects that.
	DisableCMA bool
	// RingSize is the size in bytes of each direction's ring of records
	// (messages, immediates, staged data); a power of two, at least 64 KiB.
	// Default 1 MiB.
	RingSize int
	// MaxRegions bounds the live registrations of the device; a power of
	// two, at most 65536. Default 4096.
	MaxRegions int
	// MaxCompletionQueues bounds the live completion queues of the device.
	// Default 64.
	MaxCompletionQueues int
	// Spin is how long CompletionQueue.Wait polls before it starts to
	// yield the CPU. Default 20 µs; negative: none.
	Spin time.Duration
	// Yield is how long Wait then polls with a sched_yield between polls
	// (staying runnable, as Open MPI does when oversubscribed), before it
	// sleeps on a futex until a peer rings it. Default 1 ms; negative:
	// none. Shorten both where the ranks of a host outnumber its cores
	// and waits are long (computation between collectives).
	Yield time.Duration
	// HandshakeTimeout bounds each step of a connection's handshake once
	// both sides are talking. Default 5 s.
	HandshakeTimeout time.Duration
	// RevokeTimeout bounds how long Deregister and Close wait for a live
	// peer to finish a copy into or out of this device's memory. A peer
	// that overruns it is cut off (its connection fails with ErrLink).
	// Default 10 s.
	RevokeTimeout time.Duration
	// Logger receives warnings about refused connections and copies that
	// fall back to another way. Default slog.Default().
	Logger *slog.Logger

	// noSelf makes endpoints whose peer lives in this process map the
	// peer's segments as another process would (tests).
	noSelf bool
	// token, if set, is the device's token instead of a random one
	// (tests: it decides which side dials).
	token *[16]byte
}

func (o *Options) withDefaults() (Options, error) {
	v := *o
	if v.RingSize == 0 {
		v.RingSize = 1 << 20
	}
	if v.RingSize < 64<<10 || v.RingSize > 1<<30 || v.RingSize&(v.RingSize-1) != 0 {
		return v, fmt.Errorf("shm: ring size %d: want a power of two from 64 KiB to 1 GiB: %w", v.RingSize, transport.ErrInvalid)
	}
	if v.MaxRegions == 0 {
		v.MaxRegions = 4096
	}
	if v.MaxRegions < 1 || v.MaxRegions > maxSlots || v.MaxRegions&(v.MaxRegions-1) != 0 {
		return v, fmt.Errorf("shm: max regions %d: want a power of two up to %d: %w", v.MaxRegions, maxSlots, transport.ErrInvalid)
	}
	if v.MaxCompletionQueues == 0 {
		v.MaxCompletionQueues = 64
	}
	if v.MaxCompletionQueues < 1 || v.MaxCompletionQueues > maxBells {
		return v, fmt.Errorf("shm: max completion queues %d: want 1 to %d: %w", v.MaxCompletionQueues, maxBells, transport.ErrInvalid)
	}
	if v.Spin == 0 {
		v.Spin = 20 * time.Microsecond
	}
	if v.Yield == 0 {
		v.Yield = time.Millisecond
	}
	if v.HandshakeTimeout <= 0 {
		v.HandshakeTimeout = 5 * time.Second
	}
	if v.RevokeTimeout <= 0 {
		v.RevokeTimeout = 10 * time.Second
	}
	if v.Logger == nil {
		v.Logger = slog.Default()
	}
	return v, nil
}

const (
	maxSlots = 1 << 16 // a key's low 16 bits name its slot
	maxBells = 4096
)

// maxChunk is the largest payload of one record: a message or a staged
// transfer longer than that goes as several records.
func (d *Device) maxChunk() int { return d.opts.RingSize / 16 }

// Device is a shared-memory transport instance of a process: a control
// segment (bells and the region table, mapped by every peer), a listening
// abstract Unix socket, the registrations, completion queues and
// endpoints. It is safe for concurrent use.
type Device struct {
	opts  Options
	pid   int
	uid   int
	host  [16]byte
	token [16]byte
	ln    *net.UnixListener

	ctlFD int
	ctl   []byte // the whole control segment
	bells []byte // part 1
	table []byte // part 2

	regMu   sync.Mutex
	slots   []atomic.Pointer[region] // by slot; read without regMu
	free    []int                    // free slots, a stack
	exports map[uint64]*export       // by segment id

	mu     sync.Mutex
	closed bool
	eps    map[[16]byte]*endpoint // every open endpoint, by token
	conns  []*endpoint            // connected endpoints, whose peers may touch our regions
	cqs    []*cq                  // by bell index; nil where free

	wg sync.WaitGroup // accept loop and handshakes
}

var _ transport.Device = (*Device)(nil)

// export is an Alloc segment that peers of the device may map: it holds
// a region of the device.
type export struct {
	seg  *segment
	refs int
}

// devices holds every open device of the process by token, so that an
// endpoint whose peer is in the same process copies into the peer's
// registered memory directly.
var devices sync.Map // [16]byte -> *Device

// NewDevice creates a device: its control segment and its listening
// socket (an abstract Unix socket: nothing in the file system, gone when
// the process is). It does not block.
func NewDevice(opts Options) (*Device, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	host, err := hostHash()
	if err != nil {
		return nil, err
	}
	d := &Device{opts: o, pid: os.Getpid(), uid: os.Getuid(), host: host,
		exports: map[uint64]*export{}, eps: map[[16]byte]*endpoint{},
		cqs: make([]*cq, o.MaxCompletionQueues)}
	if _, err := rand.Read(d.token[:]); err != nil {
		return nil, fmt.Errorf("shm: new device: random token: %w", err)
	}
	if o.token != nil {
		d.token = *o.token
	}
	size := ctlSize(o.MaxCompletionQueues, o.MaxRegions)
	if d.ctlFD, err = newMemfd("goccl-shm-ctl", size); err != nil {
		return nil, fmt.Errorf("shm: new device: control segment: %w", err)
	}
	if d.ctl, err = unix.Mmap(d.ctlFD, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		unix.Close(d.ctlFD)
		return nil, fmt.Errorf("shm: new device: map control segment: %w", err)
	}
	part1 := ctlBellsEnd(o.MaxCompletionQueues)
	d.bells, d.table = d.ctl[:part1], d.ctl[part1:]
	writeMagic(d.ctl, ctlMagic)
	putHeader32(d.ctl, ctlPid, uint32(d.pid))
	putHeader32(d.ctl, ctlMaxCQs, uint32(o.MaxCompletionQueues))
	putHeader32(d.ctl, ctlSlots, uint32(o.MaxRegions))
	d.slots = make([]atomic.Pointer[region], o.MaxRegions)
	d.free = make([]int, o.MaxRegions)
	for i := range d.free {
		d.free[i] = o.MaxRegions - 1 - i
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: socketName(d.token), Net: "unixpacket"})
	if err != nil {
		unix.Munmap(d.ctl)
		unix.Close(d.ctlFD)
		return nil, fmt.Errorf("shm: new device: listen: %w: %w", err, transport.ErrNotSupported)
	}
	d.ln = ln
	devices.Store(d.token, d)
	d.wg.Add(1)
	go d.acceptLoop()
	return d, nil
}

// Alloc is the package's Alloc: memory whose regions the device's peers
// map. It lets a caller that holds a transport.Device ask it for memory by
// an interface (Alloc(int) ([]byte, error) and Free([]byte) error).
func (d *Device) Alloc(n int) ([]byte, error) { return Alloc(n) }

// Free is the package's Free.
func (d *Device) Free(b []byte) error { return Free(b) }

// Name returns "shm".
func (d *Device) Name() string { return "shm" }

func (d *Device) String() string { return "shm device " + hex.EncodeToString(d.token[:4]) }

// logf logs a warning "shm: DEVICE: ..."; after Close it stays silent.
func (d *Device) logf(format string, args ...any) {
	if d.isClosed() {
		return
	}
	d.opts.Logger.Warn(fmt.Sprintf("shm: %s: "+format, append([]any{d}, args...)...))
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// Register registers buf. Memory from Alloc is exported to the device's
// peers (they map it, and their writes and reads are one copy with no work
// on this side); other memory is reached by the kernel's cross-memory
// attach or through the ring. The key is 48 random bits above the slot
// number. Register does not block.
func (d *Device) Register(buf []byte, access transport.Access) (transport.Region, error) {
	if access&^transport.AccessAll != 0 {
		return nil, fmt.Errorf("shm: register %d bytes: unknown access bits %#x: %w", len(buf), uint32(access), transport.ErrInvalid)
	}
	var kb [8]byte
	if _, err := rand.Read(kb[:]); err != nil {
		return nil, fmt.Errorf("shm: register %d bytes: random key: %w", len(buf), err)
	}
	r := &region{dev: d, buf: buf, access: access}
	seg, segOff, shared := segmentOf(buf)
	d.mu.Lock() // d.closed
	defer d.mu.Unlock()
	d.regMu.Lock()
	defer d.regMu.Unlock()
	fail := func(err error) (transport.Region, error) {
		if shared {
			seg.regs.Add(-1)
		}
		return nil, err
	}
	if d.closed {
		return fail(fmt.Errorf("shm: register %d bytes: device: %w", len(buf), transport.ErrClosed))
	}
	if len(d.free) == 0 {
		return fail(fmt.Errorf("shm: register %d bytes: all %d regions in use (Options.MaxRegions): %w", len(buf), len(d.slots), transport.ErrInvalid))
	}
	r.slot = d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	r.key = binary.LittleEndian.Uint64(kb[:])&^(maxSlots-1) | uint64(r.slot)
	if r.key == 0 {
		r.key = maxSlots | uint64(r.slot)
	}
	info := slotInfo{key: r.key, len: uint64(len(buf)), access: uint32(access)}
	if len(buf) > 0 {
		info.addr = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	}
	if shared {
		r.seg = seg // Free refuses the memory while it is registered
	}
	if shared && access&(transport.AccessRemoteRead|transport.AccessRemoteWrite) != 0 {
		// Peers may touch it: give them the memory.
		r.exported = true
		info.seg, info.segOff = seg.id, segOff
		x := d.exports[seg.id]
		if x == nil {
			x = &export{seg: seg}
			d.exports[seg.id] = x // a peer asks for it when it needs it
		}
		x.refs++
	}
	d.slots[r.slot].Store(r)
	tableSlot(d.table, r.slot).publish(info)
	return r, nil
}

// Deregister revokes the region's key. It blocks until no transfer touches
// the region's memory any more: a local one, or a peer's copy in progress,
// which may take up to a copy's time (or Options.RevokeTimeout for a peer
// that stalls; such a peer is cut off). After Deregister returns no peer
// reads or writes the memory through this device.
func (d *Device) Deregister(tr transport.Region) error {
	r, ok := tr.(*region)
	if !ok || r == nil || r.dev != d {
		return fmt.Errorf("shm: deregister: region of another device: %w", transport.ErrInvalid)
	}
	d.mu.Lock()
	d.regMu.Lock()
	if d.closed || d.slots[r.slot].Load() != r {
		closed := d.closed
		d.regMu.Unlock()
		d.mu.Unlock()
		if closed {
			return nil // Close revoked it
		}
		return fmt.Errorf("shm: deregister key %#x: not registered: %w", r.key, transport.ErrInvalid)
	}
	// Revoke, then wait out every peer that may have seen the slot live
	// (see endpoint.remote for the other half of this handshake).
	tableSlot(d.table, r.slot).state().Store(0)
	d.regMu.Unlock()
	for _, e := range d.conns {
		e.waitPeerIdle(uint64(r.slot) + 1)
	}
	d.regMu.Lock()
	d.slots[r.slot].Store(nil)
	d.free = append(d.free, r.slot)
	var forget *segment
	if r.exported {
		x := d.exports[r.seg.id]
		if x.refs--; x.refs == 0 {
			delete(d.exports, r.seg.id)
			forget = r.seg
		}
	}
	d.regMu.Unlock()
	if forget != nil {
		for _, e := range d.conns {
			e.forgetSegment(forget.id)
		}
	}
	d.mu.Unlock()
	r.revoke()
	if r.seg != nil {
		r.seg.regs.Add(-1)
	}
	return nil
}

// localRegion checks that tr is a region of this device.
func (d *Device) localRegion(tr transport.Region) (*region, bool) {
	r, ok := tr.(*region)
	if !ok || r == nil || r.dev != d {
		return nil, false
	}
	return r, true
}

// lookup finds the live region with key, for an access by a peer through
// the ring (the staged path). The region is acquired on success.
func (d *Device) lookup(key uint64) *region {
	slot := int(key & (maxSlots - 1))
	if slot >= len(d.slots) {
		return nil
	}
	r := d.slots[slot].Load()
	if r == nil || r.key != key || !r.acquire() {
		return nil
	}
	return r
}

// NewCompletionQueue creates a completion queue holding depth completions
// (depth > 0; see transport.CompletionQueue for the rule). It does not
// block.
func (d *Device) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("shm: completion queue of depth %d: %w", depth, transport.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("shm: new completion queue: device: %w", transport.ErrClosed)
	}
	for i, q := range d.cqs {
		if q == nil {
			q = newCQ(d, i, depth)
			d.cqs[i] = q
			return q, nil
		}
	}
	return nil, fmt.Errorf("shm: new completion queue: all %d in use (Options.MaxCompletionQueues): %w", len(d.cqs), transport.ErrInvalid)
}

func (d *Device) forgetCQ(q *cq) {
	d.mu.Lock()
	if d.cqs[q.index] == q {
		d.cqs[q.index] = nil
	}
	d.mu.Unlock()
}

// NewEndpoint creates an unconnected endpoint with a fresh random token.
// It does not block.
func (d *Device) NewEndpoint(tq transport.CompletionQueue) (transport.Endpoint, error) {
	q, ok := tq.(*cq)
	if !ok || q == nil || q.dev != d {
		return nil, fmt.Errorf("shm: new endpoint: completion queue of another device: %w", transport.ErrInvalid)
	}
	var tok [16]byte
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("shm: new endpoint: device: %w", transport.ErrClosed)
	}
	for {
		if _, err := rand.Read(tok[:]); err != nil {
			return nil, fmt.Errorf("shm: new endpoint: random token: %w", err)
		}
		if d.eps[tok] == nil && tok != ([16]byte{}) {
			break
		}
	}
	e := newEndpoint(d, q, tok)
	d.eps[tok] = e
	return e, nil
}

// connected adds e to the endpoints whose peers may touch the device's
// regions (Deregister waits for them, and tells those given a segment to
// forget it). Its reader, which gives the peer segments, starts after.
func (d *Device) connected(e *endpoint) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("device: %w", transport.ErrClosed)
	}
	d.conns = append(d.conns, e)
	return nil
}

// forgetEndpoint removes e; after it returns no Deregister looks at e's
// mappings.
func (d *Device) forgetEndpoint(e *endpoint) {
	d.mu.Lock()
	if d.eps[e.token] == e {
		delete(d.eps, e.token)
	}
	for i, c := range d.conns {
		if c == e {
			d.conns = append(d.conns[:i], d.conns[i+1:]...)
			break
		}
	}
	d.mu.Unlock()
}

// Close closes every endpoint (their pending requests complete with
// ErrClosed, their peers' with ErrPeerClosed) and every completion queue,
// revokes every registration and releases the device's memory and socket.
// It waits for the device's goroutines.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	eps := make([]*endpoint, 0, len(d.eps))
	for _, e := range d.eps {
		eps = append(eps, e)
	}
	d.mu.Unlock()
	devices.Delete(d.token)
	d.ln.Close()
	for _, e := range eps {
		e.Close()
	}
	d.mu.Lock()
	cqs := make([]*cq, 0, len(d.cqs))
	for _, q := range d.cqs {
		if q != nil {
			cqs = append(cqs, q)
		}
	}
	d.mu.Unlock()
	for _, q := range cqs {
		q.Close()
		q.drainWaiters()
	}
	d.regMu.Lock()
	for i := range d.slots {
		if r := d.slots[i].Swap(nil); r != nil {
			tableSlot(d.table, i).state().Store(0)
			r.revoke()
			if r.seg != nil {
				r.seg.regs.Add(-1)
			}
		}
	}
	d.exports = map[uint64]*export{}
	d.regMu.Unlock()
	d.wg.Wait()
	unix.Munmap(d.ctl)
	unix.Close(d.ctlFD)
	return nil
}

func (d *Device) acceptLoop() {
	defer d.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			d.logf("accept: %v", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			continue
		}
		d.wg.Add(1)
		d.mu.Unlock()
		go d.handshake(c)
	}
}
