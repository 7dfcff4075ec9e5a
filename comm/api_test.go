package comm_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unsafe"

	. "github.com/goccl/goccl/comm"
)

func rawOf(s []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 4*len(s))
}

// form is one way to call a collective: it runs the call with opts on
// rank c and returns, for the asynchronous forms, the algorithm the
// finished call reports, and its error.
type form func(c *Comm, opts ...CallOption) (algo string, async bool, err error)

func blocking(f func(ctx context.Context, c *Comm, opts ...CallOption) error) form {
	return func(c *Comm, opts ...CallOption) (string, bool, error) {
		return "", false, f(context.Background(), c, opts...)
	}
}

func async(f func(c *Comm, opts ...CallOption) *Request) form {
	return func(c *Comm, opts ...CallOption) (string, bool, error) {
		r := f(c, opts...)
		err := r.Wait(context.Background())
		return r.Algorithm(), true, err
	}
}

// errInit marks the error of the persistent form's ...Init: a call
// refused there never started.
var errInit = errors.New("init: ")

// persistent is the persistent form of a collective: prepared by init,
// started once and waited for.
func persistent(init func(c *Comm, o ...CallOption) (*Persistent, error)) form {
	return func(c *Comm, o ...CallOption) (string, bool, error) {
		p, err := init(c, o...)
		if err != nil {
			return "", false, fmt.Errorf("%w%w", errInit, err)
		}
		if err := p.Start(); err != nil {
			return "", false, err
		}
		err = p.Wait(context.Background())
		return p.Algorithm(), true, err
	}
}

