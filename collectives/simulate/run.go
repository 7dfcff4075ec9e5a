package simulate

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/goccl/goccl/collectives"
)

// Job is one collective call to simulate.
type Job struct {
	Coll collectives.Coll
	Algo string
	// Bytes is the call's priced size (collectives.Coll.PricedBytes): the
	// buffer of allreduce and broadcast, all size blocks of the block
	// collectives (alltoall's whole send buffer). It is rounded down to
	// whole elements (and whole blocks).
	Bytes    int
	ElemSize int // default 4
	Root     int
	// OutOfPlace marks a reducing collective called with separate send and
	// receive buffers: the communicator copies the send buffer into the
	// receive buffer before the plan runs (what OSU's benchmarks do).
	OutOfPlace bool
}

// Method is how a time was obtained.
type Method uint8

const (
	// Auto picks the first method that applies, in the order Periodic,
	// Full, Extrapolated, Analytic.
	Auto Method = iota
	// Full simulates every rank.
	Full
	// Periodic simulates a window of ranks of a symmetric algorithm on
	// alike hosts; exact when the window's schedules are the job's (when
	// the buffer divides evenly into the algorithm's segments).
	Periodic
	// Extrapolated simulates two smaller sizes (fully or periodically)
	// and extends the line through them: the time of a large call grows
	// linearly with its size once its messages are many chunks long.
	Extrapolated
	// Analytic is the registry's α-β-γ cost (collectives.Algo.Time) on the
	// links' selector model: no simulation at all.
	Analytic
)

func (m Method) String() string {
	return [...]string{"auto", "full", "periodic", "extrapolated", "analytic"}[m]
}

// Options bound a simulation.
type Options struct {
	Method Method
	// Budget is the most events one simulation may take (default 2e7,
	// about a few seconds); Auto moves on to the next method past it.
	Budget int
	// Barrier, if set, paces the calls as OSU's timed loop does (a call,
	// then a barrier of this algorithm, then the next call): each rank
	// enters the call when it leaves the barrier after the previous one,
	// and its time is counted from its own entry, not from a common
	// start. Where ranks leave a barrier at different times (ranks
	// sharing cores, a barrier whose root leaves first), a rooted call's
	// waiting ranks enter before or after its root, which a common start
	// misses. Full simulations only (a periodic window has no barrier of
	// its own): the others start every rank at once. The loop's calls and
	// barriers share the Budget.
	Barrier string
	// Plans, if not nil, keeps the ranks' compiled schedules between
	// simulations that share it (a fit that simulates the same jobs under
	// thousands of parameter sets compiles each once; see Plans).
	Plans *Plans
}

func (o Options) budget() int {
	if o.Budget > 0 {
		return o.Budget
	}
	return 20_000_000
}

// Port names a port of the model: a host's NIC or a rank's local port, in
// one direction.
type Port struct {
	Net   bool // a host's NIC; else a rank's local port
	Owner int  // host or rank
	In    bool // the input direction
}

func (p Port) String() string {
	dir := "out"
	if p.In {
		dir = "in"
	}
	if p.Net {
		return fmt.Sprintf("host %d NIC %s", p.Owner, dir)
	}
	return fmt.Sprintf("rank %d local %s", p.Owner, dir)
}

// Result is the simulated time of a job.
type Result struct {
	// Seconds is when the last rank finishes; MeanSeconds the mean over
	// ranks of when each finishes (what OSU's average latency measures).
	Seconds, MeanSeconds float64
	Method               Method
	// Simulated is the number of ranks simulated (the window of a
	// periodic simulation); Events the events taken.
	Simulated, Events int
	// Busiest is the port that carried the most bytes, and BusiestBytes
	// its bytes. Analytic results give the busiest rank's bytes from the
	// cost table and a zero Port.
	Busiest      Port
	BusiestBytes float64
	// NetBytes is the bytes that crossed between hosts, over the job.
	NetBytes float64
	// RankSeconds is, for a simulation of every rank (Full), each rank's
	// time, entry to finish, in the (last) call: MeanSeconds is their
	// mean. A broadcast's root and leaves take different times, which the
	// mean alone does not tell apart.
	RankSeconds []float64
	// Ends is, for a simulation of every rank (Full), the message ends
	// rank 0 was charged a message's Overhead for in the (last) call:
	// data posted and read, credits written and read alone
	// (Params.CreditWrites); data messages that share a write or a read
	// (Params.Coalesce) count once.
	Ends int
}

