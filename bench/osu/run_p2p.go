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
	if !cfg.JSON {
		writePt2ptHeader(r.out, r.b.Title, r.meta, r.b.Kind != KindLatency, cfg.Validate)
		writeDatatype(r.out, cfg.OSUType)
	}
	ack, err := comm.Alloc[T](r.c, max(1, 4/r.es))
	if err != nil {
		return err
	}
	defer comm.Free(r.c, ack)
	p := &p2pRun[T]{runner: r, peer: 1 - r.rank, ack: ack, reqs: make([]*comm.Request, 0, 2*cfg.Window)}
	first := true
	for _, size := range r.sizes() {
		count := size / r.es
		if !r.fits(size) {
			continue
		}
		if d := r.warmupFor(size, first); d > 0 && r.b.Kind == KindLatency {
			send, recv := p.send[:count], p.recv[:count]
			if err := WarmUpFor(r.ctx, r.c, d, func() error { return p.exchange(send, recv) }); err != nil {
				return err
			}
		}
		first = false
		iters, skip := r.iterations(size)
		total, wrong, err := p.measure(count, iters, skip)
		if err != nil {
			return err
		}
		if err := p.report(size, count, iters, total, wrong); err != nil {
			return err
		}
	}
	return nil
}

// p2pRun is the state of runP2P: the peer, osu_bw's acknowledgement
// buffer, and the requests of a window.
type p2pRun[T comm.Number] struct {
	*runner[T]
	peer int
	ack  []T
	reqs []*comm.Request
}

// measure runs skip warm-up and iters timed exchanges of count elements
// and returns the time of the timed ones and, with -c, the elements this
// rank received wrong.
func (p *p2pRun[T]) measure(count, iters, skip int) (total time.Duration, wrong int, err error) {
	cfg := p.cfg
	send, recv := p.send[:count], p.recv[:count]
	if err := p.barrier(); err != nil {
		return 0, 0, err
	}
	if !cfg.Validate {
		// Nothing happens between exchanges: time the timed ones as one
		// span, as OSU 5's osu_latency and the peers' harness do. A clock
		// read on each side of each exchange costs about as much as the
		// library's share of a shared-memory round trip of 8 B.
		var t0 time.Duration
		for i := range iters + skip {
			if i == skip {
				t0 = wtime()
			}
			if err := p.exchange(send, recv); err != nil {
				return 0, 0, err
			}
		}
		if iters <= 0 {
			return 0, 0, nil
		}
		return wtime() - t0, 0, nil
	}
	for i := range iters + skip {
		fill("sendrecv", send, recv, count, p.rank, 2, 0, i)
		if err := p.barrier(); err != nil {
			return 0, 0, err
		}
		t0 := wtime()
		err := p.exchange(send, recv)
		d := wtime() - t0
		if err != nil {
			return 0, 0, err
		}
		// In bw only rank 1 receives data.
		if p.b.Kind != KindBandwidth || p.rank == 1 {
			wrong += check("sendrecv", recv, count, p.rank, 2, 0, i)
		}
		if i >= skip {
			total += d
		}
	}
	return total, wrong, nil
}

// exchange is one iteration of the test: a ping-pong (latency), a window
// of sends acknowledged by the receiver (bw), or a window of exchanges
// (bibw).
func (p *p2pRun[T]) exchange(send, recv []T) error {
	ctx, c, peer := p.ctx, p.c, p.peer
	switch p.b.Kind {
	case KindLatency:
		if p.rank == 0 {
			if err := p.p2p.Send(ctx, c, send, peer, tagData); err != nil {
				return err
			}
			return p.p2p.Recv(ctx, c, recv, peer, tagData)
		}
		if err := p.p2p.Recv(ctx, c, recv, peer, tagData); err != nil {
			return err
		}
		return p.p2p.Send(ctx, c, send, peer, tagData)
	case KindBandwidth:
		p.reqs = p.reqs[:0]
		if p.rank == 0 {
			for range p.cfg.Window {
				p.reqs = append(p.reqs, p.p2p.SendAsync(c, send, peer, tagBW))
			}
			if err := comm.WaitAll(ctx, p.reqs...); err != nil {
				return err
			}
			return p.p2p.Recv(ctx, c, p.ack, peer, tagAck)
		}
		for range p.cfg.Window {
			p.reqs = append(p.reqs, p.p2p.RecvAsync(c, recv, peer, tagBW))
		}
		if err := comm.WaitAll(ctx, p.reqs...); err != nil {
			return err
		}
		return p.p2p.Send(ctx, c, p.ack, peer, tagAck)
	case KindBiBandwidth:
		// comm runs a communicator's calls one at a time, in order, so a
		// window of receives posted before a window of sends on both
		// ranks would wait on itself: the exchange is SendRecv, goccl's
		// MPI_Sendrecv.
		p.reqs = p.reqs[:0]
		for range p.cfg.Window {
			p.reqs = append(p.reqs, p.p2p.SendRecvAsync(c, send, peer, recv, peer, tagBW))
		}
		return comm.WaitAll(ctx, p.reqs...)
	}
	return nil
}

// report writes the row (or JSON record) of one size: rank 0's time is
// the measurement, as in OSU; the wrong elements are summed over ranks.
func (p *p2pRun[T]) report(size, count, iters int, total time.Duration, wrong int) error {
	s, err := p.allreduce(comm.Sum, float64(wrong))
	if err != nil {
		return err
	}
	errs := int(s[0])
	var value float64
	rec := p.record(size, count)
	rec.Iterations, rec.Wrong = iters, int64(errs)
	switch p.b.Kind {
	case KindLatency:
		value = us(total) / (2 * float64(iters))
		rec.AvgUs = value
		p.bandwidths(&rec, size, value)
	case KindBandwidth:
		value = float64(size) / 1e6 * float64(iters*p.cfg.Window) / total.Seconds()
		rec.MBps, rec.AlgBW, rec.BusBW = value, value/1e3, value/1e3
	case KindBiBandwidth:
		value = float64(size) / 1e6 * float64(iters*p.cfg.Window) * 2 / total.Seconds()
		rec.MBps, rec.AlgBW, rec.BusBW = value, value/1e3, value/1e3
	}
	if p.cfg.JSON {
		if err := writeRecord(p.out, rec); err != nil {
			return err
		}
	} else {
		writePt2ptRow(p.out, size, value, p.cfg.Validate, errs)
	}
	if errs > 0 {
		return p.validationFailed(size)
	}
	return nil
}