// everyForm lists, per canonical collective name, its four forms (typed
// and bytes, blocking and async; allreduce also persistent) on 2 ranks
// with blocks of 2 float32s.
func everyForm() map[string][]form {
	const k = 2
	b := func() []float32 { return make([]float32, 2*k) } // two blocks
	blk := func() []float32 { return make([]float32, k) }
	counts := []int{k, k}
	peer := func(c *Comm) int { return 1 - c.Rank() }
	p2p := func(c *Comm, send func() error, recv func() error) error {
		if c.Rank() == 0 {
			return send()
		}
		return recv()
	}
	return map[string][]form{
		"allreduce": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Allreduce(ctx, c, blk(), blk(), Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return AllreduceAsync(c, blk(), blk(), Sum, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.AllreduceBytes(ctx, rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.AllreduceBytesAsync(rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return AllreduceInit(c, nil, blk(), Sum, o...) }),
		},
		"broadcast": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error { return Broadcast(ctx, c, blk(), 0, o...) }),
			async(func(c *Comm, o ...CallOption) *Request { return BroadcastAsync(c, blk(), 0, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.BroadcastBytes(ctx, rawOf(blk()), TypeFloat32, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.BroadcastBytesAsync(rawOf(blk()), TypeFloat32, 0, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return BroadcastInit(c, blk(), 0, o...) }),
		},
		"reduce": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Reduce(ctx, c, blk(), blk(), Sum, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return ReduceAsync(c, blk(), blk(), Sum, 0, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.ReduceBytes(ctx, rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.ReduceBytesAsync(rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, 0, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return ReduceInit(c, blk(), blk(), Sum, 0, o...) }),
		},
		"allgather": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error { return Allgather(ctx, c, blk(), b(), o...) }),
			async(func(c *Comm, o ...CallOption) *Request { return AllgatherAsync(c, blk(), b(), o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.AllgatherBytes(ctx, rawOf(blk()), rawOf(b()), TypeFloat32, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.AllgatherBytesAsync(rawOf(blk()), rawOf(b()), TypeFloat32, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return AllgatherInit(c, blk(), b(), o...) }),
		},
		"allgatherv": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Allgatherv(ctx, c, blk(), b(), counts, nil, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return AllgathervAsync(c, blk(), b(), counts, nil, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.AllgathervBytes(ctx, rawOf(blk()), rawOf(b()), TypeFloat32, counts, nil, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.AllgathervBytesAsync(rawOf(blk()), rawOf(b()), TypeFloat32, counts, nil, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) {
				return AllgathervInit(c, blk(), b(), counts, nil, o...)
			}),
		},
		"reduce-scatter": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return ReduceScatter(ctx, c, b(), blk(), Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return ReduceScatterAsync(c, b(), blk(), Sum, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.ReduceScatterBytes(ctx, rawOf(b()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.ReduceScatterBytesAsync(rawOf(b()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) {
				return ReduceScatterInit(c, b(), blk(), Sum, o...)
			}),
		},
		"alltoall": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error { return Alltoall(ctx, c, b(), b(), o...) }),
			async(func(c *Comm, o ...CallOption) *Request { return AlltoallAsync(c, b(), b(), o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.AlltoallBytes(ctx, rawOf(b()), rawOf(b()), TypeFloat32, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.AlltoallBytesAsync(rawOf(b()), rawOf(b()), TypeFloat32, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return AlltoallInit(c, b(), b(), o...) }),
		},
		"alltoallv": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Alltoallv(ctx, c, b(), counts, nil, b(), counts, nil, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return AlltoallvAsync(c, b(), counts, nil, b(), counts, nil, o...)
			}),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.AlltoallvBytes(ctx, rawOf(b()), counts, nil, rawOf(b()), counts, nil, TypeFloat32, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.AlltoallvBytesAsync(rawOf(b()), counts, nil, rawOf(b()), counts, nil, TypeFloat32, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) {
				return AlltoallvInit(c, b(), counts, nil, b(), counts, nil, o...)
			}),
		},
		"gather": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error { return Gather(ctx, c, blk(), b(), 0, o...) }),
			async(func(c *Comm, o ...CallOption) *Request { return GatherAsync(c, blk(), b(), 0, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.GatherBytes(ctx, rawOf(blk()), rawOf(b()), TypeFloat32, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.GatherBytesAsync(rawOf(blk()), rawOf(b()), TypeFloat32, 0, o...)
			}),
		},
		"scatter": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error { return Scatter(ctx, c, b(), blk(), 0, o...) }),
			async(func(c *Comm, o ...CallOption) *Request { return ScatterAsync(c, b(), blk(), 0, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.ScatterBytes(ctx, rawOf(b()), rawOf(blk()), TypeFloat32, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.ScatterBytesAsync(rawOf(b()), rawOf(blk()), TypeFloat32, 0, o...)
			}),
		},
		"gatherv": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Gatherv(ctx, c, blk(), b(), counts, nil, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return GathervAsync(c, blk(), b(), counts, nil, 0, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.GathervBytes(ctx, rawOf(blk()), rawOf(b()), TypeFloat32, counts, nil, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.GathervBytesAsync(rawOf(blk()), rawOf(b()), TypeFloat32, counts, nil, 0, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) {
				return GathervInit(c, blk(), b(), counts, nil, 0, o...)
			}),
		},
		"scatterv": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Scatterv(ctx, c, b(), blk(), counts, nil, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return ScattervAsync(c, b(), blk(), counts, nil, 0, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.ScattervBytes(ctx, rawOf(b()), rawOf(blk()), TypeFloat32, counts, nil, 0, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.ScattervBytesAsync(rawOf(b()), rawOf(blk()), TypeFloat32, counts, nil, 0, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) {
				return ScattervInit(c, b(), blk(), counts, nil, 0, o...)
			}),
		},
		"scan": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Scan(ctx, c, blk(), blk(), Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return ScanAsync(c, blk(), blk(), Sum, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.ScanBytes(ctx, rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.ScanBytesAsync(rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return ScanInit(c, nil, blk(), Sum, o...) }),
		},
		"exscan": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return Exscan(ctx, c, blk(), blk(), Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request { return ExscanAsync(c, blk(), blk(), Sum, o...) }),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.ExscanBytes(ctx, rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.ExscanBytesAsync(rawOf(blk()), rawOf(blk()), TypeFloat32, Sum, o...)
			}),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return ExscanInit(c, nil, blk(), Sum, o...) }),
		},
		"barrier": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error { return c.Barrier(ctx, o...) }),
			async(func(c *Comm, o ...CallOption) *Request { return c.BarrierAsync(o...) }),
			persistent(func(c *Comm, o ...CallOption) (*Persistent, error) { return BarrierInit(c, o...) }),
		},
		"send": { // rank 0 sends, rank 1 receives
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return p2p(c, func() error { return Send(ctx, c, blk(), 1, 3, o...) }, func() error { return Recv(ctx, c, blk(), 0, 3, o...) })
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				if c.Rank() == 0 {
					return SendAsync(c, blk(), 1, 3, o...)
				}
				return RecvAsync(c, blk(), 0, 3, o...)
			}),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return p2p(c, func() error { return c.SendBytes(ctx, rawOf(blk()), TypeFloat32, 1, 3, o...) },
					func() error { return c.RecvBytes(ctx, rawOf(blk()), TypeFloat32, 0, 3, o...) })
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				if c.Rank() == 0 {
					return c.SendBytesAsync(rawOf(blk()), TypeFloat32, 1, 3, o...)
				}
				return c.RecvBytesAsync(rawOf(blk()), TypeFloat32, 0, 3, o...)
			}),
		},
		"sendrecv": {
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return SendRecv(ctx, c, blk(), peer(c), blk(), peer(c), 4, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return SendRecvAsync(c, blk(), peer(c), blk(), peer(c), 4, o...)
			}),
			blocking(func(ctx context.Context, c *Comm, o ...CallOption) error {
				return c.SendRecvBytes(ctx, rawOf(blk()), peer(c), rawOf(blk()), peer(c), TypeFloat32, 4, o...)
			}),
			async(func(c *Comm, o ...CallOption) *Request {
				return c.SendRecvBytesAsync(rawOf(blk()), peer(c), rawOf(blk()), peer(c), TypeFloat32, 4, o...)
			}),
		},
	}
}

