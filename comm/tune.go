package comm

import (
	"context"
	"fmt"
	"math"

	"slices"
	"time"

	"github.com/goccl/goccl/collectives"
)

// The selector's cost model needs α (seconds per message step), β
// (seconds per byte on the wire) and γ (seconds per byte reduced) of the
// transport and CPU in use. tune measures them once, at New: α and β by a
// two-point fit of one algorithm (ring allreduce, 2(n-1) steps moving
// 2(n-1)/n of the buffer) at a latency-bound and a bandwidth-bound size, so
// both come from the same code path; γ by timing the reduction kernel;
// and on 3 to tuneRingMax ranks the β of the recursive exchanges
// (Rabenseifner, recursive doubling) by timing Rabenseifner's allreduce
// at tuneRab bytes (collectives.Model.AlgoBeta). Rank 0's figures are
// broadcast, so every rank prices calls alike and picks the same
// algorithm.
//
// Above tuneRingMax ranks a ring allreduce has too many steps to time at
// New (2(n-1): 1,022 at 512 ranks, each waiting for the one before), and
// tune times one ring step instead, which is what each of them is: every
// rank sends to its successor and receives from its predecessor at once
// (SendRecv), at the same two sizes.

const (
	tuneSmall   = 8
	tuneLarge   = 4 << 20
	tuneRepeats = 5
	// tuneSmallRepeats calls time the small size, whose fastest sets α.
	// Calls right after the start are as slow as the slower of the two
	// ways a waiting rank gets its data (spinning, or asleep in poll(2)
	// and woken), in no order: 40 8-byte ring allreduces of 2 ranks over
	// TCP at New took 20-40 us and 80-230 us in turn (12-13 in a
	// benchmark's steady state), and the median of 5 made α 11-90 us
	// from one job to the next (4 ranks on 2 cores: 67-143, where the
	// ring's steady 16 KiB time says 33-37), which moved the selector's
	// choices from job to job. The fastest of 15: 7.8-10.3 us (4 ranks
	// on 2 cores: 29-38).
	tuneSmallRepeats = 15
	tuneRingMax      = 64
	// tuneRab is the size Rabenseifner's allreduce is timed at: a
	// quarter of tuneLarge, where its extra cost with ranks sharing cores
	// shows too (1 MiB: 1.45-2.0 ms against the ring's 1.25-1.4), since
	// 4 MiB made the race-enabled tests that measure at New take twice
	// as long.
	tuneRab = 1 << 20
)

// initStallMargin is how long before Init's deadline its measuring calls
// end (see tune): time to ask the ranks which one is stopped.
const initStallMargin = 2 * queryWait

