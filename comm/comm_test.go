package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
	"github.com/goccl/goccl/internal/racetest"
)

// raceEnabled: under the race detector (5-10x slower) the table tests
// shrink: fewer rank counts and a smaller "large" size. The full tables
// run without -race.
const raceEnabled = racetest.Enabled

// bigCount is the "1 MiB + 3 elements" case; the race detector's slowdown
// makes it 64 KiB + 3 there.
var bigCount = 1<<18 + 3

func init() {
	if raceEnabled {
		bigCount = 1<<14 + 3
	}
}

// testOpts uses small chunks and few slots so that even small buffers are
// cut into many chunks and flow control is exercised. Alpha and Beta are
// given, so New does not measure them (a fifth of the package's time
// under the race detector when every test did); TestMeasurementAtNew and
// the tests that set them to zero cover the measurement.
var testOpts = Options{ChunkSize: 4096, Slots: 3, Timeout: 60 * time.Second, Alpha: 20e-6, Beta: 1 / 2e9}

// transports the collective tests run over.
var transports = []string{"mem", "tcp"}

// runRanks runs f on n ranks, goroutines of this process connected by the
// in-memory transport, and fails the test with every rank's error.
func runRanks(t *testing.T, n int, opts Options, f func(c *Comm) error) {
	t.Helper()
	runRanksOn(t, "mem", n, opts, f)
}

