package comm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/internal/affinity"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
	"github.com/goccl/goccl/transport/tcp"
	"github.com/goccl/goccl/transport/verbs"
)

// Init joins the job this process was started in. It reads the rank, size,
// store address and secret that gorun, torchrun, Slurm's srun or Open MPI's
// mpirun set (see package bootstrap), meets the other ranks through the
// bootstrap store, opens the transports and connects every peer. ctx
// bounds the whole set-up. A process started without any launcher runs as
// a single rank. A rank of a job returns 8 ms after its set-up ends, asleep
// meanwhile, so that its first calls do not stall (settleRuntime).
//
// Init reads the environment once (OptionsFromEnv): the fields opts
// leaves zero take the values of the GOCCL_* variables that are set; a
// field opts sets wins. A malformed variable fails Init naming it. The
// transports Init opens get their settings (and opts.Logger) from the
// result; nothing below reads the environment.
//
// The transports are chosen by Options.Transport (GOCCL_TRANSPORT):
// "auto" (default: shared memory for the peers on this host, and for the
// others verbs when a usable RDMA device exists, else TCP), "shm" (shared
// memory only: every rank on this host), "tcp" or "verbs" (that transport
// for every peer, also those on this host; "verbs" is an error if no
// device is usable).
// Peers are on the same host when their host identities (boot id,
// network, pid and user namespaces, uid) are equal, so containers and
// network namespaces on one machine count as different hosts.
func Init(ctx context.Context, opts Options) (*Comm, error) {
	// The boundary: the environment is read here, once, and explicit
	// fields win; below, only opts.
	transportSetting := "GOCCL_TRANSPORT"
	if opts.Transport != "" {
		transportSetting = "Options.Transport"
	}
	ifSetting := "GOCCL_SOCKET_IFNAME"
	if opts.SocketInterface != "" {
		ifSetting = "Options.SocketInterface"
	}
	info, err := bootstrap.FromEnv()
	single := errors.Is(err, bootstrap.ErrNoLauncher)
	if err != nil && !single {
		return nil, fmt.Errorf("comm: init: %w", err)
	}
	if single {
		info = bootstrap.Info{Size: 1, LocalSize: 1}
	}
	// A rank that fails before it joins tells the others, which would
	// otherwise wait for it until their InitTimeout (a launcher that does
	// not stop a job when one rank exits: srun without
	// --kill-on-bad-exit, a user's own scripts).
	refuse := func(err error) (*Comm, error) {
		if !single {
			actx, cancel := context.WithTimeout(ctx, announceWait)
			bootstrap.Announce(actx, info, err, bootstrap.WithLogger(slog.New(slog.DiscardHandler)))
			cancel()
		}
		return nil, err
	}
	if err := opts.applyEnv(os.LookupEnv); err != nil {
		return refuse(fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err))
	}
	if info.Rank == 0 {
		warnMisspelled(resolveLogger(opts.Logger, opts.Debug), os.Environ())
	}
	if err := bindSelf(opts.Bind, info); err != nil {
		return refuse(fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err))
	}
	if opts.SpinPolls == 0 && opts.crowded(info.LocalSize) {
		// More ranks than cores on this host: a rank that spins while it
		// waits takes the core its peer needs. Block at once instead.
		opts.SpinPolls = 1
	}
	if err := opts.fill(); err != nil {
		return refuse(fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err))
	}
	// Joining is bounded even when ctx is not: a rank that never shows up
	// must not hang the others.
	if _, ok := ctx.Deadline(); !ok {
		d := opts.InitTimeout
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, fmt.Errorf("not every rank joined within %v (Options.InitTimeout, GOCCL_INIT_TIMEOUT)", d))
		defer cancel()
	}
	ts := transportSetup{opts: opts, setting: transportSetting, info: info}
	if single {
		devs, why, derr := ts.open("127.0.0.1")
		if derr != nil {
			return nil, fmt.Errorf("comm: init single rank: %w", derr)
		}
		why += "; no launcher in the environment (gorun, torchrun, Open MPI, Slurm): a job of one rank"
		logTransport(opts.Logger, 0, devs, why, true)
		return newComm(ctx, NewLocalGroup(1).Member(0), devs, opts, "world")
	}
	b, err := bootstrap.Connect(ctx, info, bootstrap.WithLogger(opts.Logger))
	if err != nil {
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err)
	}
	joinFailed := func(err error) (*Comm, error) {
		err = fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err)
		fctx, cancel := context.WithTimeout(ctx, notifyWait)
		b.Fail(fctx, err) // the others fail at once, naming this rank and why
		cancel()
		b.Close()
		return nil, err
	}
	advertise, err := advertiseIP(b.Client().LocalIP(), info, opts.SocketInterface, ifSetting)
	if err != nil {
		return joinFailed(err)
	}
	devs, why, err := ts.open(advertise)
	if err != nil {
		return joinFailed(err)
	}
	logTransport(opts.Logger, info.Rank, devs, why, info.LocalRank == 0)
	// newComm closes b and devs itself if it fails.
	c, err := newComm(ctx, b, devs, opts, "world")
	if err == nil {
		settleRuntime()
	}
	return c, err
}

