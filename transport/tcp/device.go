package tcp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goccl/goccl/internal/ratelog"
	"github.com/goccl/goccl/transport"
)

// Options configures a Device. The zero value is usable: it listens on an
// ephemeral port of every interface and advertises 127.0.0.1.
type Options struct {
	// ListenAddress is the host:port the device listens on; default ":0".
	ListenAddress string
	// AdvertiseHost is the IP address (or a host name that resolves to one)
	// published in address blobs; peers dial it. Callers pass the address
	// their bootstrap connection used. Default: the listen IP if one was
	// given, else 127.0.0.1.
	AdvertiseHost string
	// DialHost, if set, is the local IP address the device's outgoing
	// connections are bound to (the port is chosen by the system), so that
	// peers, or a proxy in front of them, see that address as the source.
	// Default: the system chooses.
	DialHost string
	// UserTimeout is TCP_USER_TIMEOUT: how long sent data may stay
	// unacknowledged before the connection fails. Default 10 s; negative
	// leaves the system default (which can block ~15 minutes on a cut link).
	UserTimeout time.Duration
	// KeepAliveIdle, KeepAliveInterval and KeepAliveCount configure TCP
	// keepalive probes so that an idle connection over a dead link fails.
	// Defaults 5 s, 2 s, 3; a negative KeepAliveIdle disables keepalive.
	KeepAliveIdle     time.Duration
	KeepAliveInterval time.Duration
	KeepAliveCount    int
	// HandshakeTimeout bounds the hello exchange of a new connection, on
	// both sides. Default 5 s.
	HandshakeTimeout time.Duration
	// ConnectTimeout bounds how long an accepting endpoint, once Connect was
	// called, waits for its peer's connection before entering the error
	// state. Default 60 s.
	ConnectTimeout time.Duration
	// LingerTimeout bounds how long an endpoint that refused a remote access
	// keeps draining the connection so that its refusal reaches the peer.
	// Default 5 s.
	LingerTimeout time.Duration
	// MaxMessage is the largest payload of one request (send, write, read).
	// Default 1 GiB.
	MaxMessage int
	// Congestion is the TCP congestion control of the device's connections
	// (TCP_CONGESTION), set on both ends of each. Default "": "reno" (which
	// every process may choose; the system's own if it is refused).
	// "system" keeps the system's default. Why not the system's: where
	// that is BBR (Debian's cloud kernels and others), it paces every
	// connection with timers, which halved the throughput of a large
	// transfer over loopback (a 2-rank 64 MiB allreduce: 45 ms with bbr,
	// 25 ms with cubic). Why not cubic: its HyStart leaves slow start at
	// the first rise of the round-trip time, and where ranks outnumber
	// cores every connection's round trip rises with the scheduling, not
	// with a queue: 4 ranks on 2 cores over loopback, 1-16 MiB, cubic
	// took about twice reno's time in allreduce, broadcast and all-to-all
	// (with HyStart turned off, the same as reno); 2 ranks, the same.
	// A name the kernel refuses fails the connection.
	Congestion string
	// SocketBuffer, if positive, sets SO_SNDBUF and SO_RCVBUF (which
	// disables the kernel's autotuning). Default: leave autotuning on.
	SocketBuffer int
	// SpinTime is how long a Wait keeps polling its sockets while nothing
	// arrives before it sleeps in poll(2) on its sockets.
	// Default 50 µs; negative sleeps at once.
	SpinTime time.Duration
	// Oversubscribed says that this host runs more ranks than it has
	// cores: a Wait then yields the processor to the kernel between polls
	// and sleeps after a short spin, so that it does not hold the core a
	// peer needs.
	Oversubscribed bool
	// Logger receives warnings about refused and dropped connections
	// (rate-limited per remote host). Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) withDefaults() Options {
	v := *o
	if v.ListenAddress == "" {
		v.ListenAddress = ":0"
	}
	if v.UserTimeout == 0 {
		v.UserTimeout = 10 * time.Second
	}
	if v.KeepAliveIdle == 0 {
		v.KeepAliveIdle = 5 * time.Second
	}
	if v.KeepAliveInterval <= 0 {
		v.KeepAliveInterval = 2 * time.Second
	}
	if v.KeepAliveCount <= 0 {
		v.KeepAliveCount = 3
	}
	if v.HandshakeTimeout <= 0 {
		v.HandshakeTimeout = 5 * time.Second
	}
	if v.ConnectTimeout <= 0 {
		v.ConnectTimeout = 60 * time.Second
	}
	if v.LingerTimeout <= 0 {
		v.LingerTimeout = 5 * time.Second
	}
	if v.MaxMessage <= 0 {
		v.MaxMessage = 1 << 30
	}
	if v.Logger == nil {
		v.Logger = slog.Default()
	}
	return v
}

