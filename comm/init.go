package comm

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/bits"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/goccl/goccl/bootstrap"
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
// a single rank.
//
// The transports are chosen by GOCCL_TRANSPORT: "auto" (default: shared
// memory for the peers on this host, and for the others verbs when a
// usable RDMA device exists, else TCP), "shm" (shared memory only: every
// rank on this host), "tcp" or "verbs" (that transport for every peer,
// also those on this host; "verbs" is an error if no device is usable).
// Peers are on the same host when their host identities (boot id,
// network, pid and user namespaces, uid) are equal, so containers and
// network namespaces on one machine count as different hosts.
func Init(ctx context.Context, opts Options) (*Comm, error) {
	// Joining is bounded even when ctx is not: a rank that never shows up
	// must not hang the others.
	if _, ok := ctx.Deadline(); !ok {
		d, err := envDuration("GOCCL_INIT_TIMEOUT", 5*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("comm: init: %w", err)
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, fmt.Errorf("not every rank joined within %v (GOCCL_INIT_TIMEOUT)", d))
		defer cancel()
	}
	info, err := bootstrap.FromEnv()
	if errors.Is(err, bootstrap.ErrNoLauncher) {
		devs, why, derr := openTransports("127.0.0.1", bootstrap.Info{Size: 1, LocalSize: 1})
		if derr != nil {
			return nil, fmt.Errorf("comm: init single rank: %w", derr)
		}
		logTransport(0, devs, why, true)
		return newComm(ctx, NewLocalGroup(1).Member(0), devs, opts, "world")
	}
	if err != nil {
		return nil, fmt.Errorf("comm: init: %w", err)
	}
	b, err := bootstrap.Connect(ctx, info)
	if err != nil {
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err)
	}
	advertise, err := advertiseIP(b.Client().LocalIP(), info)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err)
	}
	devs, why, err := openTransports(advertise, info)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err)
	}
	logTransport(info.Rank, devs, why, info.LocalRank == 0)
	if opts.SpinPolls == 0 && os.Getenv("GOCCL_SPIN_POLLS") == "" && oversubscribed(info) {
		// More ranks than cores on this host: a rank that spins while it
		// waits takes the core its peer needs. Block at once instead.
		opts.SpinPolls = 1
	}
	// newComm closes b and devs itself if it fails.
	return newComm(ctx, b, devs, opts, "world")
}

// oversubscribed says that the ranks of this host outnumber its cores.
func oversubscribed(info bootstrap.Info) bool { return info.LocalSize > runtime.NumCPU() }

// openTransports opens the transports GOCCL_TRANSPORT asks for and says
// why those. advertise is the IP address peers reach this rank on over
// TCP. Shared memory is opened unless this rank is alone on its host, the
// network device unless every rank is on this host (as the launcher
// tells; the host identities exchanged at connect decide which peer uses
// which).
//
// Every rank must end up able to reach every peer: with "auto" a job
// whose hosts differ (some with an RDMA device, some without) must set
// GOCCL_TRANSPORT explicitly.
func openTransports(advertise string, info bootstrap.Info) (devs devices, why string, err error) {
	devs.own = true
	over := oversubscribed(info)
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
	switch t := os.Getenv("GOCCL_TRANSPORT"); t {
	case "", "auto":
		var whys []string
		if needShm {
			if devs.shm, err = openShm(info); err != nil {
				// Shared memory is an optimisation: without it the
				// network device serves the local peers too.
				whys = append(whys, "shared memory unavailable ("+err.Error()+")")
				needNet, err = true, nil
			} else {
				whys = append(whys, "shared memory for the ranks of this host")
			}
		}
		if needNet {
			d, verr := openVerbs(over)
			switch {
			case verr == nil:
				devs.net = d
				whys = append(whys, "an RDMA device is usable")
			case !errors.Is(verr, transport.ErrNotSupported):
				return devs, "", fmt.Errorf("GOCCL_TRANSPORT=auto: %w", verr)
			default:
				// Why verbs is off, e.g. "verbs: libibverbs.so.1 not
				// loaded (...)" or "verbs: no RDMA device (...)".
				whys = append(whys, strings.TrimSuffix(verr.Error(), ": "+transport.ErrNotSupported.Error()))
				if devs.net, err = openTCP(advertise, over); err != nil {
					return devs, "", err
				}
			}
		}
		return devs, "GOCCL_TRANSPORT=auto: " + strings.Join(whys, "; "), nil
	case "shm":
		if devs.shm, err = openShm(info); err != nil {
			return devs, "", fmt.Errorf("GOCCL_TRANSPORT=shm: %w", err)
		}
		return devs, "GOCCL_TRANSPORT=shm", nil
	case "tcp":
		devs.net, err = openTCP(advertise, over)
		return devs, "GOCCL_TRANSPORT=tcp", err
	case "verbs":
		d, err := openVerbs(over)
		if err != nil {
			return devs, "", fmt.Errorf("GOCCL_TRANSPORT=verbs: %w", err)
		}
		devs.net = d
		return devs, "GOCCL_TRANSPORT=verbs", nil
	default:
		return devs, "", fmt.Errorf("GOCCL_TRANSPORT=%q: want auto, shm, tcp or verbs", t)
	}
}

