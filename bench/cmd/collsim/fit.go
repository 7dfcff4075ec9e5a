package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/collectives/simulate"
)

// The fit of one link class from `collsim calibrate`'s measurements of the
// ring allreduce on 2 ranks over that class. Every parameter comes from a
// measurement the calibration repeats:
//
//   - gamma and copy: the CPU's reduction and copy speeds, timed in
//     process (rank 0's);
//   - overhead (CPU per message at each end) from the CPU time per call at
//     the smallest size, after the reduction and copies, divided by the
//     chunks the rank sends and receives;
//   - per_byte (CPU per byte at each end) from the CPU time per call at
//     the largest size, after the overheads, reductions and copies;
//   - alpha so that the simulator reproduces the measured time at the
//     smallest size, beta so that it reproduces the largest (0 if the CPU
//     alone already explains it within 1%): a two-point fit through the
//     simulator, with the CPU costs above in place.

// calibSize is one size of a calibration: wall and CPU per call, averaged
// over the ranks.
type calibSize struct {
	bytes     int
	wall, cpu float64
}

type calibration struct {
	sizes         []calibSize
	gamma, copy   float64
	chunk, slots  int
	inline, ranks int
}

// readCalibration reads the JSON lines of one `collsim calibrate` run (as
// gorun tags them: "[r] {...}").
func readCalibration(path string) (*calibration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []calibRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "{"); i >= 0 {
			line = line[i:]
		} else {
			continue
		}
		var r calibRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: no measurements", path)
	}
	c := &calibration{chunk: recs[0].Chunk, slots: recs[0].Slots, inline: recs[0].Inline, ranks: recs[0].Ranks}
	by := map[int][]calibRecord{}
	for _, r := range recs {
		if r.Rank == 0 {
			c.gamma, c.copy = r.Gamma, r.Copy
		}
		by[r.Bytes] = append(by[r.Bytes], r)
	}
	for b, rs := range by {
		s := calibSize{bytes: b}
		for _, r := range rs {
			s.wall += r.WallS / float64(len(rs))
			s.cpu += r.CPUS / float64(len(rs))
		}
		c.sizes = append(c.sizes, s)
	}
	slices.SortFunc(c.sizes, func(a, b calibSize) int { return a.bytes - b.bytes })
	return c, nil
}

// work is what one rank's CPU does in a call: messages (chunks) put on and
// taken off the transport, their bytes, bytes reduced and bytes copied.
type work struct {
	events             int
	wire, reduce, copy float64
}

// rankWork counts rank 0's work in job on p ranks from its compiled plan.
func rankWork(job simulate.Job, p, chunk int) (work, error) {
	a, err := collectives.LookupAlgo(job.Coll, job.Algo)
	if err != nil {
		return work{}, err
	}
	count := job.Bytes / 4
	if job.Coll.Info().Blocked {
		count /= p
	}
	s := a.Schedule(0, p, &collectives.Args{Count: count, ElemSize: 4, Root: job.Root})
	pl, err := collectives.Compile(s, chunk)
	if err != nil {
		return work{}, err
	}
	var w work
	for _, cp := range pl.PreCopies() {
		w.copy += float64(cp.Len)
	}
	if job.OutOfPlace {
		w.copy += float64(count * 4)
	}
	for i := range pl.NumChunks() {
		c := pl.Chunk(i)
		switch c.Kind {
		case collectives.Send:
			w.events++
			w.wire += float64(c.Len)
		case collectives.Recv, collectives.RecvReduce:
			w.events++ // taking it off the transport
			w.wire += float64(c.Len)
			if c.Kind == collectives.RecvReduce {
				w.reduce += float64(c.Len)
			} else {
				w.copy += float64(c.Len)
			}
		case collectives.Copy:
			w.copy += float64(c.Len)
		}
	}
	return w, nil
}