// maxHandshakes bounds the connections that may be in their hello exchange
// at once. The accept loop takes no more while that many are: further ones
// wait in the listen backlog (a burst of 127 ranks dialling their leader is
// normal), and a stranger holding a slot loses it after HandshakeTimeout.
const maxHandshakes = 64

// Device is a TCP transport instance: one listening socket, the
// registrations, and the endpoints that connections are routed to.
type Device struct {
	opts Options
	spin spinPolicy
	ln   *net.TCPListener
	host netip.Addr
	port uint16
	from netip.Addr // DialHost, if set

	regMu   sync.RWMutex
	regions map[uint64]*region

	mu         sync.Mutex
	closed     bool
	eps        map[[16]byte]*endpoint
	cqs        map[*cq]struct{}
	handshakes map[net.Conn]struct{}
	hsSlots    chan struct{} // one token per handshake in progress
	quit       chan struct{} // closed by Close

	wg sync.WaitGroup // accept loop and handshakes

	// dropLog throttles the per-connection lines about dropped
	// connections (see dropf).
	dropLog *ratelog.Limiter

	bg bgLoop // serves the sockets nobody polls
}

// A flood of stray connections (a port scanner, a peer reconnecting in a
// loop) must not bury the log: per remote host the first dropBurst dropped
// connections are logged in full, the rest counted, one summary line per
// dropInterval.
const (
	dropBurst    = 5
	dropInterval = 10 * time.Second
)

var _ transport.Device = (*Device)(nil)

// NewDevice listens on opts.ListenAddress and returns the device. It does
// not block beyond the listen call.
func NewDevice(opts Options) (*Device, error) {
	o := opts.withDefaults()
	lc := net.ListenConfig{KeepAlive: -1}
	l, err := lc.Listen(context.Background(), "tcp", o.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen on %s: %w: %w", o.ListenAddress, err, transport.ErrLink)
	}
	ln := l.(*net.TCPListener)
	la := ln.Addr().(*net.TCPAddr).AddrPort()
	host, err := advertised(o.AdvertiseHost, la.Addr())
	if err != nil {
		ln.Close()
		return nil, err
	}
	var from netip.Addr
	if o.DialHost != "" {
		if from, err = netip.ParseAddr(o.DialHost); err != nil {
			ln.Close()
			return nil, fmt.Errorf("tcp: dial host %q is not an IP address: %w", o.DialHost, transport.ErrInvalid)
		}
		from = from.Unmap()
	}
	d := &Device{
		opts:       o,
		spin:       newSpinPolicy(&o),
		ln:         ln,
		host:       host,
		port:       la.Port(),
		from:       from,
		regions:    make(map[uint64]*region),
		eps:        make(map[[16]byte]*endpoint),
		cqs:        make(map[*cq]struct{}),
		handshakes: make(map[net.Conn]struct{}),
		hsSlots:    make(chan struct{}, maxHandshakes),
		quit:       make(chan struct{}),
	}
	d.dropLog = ratelog.New(dropBurst, dropInterval, func(s ratelog.Summary) {
		d.opts.Logger.Warn(fmt.Sprintf("tcp: device %s: %d more connections from %s dropped in the last %s", d.Addr(), s.Suppressed, s.Key, s.Span.Round(time.Second)))
	})
	d.bg.start()
	d.wg.Add(1)
	go d.acceptLoop()
	return d, nil
}

