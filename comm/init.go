package comm

import (
	"context"
	"errors"
	"fmt"
	"os"

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
	info, err := bootstrap.FromEnv()
	if errors.Is(err, bootstrap.ErrNoLauncher) {
		dev, derr := openTransport("127.0.0.1")
		if derr != nil {
			return nil, fmt.Errorf("comm: init single rank: %w", derr)
		}
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
	dev, err := openTransport(b.Client().LocalIP().String())
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("comm: init rank %d of %d: %w", info.Rank, info.Size, err)
	}
	opts.OwnDevice = true
	// New closes b and dev itself if it fails.
	return New(ctx, b, dev, opts)
}

// openTransport opens the transport GOCCL_TRANSPORT asks for. advertise is
// the IP address peers reach this rank on over TCP.
//
// Every rank must end up on the same transport; with "auto" a job whose
// hosts differ (some with an RDMA device, some without) must set
// GOCCL_TRANSPORT explicitly.
func openTransport(advertise string) (transport.Device, error) {
	switch t := os.Getenv("GOCCL_TRANSPORT"); t {
	case "", "auto":
		d, err := verbs.Open()
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, transport.ErrNotSupported) {
			return nil, fmt.Errorf("GOCCL_TRANSPORT=auto: verbs: %w", err)
		}
		return openTCP(advertise)
	case "tcp":
		return openTCP(advertise)
	case "verbs":
		d, err := verbs.Open()
		if err != nil {
			return nil, fmt.Errorf("GOCCL_TRANSPORT=verbs: %w", err)
		}
		return d, nil
	default:
		return nil, fmt.Errorf("GOCCL_TRANSPORT=%q: want auto, tcp or verbs", t)
	}
}

func openTCP(advertise string) (transport.Device, error) {
	d, err := tcp.NewDevice(tcp.Options{AdvertiseHost: advertise})
	if err != nil {
		return nil, err
	}
	return d, nil
}