// announceWait bounds how long a rank whose start failed before it
// joined spends telling the others (bootstrap.Announce): reaching the
// store, and on the rank that hosts it, keeping it up for them.
const announceWait = 10 * time.Second

// settleTime is how long settleRuntime sleeps: the Go runtime monitor's
// fast phase, 50 sleeps of 20 µs that take 70-120 µs each (120 on this
// project's 2-core VMs), with room to spare.
const settleTime = 8 * time.Millisecond

// settleRuntime lets the Go runtime's monitor thread (sysmon) through the
// fast phase it enters when a process that had nothing running (Init
// waits on the network) makes its next system call: for its next 50
// rounds it wakes every 20 µs of sleep, and on a rank pinned to one core
// each wake-up takes the core for ~15 µs, so the first few milliseconds of
// collectives after Init stall every ~120 µs (2 ranks on shared memory,
// 8-byte ping-pong: 0.7-2.7 µs per message for the first 2,500 messages
// against 0.4-0.5 after). It makes a system call, which starts that phase
// now, then sleeps through it in a raw one (the runtime does not see it,
// so the process still has a running processor and the monitor does not
// sleep deeply again and restart): 8 ms of Init's time, no processor
// time. The same 8-byte ping-pong: 0.39-0.63 µs from the start.
func settleRuntime() {
	unix.Syscall(unix.SYS_GETPID, 0, 0, 0)
	ts := unix.NsecToTimespec(int64(settleTime))
	unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// bindSelf binds this process to its share of the CPUs it may use, split
// among the ranks of its host (mode: Options.Bind), and sizes GOMAXPROCS
// to it unless the environment sets GOMAXPROCS. A process that may run on
// one CPU only is left as it is.
func bindSelf(mode string, info bootstrap.Info) error {
	if mode == "" || mode == "none" {
		return nil
	}
	cpus, err := affinity.Usable()
	if err != nil {
		return fmt.Errorf("GOCCL_BIND=%s: %w", mode, err)
	}
	blocks, err := affinity.Blocks(mode, cpus, info.LocalSize)
	if err != nil {
		return fmt.Errorf("GOCCL_BIND=%s: %w", mode, err)
	}
	if blocks == nil || info.LocalRank >= len(blocks) || len(cpus) == 1 {
		return nil
	}
	block := blocks[info.LocalRank]
	if err := affinity.BindProcess(block); err != nil {
		return fmt.Errorf("GOCCL_BIND=%s: %w", mode, err)
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(len(block))
	}
	return nil
}

// crowded says whether a host's n ranks yield the processor while they
// wait (Options.YieldWhenIdle): by default when they outnumber its
// processors.
func (o *Options) crowded(n int) bool {
	switch o.YieldWhenIdle {
	case "1":
		return true
	case "0":
		return false
	}
	return n > onlineCPUs()
}

// onlineCPUs is the number of processors of the host (not only those this
// process may run on: a rank bound to one core of two is not crowded).
func onlineCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		z, err2 := a, error(nil)
		if isRange {
			z, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || z < a {
			return runtime.NumCPU()
		}
		n += z - a + 1
	}
	return max(n, 1)
}