// openShm opens the shared-memory transport. With more ranks than cores it
// does not spin before it yields the core, and it gives each step of a
// connection's handshake longer than the default 5 s, in proportion to the
// ranks per core: an all-to-all connects every pair of the host at once,
// and with hundreds of ranks per core a peer may not run for seconds.
func openShm(info bootstrap.Info) (*shm.Device, error) {
	var o shm.Options
	if oversubscribed(info) {
		o.Spin = -1
		perCore := info.LocalSize / runtime.NumCPU()
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

func openVerbs(oversubscribed bool) (*verbs.Device, error) {
	cfg, err := verbs.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	if oversubscribed {
		cfg.Spin = -1
	}
	return verbs.OpenConfig(cfg)
}

// logTransport says which transports this process opened and why, once
// per host (the first local rank) or, with GOCCL_DEBUG, on every rank:
// hosts may differ in what they have. Which peer uses which is logged by
// connect with GOCCL_DEBUG, and told by Comm.Transports.
func logTransport(rank int, devs devices, why string, firstOnHost bool) {
	if firstOnHost || debugEnabled() {
		var names []string
		for _, d := range []transport.Device{devs.shm, devs.net} {
			if d != nil {
				names = append(names, d.Name())
			}
		}
		log.Printf("goccl: rank %d: transports %s (%s)", rank, strings.Join(names, ", "), why)
	}
}

// openTCP opens the TCP transport. oversubscribed (more local ranks than
// cores) makes its waits spin briefly and yield the processor while they do.
func openTCP(advertise string, oversubscribed bool) (transport.Device, error) {
	// GOCCL_SOCKET_TIMEOUT bounds how long unacknowledged data may sit on a
	// connection (TCP_USER_TIMEOUT) before the link is declared dead.
	ut, err := envDuration("GOCCL_SOCKET_TIMEOUT", 10*time.Second)
	if err != nil {
		return nil, err
	}
	// GOCCL_SPIN_TIME is how long a wait polls its sockets while nothing
	// arrives before it sleeps ("0s" sleeps at once).
	var spin time.Duration
	if v := os.Getenv("GOCCL_SPIN_TIME"); v != "" {
		if spin, err = time.ParseDuration(v); err != nil || spin < 0 {
			return nil, fmt.Errorf("GOCCL_SPIN_TIME=%q: want a duration such as 200us", v)
		}
		if spin == 0 {
			spin = -1
		}
	}
	d, err := tcp.NewDevice(tcp.Options{AdvertiseHost: advertise, UserTimeout: ut, SpinTime: spin, Oversubscribed: oversubscribed})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// advertiseIP chooses the address peers reach this rank's TCP transport
// on: GOCCL_SOCKET_IFNAME's interface if set; else the local address of
// the connection to the bootstrap store, unless that is a loopback address
// while ranks run on other hosts (a host name that /etc/hosts maps to
// 127.0.1.1, say), in which case the first up, non-loopback IPv4 address.
func advertiseIP(storeLocal net.IP, info bootstrap.Info) (string, error) {
	if name := os.Getenv("GOCCL_SOCKET_IFNAME"); name != "" {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return "", fmt.Errorf("GOCCL_SOCKET_IFNAME=%q: %w", name, err)
		}
		if ip := firstIPv4(ifi); ip != nil {
			return ip.String(), nil
		}
		return "", fmt.Errorf("GOCCL_SOCKET_IFNAME=%q: interface has no IPv4 address", name)
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
		if ip := firstIPv4(&ifs[i]); ip != nil {
			return ip.String(), nil
		}
	}
	if storeLocal != nil {
		return storeLocal.String(), nil
	}
	return "127.0.0.1", nil
}

func firstIPv4(ifi *net.Interface) net.IP {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP
		}
	}
	return nil
}
