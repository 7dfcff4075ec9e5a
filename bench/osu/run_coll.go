package osu

import (
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
		writeCollHeader(r.out, r.b.NoSize, cfg.Full, cfg.Validate)
	}
	sizes := r.sizes()
	if r.b.NoSize {
		sizes = []int{0}
	}
	for _, size := range sizes {
		count := size / r.es
		sendLen, recvLen, block := layout(r.b.Coll, count, r.n, false)
		if !r.b.NoSize && (count == 0 || block == 0) {
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
		var timer time.Duration
		wrong := 0
		for i := range iters + skip {
			root := r.root(i)
			if cfg.Validate {
				fill(r.b.Coll, send, recv, block, r.rank, r.n, root, i)
				if err := r.barrier(); err != nil {
					return err
				}
			}
			t0 := time.Now()
			err := r.impl.Run(r.ctx, r.c, send, recv, comm.Sum, root, r.opts)
			d := time.Since(t0)
			if err != nil {
				return err
			}
			if err := r.barrier(); err != nil {
				return err
			}
			if cfg.Validate {
				wrong += check(r.b.Coll, recv, block, r.rank, r.n, root, i)
			}
			if i >= skip {
				timer += d
			}
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
		if count == 0 || block == 0 {
			continue
		}
		send, recv := r.send[:sendLen], r.recv[:recvLen]
		iters, skip := r.iterations(size)
		wrong := 0
		call := func(i int, compute time.Duration, row *NBCRow) error {
			root := r.root(i)
			if cfg.Validate {
				fill(r.b.Coll, send, recv, block, r.rank, r.n, root, i)
				if err := r.barrier(); err != nil {
					return err
				}
			}
			t0 := time.Now()
			req := r.impl.Start(r.c, send, recv, comm.Sum, root, r.opts)
			tInit := time.Since(t0)
			var tComp, tTest, tWait time.Duration
			if compute > 0 {
				t1 := time.Now()
				var err error
				tTest, err = r.kernel.dummyCompute(compute, req, cfg.Probes)
				tComp = time.Since(t1)
				if err != nil {
					return err
				}
			}
			t2 := time.Now()
			err := req.Wait(r.ctx)
			tWait = time.Since(t2)
			total := time.Since(t0)
			if err != nil {
				return err
			}
			if err := r.barrier(); err != nil {
				return err
			}
			if cfg.Validate {
				wrong += check(r.b.Coll, recv, block, r.rank, r.n, root, i)
			}
			if i >= skip {
				row.Overall += us(total)
				row.Init += us(tInit)
				row.Compute += us(tComp)
				row.Test += us(tTest)
				row.Wait += us(tWait)
			}
			return nil
		}
		if err := r.barrier(); err != nil {
			return err
		}
		var pure NBCRow
		for i := range iters + skip {
			if err := call(i, 0, &pure); err != nil {
				return err
			}
		}
		latency := pure.Overall / float64(iters)
		if err := r.barrier(); err != nil {
			return err
		}
		var ov NBCRow
		for i := range iters + skip {
			if err := call(i, time.Duration(latency*float64(time.Microsecond)), &ov); err != nil {
				return err
			}
		}
		it := float64(iters)
		s, err := r.allreduce(comm.Sum, ov.Overall/it, ov.Compute/it, ov.Init/it, ov.Test/it, ov.Wait/it, latency, float64(wrong))
		if err != nil {
			return err
		}
		m, err := r.allreduce(comm.Max, latency, -latency)
		if err != nil {
			return err
		}
		n := float64(r.n)
		row := NBCRow{Size: size, Overall: s[0] / n, Compute: s[1] / n, Init: s[2] / n, Test: s[3] / n, Wait: s[4] / n,
			Comm: s[5] / n, MinComm: -m[1], MaxComm: m[0], Errors: int(s[6])}
		if cfg.JSON {
			rec := r.record(size, count)
			rec.Iterations, rec.Wrong = iters, int64(row.Errors)
			rec.AvgUs, rec.MinUs, rec.MaxUs = row.Comm, row.MinComm, row.MaxComm
			rec.OverallUs, rec.ComputeUs, rec.CommUs, rec.OverlapPct = row.Overall, row.Compute-row.Test, row.Comm, row.Overlap()
			r.bandwidths(&rec, max(sendLen, recvLen)*r.es, row.Comm)
			if err := writeRecord(r.out, rec); err != nil {
				return err
			}
		} else {
			writeNBCRow(r.out, row, cfg.Full, cfg.Validate)
		}
		if row.Errors > 0 {
			return r.validationFailed(size)
		}
	}
	return nil
}
