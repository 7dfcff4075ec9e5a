package commtest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/tcp"
)

// Connect starts n ranks as goroutines of this process over the named
// transport ("mem", or "tcp" on loopback) and returns their connected
// communicators, each owning its device; on failure it closes what it made
// and returns every rank's error joined.
func Connect(ctx context.Context, kind string, n int, opts comm.Options) ([]*comm.Comm, error) {
	network := mem.NewNetwork(mem.Options{})
	g := comm.NewLocalGroup(n)
	comms := make([]*comm.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dev transport.Device = network.NewDevice()
			if kind == "tcp" {
				d, err := tcp.NewDevice(tcp.Options{ListenAddress: "127.0.0.1:0"})
				if err != nil {
					errs[r] = fmt.Errorf("rank %d: %w", r, err)
					return
				}
				dev = d
			}
			o := opts
			o.OwnDevice = true
			c, err := comm.New(ctx, g.Member(r), dev, o)
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

// Run starts a job of n ranks (see Connect), runs f on every rank
// concurrently, closes the communicators and returns each rank's error
// (f's, or Close's).
func Run(ctx context.Context, kind string, n int, opts comm.Options, f func(c *comm.Comm) error) []error {
	errs := make([]error, n)
	comms, err := Connect(ctx, kind, n, opts)
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