// args is the schedule arguments of job on p ranks.
func (j Job) args(p int) (*collectives.Args, int, error) {
	es := j.ElemSize
	if es <= 0 {
		es = 4
	}
	count := j.Bytes / es
	if j.Coll.Info().Blocked {
		count = j.Bytes / (es * p)
	}
	if j.Root < 0 || j.Root >= p {
		return nil, 0, fmt.Errorf("simulate: root %d of %d ranks", j.Root, p)
	}
	return &collectives.Args{Count: count, ElemSize: es, Root: j.Root}, es, nil
}

// Simulate runs job on machine m under par.
func Simulate(job Job, m Machine, par Params, opt Options) (Result, error) {
	if err := m.validate(); err != nil {
		return Result{}, err
	}
	if err := par.validate(); err != nil {
		return Result{}, err
	}
	algo, err := collectives.LookupAlgo(job.Coll, job.Algo)
	if err != nil {
		return Result{}, fmt.Errorf("simulate: %w", err)
	}
	if _, _, err := job.args(m.Ranks); err != nil {
		return Result{}, err
	}
	s := &sim{job: job, m: m, par: par, algo: algo, budget: opt.budget(), plans: opt.Plans}
	if opt.Barrier != "" {
		if s.barrier, err = collectives.LookupAlgo(collectives.CollBarrier, opt.Barrier); err != nil {
			return Result{}, fmt.Errorf("simulate: %w", err)
		}
	}
	switch opt.Method {
	case Full:
		return s.full(job.Bytes)
	case Periodic:
		return s.periodic(job.Bytes)
	case Extrapolated:
		return s.extrapolate()
	case Analytic:
		return s.analytic()
	}
	if s.window(job.Bytes) > 0 {
		if r, err := s.periodic(job.Bytes); !errors.Is(err, errBudget) {
			return r, err
		}
	}
	if r, err := s.full(job.Bytes); !errors.Is(err, errBudget) {
		return r, err
	}
	if r, err := s.extrapolate(); !errors.Is(err, errBudget) {
		return r, err
	}
	return s.analytic()
}

type sim struct {
	job     Job
	m       Machine
	par     Params
	algo    *collectives.Algo
	barrier *collectives.Algo // Options.Barrier, or nil
	budget  int
	plans   *Plans // Options.Plans: nil compiles every time
}

// symmetry is the job's symmetry at size bytes.
func (s *sim) symmetry(bytes int) symmetry {
	a, _, _ := s.withBytes(bytes).args(s.m.Ranks)
	return symmetryOf(s.job.Coll, s.job.Algo, s.m.Ranks, a.Count)
}

// window is the periodic window at size bytes, 0 if none.
func (s *sim) window(bytes int) int {
	sym := s.symmetry(bytes)
	pool := 0
	if s.m.Cores > 0 {
		pool = s.m.poolRanks()
	}
	return periodicWindow(sym, s.m.Ranks, s.m.rph(), pool)
}

// estimate is the events a simulation of n ranks of the job at size bytes
// would take, from the chunk counts of a few ranks' schedules.
func (s *sim) estimate(bytes, n int) int {
	p := s.m.Ranks
	a, _, _ := s.withBytes(bytes).args(p)
	most := 0
	for _, r := range s.samples() {
		msgs, copies := chunkCount(s.algo.Schedule(r, p, a), s.par.ChunkBytes)
		most = max(most, 3*msgs+copies)
	}
	return most * n
}