// TestEveryFormTakesOptions calls every collective in each of its forms
// with every algorithm forced, and with an unknown one (issue 11 item
// 14b: the v-collectives, gather, scatter and send/recv had no bytes form
// and some no options), which breaks the communicator as any refused
// argument does; the asynchronous forms report the algorithm they ran
// (item 14f).
func TestEveryFormTakesOptions(t *testing.T) {
	forms := everyForm()
	runRanks(t, 2, testOpts, func(c *Comm) error {
		for _, coll := range slices.Sorted(maps.Keys(forms)) { // the same order on every rank
			fs, algos := forms[coll], Algorithms(coll)
			if len(algos) == 0 {
				return fmt.Errorf("%s: no algorithms", coll)
			}
			for i, f := range fs {
				for _, algo := range algos {
					used, isAsync, err := f(c, WithAlgorithm(algo))
					if err != nil {
						return fmt.Errorf("%s form %d with algorithm %s: %v", coll, i, algo, err)
					}
					if isAsync && used != algo {
						return fmt.Errorf("%s form %d forced to %s reports %q", coll, i, algo, used)
					}
				}
				// An unknown one is a refused argument: it breaks the
				// communicator (a duplicate here).
				d, err := c.Dup(context.Background())
				if err != nil {
					return err
				}
				_, _, err = f(d, WithAlgorithm("no-such"))
				if err == nil || !strings.Contains(err.Error(), `"no-such"`) {
					d.Close()
					return fmt.Errorf("%s form %d with an unknown algorithm: %v", coll, i, err)
				}
				initRefused := errors.Is(err, errInit) // nothing started
				_, _, err = f(d)
				d.Close()
				if err == nil && !initRefused {
					return fmt.Errorf("%s form %d after one with an unknown algorithm succeeded: want the communicator broken", coll, i)
				}
				if used, isAsync, err := f(c); err != nil || (isAsync && !slices.Contains(algos, used)) {
					return fmt.Errorf("%s form %d, the selector's choice: %v, ran %q (have %v)", coll, i, err, used, algos)
				}
			}
		}
		return nil
	})
}
