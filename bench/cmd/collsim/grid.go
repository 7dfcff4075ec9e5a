package main

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/collectives/simulate"
)

// A grid is every priced algorithm of some collectives, simulated at some
// rank counts and sizes, with the selector's pick at each point.

// point is one (collective, ranks, size): every algorithm's result and the
// selector's choice.
type point struct {
	Coll     string              `json:"collective"`
	Ranks    int                 `json:"ranks"`
	Hosts    int                 `json:"hosts"`
	Bytes    int                 `json:"bytes"` // priced size (the whole buffer; all blocks of all-to-all)
	Block    int                 `json:"block,omitempty"`
	Algos    []algoResult        `json:"algorithms"`
	Best     string              `json:"best"`
	Selector string              `json:"selector"`
	prices   []collectives.Price // the selector's
}

type algoResult struct {
	Algo         string  `json:"algorithm"`
	Seconds      float64 `json:"seconds"`
	MeanSeconds  float64 `json:"mean_seconds"`
	Method       string  `json:"method"`
	Simulated    int     `json:"simulated_ranks,omitempty"`
	Events       int     `json:"events,omitempty"`
	BusiestPort  string  `json:"busiest_port,omitempty"`
	BusiestBytes float64 `json:"busiest_bytes"`
	NetBytes     float64 `json:"net_bytes"`
	Err          string  `json:"error,omitempty"`
}

// gridSpec is what to simulate.
type gridSpec struct {
	colls  []collectives.Coll
	ranks  []int
	sizes  map[collectives.Coll][]int // buffer bytes; all-to-all: bytes per block
	cfg    config
	budget int
	jobs   int
}

// defaultSizes are the tables' sizes: 8 B to 1 GiB by factors of 8 for
// allreduce and broadcast, 8 B to 256 KiB per block for all-to-all.
func defaultSizes(c collectives.Coll) []int {
	top := 1 << 30
	if c.Info().Blocked {
		top = 256 << 10
	}
	var out []int
	for n := 8; n <= top; n *= 8 {
		out = append(out, n)
	}
	return out
}

// run simulates the grid, in parallel, and returns its points in order.
func (g *gridSpec) run(progress func(string)) ([]*point, error) {
	par := g.cfg.params()
	type work struct {
		pt *point
		i  int
		a  *collectives.Algo
	}
	var points []*point
	var todo []work
	for _, c := range g.colls {
		var algos []*collectives.Algo
		for _, a := range collectives.Algos(c) {
			if a.Cost != nil {
				algos = append(algos, a)
			}
		}
		if len(algos) == 0 {
			return nil, fmt.Errorf("%s has no priced algorithm", c)
		}
		for _, p := range g.ranks {
			m := g.cfg.machine(p)
			for _, size := range g.sizes[c] {
				pt := &point{Coll: c.String(), Ranks: p, Hosts: m.Hosts(), Bytes: size}
				if c.Info().Blocked {
					pt.Block, pt.Bytes = size, size*p
				}
				sel, prices, err := collectives.Select(c, pt.Bytes, m.Topology(), par.SelectorModel(), nil)
				if err != nil {
					return nil, err
				}
				pt.Selector, pt.prices = sel.Name, prices
				pt.Algos = make([]algoResult, len(algos))
				for i, a := range algos {
					pt.Algos[i].Algo = a.Name
					todo = append(todo, work{pt, i, a})
				}
				points = append(points, pt)
			}
		}
	}
	// The largest jobs first, so that the pool ends together.
	jobs := g.jobs
	if jobs <= 0 {
		jobs = min(runtime.GOMAXPROCS(0), 4)
	}
	ch := make(chan work)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range jobs {
		wg.Go(func() {
			for w := range ch {
				c, _ := collectives.CollByName(w.pt.Coll)
				job := simulate.Job{Coll: c, Algo: w.a.Name, Bytes: w.pt.Bytes}
				r, err := simulate.Simulate(job, g.cfg.machine(w.pt.Ranks), par, simulate.Options{Budget: g.budget})
				ar := &w.pt.Algos[w.i]
				if err != nil {
					ar.Err = err.Error()
				} else {
					ar.Seconds, ar.MeanSeconds, ar.Method = r.Seconds, r.MeanSeconds, r.Method.String()
					ar.Simulated, ar.Events = r.Simulated, r.Events
					ar.BusiestBytes, ar.NetBytes = r.BusiestBytes, r.NetBytes
					if r.Method != simulate.Analytic {
						ar.BusiestPort = r.Busiest.String()
					}
				}
				if progress != nil {
					mu.Lock()
					progress(fmt.Sprintf("%s %s p=%d %s: %s", w.pt.Coll, w.a.Name, w.pt.Ranks, sizeLabel(w.pt.Bytes), ar.summary()))
					mu.Unlock()
				}
			}
		})
	}
	for i := len(todo) - 1; i >= 0; i-- {
		ch <- todo[i]
	}
	close(ch)
	wg.Wait()
	for _, pt := range points {
		best := -1
		for i, a := range pt.Algos {
			if a.Err == "" && (best < 0 || a.Seconds < pt.Algos[best].Seconds) {
				best = i
			}
		}
		if best >= 0 {
			pt.Best = pt.Algos[best].Algo
		}
	}
	return points, nil
}

func (a *algoResult) summary() string {
	if a.Err != "" {
		return "error: " + a.Err
	}
	return fmt.Sprintf("%s (%s, %d events)", seconds(a.Seconds), a.Method, a.Events)
}

// find returns the result of algorithm name at pt.
func (pt *point) find(name string) *algoResult {
	for i := range pt.Algos {
		if pt.Algos[i].Algo == name {
			return &pt.Algos[i]
		}
	}
	return nil
}

// seconds prints a time with three significant digits in us, ms or s.
func seconds(s float64) string {
	// 0.9995 and up round to 1 in three digits: "1ms", not "1e+03us".
	switch {
	case s >= 0.9995:
		return fmt.Sprintf("%.3gs", s)
	case s >= 0.9995e-3:
		return fmt.Sprintf("%.3gms", s*1e3)
	}
	return fmt.Sprintf("%.3gus", s*1e6)
}
