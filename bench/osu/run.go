package osu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/goccl/goccl/comm"
)

// ErrNotSupported marks benchmarks whose collective comm does not offer yet.
var ErrNotSupported = errors.New("not yet supported")

// ErrValidation is returned when -c found wrong results.
var ErrValidation = errors.New("data validation error")

// CheckSupported returns ErrNotSupported (wrapped, naming the missing comm
// function) if comm cannot run benchmark b yet.
func CheckSupported(b *Benchmark) error {
	if supported(b.Coll) {
		return nil
	}
	return fmt.Errorf("osu: %s: %w: goccl's comm package has no %s yet", b.Name, ErrNotSupported, apiName(b.Coll))
}

// Run runs cfg's benchmark on c. Every rank of c must call it with the same
// configuration. Rank 0 prints the results to stdout and warnings to
// stderr; the other ranks print nothing.
func Run(ctx context.Context, c *comm.Comm, cfg *Config, stdout, stderr io.Writer) error {
	if err := CheckSupported(cfg.Bench); err != nil {
		return err
	}
	switch cfg.Type {
	case "int8":
		return run[int8](ctx, c, cfg, stdout, stderr)
	case "uint8":
		return run[uint8](ctx, c, cfg, stdout, stderr)
	case "int32":
		return run[int32](ctx, c, cfg, stdout, stderr)
	case "uint32":
		return run[uint32](ctx, c, cfg, stdout, stderr)
	case "int64":
		return run[int64](ctx, c, cfg, stdout, stderr)
	case "uint64":
		return run[uint64](ctx, c, cfg, stdout, stderr)
	case "float32":
		return run[float32](ctx, c, cfg, stdout, stderr)
	case "float64":
		return run[float64](ctx, c, cfg, stdout, stderr)
	case "float16":
		return run[comm.Float16](ctx, c, cfg, stdout, stderr)
	case "bfloat16":
		return run[comm.BFloat16](ctx, c, cfg, stdout, stderr)
	}
	return typeErr(cfg.Type)
}

// runner holds one rank's state for one benchmark run.
type runner[T comm.Number] struct {
	ctx        context.Context
	c          *comm.Comm
	cfg        *Config
	b          *Benchmark
	out, warn  io.Writer // io.Discard except on rank 0
	rank, n    int
	es         int // element size
	maxSize    int
	impl       collImpl[T]
	p2p        p2pImpl[T]
	send, recv []T
	stats      []float64
	meta       Meta
	pids       []int
	kernel     kernel // the dummy compute of non-blocking tests
	opts       []comm.CallOption
}

func run[T comm.Number](ctx context.Context, c *comm.Comm, cfg *Config, stdout, stderr io.Writer) (err error) {
	b := cfg.Bench
	r := &runner[T]{ctx: ctx, c: c, cfg: cfg, b: b, out: stdout, warn: stderr, rank: c.Rank(), n: c.Size(),
		impl: collsFor[T]()[b.Coll], p2p: p2pFor[T]()}
	if r.rank != 0 {
		r.out, r.warn = io.Discard, io.Discard
	}
	dt, _ := typeByName(cfg.Type)
	r.es = dt.Size()
	switch b.Kind {
	case KindLatency, KindBandwidth, KindBiBandwidth:
		if r.n != 2 {
			return usageErr("this test requires exactly two processes, got %d", r.n)
		}
	default:
		if r.n < 2 {
			return usageErr("this test requires at least two processes, got %d", r.n)
		}
	}
	if cfg.Root >= r.n {
		return usageErr("root rank %d (-k) is not below the number of processes %d", cfg.Root, r.n)
	}
	if cfg.Algorithm != "" {
		r.opts = []comm.CallOption{comm.WithAlgorithm(cfg.Algorithm)}
	}
	r.maxSize = r.limitMemory()
	if err := r.someSizeFits(); err != nil {
		return err
	}
	maxCount := r.maxSize / r.es
	sendLen, recvLen, _ := layout(b.Coll, maxCount, r.n, cfg.NCCL)
	if r.send, err = comm.Alloc[T](c, sendLen); err != nil {
		return err
	}
	defer comm.Free(c, r.send)
	if r.recv, err = comm.Alloc[T](c, recvLen); err != nil {
		return err
	}
	defer comm.Free(c, r.recv)
	if r.stats, err = comm.Alloc[float64](c, 16); err != nil {
		return err
	}
	defer comm.Free(c, r.stats)
	pids, hosts, err := gatherHosts(ctx, c)
	if err != nil {
		return err
	}
	r.pids = pids
	r.meta = newMeta(c, b.Coll, cfg.Algorithm, r.maxSize, hosts)
	switch {
	case cfg.NCCL:
		return r.runNCCL()
	case b.Kind == KindColl:
		return r.runColl()
	case b.Kind == KindNBC:
		return r.runNBC()
	}
	return r.runP2P()
}

// limitMemory applies -M as OSU's check_mem_limit does and returns the
// largest size to run.
func (r *runner[T]) limitMemory() int {
	maxSize := r.cfg.MaxSize
	if r.b.Many && !r.cfg.NCCL {
		if maxSize*r.n > r.cfg.MemLimit {
			maxSize = r.cfg.MemLimit / r.n
			fmt.Fprintf(r.warn, "Warning! Limiting max message size to: %d. Increase -M, --mem-limit for higher message sizes.", maxSize)
		}
	} else if maxSize > r.cfg.MemLimit {
		maxSize = r.cfg.MemLimit
		fmt.Fprintf(r.warn, "Warning! Limiting max message size to: %d. Increase -M, --mem-limit for higher message sizes.", maxSize)
	}
	return maxSize
}