// runRanksSenderLearns is runRanksOn for a test whose receiver fails on
// a message its sender sent and completed (a point-to-point mismatch):
// the sender's Close may name the message its receiver never received.
func runRanksSenderLearns(t *testing.T, kind string, opts Options, f func(c *Comm) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for r, err := range commtest.Run(ctx, kind, 2, opts, f) {
		if err != nil && (r != 0 || !strings.Contains(err.Error(), "a message that rank 1 never received")) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// runRanksOn is runRanks over the named transport.
func runRanksOn(t *testing.T, kind string, n int, opts Options, f func(c *Comm) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for r, err := range commtest.Run(ctx, kind, n, opts, f) {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// input is rank r's element i for operation op: small integers, so that
// every reduction is exact in every type and results compare bitwise.
func input(op Op, r, i int) float64 {
	if op == Prod {
		return []float64{1, -1, 2}[(r+i)%3]
	}
	return float64((r*7+i*3)%9 - 4)
}

// reference computes the expected element i over n ranks in float64,
// independently of the kernels under test.
func reference(op Op, n, i int, integer bool) float64 {
	acc := input(op, 0, i)
	for r := 1; r < n; r++ {
		v := input(op, r, i)
		switch op {
		case Sum, Avg:
			acc += v
		case Prod:
			acc *= v
		case Min:
			acc = math.Min(acc, v)
		case Max:
			acc = math.Max(acc, v)
		}
	}
	if op == Avg {
		acc /= float64(n)
		if integer {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

func checkAllreduce[T Number](ctx context.Context, c *Comm, count int, op Op, registered, inPlace bool) error {
	var send, recv []T
	var err error
	if registered {
		if recv, err = Alloc[T](c, count); err != nil {
			return err
		}
		defer Free(c, recv)
	} else {
		recv = make([]T, count)
	}
	send = recv
	if !inPlace {
		send = make([]T, count)
	}
	for i := range send {
		send[i] = T(input(op, c.Rank(), i))
	}
	if !inPlace {
		for i := range recv {
			recv[i] = 99
		}
	}
	if err := Allreduce(ctx, c, send, recv, op); err != nil {
		return err
	}
	integer := TypeOf[T]() != TypeFloat32 && TypeOf[T]() != TypeFloat64
	for i, v := range recv {
		want := float64(T(reference(op, c.Size(), i, integer)))
		if float64(v) != want {
			return fmt.Errorf("allreduce(%s, %d, %s, registered=%v, inplace=%v): element %d = %v, want %v",
				TypeOf[T](), count, op, registered, inPlace, i, v, want)
		}
	}
	if !inPlace {
		for i := range send {
			if send[i] != T(input(op, c.Rank(), i)) {
				return fmt.Errorf("allreduce out of place modified the send buffer at %d", i)
			}
		}
	}
	return nil
}

func TestAllreduceTable(t *testing.T) {
	for _, kind := range transports {
		for _, n := range tableRanks(kind, rankTable{
			mem: []int{1, 2, 3, 4, 5, 7, 8, 16}, memRace: []int{1, 3, 8},
			tcp: []int{2, 3, 4}, tcpRace: []int{3},
		}) {
			t.Run(fmt.Sprintf("%s/ranks=%d", kind, n), func(t *testing.T) {
				testAllreduceTable(t, kind, n)
			})
		}
	}
}

func testAllreduceTable(t *testing.T, kind string, n int) {
	{
		{
			counts := []int{0, 1, 7, 13, 3*n + 1, bigCount}
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				for _, count := range counts {
					for _, op := range []Op{Sum, Prod, Min, Max, Avg} {
						big := count > 1000
						if big && op != Sum && op != Avg {
							continue // large sizes once per kernel family is enough
						}
						for _, reg := range []bool{false, true} {
							inPlace := !reg
							if err := checkAllreduce[float32](ctx, c, count, op, reg, inPlace); err != nil {
								return err
							}
							if big && reg {
								continue
							}
							if err := checkAllreduce[float64](ctx, c, count, op, reg, !inPlace); err != nil {
								return err
							}
							if err := checkAllreduce[int32](ctx, c, count, op, reg, inPlace); err != nil {
								return err
							}
							if err := checkAllreduce[int64](ctx, c, count, op, reg, !inPlace); err != nil {
								return err
							}
						}
					}
				}
				return nil
			})
		}
	}
}

func TestBroadcastAndBarrier(t *testing.T) {
	for _, kind := range transports {
		// Every root at every rank count, 2 MiB each.
		for _, n := range tableRanks(kind, rankTable{
			mem: []int{1, 2, 3, 5, 8, 9}, memRace: []int{1, 2, 3, 5},
			tcp: []int{1, 2, 3}, tcpRace: []int{1, 2},
		}) {
			t.Run(fmt.Sprintf("%s/ranks=%d", kind, n), func(t *testing.T) {
				testBroadcastAndBarrier(t, kind, n)
			})
		}
	}
}

func testBroadcastAndBarrier(t *testing.T, kind string, n int) {
	{
		{
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				for _, count := range []int{0, 1, 7, 4099, 1<<18 + 5} {
					for root := range n {
						buf := make([]int64, count)
						for i := range buf {
							buf[i] = int64(c.Rank()*1000000 + i)
						}
						if err := Broadcast(ctx, c, buf, root); err != nil {
							return err
						}
						for i, v := range buf {
							if want := int64(root*1000000 + i); v != want {
								return fmt.Errorf("broadcast(root=%d, %d): element %d = %d, want %d", root, count, i, v, want)
							}
						}
						if err := c.Barrier(ctx); err != nil {
							return err
						}
					}
				}
				return nil
			})
		}
	}
}

// TestAsyncInFlight queues many asynchronous allreduces before waiting for
// any and checks they ran in order with the right results.
func TestAsyncInFlight(t *testing.T) {
	runRanks(t, 4, testOpts, func(c *Comm) error {
		const k = 32
		bufs := make([][]float32, k)
		reqs := make([]*Request, k)
		for j := range k {
			bufs[j] = make([]float32, 1000+j*37)
			for i := range bufs[j] {
				bufs[j][i] = float32(c.Rank() + j)
			}
			reqs[j] = AllreduceAsync(c, bufs[j], bufs[j], Sum)
		}
		if err := WaitAll(context.Background(), reqs...); err != nil {
			return err
		}
		for j := range k {
			want := float32(6 + 4*j)
			for i, v := range bufs[j] {
				if v != want {
					return fmt.Errorf("request %d element %d = %v, want %v", j, i, v, want)
				}
			}
		}
		return nil
	})
}

// TestWaitFinishedWithEndedContext: Wait and WaitAll on a request that
// has finished return its result even when their context has ended too
// (they failed about half the time: a select picked the context).
func TestWaitFinishedWithEndedContext(t *testing.T) {
	runRanks(t, 2, testOpts, func(c *Comm) error {
		x := []float32{float32(c.Rank() + 1)}
		r := AllreduceAsync(c, x, x, Sum)
		if err := r.Wait(context.Background()); err != nil {
			return err
		}
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		for i := range 200 {
			if err := r.Wait(ended); err != nil {
				return fmt.Errorf("Wait %d of a finished request with an ended context: %w", i, err)
			}
		}
		if err := WaitAll(ended, r, r, r); err != nil {
			return fmt.Errorf("WaitAll of a finished request with an ended context: %w", err)
		}
		if x[0] != 3 {
			return fmt.Errorf("x = %v, want 3", x[0])
		}
		return nil
	})
}

// TestBadArguments: a call whose arguments a rank refuses fails on that
// rank with an error naming the argument, and breaks the communicator (as
// MPI's default error handler makes errors fatal): later calls fail too.
// (TestBadInputFailsEveryRank checks the other ranks.)
func TestBadArguments(t *testing.T) {
	bad := []struct {
		what, want string
		call       func(ctx context.Context, c *Comm) error
	}{
		{"length", "send has 12 bytes but recv has 16", func(ctx context.Context, c *Comm) error {
			return Allreduce(ctx, c, make([]float32, 3), make([]float32, 4), Sum)
		}},
		{"op", "unsupported reduction", func(ctx context.Context, c *Comm) error {
			return Allreduce(ctx, c, []float32{1}, []float32{1}, Op(99))
		}},
		{"root", "root 2 out of range", func(ctx context.Context, c *Comm) error {
			return Broadcast(ctx, c, []float32{1}, 2)
		}},
	}
	for _, b := range bad {
		t.Run(b.what, func(t *testing.T) {
			runRanks(t, 2, testOpts, func(c *Comm) error {
				ctx := context.Background()
				err := b.call(ctx, c)
				if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", c.Rank())) {
					return fmt.Errorf("bad %s: error %v does not name rank %d and %q", b.what, err, c.Rank(), b.want)
				}
				buf := []float32{1}
				if err := Allreduce(ctx, c, buf, buf, Sum); err == nil {
					return fmt.Errorf("the communicator still works after a refused call")
				}
				return nil
			})
		})
	}
}

// TestPersistentCollectives prepares every persistent collective once
// (BroadcastInit, ReduceInit, AllgatherInit, ReduceScatterInit,
// AlltoallInit, BarrierInit) and starts each many times on new data, over
// the in-memory, TCP and shared-memory transports, checking every result.
func TestPersistentCollectives(t *testing.T) {
	for _, kind := range []string{"mem", "tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			const n, k = 3, 5 // ranks, elements per block
			runRanksOn(t, kind, n, testOpts, func(c *Comm) error {
				ctx := context.Background()
				me := c.Rank()
				bc, err := Alloc[int32](c, k) // registered, and plain below
				if err != nil {
					return err
				}
				defer Free(c, bc)
				red, redOut := make([]int32, k), make([]int32, k)
				agIn, agOut := make([]int32, k), make([]int32, n*k)
				rsIn, rsOut := make([]int32, n*k), make([]int32, k)
				a2aIn, a2aOut := make([]int32, n*k), make([]int32, n*k)
				var ps []*Persistent
				for _, mk := range []func() (*Persistent, error){
					func() (*Persistent, error) { return BroadcastInit(c, bc, 2) },
					func() (*Persistent, error) { return ReduceInit(c, red, redOut, Max, 1) },
					func() (*Persistent, error) { return AllgatherInit(c, agIn, agOut) },
					func() (*Persistent, error) { return ReduceScatterInit(c, rsIn, rsOut, Sum) },
					func() (*Persistent, error) { return AlltoallInit(c, a2aIn, a2aOut) },
					func() (*Persistent, error) { return BarrierInit(c) },
				} {
					p, err := mk()
					if err != nil {
						return err
					}
					ps = append(ps, p)
				}
				val := func(step, r, i int) int32 { return int32(1000*step + 100*r + i) }
				for step := range 12 {
					for i := range k {
						bc[i] = val(step, me, i)
						red[i] = val(step, me, i)
						agIn[i] = val(step, me, i)
					}
					for j := range n * k {
						rsIn[j] = val(step, me, j)
						a2aIn[j] = val(step, me, j)
					}
					for _, p := range ps {
						if err := p.Start(); err != nil {
							return err
						}
					}
					for i, p := range ps {
						if err := p.Wait(ctx); err != nil {
							return fmt.Errorf("step %d, persistent collective %d: %w", step, i, err)
						}
					}
					for i := range k {
						if bc[i] != val(step, 2, i) {
							return fmt.Errorf("step %d: broadcast [%d] = %d, want %d", step, i, bc[i], val(step, 2, i))
						}
						if me == 1 && redOut[i] != val(step, n-1, i) {
							return fmt.Errorf("step %d: reduce (max) [%d] = %d, want %d", step, i, redOut[i], val(step, n-1, i))
						}
						var sum int32
						for r := range n {
							sum += val(step, r, me*k+i)
							if got := agOut[r*k+i]; got != val(step, r, i) {
								return fmt.Errorf("step %d: allgather block %d [%d] = %d, want %d", step, r, i, got, val(step, r, i))
							}
							if got := a2aOut[r*k+i]; got != val(step, r, me*k+i) {
								return fmt.Errorf("step %d: alltoall block %d [%d] = %d, want %d", step, r, i, got, val(step, r, me*k+i))
							}
						}
						if rsOut[i] != sum {
							return fmt.Errorf("step %d: reduce-scatter [%d] = %d, want %d", step, i, rsOut[i], sum)
						}
					}
				}
				// Refused at Init, naming the argument; nothing breaks.
				if _, err := BroadcastInit(c, bc, n); err == nil || !strings.Contains(err.Error(), "root") {
					return fmt.Errorf("BroadcastInit with root %d of %d ranks: %v, want a refusal naming the root", n, n, err)
				}
				if _, err := AllgatherInit(c, agIn, rsOut); err == nil {
					return fmt.Errorf("AllgatherInit with a short recv: no error")
				}
				return c.Barrier(ctx)
			})
		})
	}
}

