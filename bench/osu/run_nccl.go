package osu

import (
	"time"

	"github.com/goccl/goccl/comm"
)

// runNCCL measures as nccl-tests does: per size, one synchronising call, a
// barrier, then Iters calls back to back timed together; the time is
// averaged over ranks. With checking on (-c, the default in this layout)
// one more call on fresh data counts the wrong elements.
func (r *runner[T]) runNCCL() error {
	cfg := r.cfg
	check := cfg.Validate
	if !cfg.JSON {
		ranks := make([]NCCLRank, r.n)
		for i := range ranks {
			ranks[i] = NCCLRank{Rank: i, Pid: r.pids[i], Host: r.meta.HostNames[i]}
		}
		writeNCCLHeader(r.out, NCCLParams{MinBytes: cfg.MinSize, MaxBytes: r.maxSize, Warmup: cfg.Skip, Iters: cfg.Iters, Check: check}, r.meta, ranks)
	}
	root := max(cfg.Root, 0)
	rootCol, opCol := -1, "none"
	if r.b.HasRoot {
		rootCol = root
	}
	if r.b.HasOp {
		opCol = "sum"
	}
	// Warm-up at the largest then the smallest size, as nccl-tests does.
	for _, size := range []int{r.maxSize, cfg.MinSize} {
		sendLen, recvLen, block := layout(r.b.Coll, size/r.es, r.n, true)
		if block == 0 && r.b.Coll != "barrier" {
			continue
		}
		for range cfg.Skip {
			if err := r.impl.Run(r.ctx, r.c, r.send[:sendLen], r.recv[:recvLen], comm.Sum, root, r.opts); err != nil {
				return err
			}
		}
	}
	var busSum float64
	var busN, errors int
	for _, size := range r.sizes() {
		count := size / r.es
		sendLen, recvLen, block := layout(r.b.Coll, count, r.n, true)
		if !r.fits(size) {
			continue
		}
		send, recv := r.send[:sendLen], r.recv[:recvLen]
		row := NCCLRow{Bytes: max(sendLen, recvLen) * r.es, Count: block, Type: ncclTypeName(cfg.Type), Op: opCol, Root: rootCol}
		for place := range 2 {
			res, err := r.ncclMeasure(send, recv, block, root, place == 1, check, row.Bytes)
			if err != nil {
				return err
			}
			if place == 0 {
				row.Out = res
			} else {
				row.In = res
			}
			if !res.Skipped {
				busSum += res.BusBW
				busN++
				if res.Wrong > 0 {
					errors++
				}
				if cfg.JSON {
					rec := r.record(row.Bytes, row.Count)
					rec.Layout, rec.Type, rec.Root, rec.InPlace = "nccl", row.Type, rootCol, place == 1
					rec.AvgUs, rec.Iterations, rec.AlgBW, rec.BusBW = res.Time, cfg.Iters, res.AlgBW, res.BusBW
					rec.Wrong, rec.Validated = max(res.Wrong, 0), check
					if err := writeRecord(r.out, rec); err != nil {
						return err
					}
				}
			}
		}
		if !cfg.JSON {
			writeNCCLRow(r.out, row)
		}
	}
	if !cfg.JSON {
		avg := 0.0
		if busN > 0 {
			avg = busSum / float64(busN)
		}
		writeNCCLFooter(r.out, errors, avg)
	}
	if errors > 0 {
		return r.validationFailed(r.maxSize)
	}
	return nil
}

// ncclMeasure times one size, out of place or in place.
func (r *runner[T]) ncclMeasure(send, recv []T, block, root int, inPlace, check bool, bytes int) (NCCLResult, error) {
	coll := r.b.Coll
	call := func() error { return r.impl.Run(r.ctx, r.c, send, recv, comm.Sum, root, r.opts) }
	if inPlace {
		if r.impl.InPlace == nil {
			return NCCLResult{Skipped: true}, nil
		}
		call = func() error { return r.impl.InPlace(r.ctx, r.c, recv, comm.Sum, root, r.opts) }
	}
	prepare := func(iter int) {
		fill(coll, send, recv, block, r.rank, r.n, root, iter)
		if inPlace {
			prepareInPlace(coll, send, recv, block, r.rank)
		}
	}
	prepare(0)
	if err := call(); err != nil {
		return NCCLResult{}, err
	}
	if err := r.barrier(); err != nil {
		return NCCLResult{}, err
	}
	iters := r.cfg.Iters
	t0 := time.Now()
	for range iters {
		if err := call(); err != nil {
			return NCCLResult{}, err
		}
	}
	t := us(time.Since(t0)) / float64(iters)
	wrong := 0
	if check {
		if err := r.barrier(); err != nil {
			return NCCLResult{}, err
		}
		prepare(99)
		if err := r.barrier(); err != nil {
			return NCCLResult{}, err
		}
		if err := call(); err != nil {
			return NCCLResult{}, err
		}
		wrong = r.checkOne(coll, recv, block, root, 99)
	}
	s, err := r.allreduce(comm.Sum, t, float64(wrong))
	if err != nil {
		return NCCLResult{}, err
	}
	res := NCCLResult{Time: s[0] / float64(r.n), Wrong: int64(s[1])}
	if !check {
		res.Wrong = -1
	}
	if res.Time > 0 {
		res.AlgBW = float64(bytes) / res.Time / 1e3
		res.BusBW = res.AlgBW * busFactor(coll, r.n)
	}
	return res, nil
}

func (r *runner[T]) checkOne(coll string, recv []T, block, root, iter int) int {
	return check(coll, recv, block, r.rank, r.n, root, iter)
}