// transportSetup is what Init opens its transports from: the options
// (Transport and the transports' fields), the name of the setting that
// chose Transport (for messages: "GOCCL_TRANSPORT" or
// "Options.Transport") and the rank's place on its host.
type transportSetup struct {
	opts    Options
	setting string
	info    bootstrap.Info
}

// open opens the transports Options.Transport asks for and says why
// those. advertise is the IP address peers reach this rank on over TCP.
// Shared memory is opened unless this rank is alone on its host, the
// network device unless every rank is on this host (as the launcher
// tells; the host identities exchanged at connect decide which peer uses
// which).
//
// Every rank must end up able to reach every peer: with "auto" a job
// whose hosts differ (some with an RDMA device, some without) must set
// GOCCL_TRANSPORT explicitly.
func (ts transportSetup) open(advertise string) (devs devices, why string, err error) {
	devs.own = true
	info := ts.info
	// A communicator of one rank still needs a device (registration,
	// staging): the cheapest, shared memory.
	needShm := info.LocalSize != 1 || info.Size == 1
	needNet := info.LocalSize <= 0 || info.LocalSize < info.Size
	defer func() {
		if err != nil {
			devs.close()
			devs = devices{}
		}
	}()
	setting := ts.setting + "=" + ts.opts.Transport
	switch ts.opts.Transport {
	case "auto":
		var whys []string
		if needShm {
			if devs.shm, err = ts.openShm(); err != nil {
				// Shared memory is an optimisation: without it the
				// network device serves the local peers too.
				whys = append(whys, "shared memory unavailable ("+err.Error()+")")
				needNet, err = true, nil
			} else {
				whys = append(whys, "shared memory for the ranks of this host")
			}
		}
		if needNet {
			d, verr := ts.openVerbs()
			switch {
			case verr == nil:
				devs.net = d
				whys = append(whys, "an RDMA device is usable")
			case !errors.Is(verr, transport.ErrNotSupported):
				return devs, "", fmt.Errorf("%s: %w", setting, verr)
			default:
				// Why verbs is off, e.g. "verbs: libibverbs.so.1 not
				// loaded (...)" or "verbs: no RDMA device (...)".
				whys = append(whys, strings.TrimSuffix(verr.Error(), ": "+transport.ErrNotSupported.Error()))
				if devs.net, err = ts.openTCP(advertise); err != nil {
					return devs, "", err
				}
			}
		}
		return devs, setting + ": " + strings.Join(whys, "; "), nil
	case "shm":
		if devs.shm, err = ts.openShm(); err != nil {
			return devs, "", fmt.Errorf("%s: %w", setting, err)
		}
		return devs, setting, nil
	case "tcp":
		devs.net, err = ts.openTCP(advertise)
		return devs, setting, err
	case "verbs":
		d, err := ts.openVerbs()
		if err != nil {
			return devs, "", fmt.Errorf("%s: %w", setting, err)
		}
		devs.net = d
		return devs, setting, nil
	default: // fill refused it
		return devs, "", fmt.Errorf("%s: %w", setting, checkTransport(ts.opts.Transport))
	}
}

// openShm opens the shared-memory transport. With more ranks than cores it
// does not spin before it yields the core, and it gives each step of a
// connection's handshake longer than the default 5 s, in proportion to the
// ranks per core: an all-to-all connects every pair of the host at once,
// and with hundreds of ranks per core a peer may not run for seconds.
func (ts transportSetup) openShm() (*shm.Device, error) {
	info := ts.info
	o := shm.Options{Logger: ts.opts.Logger}
	if ts.opts.crowded(info.LocalSize) {
		o.Spin = -1
		perCore := info.LocalSize / onlineCPUs()
		o.HandshakeTimeout = time.Duration(max(1, perCore/8)) * 5 * time.Second
	}
	if info.LocalSize > 16 {
		// Every connection maps a ring per direction (1 MiB by default):
		// an all-to-all connects every pair of the host. Smaller rings
		// for many local ranks (16 MiB per rank at most, were every peer
		// connected; at least 64 KiB).
		o.RingSize = max(64<<10, 1<<bits.Len(uint(16<<20/info.LocalSize))>>1)
	}
	return shm.NewDevice(o)
}