// fitClass fits the link class of cal (2 ranks, hosts as given: 1 for the
// local class, 2 for the net class) into cfg, whose other class (if
// already fitted) stays as it is. cores is the machine's.
func fitClass(cfg *config, class collectives.LinkClass, cal *calibration, cores int, log io.Writer) error {
	if cal.ranks != 2 || len(cal.sizes) < 2 {
		return fmt.Errorf("calibration on %d ranks at %d sizes: want 2 ranks, 2 sizes or more", cal.ranks, len(cal.sizes))
	}
	cfg.Gamma, cfg.Copy = cal.gamma, cal.copy
	cfg.ChunkBytes, cfg.Slots, cfg.Inline = cal.chunk, cal.slots, cal.inline
	link := &cfg.Local
	rph := 2
	if class == collectives.LinkNet {
		link, rph = &cfg.Net, 1
	}
	*link = simulate.Link{}
	small, large := cal.sizes[0], cal.sizes[len(cal.sizes)-1]
	job := func(b int) simulate.Job {
		return simulate.Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: b, OutOfPlace: true}
	}
	ws, err := rankWork(job(small.bytes), 2, cfg.ChunkBytes)
	if err != nil {
		return err
	}
	wl, err := rankWork(job(large.bytes), 2, cfg.ChunkBytes)
	if err != nil {
		return err
	}
	cpuRest := func(w work) float64 { return w.reduce*cfg.Gamma + w.copy*cfg.Copy }
	link.Overhead = max(0, (small.cpu-cpuRest(ws))/float64(ws.events))
	link.PerByte = max(0, (large.cpu-cpuRest(wl)-float64(wl.events)*link.Overhead)/wl.wire)
	m := simulate.Machine{Ranks: 2, RanksPerHost: rph, Cores: cores, PoolRanks: 2}
	timeAt := func(b int) (float64, error) {
		r, err := simulate.Simulate(job(b), m, cfg.params(), simulate.Options{Method: simulate.Full})
		return r.MeanSeconds, err
	}
	// alpha: the time at the smallest size is linear in it.
	t0, err := timeAt(small.bytes)
	if err != nil {
		return err
	}
	link.Alpha = 10e-6
	t1, err := timeAt(small.bytes)
	if err != nil {
		return err
	}
	link.Alpha = max(0, (small.wall-t0)/((t1-t0)/10e-6))
	// beta: the time at the largest size grows with it; bisect.
	lo, hi := 0.0, 1e-7
	link.Beta = 0
	if t, err := timeAt(large.bytes); err != nil {
		return err
	} else if t < 0.99*large.wall {
		// The port is not the bottleneck at small beta (the CPU is), so the
		// time is flat there: bisect for the smallest beta that explains
		// the measurement.
		for range 50 {
			link.Beta = (lo + hi) / 2
			t, err := timeAt(large.bytes)
			if err != nil {
				return err
			}
			if t < large.wall {
				lo = link.Beta
			} else {
				hi = link.Beta
			}
		}
		link.Beta = (lo + hi) / 2
	}
	if log != nil {
		fmt.Fprintf(log, "# %s link: fitted alpha %.2f us, port %s, overhead %.2f us/message, CPU %.3f ns/B per end; from:\n",
			class, link.Alpha*1e6, rate(link.Beta), link.Overhead*1e6, link.PerByte*1e9)
		for _, s := range cal.sizes {
			pred, err := timeAt(s.bytes)
			if err != nil {
				return err
			}
			w, err := rankWork(job(s.bytes), 2, cfg.ChunkBytes)
			if err != nil {
				return err
			}
			cpu := cpuRest(w) + float64(w.events)*link.Overhead + w.wire*link.PerByte
			fmt.Fprintf(log, "#   %8s: wall %10s (model %10s), CPU %10s (model %10s)\n",
				sizeLabel(s.bytes), seconds(s.wall), seconds(pred), seconds(s.cpu), seconds(cpu))
		}
	}
	return nil
}

// fitSwitch fits Params.Switch from a calibration of cal.ranks ranks on
// one host, more than the machine's cores: the CPU time per message end
// beyond the local class's overhead (fitted on 2 ranks, where every rank
// has a core). The local class must be fitted first.
func fitSwitch(cfg *config, cal *calibration, cores int, log io.Writer) error {
	if cal.ranks <= cores {
		return fmt.Errorf("oversubscribed calibration on %d ranks: want more than the %d cores", cal.ranks, cores)
	}
	small := cal.sizes[0]
	job := simulate.Job{Coll: collectives.CollAllreduce, Algo: "ring", Bytes: small.bytes, OutOfPlace: true}
	w, err := rankWork(job, cal.ranks, cfg.ChunkBytes)
	if err != nil {
		return err
	}
	rest := w.reduce*cfg.Gamma + w.copy*cfg.Copy + float64(w.events)*cfg.Local.Overhead + w.wire*cfg.Local.PerByte
	cfg.Switch = max(0, (small.cpu-rest)/float64(w.events))
	if log != nil {
		m := simulate.Machine{Ranks: cal.ranks, Cores: cores, PoolRanks: cal.ranks}
		r, err := simulate.Simulate(job, m, cfg.params(), simulate.Options{Method: simulate.Full})
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "# %d ranks on %d cores: fitted %.2f us more per message end; %s: wall %s (model %s), CPU %s\n",
			cal.ranks, cores, cfg.Switch*1e6, sizeLabel(small.bytes), seconds(small.wall), seconds(r.MeanSeconds), seconds(small.cpu))
	}
	return nil
}