// TestPersistentInitNamesTheSubCommunicator: an ...Init refused on a
// sub-communicator names it, as the same call's refusal does (the
// blocking form's error ends with "[sub-communicator ...]"); the Init's
// did not.
func TestPersistentInitNamesTheSubCommunicator(t *testing.T) {
	runRanks(t, 3, testOpts, func(c *Comm) error {
		ctx := context.Background()
		sub, err := c.Split(ctx, c.Rank()%2, 0)
		if err != nil {
			return err
		}
		defer sub.Close()
		buf := make([]float32, 4)
		for name, init := range map[string]func() (*Persistent, error){
			"ReduceInit with BXor on float32": func() (*Persistent, error) { return ReduceInit(sub, buf, buf, BXor, 0) },
			"BroadcastInit with root 5":       func() (*Persistent, error) { return BroadcastInit(sub, buf, 5) },
			"AllreduceInit with a short recv": func() (*Persistent, error) { return AllreduceInit(sub, buf, buf[:2], Sum) },
		} {
			_, err := init()
			if err == nil || !strings.Contains(err.Error(), "[sub-communicator ") {
				return fmt.Errorf("%s on a sub-communicator: %v, want a refusal naming the sub-communicator", name, err)
			}
		}
		return sub.Barrier(ctx)
	})
}