// sizes lists the message sizes: doubling from the minimum (0, then 1, for
// latency) up to the maximum.
func (r *runner[T]) sizes() []int {
	var s []int
	for size := r.cfg.MinSize; size <= r.maxSize; {
		s = append(s, size)
		if size == 0 {
			size = 1
		} else {
			size *= 2
		}
	}
	return s
}

// fits reports whether a message of size bytes runs: it holds at least
// one element (one per rank where the test divides the message among the
// ranks). Smaller sizes of the range are skipped, as OSU does.
func (r *runner[T]) fits(size int) bool {
	if r.b.NoSize && !r.cfg.NCCL {
		return true
	}
	count := size / r.es
	if !r.collective() {
		return count > 0
	}
	_, _, block := layout(r.b.Coll, count, r.n, r.cfg.NCCL)
	return count > 0 && (block > 0 || r.b.Coll == "barrier")
}

// collective reports whether the benchmark times a collective (blocking
// or not), whose message layout depends on the ranks; else it is
// point-to-point.
func (r *runner[T]) collective() bool { return r.b.Kind == KindColl || r.b.Kind == KindNBC }

// someSizeFits returns a usage error if no size of the range runs, so that
// a range below the element size is refused, not answered with an empty
// table.
func (r *runner[T]) someSizeFits() error {
	for _, size := range r.sizes() {
		if r.fits(size) {
			return nil
		}
	}
	need := fmt.Sprintf("one %s element (%d bytes)", r.cfg.Type, r.es)
	if divided := r.cfg.NCCL || r.b.Coll == "reduce_scatter"; divided && r.collective() {
		need = fmt.Sprintf("one %s element (%d bytes) for each of the %d ranks (%d bytes)", r.cfg.Type, r.es, r.n, r.es*r.n)
	}
	return usageErr("no message size from %d to %d bytes (-m) holds %s", r.cfg.MinSize, r.maxSize, need)
}

// warmupFor is how long the calls of a size warm up before its -x
// warm-up calls (Config.WarmupTime): the first size WarmupTime; a later
// size up to largeMessageSize sizeWarmupTime (none with --warmup-time 0),
// larger ones none (their -x calls take longer than that).
func (r *runner[T]) warmupFor(size int, first bool) time.Duration {
	switch {
	case r.cfg.WarmupTime <= 0:
		return 0
	case first:
		return r.cfg.WarmupTime
	case size <= largeMessageSize:
		return sizeWarmupTime
	}
	return 0
}

// iterations returns the iteration and warm-up counts for a size.
func (r *runner[T]) iterations(size int) (iters, skip int) {
	if size > largeMessageSize {
		return r.cfg.ItersLarge, r.cfg.SkipLarge
	}
	return r.cfg.Iters, r.cfg.Skip
}

// root is the root of iteration i (-k rotate: i mod n).
func (r *runner[T]) root(i int) int {
	if r.cfg.Root < 0 {
		return i % r.n
	}
	return r.cfg.Root
}

func (r *runner[T]) barrier() error { return r.c.Barrier(r.ctx) }

// allreduce combines per-rank values with op and returns the result on
// every rank (OSU reduces to rank 0; every rank here takes the result so
// that all agree on when to stop).
func (r *runner[T]) allreduce(op comm.Op, vals ...float64) ([]float64, error) {
	buf := r.stats[:len(vals)]
	copy(buf, vals)
	if err := comm.Allreduce(r.ctx, r.c, buf, buf, op); err != nil {
		return nil, err
	}
	return append([]float64(nil), buf...), nil
}

// spread returns the mean, minimum and maximum of v across ranks, and the
// sum of errs.
func (r *runner[T]) spread(v float64, errs int) (avg, lo, hi float64, total int, err error) {
	s, err := r.allreduce(comm.Sum, v, float64(errs))
	if err != nil {
		return
	}
	m, err := r.allreduce(comm.Max, v, -v)
	if err != nil {
		return
	}
	return s[0] / float64(r.n), -m[1], m[0], int(s[1]), nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// epoch is when the program started, the origin of wtime.
var epoch = time.Now()

// wtime is the time since epoch, as MPI_Wtime, the clock OSU times calls
// with: one read of the monotonic clock. (time.Now reads the wall clock
// too, and time.Since(t0) then adds tens of nanoseconds to every timed
// call, a tenth of a small call on shared memory.)
func wtime() time.Duration { return time.Since(epoch) }

// validationFailed prints OSU's closing line and returns ErrValidation.
func (r *runner[T]) validationFailed(size int) error {
	fmt.Fprintf(r.out, "DATA VALIDATION ERROR: %s exited with status 1 on message size %d.\n", r.b.OSU, size)
	return fmt.Errorf("osu: %s: %w at message size %d", r.b.Name, ErrValidation, size)
}

// record starts a JSON row with the run's metadata.
func (r *runner[T]) record(size, count int) Record {
	rec := Record{Benchmark: r.b.Name, Layout: "osu", Size: size, Count: count, Type: r.cfg.Type, Root: -1,
		Validated: r.cfg.Validate}
	if r.b.HasOp {
		rec.Op = "sum"
	}
	if r.b.HasRoot {
		rec.Root = max(r.cfg.Root, 0)
	}
	rec.setMeta(r.meta)
	rec.Algorithm = algorithmOf(r.c, r.b.Coll, r.cfg.Algorithm, size)
	return rec
}

// bandwidths fills algbw and busbw (GB/s, nccl-tests' definitions) of a
// call moving max(send, recv) bytes in t microseconds.
func (r *runner[T]) bandwidths(rec *Record, bytes int, t float64) {
	if t <= 0 {
		return
	}
	rec.AlgBW = float64(bytes) / t / 1e3
	rec.BusBW = rec.AlgBW * busFactor(r.b.Coll, r.n)
}
