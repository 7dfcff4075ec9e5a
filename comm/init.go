package comm

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
	"github.com/goccl/goccl/transport/verbs"
)

// Init joins the job this process was started in. It reads the rank, size,
// store address and secret that gorun, torchrun, Slurm's srun or Open MPI's
// mpirun set (see package bootstrap), meets the other ranks through the
// bootstrap store, opens the transport and connects every peer. ctx bounds
// the whole set-up. A process started without any launcher runs as a
// single rank.
//
// The transport is chosen by GOCCL_TRANSPORT: "auto" (default: verbs when a
// usable RDMA device exists, else TCP), "tcp", or "verbs" (an error if no
// device is usable).
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
		dev, why, derr := openTransport("127.0.0.1", false)
		if derr != nil {
			return nil, fmt.Errorf("comm: init single rank: %w", derr)
		}
		logTransport(0, dev, why, true)
		opts.OwnDevice = true
		return New(ctx, NewLocalGroup(1).Member(0), dev, opts)
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
	// More ranks than cores on this host: a rank that spins while it waits
	// takes the core its peer needs. Block at once instead.
	oversubscribed := info.LocalSize > runtime.NumCPU()
	dev, why, err := openTransport(advertise, oversubscribed)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err)
	}
	logTransport(info.Rank, dev, why, info.LocalRank == 0)
	opts.OwnDevice = true
	if opts.SpinPolls == 0 && os.Getenv("GOCCL_SPIN_POLLS") == "" && oversubscribed {
		opts.SpinPolls = 1
	}
	// New closes b and dev itself if it fails.
	return New(ctx, b, dev, opts)
}

// openTransport opens the transport GOCCL_TRANSPORT asks for and says why
// that one. advertise is the IP address peers reach this rank on over TCP;
// oversubscribed says that local ranks outnumber cores (the verbs
// transport then does not spin while it waits).
//
// Every rank must end up on the same transport; with "auto" a job whose
// hosts differ (some with an RDMA device, some without) must set
// GOCCL_TRANSPORT explicitly.
func openTransport(advertise string, oversubscribed bool) (dev transport.Device, why string, err error) {
	switch t := os.Getenv("GOCCL_TRANSPORT"); t {
	case "", "auto":
		d, err := openVerbs(oversubscribed)
		if err == nil {
			return d, "GOCCL_TRANSPORT=auto: an RDMA device is usable", nil
		}
		if !errors.Is(err, transport.ErrNotSupported) {
			return nil, "", fmt.Errorf("GOCCL_TRANSPORT=auto: %w", err)
		}
		// Why verbs is off, e.g. "verbs: libibverbs.so.1 not loaded
		// (...)" or "verbs: no RDMA device (...)".
		why := "GOCCL_TRANSPORT=auto: " + strings.TrimSuffix(err.Error(), ": "+transport.ErrNotSupported.Error())
		dev, err := openTCP(advertise, oversubscribed)
		return dev, why, err
	case "tcp":
		dev, err := openTCP(advertise, oversubscribed)
		return dev, "GOCCL_TRANSPORT=tcp", err
	case "verbs":
		d, err := openVerbs(oversubscribed)
		if err != nil {
			return nil, "", fmt.Errorf("GOCCL_TRANSPORT=verbs: %w", err)
		}
		return d, "GOCCL_TRANSPORT=verbs", nil
	default:
		return nil, "", fmt.Errorf("GOCCL_TRANSPORT=%q: want auto, tcp or verbs", t)
	}
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

// logTransport says which transport this process uses and why, once per
// host (the first local rank) or, with GOCCL_DEBUG, on every rank: hosts
// may differ in what they have.
func logTransport(rank int, dev transport.Device, why string, firstOnHost bool) {
	if firstOnHost || debugEnabled() {
		log.Printf("goccl: rank %d: transport %s (%s)", rank, dev.Name(), why)
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