func (c *Comm) tune(ctx context.Context) error {
	if c.opts.Alpha > 0 && c.opts.Beta > 0 {
		c.alpha, c.beta = c.opts.Alpha, c.opts.Beta
		return nil
	}
	// Safe defaults while measuring (the measurements force their
	// algorithm anyway).
	c.alpha, c.beta, c.gamma = 20e-6, 1/2e9, 1/8e9
	if c.size == 1 {
		return nil
	}
	// The measurement is invisible to the user: it logs nothing, the
	// user's first collective is #1 (every rank resets its sequence after
	// the same number of calls), and choices priced with the defaults
	// above are forgotten. Its calls are numbered far from the user's
	// first ones (from SeqMod/2): a rank that finished its part of the
	// last one (a broadcast root, done once sent) may send data of its
	// first call to a rank still in the measurement, where it must be
	// taken for a later call's data, not an earlier one's (which would
	// be a mismatch, see collectives.checkArrival).
	debug := c.debug
	c.debug = false
	c.tuning.Store(true)
	c.seq = collectives.SeqMod / 2
	defer func() {
		// Every measuring call has returned: no run goes on.
		c.tuning.Store(false)
		if c.watchdog.Stop() {
			// Armed with the measurement's longer bound (callTimeout):
			// the user's first call arms it again with its own.
			c.dogArmed.Store(false)
		}
		c.seq, c.debug = 0, debug
		c.exec.SetSettled(0)  // the measurement's calls numbered from SeqMod/2
		c.exec.ForgetProofs() // its calls cannot disagree: Close need not prove them
		c.forgetChoices()
	}()
	// A rank stopped or hung in the measurement is named (silentPeer) when
	// Init's time is up: the measuring calls' context ends a moment before
	// Init's, with initStallError as its cause. (Every rank blamed itself,
	// or a peer that relayed its failure: "rank 1 failed: ... not every
	// rank joined within 8s".)
	// (Not with less time than a few margins left, a short deadline of
	// the caller's: the measurement keeps all of it.)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 4*initStallMargin {
		mctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		t := time.AfterFunc(time.Until(dl)-initStallMargin, func() { cancel(&initStallError{d: c.opts.InitTimeout}) })
		defer t.Stop()
		ctx = mctx
	}
	buf, err := Alloc[float32](c, tuneLarge/4)
	if err != nil {
		return err
	}
	defer Free(c, buf)
	ring := WithAlgorithm("ring")
	oneStep := c.size > tuneRingMax
	var in []float32
	if oneStep {
		if in, err = Alloc[float32](c, tuneLarge/4); err != nil {
			return err
		}
		defer Free(c, in)
	}
	next, prev := (c.rank+1)%c.size, (c.rank+c.size-1)%c.size
	// timeWith returns the time of a call of n bytes with algo: the
	// fastest of tuneSmallRepeats at tuneSmall, else the median of
	// tuneRepeats (bandwidth-bound calls vary less, and their fastest
	// would be a lucky one).
	timeWith := func(n int, algo CallOption) (float64, error) {
		var ts []float64
		reps := tuneRepeats
		if n == tuneSmall {
			reps = tuneSmallRepeats
		}
		for i := range reps + 1 {
			start := time.Now()
			var err error
			if oneStep {
				err = SendRecv(ctx, c, buf[:n/4], next, in[:n/4], prev, 0)
			} else {
				err = Allreduce(ctx, c, buf[:n/4], buf[:n/4], Max, algo)
			}
			if err != nil {
				return 0, err
			}
			if i > 0 {
				ts = append(ts, time.Since(start).Seconds())
			}
		}
		if n == tuneSmall {
			return slices.Min(ts), nil
		}
		return median(ts), nil
	}
	t1, err := timeWith(tuneSmall, ring)
	if err != nil {
		return err
	}
	t2, err := timeWith(tuneLarge, ring)
	if err != nil {
		return err
	}
	steps := 2 * float64(c.size-1)
	wire := func(n int) float64 { return 2 * float64(c.size-1) / float64(c.size) * float64(n) }
	if oneStep {
		steps = 1
		wire = func(n int) float64 { return float64(n) }
	}
	// γ: the kernel on 1 MiB, in this process.
	// Fresh pages cost far more to touch than the kernel costs to run:
	// the best of four passes, the first of which touches the memory.
	scratch := make([]byte, 2<<20)
	gamma := math.Inf(1)
	for range 4 {
		start := time.Now()
		collectives.Reduce(collectives.Float32, collectives.Max, scratch[:1<<20], scratch[1<<20:])
		gamma = min(gamma, time.Since(start).Seconds()/(1<<20))
	}
	beta := max((t2-t1)/(wire(tuneLarge)-wire(tuneSmall)), 1e-12)
	alpha := max(t1/steps, 1e-7)
	// On several hosts the ring's steps wait on the network; the local
	// links are priced by a ping-pong between rank 0 and a rank of its
	// host, if it has one.
	var local collectives.LinkCost
	if c.nHosts > 1 {
		if local, err = c.pingPong(ctx, buf); err != nil {
			return err
		}
	}
	// Rabenseifner's β, fitted to its own time at the large size with
	// the ring's α: the ring's β did not price it. With 4 ranks on 2
	// cores over TCP it took 1.15-1.75 times the ring's time from 1 to 64
	// MiB (4 MiB: 9.4 against 5.4 ms), where the model, moving the same
	// bytes in fewer steps, chose it; over shared memory it is the
	// faster of the two. Recursive doubling, the other algorithm of
	// exchanges between partners at distance 2^k, pays the same there
	// (2 MiB: 4.5-5.2 ms against the ring's 2.4-2.9, which Rabenseifner's
	// β predicts: 4.4) and is priced with it. Measuring costs 6
	// allreduces of tuneRab bytes at New.
	var rabBeta float64
	if !oneStep && c.size >= 3 {
		// Timed after the ring, not call by call beside it: taking turns,
		// both took about the same (β within 20%), which neither does in
		// a run of calls of its own (osu, 4 MiB: ring 5.4, Rabenseifner
		// 9.4 ms).
		t, err := timeWith(tuneRab, WithAlgorithm("rabenseifner"))
		if err != nil {
			return err
		}
		// Priced with this rank's figures (only rank 0's result counts),
		// then back to the defaults every rank shares until the
		// broadcast below, whose algorithm they choose alike.
		defaults, links := [3]float64{c.alpha, c.beta, c.gamma}, c.linkCost
		c.alpha, c.beta, c.gamma = alpha, beta, gamma
		c.setLinks(local)
		rab, _ := collectives.LookupAlgo(collAllreduce, "rabenseifner")
		if b, ok := rab.FitBeta(tuneRab, c.topology(), c.model(), t); ok {
			rabBeta = b
		}
		c.alpha, c.beta, c.gamma, c.linkCost = defaults[0], defaults[1], defaults[2], links
	}
	agreed := []float64{alpha, beta, gamma, local.Alpha, local.Beta, rabBeta}
	if err := Broadcast(ctx, c, agreed, 0); err != nil {
		return err
	}
	c.alpha, c.beta, c.gamma = agreed[0], agreed[1], agreed[2]
	c.setLinks(collectives.LinkCost{Alpha: agreed[3], Beta: agreed[4]})
	if b := agreed[5]; b > 0 {
		c.algoBeta = map[collKind]map[string]float64{collAllreduce: {"rabenseifner": b, "recursive-doubling": b}}
	}
	if debug {
		c.debug = true
		c.debugf("cost model: α=%.1fus β=%.3fns/B (%.2f GB/s) γ=%.3fns/B measured on %s", c.alpha*1e6, c.beta*1e9, 1/c.beta/1e9, c.gamma*1e9, c.dev.Name())
		if b := agreed[5]; b > 0 {
			c.debugf("cost model: rabenseifner and recursive-doubling allreduce β=%.3fns/B (%.2f GB/s), fitted to Rabenseifner's %d-byte time", b*1e9, 1/b/1e9, tuneRab)
		}
		if l := c.linkCost[collectives.LinkLocal]; c.nHosts > 1 && l.Beta > 0 {
			c.debugf("cost model: local links α=%.1fus β=%.3fns/B (%.2f GB/s), network as above (%d hosts)", l.Alpha*1e6, l.Beta*1e9, 1/l.Beta/1e9, c.nHosts)
		}
	}
	return nil
}

