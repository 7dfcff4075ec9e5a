package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// shutdownLinger bounds how long the rank hosting the store waits, in
// Close, for the other ranks to disconnect before it stops the store.
const shutdownLinger = 10 * time.Second

// Bootstrap is one rank's membership in a group that meets at a store:
// its rank and size and the group operations the communicator needs before
// any transport is up (exchanging address blobs, barriers).
//
// Every operation is collective: all ranks of the group call it in the same
// order. Keys live under a prefix, so a sub-group (WithPrefix) has its own
// namespace over the same connection.
type Bootstrap struct {
	info   Info
	client *Client
	server *Server // non-nil on the rank that hosts the store
	prefix string
	seq    *atomic.Uint64 // per-namespace call counter
	owner  bool           // Close closes client and server
}

// Connect joins the group described by info. If info.HostRoot, it first
// starts the store on info.Addr's port (on info.Addr's host when that is a
// loopback address, else on every interface); then it dials the store,
// retrying until ctx is done.
func Connect(ctx context.Context, info Info, opts ...ServerOption) (*Bootstrap, error) {
	if info.Size < 1 || info.Rank < 0 || info.Rank >= info.Size {
		return nil, fmt.Errorf("bootstrap: connect: rank %d out of range for size %d", info.Rank, info.Size)
	}
	b := &Bootstrap{info: info, prefix: "goccl/", seq: new(atomic.Uint64), owner: true}
	addr := info.Addr
	if info.HostRoot {
		host, port, err := net.SplitHostPort(info.Addr)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: connect: store address %q: %w", info.Addr, err)
		}
		listen := net.JoinHostPort("", port)
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
			listen = info.Addr
		}
		srv, err := NewServer(listen, info.Secret, opts...)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank %d hosts the store: %w", info.Rank, err)
		}
		b.server = srv
		if port == "0" {
			_, p, _ := net.SplitHostPort(srv.Addr())
			addr = net.JoinHostPort(host, p)
			b.info.Addr = addr
		}
	}
	c, err := Dial(ctx, addr, info.Secret)
	if err != nil {
		if b.server != nil {
			b.server.Close()
		}
		return nil, fmt.Errorf("bootstrap: rank %d: %w", info.Rank, err)
	}
	b.client = c
	return b, nil
}

// Rank is this rank's index in the group.
func (b *Bootstrap) Rank() int { return b.info.Rank }

// Size is the number of ranks in the group.
func (b *Bootstrap) Size() int { return b.info.Size }

// Info is what the group was created from. On the hosting rank with port 0,
// Addr holds the port actually bound.
func (b *Bootstrap) Info() Info { return b.info }

// Client is the store connection, for callers that need raw keys.
func (b *Bootstrap) Client() *Client { return b.client }

// WithPrefix returns a view of the same group and connection whose keys
// live under the namespace p (nested inside b's). Its call counter is its
// own. Closing the view does not close the connection.
func (b *Bootstrap) WithPrefix(p string) *Bootstrap {
	return &Bootstrap{
		info:   b.info,
		client: b.client,
		prefix: b.prefix + p + "/",
		seq:    new(atomic.Uint64),
	}
}

// Allgather publishes data under this rank's name and returns every rank's
// data, indexed by rank. It blocks until all ranks have called it, ctx is
// done or the store connection ends.
func (b *Bootstrap) Allgather(ctx context.Context, data []byte) ([][]byte, error) {
	n := b.seq.Add(1)
	base := b.prefix + "ag/" + strconv.FormatUint(n, 10) + "/"
	if err := b.client.Set(ctx, base+strconv.Itoa(b.info.Rank), data); err != nil {
		return nil, fmt.Errorf("bootstrap: allgather #%d: rank %d: %w", n, b.info.Rank, err)
	}
	out := make([][]byte, b.info.Size)
	out[b.info.Rank] = append([]byte(nil), data...)
	for r := range b.info.Size {
		if r == b.info.Rank {
			continue
		}
		v, err := b.client.Get(ctx, base+strconv.Itoa(r))
		if err != nil {
			return nil, fmt.Errorf("bootstrap: allgather #%d: rank %d waiting for rank %d: %w", n, b.info.Rank, r, err)
		}
		out[r] = v
	}
	return out, nil
}

// Barrier returns once every rank has called it, or fails when ctx is done
// or the store connection ends.
func (b *Bootstrap) Barrier(ctx context.Context) error {
	n := b.seq.Add(1)
	base := b.prefix + "barrier/" + strconv.FormatUint(n, 10)
	v, err := b.client.Add(ctx, base, 1)
	if err != nil {
		return fmt.Errorf("bootstrap: barrier #%d: rank %d: %w", n, b.info.Rank, err)
	}
	if v == int64(b.info.Size) {
		if err := b.client.Set(ctx, base+"/done", nil); err != nil {
			return fmt.Errorf("bootstrap: barrier #%d: rank %d: %w", n, b.info.Rank, err)
		}
		return nil
	}
	if err := b.client.Wait(ctx, base+"/done"); err != nil {
		return fmt.Errorf("bootstrap: barrier #%d: rank %d: %w", n, b.info.Rank, err)
	}
	return nil
}

// Close leaves the group. On a view from WithPrefix it does nothing. On the
// rank hosting the store it first waits (at most 10 s) for the other ranks
// to disconnect, so that a rank finishing early does not cut the others
// off; then it stops the store. It stops accepting connections at once, so
// call it only after every rank has connected (after any collective call).
func (b *Bootstrap) Close() error {
	if !b.owner {
		return nil
	}
	err := b.client.Close()
	if b.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownLinger)
		defer cancel()
		err = errors.Join(err, b.server.Shutdown(ctx))
	}
	return err
}
