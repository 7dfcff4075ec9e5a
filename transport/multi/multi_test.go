package multi_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/logtest"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/multi"
	"github.com/goccl/goccl/transport/shm"
	"github.com/goccl/goccl/transport/tcp"
	"github.com/goccl/goccl/transport/transporttest"
)

// The whole contract holds through a Device whose endpoints live on its
// second member: every post must hand that member its own region.
func TestConformanceSecondMember(t *testing.T) {
	a, b := mem.NewNetwork(mem.Options{}), mem.NewNetwork(mem.Options{})
	transporttest.Run(t, func(t testing.TB) transport.Device {
		d, err := multi.New(1, a.NewDevice(), b.NewDevice())
		require.NoError(t, err)
		return d
	})
}

// Shared memory and TCP behind one device, as comm runs them.
func TestConformanceShmAndTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("the mem-backed suite covers the routing in -short mode")
	}
	for _, def := range []int{0, 1} {
		t.Run([]string{"shm", "tcp"}[def], func(t *testing.T) {
			transporttest.Run(t, func(t testing.TB) transport.Device {
				s, err := shm.NewDevice(shm.Options{})
				require.NoError(t, err)
				c, err := tcp.NewDevice(tcp.Options{ListenAddress: "127.0.0.1:0", Logger: logtest.New(t)})
				require.NoError(t, err)
				d, err := multi.New(def, s, c)
				require.NoError(t, err)
				return d
			})
		})
	}
}

// pair connects an endpoint on member i of two multi devices over two mem
// networks, and returns everything a test needs.
type side struct {
	dev *multi.Device
	cq  transport.CompletionQueue
	eps [2]transport.Endpoint
}

func newSides(t *testing.T) (x, y *side) {
	nets := [2]*mem.Network{mem.NewNetwork(mem.Options{}), mem.NewNetwork(mem.Options{})}
	mk := func() *side {
		d, err := multi.New(0, nets[0].NewDevice(), nets[1].NewDevice())
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		cq, err := d.NewCompletionQueue(64)
		require.NoError(t, err)
		s := &side{dev: d, cq: cq}
		for i := range 2 {
			s.eps[i], err = d.NewEndpointOn(i, cq)
			require.NoError(t, err)
		}
		return s
	}
	x, y = mk(), mk()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 2 {
		errc := make(chan error, 1)
		go func() { errc <- y.eps[i].Connect(ctx, x.eps[i].LocalAddress()) }()
		require.NoError(t, x.eps[i].Connect(ctx, y.eps[i].LocalAddress()))
		require.NoError(t, <-errc)
	}
	return x, y
}

// One buffer registered once goes to a peer on each member, and one queue
// reports both, naming the Device's endpoints; a park in Wait wakes on
// either member. In a synctest bubble: the completions are posted once
// the waiter is parked, not after a sleep that hopes it is.
func TestOneRegionTwoMembers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x, y := newSides(t)
		// Wait parks at once (no spin: the bubble's clock stands still
		// while goroutines run).
		x.cq.(*multi.CompletionQueue).Spin = 0
		x.cq.(*multi.CompletionQueue).Yield = 0
		src, err := x.dev.Register([]byte("0123456789abcdef"), transport.AccessAll)
		require.NoError(t, err)
		dst, err := y.dev.Register(make([]byte, 16), transport.AccessAll)
		require.NoError(t, err)
		for i := range 2 {
			rem, ok := dst.(*multi.Region).RemoteOn(i)
			require.True(t, ok)
			require.NoError(t, x.eps[i].PostWrite(uint64(10+i), src, 8*i, 8, rem, uint64(8*i), nil))
		}
		got := map[uint64]transport.Endpoint{}
		var out [4]transport.Completion
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for len(got) < 2 {
			n, err := x.cq.Wait(ctx, out[:])
			require.NoError(t, err)
			for _, c := range out[:n] {
				require.NoError(t, c.Err)
				got[c.ID] = c.Endpoint
			}
		}
		require.Equal(t, x.eps[0], got[10])
		require.Equal(t, x.eps[1], got[11])
		require.Equal(t, "0123456789abcdef", string(dst.Bytes()))

		// A waiter parked on both members wakes on the second one's
		// completion, and keeps its order.
		recv, err := x.dev.Register(make([]byte, 0), transport.AccessAll)
		require.NoError(t, err)
		for k := range 3 {
			require.NoError(t, x.eps[1].PostRecv(uint64(100+k), recv, 0, 0))
		}
		xrem, _ := recv.(*multi.Region).RemoteOn(1)
		go func() {
			synctest.Wait() // the waiter below is parked
			for k := range 3 {
				imm := uint32(k)
				y.eps[1].PostWrite(uint64(200+k), dst, 0, 0, xrem, 0, &imm)
			}
		}()
		var ids []uint64
		for len(ids) < 3 {
			n, err := x.cq.Wait(ctx, out[:])
			require.NoError(t, err)
			for _, c := range out[:n] {
				require.NoError(t, c.Err)
				ids = append(ids, c.ID)
			}
		}
		require.Equal(t, []uint64{100, 101, 102}, ids)
	})
}