// setLinks sets the per-link-class costs from c.alpha and c.beta (the
// ring's, over the network on several hosts) and the local links' local.
func (c *Comm) setLinks(local collectives.LinkCost) {
	if c.nHosts > 1 {
		c.linkCost[collectives.LinkNet] = collectives.LinkCost{Alpha: c.alpha, Beta: c.beta}
		c.linkCost[collectives.LinkLocal] = local
	}
}

// pingPong measures the local links between rank 0 and the next rank of
// its host, if any (the zero LinkCost if none): one-way time of a small
// and a large message, half a round trip each. Only those two ranks take
// part; the others go on to the broadcast that follows.
func (c *Comm) pingPong(ctx context.Context, buf []float32) (collectives.LinkCost, error) {
	peer := -1
	if c.rank == 0 || c.hosts[c.rank] == c.hosts[0] {
		for r := 1; r < c.size; r++ {
			if c.hosts[r] == c.hosts[0] {
				peer = r
				break
			}
		}
	}
	if peer < 0 || (c.rank != 0 && c.rank != peer) {
		return collectives.LinkCost{}, nil
	}
	other := peer
	if c.rank == peer {
		other = 0
	}
	oneWay := func(n int) (float64, error) {
		var ts []float64
		for i := range tuneRepeats + 1 {
			start := time.Now()
			var err error
			if c.rank == 0 {
				if err = Send(ctx, c, buf[:n/4], other, 0); err == nil {
					err = Recv(ctx, c, buf[:n/4], other, 0)
				}
			} else {
				if err = Recv(ctx, c, buf[:n/4], other, 0); err == nil {
					err = Send(ctx, c, buf[:n/4], other, 0)
				}
			}
			if err != nil {
				return 0, fmt.Errorf("local link ping-pong with rank %d: %w", other, err)
			}
			if i > 0 {
				ts = append(ts, time.Since(start).Seconds()/2)
			}
		}
		return median(ts), nil
	}
	t1, err := oneWay(tuneSmall)
	if err != nil {
		return collectives.LinkCost{}, err
	}
	t2, err := oneWay(tuneLarge)
	if err != nil {
		return collectives.LinkCost{}, err
	}
	return collectives.LinkCost{Alpha: max(t1, 1e-7), Beta: max((t2-t1)/float64(tuneLarge-tuneSmall), 1e-12)}, nil
}

// CostModel returns the α (seconds per message step) and β (seconds per
// byte) the communicator's algorithm selector uses (zeros for a nil *Comm).
func (c *Comm) CostModel() (alpha, beta float64) {
	if c == nil {
		return 0, 0
	}
	return c.alpha, c.beta
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
