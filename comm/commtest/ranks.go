package commtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/shm"
	"github.com/goccl/goccl/transport/tcp"
)

// Kinds are the transports Connect knows:
//
//   - "mem": the in-memory transport;
//   - "tcp": TCP on loopback;
//   - "shm": shared memory (every rank on one host);
//   - "hosts": the ranks on two hosts (the first half and the rest, by
//     Options.HostID), shared memory within a host and TCP between them;
//   - "mem-hosts": as "hosts" with two in-memory networks standing for
//     shared memory and the network (fast, for large tables).
var Kinds = []string{"mem", "tcp", "shm", "hosts", "mem-hosts"}

// Connect starts n ranks as goroutines of this process over the named
// transport (see Kinds) and returns their connected communicators, each
// owning its devices; on failure it closes what it made and returns every
// rank's error joined.
func Connect(ctx context.Context, kind string, n int, opts comm.Options) ([]*comm.Comm, error) {
	var hosts []int
	if kind == "hosts" || kind == "mem-hosts" {
		hosts = make([]int, n)
		for r := range hosts {
			hosts[r] = min(r/((n+1)/2), 1) // two hosts, the first half on host 0
		}
	}
	return connect(ctx, kind, n, opts, hosts)
}

// ConnectOnHosts is Connect for kind "hosts" or "mem-hosts" with rank r on
// host hosts[r] (any layout: hosts of unequal rank counts, interleaved).
func ConnectOnHosts(ctx context.Context, kind string, hosts []int, opts comm.Options) ([]*comm.Comm, error) {
	if kind != "hosts" && kind != "mem-hosts" {
		return nil, fmt.Errorf("commtest: ConnectOnHosts of kind %q (want hosts or mem-hosts)", kind)
	}
	return connect(ctx, kind, len(hosts), opts, hosts)
}

// connect is Connect with rank r on host hosts[r] when hosts is not nil.
func connect(ctx context.Context, kind string, n int, opts comm.Options, hosts []int) ([]*comm.Comm, error) {
	network, local := mem.NewNetwork(mem.Options{}), mem.NewNetwork(mem.Options{})
	g := comm.NewLocalGroup(n)
	comms := make([]*comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts
			o.OwnDevice = true
			devs, err := devicesFor(kind, network, local)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				return
			}
			if hosts != nil {
				o.HostID = fmt.Sprintf("commtest host %d", hosts[r])
			}
			c, err := comm.NewWith(ctx, g.Member(r), devs, o)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				return
			}
			comms[r] = c
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	return comms, nil
}

// devicesFor opens one rank's devices of the named kind.
func devicesFor(kind string, network, local *mem.Network) (comm.Devices, error) {
	newTCP := func() (transport.Device, error) { return tcp.NewDevice(tcp.Options{ListenAddress: "127.0.0.1:0"}) }
	newShm := func() (transport.Device, error) { return shm.NewDevice(shm.Options{}) }
	switch kind {
	case "mem":
		return comm.Devices{Net: network.NewDevice()}, nil
	case "mem-hosts":
		return comm.Devices{Net: network.NewDevice(), Shm: local.NewDevice()}, nil
	case "tcp":
		d, err := newTCP()
		return comm.Devices{Net: d}, err
	case "shm":
		d, err := newShm()
		return comm.Devices{Shm: d}, err
	case "hosts":
		s, err := newShm()
		if err != nil {
			return comm.Devices{}, err
		}
		d, err := newTCP()
		if err != nil {
			s.Close()
			return comm.Devices{}, err
		}
		return comm.Devices{Net: d, Shm: s}, nil
	}
	return comm.Devices{}, fmt.Errorf("commtest: unknown transport kind %q (have %v)", kind, Kinds)
}

// Run starts a job of n ranks (see Connect), runs f on every rank
// concurrently, closes the communicators and returns each rank's error
// (f's, or Close's).
func Run(ctx context.Context, kind string, n int, opts comm.Options, f func(c *comm.Comm) error) []error {
	comms, err := Connect(ctx, kind, n, opts)
	return runOn(comms, err, n, f)
}

// RunOnHosts is Run over ConnectOnHosts: rank r on host hosts[r].
func RunOnHosts(ctx context.Context, kind string, hosts []int, opts comm.Options, f func(c *comm.Comm) error) []error {
	comms, err := ConnectOnHosts(ctx, kind, hosts, opts)
	return runOn(comms, err, len(hosts), f)
}

// runOn runs f on every one of comms concurrently (or reports err, the
// connection's failure, for each of n ranks) and closes them.
func runOn(comms []*comm.Comm, err error, n int, f func(c *comm.Comm) error) []error {
	errs := make([]error, n)
	if err != nil {
		for r := range errs {
			errs[r] = err
		}
		return errs
	}
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(c)
			if err := c.Close(); err != nil && errs[r] == nil {
				errs[r] = fmt.Errorf("close: %w", err)
			}
		}()
	}
	wg.Wait()
	return errs
}
