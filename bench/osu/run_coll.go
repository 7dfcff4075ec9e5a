package osu

import (
	"context"
	"time"

	"github.com/goccl/goccl/comm"
)

// runColl is OSU's blocking collective test (osu_allreduce.c and
// siblings): per size, warm-up then timed calls, each followed by a
// barrier; the per-rank average latency is averaged over ranks.
func (r *runner[T]) runColl() error {
	cfg := r.cfg
	if !cfg.JSON {
		writeTitle(r.out, r.b.Title, r.meta, true)
		writeDatatype(r.out, cfg.OSUType)
		if cfg.BackToBack {
			writeBackToBack(r.out)
		}
		writeCollHeader(r.out, r.b.NoSize, cfg.Full, cfg.Validate)
	}
	sizes := r.sizes()
	if r.b.NoSize {
		sizes = []int{0}
	}
	first := true // the first size that runs
	for _, size := range sizes {
		count := size / r.es
		sendLen, recvLen, block := layout(r.b.Coll, count, r.n, false)
		if !r.fits(size) {
			continue
		}
		send, recv := r.send[:sendLen], r.recv[:recvLen]
		iters, skip := r.iterations(size)
		if r.b.NoSize {
			iters, skip = r.cfg.Iters, r.cfg.Skip
		}
		if err := r.barrier(); err != nil {
			return err
		}
		if d := r.warmupFor(size, first); d > 0 {
			err := WarmUpFor(r.ctx, r.c, d, func() error {
				return r.impl.Run(r.ctx, r.c, send, recv, comm.Sum, r.root(0), r.opts)
			})
			if err != nil {
				return err
			}
		}
		first = false
		var timer time.Duration
		var wrong int
		var err error
		if cfg.BackToBack {
			timer, err = r.backToBack(send, recv, iters, skip)
		} else {
			timer, wrong, err = r.osuLoop(send, recv, block, iters, skip)
		}
		if err != nil {
			return err
		}
		lat := us(timer) / float64(iters)
		avg, lo, hi, errs, err := r.spread(lat, wrong)
		if err != nil {
			return err
		}
		row := CollRow{Size: size, Avg: avg, Min: lo, Max: hi, Iterations: iters, Errors: errs}
		if cfg.JSON {
			rec := r.record(size, count)
			rec.AvgUs, rec.MinUs, rec.MaxUs, rec.Iterations, rec.Wrong = avg, lo, hi, iters, int64(errs)
			if cfg.BackToBack {
				rec.Timing = "back-to-back"
			}
			r.bandwidths(&rec, max(sendLen, recvLen)*r.es, avg)
			if err := writeRecord(r.out, rec); err != nil {
				return err
			}
		} else {
			writeCollRow(r.out, row, r.b.NoSize, cfg.Full, cfg.Validate)
		}
		if err := r.barrier(); err != nil {
			return err
		}
		if errs > 0 {
			return r.validationFailed(size)
		}
	}
	return nil
}

// osuLoop is OSU's timing of one size: skip untimed calls, then iters
// timed ones, each timed alone and followed by a barrier (with -c, the
// buffers are filled before and checked after each call). It returns the
// timed calls' total time and the wrong elements seen.
func (r *runner[T]) osuLoop(send, recv []T, block, iters, skip int) (time.Duration, int, error) {
	var timer time.Duration
	wrong := 0
	for i := range iters + skip {
		root := r.root(i)
		if r.cfg.Validate {
			fill(r.b.Coll, send, recv, block, r.rank, r.n, root, i)
			if err := r.barrier(); err != nil {
				return 0, 0, err
			}
		}
		t0 := wtime()
		err := r.impl.Run(r.ctx, r.c, send, recv, comm.Sum, root, r.opts)
		d := wtime() - t0
		if err != nil {
			return 0, 0, err
		}
		if err := r.barrier(); err != nil {
			return 0, 0, err
		}
		if r.cfg.Validate {
			wrong += check(r.b.Coll, recv, block, r.rank, r.n, root, i)
		}
		if i >= skip {
			timer += d
		}
	}
	return timer, wrong, nil
}

// backToBack is --back-to-back's timing of one size: skip untimed calls,
// a barrier, then iters calls timed together, with no barrier between
// them, so that a rank that has nothing to wait for (a broadcast's root)
// may run ahead of the others, as in nccl-tests and back-to-back drivers.
// The rank's latency is the span over the iters calls, divided by them.
func (r *runner[T]) backToBack(send, recv []T, iters, skip int) (time.Duration, error) {
	for i := range skip {
		if err := r.impl.Run(r.ctx, r.c, send, recv, comm.Sum, r.root(i), r.opts); err != nil {
			return 0, err
		}
	}
	if err := r.barrier(); err != nil {
		return 0, err
	}
	t0 := wtime()
	for i := range iters {
		if err := r.impl.Run(r.ctx, r.c, send, recv, comm.Sum, r.root(skip+i), r.opts); err != nil {
			return 0, err
		}
	}
	return wtime() - t0, nil
}