func advertised(host string, listen netip.Addr) (netip.Addr, error) {
	if host == "" {
		listen = listen.Unmap()
		if listen.IsValid() && !listen.IsUnspecified() {
			return listen, nil
		}
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if a.IsUnspecified() {
			return netip.Addr{}, fmt.Errorf("tcp: advertised host %s is unspecified: %w", host, transport.ErrInvalid)
		}
		return a, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("tcp: resolve advertised host %s: %v: %w", host, err, transport.ErrInvalid)
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap(), nil
		}
	}
	return ips[0], nil
}

// Name returns "tcp".
func (d *Device) Name() string { return "tcp" }

// ConnectsAlone reports that an endpoint's Connect does not wait for the
// peer's Connect (see Endpoint.Connect): comm runs a Send to a peer not
// connected yet ahead of a waiting Recv only over such a device.
func (d *Device) ConnectsAlone() bool { return true }

// WaitSpins reports that the device's completion queues poll their sockets
// in Wait (spinning, then sleeping): a caller needs no spin loop of its own
// around Poll before it calls Wait.
func (d *Device) WaitSpins() bool { return true }

// maxInline is the largest payload a post copies at once (transport.Inliner).
// The executor counts such a send done at post, where a longer one waits
// for the peer's acknowledgement, a round trip: measured between two
// processes here, osu latency at 8 KiB took 25 µs with a 4 KiB limit and
// 16.5 µs with this one, at 32 KiB 28 µs and 20.6 µs (the copy costs ~1 µs
// per 16 KiB; at 64 KiB the copy no longer paid). Open MPI's TCP eager
// limit is 64 KiB.
const maxInline = 32 << 10

// MaxInline implements transport.Inliner: sends and writes of at most
// maxInline bytes are copied before PostSend and PostWrite return.
func (d *Device) MaxInline() int { return maxInline }

// Addr is the address the device listens on, as peers see it.
func (d *Device) Addr() netip.AddrPort { return netip.AddrPortFrom(d.host, d.port) }

// logf logs a warning "tcp: device ADDR: ..."; after Close it stays
// silent (connections cut by the close are expected).
func (d *Device) logf(format string, args ...any) {
	if d.isClosed() {
		return
	}
	d.opts.Logger.Warn(fmt.Sprintf("tcp: device %s: "+format, append([]any{d.Addr()}, args...)...))
}

// dropf reports a dropped connection from remote, throttled per remote
// host (see dropBurst).
func (d *Device) dropf(remote net.Addr, format string, args ...any) {
	if d.isClosed() {
		return
	}
	if d.dropLog.Allow(hostOf(remote)) {
		d.logf("dropping connection from %s: "+format, append([]any{remote}, args...)...)
	}
}

// hostOf is the address a flood comes from: the IP without the port.
func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok && t != nil {
		return t.IP.String()
	}
	if a == nil {
		return "unknown"
	}
	return a.String()
}

// Register registers buf. It does not block. The key is 64 random bits.
func (d *Device) Register(buf []byte, access transport.Access) (transport.Region, error) {
	if access&^transport.AccessAll != 0 {
		return nil, fmt.Errorf("tcp: register %d bytes: unknown access bits %#x: %w", len(buf), uint32(access), transport.ErrInvalid)
	}
	d.regMu.Lock()
	defer d.regMu.Unlock()
	if d.isClosed() {
		return nil, fmt.Errorf("tcp: register %d bytes: device: %w", len(buf), transport.ErrClosed)
	}
	var kb [8]byte
	var key uint64
	for key == 0 || d.regions[key] != nil {
		if _, err := rand.Read(kb[:]); err != nil {
			return nil, fmt.Errorf("tcp: register %d bytes: random key: %w", len(buf), err)
		}
		key = binary.LittleEndian.Uint64(kb[:])
	}
	r := &region{dev: d, buf: buf, key: key, access: access}
	d.regions[key] = r
	return r, nil
}