// openVerbs opens the verbs device Options.IBHCA and IBGIDIndex select.
func (ts transportSetup) openVerbs() (*verbs.Device, error) {
	cfg := verbs.Config{HCA: ts.opts.IBHCA, GIDIndex: -1, Logger: ts.opts.Logger}
	if ts.opts.IBGIDIndex != nil {
		cfg.GIDIndex = *ts.opts.IBGIDIndex
	}
	if ts.opts.crowded(ts.info.LocalSize) {
		cfg.Spin = -1
	}
	return verbs.OpenConfig(cfg)
}

// openTCP opens the TCP transport. Oversubscribed (more local ranks than
// cores) makes its waits spin briefly and yield the processor while they
// do.
func (ts transportSetup) openTCP(advertise string) (transport.Device, error) {
	// Listen on the advertised address only, as NCCL binds to its
	// interface's: not on every interface of the host, where a job on
	// loopback would be open to the network.
	d, err := tcp.NewDevice(tcp.Options{ListenAddress: net.JoinHostPort(advertise, "0"), AdvertiseHost: advertise, UserTimeout: ts.opts.SocketTimeout,
		Congestion: ts.opts.TCPCongestion, SpinTime: ts.opts.SpinTime, Oversubscribed: ts.opts.crowded(ts.info.LocalSize), Logger: ts.opts.Logger})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// logTransport says which transports this process opened and why, once
// per host (the first local rank, at Info level) or on every rank at
// Debug level (hosts may differ in what they have). Which peer uses which
// is logged by connect at Debug level, and told by Comm.Transports.
func logTransport(l *slog.Logger, rank int, devs devices, why string, firstOnHost bool) {
	level := slog.LevelInfo
	if !firstOnHost {
		level = slog.LevelDebug
	}
	if !l.Enabled(context.Background(), level) {
		return
	}
	var names []string
	for _, d := range []transport.Device{devs.shm, devs.net} {
		if d != nil {
			names = append(names, d.Name())
		}
	}
	l.Log(context.Background(), level, fmt.Sprintf("goccl: rank %d: transports %s (%s)", rank, strings.Join(names, ", "), why))
}

// advertiseIP chooses the address peers reach this rank's TCP transport
// on: interface ifname's if set (named setting in errors); else the local
// address of the connection to the bootstrap store, unless that is a
// loopback address while ranks run on other hosts (a host name that
// /etc/hosts maps to 127.0.1.1, say), in which case the first up,
// non-loopback IPv4 address. A named interface's loopback address (lo) is
// taken when it has no other, if every rank runs on this host.
func advertiseIP(storeLocal net.IP, info bootstrap.Info, ifname, setting string) (string, error) {
	if ifname != "" {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return "", fmt.Errorf("%s=%q: %w", setting, ifname, err)
		}
		ip := firstIPv4(ifi, false)
		if ip == nil {
			ip = firstIPv4(ifi, true)
		}
		switch {
		case ip == nil:
			return "", fmt.Errorf("%s=%q: interface has no IPv4 address", setting, ifname)
		case ip.IsLoopback() && info.LocalSize < info.Size:
			return "", fmt.Errorf("%s=%q: its address %v is a loopback address, which the ranks on other hosts cannot reach (%d of the %d ranks run on this host)",
				setting, ifname, ip, info.LocalSize, info.Size)
		}
		return ip.String(), nil
	}
	if storeLocal != nil && (!storeLocal.IsLoopback() || info.LocalSize >= info.Size) {
		return storeLocal.String(), nil
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for i := range ifs {
		if ifs[i].Flags&net.FlagUp == 0 || ifs[i].Flags&net.FlagLoopback != 0 {
			continue
		}
		if ip := firstIPv4(&ifs[i], false); ip != nil {
			return ip.String(), nil
		}
	}
	if storeLocal != nil {
		return storeLocal.String(), nil
	}
	return "127.0.0.1", nil
}

// firstIPv4 returns the first IPv4 address of ifi, a loopback one only if
// loopback is set (and then only a loopback one).
func firstIPv4(ifi *net.Interface, loopback bool) net.IP {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsLoopback() == loopback {
			return n.IP
		}
	}
	return nil
}