// TestWaitCancelledWhileParked: a parked Wait returns at its context's
// deadline (on the bubble's clock: at once, and exactly then).
func TestWaitCancelledWhileParked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		x, _ := newSides(t)
		x.cq.(*multi.CompletionQueue).Spin = 0
		x.cq.(*multi.CompletionQueue).Yield = 0
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		var out [4]transport.Completion
		start := time.Now()
		n, err := x.cq.Wait(ctx, out[:])
		require.Zero(t, n)
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		require.Equal(t, 30*time.Millisecond, time.Since(start))
	})
}

func TestRegisterOnOneMember(t *testing.T) {
	x, _ := newSides(t)
	r, err := x.dev.RegisterOn(1, make([]byte, 8), transport.AccessAll)
	require.NoError(t, err)
	_, ok := r.RemoteOn(0)
	require.False(t, ok)
	_, ok = r.RemoteOn(1)
	require.True(t, ok)
	err = x.eps[0].PostSend(1, r, 0, 8)
	require.ErrorIs(t, err, transport.ErrInvalid)
	require.ErrorContains(t, err, "not registered with mem")
	require.NoError(t, x.dev.Deregister(r))
}

func TestNewRefusesBadArguments(t *testing.T) {
	_, err := multi.New(0)
	require.ErrorIs(t, err, transport.ErrInvalid)
	n := mem.NewNetwork(mem.Options{})
	_, err = multi.New(1, n.NewDevice())
	require.ErrorIs(t, err, transport.ErrInvalid)
	d, err := multi.New(0, n.NewDevice(), n.NewDevice())
	require.NoError(t, err)
	defer d.Close()
	require.Contains(t, d.Name(), "+mem")
	_, err = d.NewEndpointOn(2, nil)
	require.ErrorIs(t, err, transport.ErrInvalid)
}

// A Wait whose completion comes within its spin and yield does not park:
// parking hands each completion from a member's waiter goroutine to the
// caller, and with one processor per rank each such hand-off waited for
// the member waits' own spins (2 hosts of 2 ranks, an 8-byte allreduce:
// 600-1100 us per call when Wait parked after 50 us, 55-80 us without).
// The completion here comes 2 ms after the Wait began, on each member in
// turn, with a yield of a minute: the queue parked before the change.
func TestWaitYieldsBeforeItParks(t *testing.T) {
	x, y := newSides(t)
	q := x.cq.(*multi.CompletionQueue)
	q.Spin, q.Yield = 50*time.Microsecond, time.Minute
	dst, err := y.dev.Register(make([]byte, 8), transport.AccessAll)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		recv, err := x.dev.Register(make([]byte, 0), transport.AccessAll)
		require.NoError(t, err)
		require.NoError(t, x.eps[i].PostRecv(uint64(10+i), recv, 0, 0))
		xrem, _ := recv.(*multi.Region).RemoteOn(i)
		errc := make(chan error, 1)
		go func() {
			time.Sleep(2 * time.Millisecond)
			imm := uint32(i)
			errc <- y.eps[i].PostWrite(uint64(20+i), dst, 0, 0, xrem, 0, &imm)
		}()
		var out [4]transport.Completion
		n, err := q.Wait(ctx, out[:])
		require.NoError(t, err)
		require.NoError(t, <-errc)
		require.Equal(t, 1, n)
		require.NoError(t, out[0].Err)
		require.Equal(t, uint64(10+i), out[0].ID)
		require.Equal(t, x.eps[i], out[0].Endpoint)
	}
	require.Zero(t, multi.Parks(q), "Wait parked")
}