// samples are the ranks whose schedules stand for all in estimates: rank
// 0 of a symmetric algorithm; else the root, its neighbours, the middle
// and the last.
func (s *sim) samples() []int {
	p := s.m.Ranks
	if s.symmetry(s.job.Bytes) != symNone {
		return []int{0}
	}
	out := []int{s.job.Root}
	for _, r := range []int{(s.job.Root + 1) % p, (s.job.Root + p - 1) % p, p / 2, 0, p - 1} {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func (s *sim) withBytes(b int) Job {
	j := s.job
	j.Bytes = b
	return j
}

// full simulates every rank.
func (s *sim) full(bytes int) (Result, error) {
	p := s.m.Ranks
	if s.estimate(bytes, p) > s.budget {
		return Result{}, errBudget
	}
	wd := &world{p: p, w: p, rph: s.m.rph()}
	return s.simulate(bytes, wd, Full)
}

// periodic simulates a window of ranks.
func (s *sim) periodic(bytes int) (Result, error) {
	w := s.window(bytes)
	if w == 0 {
		return Result{}, fmt.Errorf("simulate: %s %s on %d ranks, %d per host: not periodic", s.job.Coll, s.job.Algo, s.m.Ranks, s.m.rph())
	}
	if s.estimate(bytes, w) > s.budget {
		return Result{}, errBudget
	}
	wd := &world{p: s.m.Ranks, w: w, sym: s.symmetry(bytes), rph: s.m.rph()}
	return s.simulate(bytes, wd, Periodic)
}

func (s *sim) simulate(bytes int, wd *world, method Method) (Result, error) {
	a, _, err := s.withBytes(bytes).args(wd.p)
	if err != nil {
		return Result{}, err
	}
	plans := make([]*rankPlan, wd.w)
	for r := range wd.w {
		if plans[r], err = s.plans.rank(s.algo, r, wd.p, a, s.par.ChunkBytes); err != nil {
			return Result{}, err
		}
		if s.job.OutOfPlace && s.job.Coll.Info().Reducing {
			extra := a.Count * a.ElemSize
			if s.job.Coll.Info().Blocked {
				extra *= wd.p
			}
			plans[r].pre += extra
		}
	}
	e, err := s.runPlans(plans, wd, nil, nil, 0, 0)
	if err != nil {
		return Result{}, err
	}
	events := e.events
	var enter []float64
	if s.barrier != nil && wd.w == wd.p && wd.p > 1 {
		// OSU's timed loop: each call after a barrier, each rank's time
		// from its own entry. The barrier's exits (after the previous
		// call's finishes) are the next call's entries, and the ports'
		// token buckets carry over; rounds until the times settle.
		bplans := make([]*rankPlan, wd.w)
		for r := range wd.w {
			if bplans[r], err = s.plans.rank(s.barrier, r, wd.p, &collectives.Args{}, s.par.ChunkBytes); err != nil {
				return Result{}, err
			}
		}
		enter = make([]float64, wd.w)
		rounds := pacedRounds
		if s.par.Links[collectives.LinkLocal].Burst > 0 || s.par.Links[collectives.LinkNet].Burst > 0 {
			rounds = pacedRoundsBucket
		}
		// The buckets too must hold still: while they drain, calls that
		// take their bytes from them take the same time round after round
		// (2 ranks' 32 KiB all-to-all at 1 Gbit/s with a 128 KiB bucket:
		// three calls of 47 us, then the rate; measured 183 us).
		burst := 0.0 // every port's bucket, full
		for i := range e.ports {
			if e.ports[i].net {
				burst += s.par.Links[collectives.LinkNet].Burst
			} else {
				burst += s.par.Links[collectives.LinkLocal].Burst
			}
		}
		last, lastTok, still := -1.0, -1.0, 0
		for range rounds {
			finish := make([]float64, wd.w)
			for r := range e.ranks {
				finish[r] = e.ranks[r].finish
			}
			b, err := s.runPlans(bplans, wd, finish, e, 0, events)
			if err != nil {
				return Result{}, err
			}
			first := math.Inf(1)
			for r := range b.ranks {
				enter[r] = b.ranks[r].finish
				first = min(first, enter[r])
			}
			for r := range enter {
				enter[r] -= first
			}
			events += b.events
			if e, err = s.runPlans(plans, wd, enter, b, first, events); err != nil {
				return Result{}, err
			}
			events += e.events
			total := 0.0 // the ranks' times, the mean's numerator
			for r := range e.ranks {
				total += e.ranks[r].finish - enter[r]
			}
			tok := 0.0
			for i := range e.ports {
				tok += e.ports[i].tok
			}
			if math.Abs(total-last) <= 1e-3*total && math.Abs(tok-lastTok) <= 1e-3*burst {
				if still++; still == 2 {
					break
				}
			} else {
				still = 0
			}
			last, lastTok = total, tok
		}
	}
	res := Result{Method: method, Simulated: wd.w, Events: events}
	if method == Full && len(e.ends) > 0 {
		res.Ends = int(e.ends[0])
	}
	if method == Full {
		res.RankSeconds = make([]float64, len(e.ranks))
	}
	for r := range e.ranks {
		t := e.ranks[r].finish
		if enter != nil {
			t -= enter[r]
		}
		res.Seconds = max(res.Seconds, t)
		res.MeanSeconds += t
		if res.RankSeconds != nil {
			res.RankSeconds[r] = t
		}
	}
	res.MeanSeconds /= float64(len(e.ranks))
	for _, pt := range e.ports {
		if pt.bytes > res.BusiestBytes {
			res.BusiestBytes = pt.bytes
			res.Busiest = Port{Net: pt.net, Owner: int(pt.owner), In: pt.dir == 1}
		}
		if pt.net && pt.dir == 0 {
			res.NetBytes += pt.bytes
		}
	}
	res.NetBytes *= float64(wd.p) / float64(wd.w)
	return res, nil
}

// pacedRounds is how many calls a paced simulation (Options.Barrier)
// runs at most after the first, each entered at the previous barrier's
// exits; pacedRoundsBucket with token buckets (Link.Burst), which take
// longer to drain to their steady state. It stops earlier once the mean
// time holds still (within 0.1%) for two rounds.
const (
	pacedRounds       = 3
	pacedRoundsBucket = 24
)

// runPlans runs the engine on plans, rank r entering at enterAt[r] (nil:
// all at 0), within what is left of the budget after used events. If prev
// is not nil, the ports start as prev's ended, its times moved back by
// shift (the new run's 0 is prev's shift).
func (s *sim) runPlans(plans []*rankPlan, wd *world, enterAt []float64, prev *engine, shift float64, used int) (*engine, error) {
	if used >= s.budget {
		return nil, errBudget
	}
	e, err := newEngine(plans, wd, s.m, &s.par, s.budget-used)
	if err != nil {
		return nil, fmt.Errorf("simulate: %s %s on %d ranks: %w", s.job.Coll, s.job.Algo, wd.p, err)
	}
	e.enterAt = enterAt
	if prev != nil {
		for i := range e.ports {
			e.ports[i].free, e.ports[i].tok = prev.ports[i].free-shift, prev.ports[i].tok
		}
	}
	if err := e.run(); err != nil {
		if errors.Is(err, errBudget) {
			return nil, err
		}
		return nil, fmt.Errorf("simulate: %s %s on %d ranks: %w", s.job.Coll, s.job.Algo, wd.p, err)
	}
	return e, nil
}

// extrapolate simulates two smaller sizes n1 < n2 = 2 n1 and extends the
// line through them to the job's size. The smaller size's largest message
// must still be several chunks long (see steady); else (or if even they
// do not fit the budget) it gives up.
func (s *sim) extrapolate() (Result, error) {
	p := s.m.Ranks
	n := s.job.Bytes
	// Whole elements on every rank's segments (and whole blocks), so that
	// a periodic job stays periodic at the smaller sizes.
	unit := 4 * max(s.job.ElemSize, 1) * p
	inner := s.full
	w := p
	if ww := s.window(n); ww > 0 {
		inner, w = s.periodic, ww
	}
	n2 := n / 2
	for n2 >= unit && s.estimate(n2, w) > s.budget {
		n2 /= 2
	}
	n2 = n2 / unit * unit
	n1 := n2 / 2 / unit * unit
	if n1 < unit || !s.steady(n1) {
		return Result{}, errBudget
	}
	r1, err := inner(n1)
	if err != nil {
		return Result{}, err
	}
	r2, err := inner(n2)
	if err != nil {
		return Result{}, err
	}
	at := func(y1, y2 float64) float64 {
		return y2 + (y2-y1)/float64(n2-n1)*float64(n-n2)
	}
	res := r2
	res.Method = Extrapolated
	res.Seconds = at(r1.Seconds, r2.Seconds)
	res.MeanSeconds = at(r1.MeanSeconds, r2.MeanSeconds)
	res.BusiestBytes = at(r1.BusiestBytes, r2.BusiestBytes)
	res.NetBytes = at(r1.NetBytes, r2.NetBytes)
	res.Events = r1.Events + r2.Events
	return res, nil
}

// steady reports whether at size bytes the job's largest message is at
// least four chunks long (on the ranks estimate samples): past that, the
// time grows linearly with the size (a message of one partial chunk costs
// α plus its bytes, a longer one is pipelined chunk after chunk), up to
// the small kinks where a message crosses a chunk boundary.
func (s *sim) steady(bytes int) bool {
	p := s.m.Ranks
	a, _, _ := s.withBytes(bytes).args(p)
	for _, r := range s.samples() {
		largest := 0
		for _, st := range s.algo.Schedule(r, p, a).Steps {
			if st.Kind != collectives.Copy {
				largest = max(largest, st.Len)
			}
		}
		if largest < 4*s.par.ChunkBytes {
			return false
		}
	}
	return true
}

// analytic prices the job with the registry's cost on the selector model.
func (s *sim) analytic() (Result, error) {
	t, ok := s.algo.Time(s.job.Bytes, s.m.Topology(), s.par.SelectorModel())
	if !ok {
		return Result{}, fmt.Errorf("simulate: %s %s has no cost model", s.job.Coll, s.job.Algo)
	}
	res := Result{Seconds: t, MeanSeconds: t, Method: Analytic}
	if s.algo.Cost != nil && s.m.Ranks > 1 {
		_, b := s.algo.Cost(s.m.Ranks, float64(s.job.Bytes))
		res.BusiestBytes = b
	}
	if math.IsNaN(t) {
		return Result{}, fmt.Errorf("simulate: %s %s: no time", s.job.Coll, s.job.Algo)
	}
	return res, nil
}