// runNBC is OSU's non-blocking collective test (osu_iallreduce.c and
// siblings): first the pure communication time (start, wait), then the
// same call overlapped with that much compute, polled with -t Test calls.
func (r *runner[T]) runNBC() error {
	cfg := r.cfg
	if r.impl.Start == nil {
		return CheckSupported(&Benchmark{Name: r.b.Name, Coll: "async " + r.b.Coll})
	}
	if !cfg.JSON {
		writeNBCPreamble(r.out, r.b.Title, r.meta)
		writeDatatype(r.out, cfg.OSUType)
		writeNBCHeader(r.out, cfg.Full, cfg.Validate)
	}
	for _, size := range r.sizes() {
		count := size / r.es
		sendLen, recvLen, block := layout(r.b.Coll, count, r.n, false)
		if !r.fits(size) {
			continue
		}
		sz := &nbcSize[T]{runner: r, send: r.send[:sendLen], recv: r.recv[:recvLen], block: block}
		sz.iters, sz.skip = r.iterations(size)
		pure, err := sz.phase(0)
		if err != nil {
			return err
		}
		latency := pure.Overall / float64(sz.iters)
		overlapped, err := sz.phase(time.Duration(latency * float64(time.Microsecond)))
		if err != nil {
			return err
		}
		if err := sz.report(size, count, latency, overlapped); err != nil {
			return err
		}
	}
	return nil
}

// nbcSize is runNBC at one size: its buffers, block and iterations, and
// the elements received wrong so far (-c).
type nbcSize[T comm.Number] struct {
	*runner[T]
	send, recv         []T
	block, iters, skip int
	wrong              int
}

// phase runs skip warm-up and iters timed calls, each overlapped with
// compute of dummy computation (none: the pure communication time), and
// returns the sums of their timings.
func (sz *nbcSize[T]) phase(compute time.Duration) (NBCRow, error) {
	var row NBCRow
	if err := sz.barrier(); err != nil {
		return row, err
	}
	for i := range sz.iters + sz.skip {
		if err := sz.call(i, compute, &row); err != nil {
			return row, err
		}
	}
	return row, nil
}

// call is one iteration: start the call, compute while polling it, wait,
// and add its timings to row unless it is a warm-up.
func (sz *nbcSize[T]) call(i int, compute time.Duration, row *NBCRow) error {
	cfg := sz.cfg
	root := sz.root(i)
	if cfg.Validate {
		fill(sz.b.Coll, sz.send, sz.recv, sz.block, sz.rank, sz.n, root, i)
		if err := sz.barrier(); err != nil {
			return err
		}
	}
	t0 := time.Now()
	req := sz.impl.Start(sz.c, sz.send, sz.recv, comm.Sum, root, sz.opts)
	tInit := time.Since(t0)
	var tComp, tTest, tWait time.Duration
	if compute > 0 {
		t1 := time.Now()
		var err error
		tTest, err = sz.kernel.dummyCompute(compute, req, cfg.Probes)
		tComp = time.Since(t1)
		if err != nil {
			return err
		}
	}
	t2 := time.Now()
	err := req.Wait(sz.ctx)
	tWait = time.Since(t2)
	total := time.Since(t0)
	if err != nil {
		return err
	}
	if err := sz.barrier(); err != nil {
		return err
	}
	if cfg.Validate {
		sz.wrong += check(sz.b.Coll, sz.recv, sz.block, sz.rank, sz.n, root, i)
	}
	if i >= sz.skip {
		row.Overall += us(total)
		row.Init += us(tInit)
		row.Compute += us(tComp)
		row.Test += us(tTest)
		row.Wait += us(tWait)
	}
	return nil
}

// report averages the overlapped phase's timings and the pure latency
// over the ranks and writes the row (or JSON record) of one size.
func (sz *nbcSize[T]) report(size, count int, latency float64, ov NBCRow) error {
	it := float64(sz.iters)
	s, err := sz.allreduce(comm.Sum, ov.Overall/it, ov.Compute/it, ov.Init/it, ov.Test/it, ov.Wait/it, latency, float64(sz.wrong))
	if err != nil {
		return err
	}
	m, err := sz.allreduce(comm.Max, latency, -latency)
	if err != nil {
		return err
	}
	ranks := float64(sz.n)
	row := NBCRow{Size: size, Overall: s[0] / ranks, Compute: s[1] / ranks, Init: s[2] / ranks, Test: s[3] / ranks, Wait: s[4] / ranks,
		Comm: s[5] / ranks, MinComm: -m[1], MaxComm: m[0], Errors: int(s[6])}
	if sz.cfg.JSON {
		rec := sz.record(size, count)
		rec.Iterations, rec.Wrong = sz.iters, int64(row.Errors)
		rec.AvgUs, rec.MinUs, rec.MaxUs = row.Comm, row.MinComm, row.MaxComm
		rec.OverallUs, rec.ComputeUs, rec.CommUs, rec.OverlapPct = row.Overall, row.Compute-row.Test, row.Comm, row.Overlap()
		sz.bandwidths(&rec, max(len(sz.send), len(sz.recv))*sz.es, row.Comm)
		if err := writeRecord(sz.out, rec); err != nil {
			return err
		}
	} else {
		writeNBCRow(sz.out, row, sz.cfg.Full, sz.cfg.Validate)
	}
	if row.Errors > 0 {
		return sz.validationFailed(size)
	}
	return nil
}

// WarmUpFor makes calls, with a barrier after each as OSU's timed ones
// have, until d has passed on every rank: in blocks of 10, after each of
// which the ranks agree (an allreduce of whether each one's time is up)
// whether to go on, so that every rank makes the same calls. A fresh
// job's first calls can run slower for a while (connections across
// emulated networks here: 2 ranks between network namespaces, 8 B, 90-145
// us per call over the first 200 calls, 28-35 us after 2,000).
func WarmUpFor(ctx context.Context, c *comm.Comm, d time.Duration, call func() error) error {
	start := time.Now()
	up, all := make([]int32, 1), make([]int32, 1)
	for {
		for range 10 {
			if err := call(); err != nil {
				return err
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		up[0] = 0
		if time.Since(start) >= d {
			up[0] = 1
		}
		if err := comm.Allreduce(ctx, c, up, all, comm.Min); err != nil {
			return err
		}
		if all[0] == 1 {
			return nil
		}
	}
}