// TestPersistentAllreduce starts one prepared allreduce many times, waited
// for by Wait or by polling Test, and checks the results and that a second
// Start before Wait is refused.
func TestPersistentAllreduce(t *testing.T) {
	runRanks(t, 3, testOpts, func(c *Comm) error {
		ctx := context.Background()
		buf, err := Alloc[float32](c, 10000)
		if err != nil {
			return err
		}
		defer Free(c, buf)
		p, err := AllreduceInit(c, nil, buf, Sum)
		if err != nil {
			return err
		}
		if err := p.Start(); err != nil {
			return err
		}
		if err := p.Start(); !errors.Is(err, ErrRunning) {
			return fmt.Errorf("second Start before Wait: %v, want ErrRunning", err)
		}
		if err := p.Wait(ctx); err != nil {
			return err
		}
		if done, err := p.Test(); !done || err != nil {
			return fmt.Errorf("Test after Wait: %v, %v, want true, nil", done, err)
		}
		for step := range 20 {
			for i := range buf {
				buf[i] = float32(c.Rank() + step)
			}
			if err := p.Start(); err != nil {
				return err
			}
			if step%2 == 0 {
				if err := p.Wait(ctx); err != nil {
					return err
				}
			} else {
				// MPI_Test's way: poll until it reports the start finished,
				// which frees the Persistent for the next Start.
				for {
					done, err := p.Test()
					if err != nil {
						return err
					}
					if done {
						break
					}
					runtime.Gosched()
				}
				if err := p.Start(); err != nil {
					return fmt.Errorf("Start after Test reported the last one finished: %v", err)
				}
				if err := p.Wait(ctx); err != nil {
					return err
				}
				// Two sums of the same data: the second of (3+3*step).
				if want := float32(3 * (3 + 3*step)); buf[0] != want || buf[len(buf)-1] != want {
					return fmt.Errorf("step %d, two starts: %v, want %v", step, buf[0], want)
				}
				continue
			}
			if want := float32(3 + 3*step); buf[0] != want || buf[len(buf)-1] != want {
				return fmt.Errorf("step %d: %v, want %v", step, buf[0], want)
			}
		}
		return nil
	})
}