// Deregister revokes the region's key. It blocks until no transfer touches
// the region's memory any more (a transfer in progress finishes or fails
// first).
func (d *Device) Deregister(tr transport.Region) error {
	r, ok := tr.(*region)
	if !ok || r.dev != d {
		return fmt.Errorf("tcp: deregister: region of another device: %w", transport.ErrInvalid)
	}
	d.regMu.Lock()
	if d.regions[r.key] != r {
		d.regMu.Unlock()
		return fmt.Errorf("tcp: deregister key %#x: not registered: %w", r.key, transport.ErrInvalid)
	}
	delete(d.regions, r.key)
	d.regMu.Unlock()
	r.revoke()
	return nil
}

// localRegion checks that tr is a live region of this device.
func (d *Device) localRegion(tr transport.Region) (*region, bool) {
	r, ok := tr.(*region)
	if !ok || r == nil || r.dev != d {
		return nil, false
	}
	return r, true
}

// remoteAccess validates a peer's access to [off, off+n) of the region
// named by key. On success the region is acquired (caller releases it).
// On failure it returns the refusal status and the region length.
func (d *Device) remoteAccess(key, off, n uint64, need transport.Access) (*region, uint8, uint64) {
	d.regMu.RLock()
	r := d.regions[key]
	d.regMu.RUnlock()
	if r == nil || !r.acquire() {
		return nil, statusBadKey, 0
	}
	size := uint64(len(r.buf))
	if r.access&need == 0 {
		r.release()
		return nil, statusAccess, size
	}
	if !inBounds(off, n, size) {
		r.release()
		return nil, statusBounds, size
	}
	return r, statusOK, size
}

// NewCompletionQueue creates a completion queue of depth entries (at least
// 1; any positive depth is supported). It does not block.
func (d *Device) NewCompletionQueue(depth int) (transport.CompletionQueue, error) {
	if depth < 1 {
		return nil, fmt.Errorf("tcp: completion queue of depth %d: %w", depth, transport.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("tcp: new completion queue: device: %w", transport.ErrClosed)
	}
	q := newCQ(d, depth)
	d.cqs[q] = struct{}{}
	return q, nil
}

func (d *Device) forgetCQ(q *cq) {
	d.mu.Lock()
	delete(d.cqs, q)
	d.mu.Unlock()
}

// NewEndpoint creates an unconnected endpoint with a fresh random token. It
// does not block.
func (d *Device) NewEndpoint(tq transport.CompletionQueue) (transport.Endpoint, error) {
	q, ok := tq.(*cq)
	if !ok || q.dev != d {
		return nil, fmt.Errorf("tcp: new endpoint: completion queue of another device: %w", transport.ErrInvalid)
	}
	var tok [16]byte
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("tcp: new endpoint: device: %w", transport.ErrClosed)
	}
	for {
		if _, err := rand.Read(tok[:]); err != nil {
			return nil, fmt.Errorf("tcp: new endpoint: random token: %w", err)
		}
		if d.eps[tok] == nil {
			break
		}
	}
	e := newEndpoint(d, q, tok)
	d.eps[tok] = e
	return e, nil
}

func (d *Device) forgetEndpoint(e *endpoint) {
	d.mu.Lock()
	if d.eps[e.token] == e {
		delete(d.eps, e.token)
	}
	d.mu.Unlock()
}

