package osu

import (
	"time"

	"github.com/goccl/goccl/comm"
)

// OSU's tags.
const (
	tagData = 1
	tagBW   = 100
	tagAck  = 101
)

// runP2P is osu_latency (ping-pong, half the round trip), osu_bw (rank 0
// streams a window of messages, rank 1 acknowledges each window) and
// osu_bibw (both stream a window at once).
func (r *runner[T]) runP2P() error {
	cfg := r.cfg
	bw := r.b.Kind != KindLatency
	if !cfg.JSON {
		writePt2ptHeader(r.out, r.b.Title, r.meta, bw, cfg.Validate)
		writeDatatype(r.out, cfg.OSUType)
	}
	peer := 1 - r.rank
	ackBuf, err := comm.Alloc[T](r.c, max(1, 4/r.es))
	if err != nil {
		return err
	}
	defer comm.Free(r.c, ackBuf)
	reqs := make([]*comm.Request, 0, 2*cfg.Window)
	for _, size := range r.sizes() {
		count := size / r.es
		if count == 0 {
			continue
		}
		send, recv := r.send[:count], r.recv[:count]
		iters, skip := r.iterations(size)
		if err := r.barrier(); err != nil {
			return err
		}
		var total time.Duration
		wrong := 0
		for i := range iters + skip {
			if cfg.Validate {
				fill("sendrecv", send, recv, count, r.rank, 2, 0, i)
				if err := r.barrier(); err != nil {
					return err
				}
			}
			t0 := time.Now()
			var err error
			switch r.b.Kind {
			case KindLatency:
				if r.rank == 0 {
					if err = r.p2p.Send(r.ctx, r.c, send, peer, tagData); err == nil {
						err = r.p2p.Recv(r.ctx, r.c, recv, peer, tagData)
					}
				} else {
					if err = r.p2p.Recv(r.ctx, r.c, recv, peer, tagData); err == nil {
						err = r.p2p.Send(r.ctx, r.c, send, peer, tagData)
					}
				}
			case KindBandwidth:
				reqs = reqs[:0]
				if r.rank == 0 {
					for range cfg.Window {
						reqs = append(reqs, r.p2p.SendAsync(r.c, send, peer, tagBW))
					}
					if err = comm.WaitAll(r.ctx, reqs...); err == nil {
						err = r.p2p.Recv(r.ctx, r.c, ackBuf, peer, tagAck)
					}
				} else {
					for range cfg.Window {
						reqs = append(reqs, r.p2p.RecvAsync(r.c, recv, peer, tagBW))
					}
					if err = comm.WaitAll(r.ctx, reqs...); err == nil {
						err = r.p2p.Send(r.ctx, r.c, ackBuf, peer, tagAck)
					}
				}
			case KindBiBandwidth:
				// comm runs a communicator's calls one at a time, in
				// order, so a window of receives posted before a window
				// of sends on both ranks would wait on itself: the
				// exchange is SendRecv, goccl's MPI_Sendrecv.
				reqs = reqs[:0]
				for range cfg.Window {
					reqs = append(reqs, r.p2p.SendRecvAsync(r.c, send, peer, recv, peer, tagBW))
				}
				err = comm.WaitAll(r.ctx, reqs...)
			}
			d := time.Since(t0)
			if err != nil {
				return err
			}
			// In bw only rank 1 receives data.
			if cfg.Validate && (r.b.Kind != KindBandwidth || r.rank == 1) {
				wrong += check("sendrecv", recv, count, r.rank, 2, 0, i)
			}
			if i >= skip {
				total += d
			}
		}
		// Rank 0's time is the measurement, as in OSU.
		s, err := r.allreduce(comm.Sum, float64(wrong))
		if err != nil {
			return err
		}
		errs := int(s[0])
		var value float64
		rec := r.record(size, count)
		rec.Iterations, rec.Wrong = iters, int64(errs)
		switch r.b.Kind {
		case KindLatency:
			value = us(total) / (2 * float64(iters))
			rec.AvgUs = value
			r.bandwidths(&rec, size, value)
		case KindBandwidth:
			value = float64(size) / 1e6 * float64(iters*cfg.Window) / total.Seconds()
			rec.MBps, rec.AlgBW, rec.BusBW = value, value/1e3, value/1e3
		case KindBiBandwidth:
			value = float64(size) / 1e6 * float64(iters*cfg.Window) * 2 / total.Seconds()
			rec.MBps, rec.AlgBW, rec.BusBW = value, value/1e3, value/1e3
		}
		if cfg.JSON {
			if err := writeRecord(r.out, rec); err != nil {
				return err
			}
		} else {
			writePt2ptRow(r.out, size, value, cfg.Validate, errs)
		}
		if errs > 0 {
			return r.validationFailed(size)
		}
	}
	return nil
}