// TestAbandonedBeforeStartNamesTheCall: a blocking call whose context has
// ended before it starts fails naming the call, its type, count and
// number, as on the shared-memory board; over TCP it said "comm: rank 0
// failed: allreduce: rank 0: compile recursive-doubling: rank 0: allreduce
// abandoned before it started: context canceled".
func TestAbandonedBeforeStartNamesTheCall(t *testing.T) {
	for _, kind := range []string{"tcp", "shm", "mem"} {
		t.Run(kind, func(t *testing.T) {
			var err0 error
			runRanksOn(t, kind, 2, testOpts, func(c *Comm) error {
				ctx, cancel := context.WithCancel(context.Background())
				if c.Rank() == 0 {
					cancel()
				}
				x := []float32{1}
				err := Allreduce(ctx, c, x, x, Sum)
				cancel()
				if c.Rank() == 0 {
					err0 = err
				}
				return nil
			})
			t.Log(err0)
			msg := fmt.Sprint(err0)
			if err0 == nil || !strings.Contains(msg, "allreduce(float32, 1, sum) #1") || strings.Contains(msg, "compile") ||
				!errors.Is(err0, context.Canceled) {
				t.Errorf("rank 0: %v; want the call named, its cause context.Canceled, and no compile step", err0)
			}
		})
	}
}

// TestQueuedBlockingCallBoundedByItsContext: a blocking call queued behind
// an asynchronous one that waits for a late peer returns when its context
// ends, and the communicator fails on every rank then: it returned only
// when its turn came (after the peer, 3 s here, or the stall timeout).
func TestQueuedBlockingCallBoundedByItsContext(t *testing.T) {
	sideBySide(t)
	for _, kind := range []string{"tcp", "shm"} {
		t.Run(kind, func(t *testing.T) {
			const late = 3 * time.Second
			var took time.Duration
			errs := make([]error, 2)
			var asyncErr error
			runRanksOn(t, kind, 2, testOpts, func(c *Comm) error {
				if c.Rank() == 1 {
					time.Sleep(late)
					x := []float32{1}
					// Its first may complete with rank 0's data, on the
					// board (rank 0 had posted it): the next fails.
					errs[1] = Allreduce(context.Background(), c, x, x, Sum)
					if errs[1] == nil {
						errs[1] = Allreduce(context.Background(), c, x, x, Sum)
					}
					return nil
				}
				x, y := []float32{1}, []float32{1}
				r := AllreduceAsync(c, x, x, Sum)
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				start := time.Now()
				errs[0] = Allreduce(ctx, c, y, y, Sum)
				took = time.Since(start)
				asyncErr = r.Wait(context.Background())
				return nil
			})
			t.Logf("rank 0 after %v: %v; its async call: %v; rank 1: %v", took.Round(time.Millisecond), errs[0], asyncErr, errs[1])
			if errs[0] == nil || !errors.Is(errs[0], context.DeadlineExceeded) {
				t.Errorf("rank 0's queued call: %v, want its context's deadline", errs[0])
			}
			if took > late/2 {
				t.Errorf("rank 0's queued call with a 200ms context returned after %v", took)
			}
			if asyncErr == nil || errs[1] == nil {
				t.Errorf("the call ahead or rank 1's calls succeeded: %v, %v", asyncErr, errs[1])
			}
		})
	}
}