func (d *Device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// Close closes the listener, every endpoint (their pending requests
// complete with ErrClosed) and every completion queue, and waits for the
// device's goroutines. Registrations are revoked.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.quit)
	eps := make([]*endpoint, 0, len(d.eps))
	for _, e := range d.eps {
		eps = append(eps, e)
	}
	for c := range d.handshakes {
		c.Close()
	}
	d.mu.Unlock()
	d.ln.Close()
	for _, e := range eps {
		e.Close()
	}
	d.dropLog.Stop()
	d.bg.stop()
	d.mu.Lock()
	cqs := make([]*cq, 0, len(d.cqs))
	for q := range d.cqs {
		cqs = append(cqs, q)
	}
	d.mu.Unlock()
	for _, q := range cqs {
		q.Close()
	}
	d.regMu.Lock()
	regs := d.regions
	d.regions = map[uint64]*region{}
	d.regMu.Unlock()
	for _, r := range regs {
		r.revoke()
	}
	d.wg.Wait()
	return nil
}

func (d *Device) acceptLoop() {
	defer d.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		// A handshake slot first: while every slot is taken, connections
		// wait in the kernel's backlog rather than being dropped.
		select {
		case d.hsSlots <- struct{}{}:
		case <-d.quit:
			return
		}
		c, err := d.ln.AcceptTCP()
		if err != nil {
			<-d.hsSlots
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
			<-d.hsSlots
			c.Close()
			continue
		}
		d.handshakes[c] = struct{}{}
		d.wg.Add(1)
		d.mu.Unlock()
		go d.handshake(c)
	}
}

// handshake reads the hello of an accepted connection (bounded by
// HandshakeTimeout), answers it, and hands the connection to the endpoint
// whose token it names. Anything unexpected drops the connection.
func (d *Device) handshake(c *net.TCPConn) {
	defer d.wg.Done()
	keep := false
	defer func() {
		d.mu.Lock()
		delete(d.handshakes, c)
		d.mu.Unlock()
		<-d.hsSlots
		if !keep {
			c.Close()
		}
	}()
	remote := c.RemoteAddr()
	c.SetDeadline(time.Now().Add(d.opts.HandshakeTimeout))
	var b [helloSize]byte
	// The magic first, so that a stranger speaking another protocol is
	// dropped at once rather than after the timeout.
	if _, err := io.ReadFull(c, b[:len(helloMagic)]); err != nil {
		d.dropf(remote, "reading hello: %v", err)
		return
	}
	if [4]byte(b[:4]) != helloMagic {
		d.dropf(remote, "bad hello magic %q", b[:4])
		return
	}
	if _, err := io.ReadFull(c, b[len(helloMagic):]); err != nil {
		d.dropf(remote, "reading hello: %v", err)
		return
	}
	var h hello
	if err := decodeHello(b[:], &h); err != nil {
		if errors.Is(err, errHelloVersion) {
			reply := hello{typ: helloAck, status: helloVersionMismatch}
			reply.encode(b[:])
			c.Write(b[:])
		}
		d.dropf(remote, "%v", err)
		return
	}
	if h.typ != helloReq {
		d.dropf(remote, "hello of type %d", h.typ)
		return
	}
	d.mu.Lock()
	e := d.eps[h.dst]
	d.mu.Unlock()
	status := helloOK
	if e == nil {
		status = helloUnknown
	} else if !e.acceptable(h.src) {
		status = helloBusy
	}
	reply := hello{typ: helloAck, status: status, dst: h.dst, src: h.src}
	reply.encode(b[:])
	if _, err := c.Write(b[:]); err != nil {
		d.dropf(remote, "answering hello: %v", err)
		return
	}
	if status != helloOK {
		d.dropf(remote, "hello names %s endpoint %x", map[uint8]string{helloUnknown: "unknown", helloBusy: "busy"}[status], h.dst[:4])
		return
	}
	if err := tune(c, &d.opts); err != nil {
		d.dropf(remote, "%v", err)
		return
	}
	c.SetDeadline(time.Time{})
	keep = e.attach(c, h.src)
	if !keep {
		d.dropf(remote, "endpoint %x no longer accepts it", h.dst[:4])
	}
}
