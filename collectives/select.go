package collectives

import (
	"fmt"
	"strings"
)

// The selector is a pure function: the collective, the size of the call,
// where the ranks are (Topology) and what the links and the CPU cost
// (Model) in; the algorithm and the price of every candidate out. The
// communicator only supplies the measurements; every rank that feeds it the
// same inputs gets the same choice.

// LinkClass is a kind of link between two ranks, priced separately.
type LinkClass uint8

const (
	// LinkLocal joins ranks of one host (shared memory, or loopback).
	LinkLocal LinkClass = iota
	// LinkNet joins ranks of different hosts (TCP, verbs).
	LinkNet
	NumLinkClasses
)

func (l LinkClass) String() string {
	switch l {
	case LinkLocal:
		return "local"
	case LinkNet:
		return "net"
	}
	return fmt.Sprintf("link(%d)", uint8(l))
}

// LinkCost is the α-β cost of one class of link: Alpha seconds per message,
// Beta seconds per byte. The zero LinkCost means "not measured".
type LinkCost struct {
	Alpha, Beta float64
}

func (l LinkCost) known() bool { return l.Alpha > 0 || l.Beta > 0 }

// Topology is where a job's ranks are: Hosts hosts of RanksPerHost ranks
// each, in rank order (the last may hold fewer), each host's ranks sharing
// its network link.
type Topology struct {
	Size  int // ranks
	Hosts int // hosts they run on; 0 or 1: all on one host
	// Uneven: the hosts hold different numbers of ranks.
	Uneven bool
}

// RanksPerHost is how many ranks a host holds (the last may hold fewer).
func (t Topology) RanksPerHost() int {
	if t.Hosts <= 1 {
		return max(t.Size, 1)
	}
	return (t.Size + t.Hosts - 1) / t.Hosts
}

// Model is what the selector prices algorithms with.
type Model struct {
	Links [NumLinkClasses]LinkCost
	// Gamma is seconds per byte through the reduction kernel.
	Gamma float64
	// ChunkBytes is the executor's pipelining unit.
	ChunkBytes int
	// Window is how many peers a concurrent algorithm (Algo.Concurrent)
	// exchanges with at once (the executor's Window); 0: all of them.
	Window int
	// AlgoBeta is β measured for one algorithm on the job itself, by
	// collective and name: it replaces the link's β in that algorithm's
	// bytes term (comm fits the ring's β and, beside it, Rabenseifner's;
	// see FitBeta). Nil or absent: the link's β.
	AlgoBeta map[Coll]map[string]float64
	// Crowded: the ranks all live on one host and outnumber its
	// processors, so a waiting rank yields its processor and every
	// dependent step costs a wake-up. An algorithm with Algo.CrowdedUpTo
	// at or above the size is taken there without pricing.
	Crowded bool
}

// link is the cost of the links a flat algorithm's messages cross on t: the
// network's when the ranks span hosts, else the local links' (either falls
// back to the other when it was not measured).
func (m *Model) link(t Topology) LinkCost {
	first, second := LinkLocal, LinkNet
	if t.Hosts > 1 {
		first, second = LinkNet, LinkLocal
	}
	if m.Links[first].known() {
		return m.Links[first]
	}
	return m.Links[second]
}

// Price is one candidate's estimated time.
type Price struct {
	Algo    *Algo
	Seconds float64
}

// Time estimates the run time of algorithm a on a call priced at nbytes
// (CollInfo.Price) on t with model m: α per step and β per byte of the
// busiest rank or, on several hosts, of the busiest host's link if that
// carries more (Algo.NetBytes), plus γ per byte reduced. It reports false
// for an algorithm without a cost.
func (a *Algo) Time(nbytes int, t Topology, m Model) (float64, bool) {
	if a.Price != nil {
		return a.Price(float64(nbytes), t, m)
	}
	if a.Cost == nil {
		return 0, false
	}
	l := m.link(t)
	// A pipeline's chunks are no larger than the buffer.
	chunk := min(m.ChunkBytes, max(nbytes, 1))
	c := a.costAt(t.Size, nbytes)
	if t.Hosts > 1 && t.Size > 1 && a.NetBytes != nil {
		// The hosts' links are shared by their ranks: the busiest one
		// may carry more than the busiest rank sends.
		c.Bytes = max(c.Bytes, a.NetBytes(t.Size, t.RanksPerHost(), float64(nbytes)))
	}
	if t.Hosts <= 1 && t.Size > 1 && a.LocalBytes != nil {
		c.Bytes = max(c.Bytes, a.LocalBytes(t.Size, float64(nbytes)))
	}
	c.Window = m.Window
	if b, ok := m.AlgoBeta[a.Coll][a.Name]; ok {
		l.Beta = b
	}
	sec := c.Time(l.Alpha, l.Beta, chunk)
	if a.Chain && t.Hosts > 1 && t.Size > t.Hosts {
		// The fill was priced at the network's cost per hop, but a chain
		// in rank order crosses only Hosts-1 host boundaries: its other
		// hops run over the local links.
		if loc := m.Links[LinkLocal]; loc.known() {
			hop := (l.Alpha - loc.Alpha) + float64(chunk)*(l.Beta-loc.Beta)
			sec -= float64(t.Size-t.Hosts) * max(hop, 0)
		}
	}
	if a.Reduced != nil && t.Size > 1 {
		sec += a.Reduced(t.Size, float64(nbytes)) * m.Gamma
	}
	return sec, true
}

// FitBeta returns the β that makes a's estimated time of a call priced at
// nbytes on t under m equal measured (Time is linear in β), and false
// where a has no cost or its time does not depend on β.
func (a *Algo) FitBeta(nbytes int, t Topology, m Model, measured float64) (float64, bool) {
	with := func(b float64) (float64, bool) {
		mb := m
		mb.AlgoBeta = map[Coll]map[string]float64{a.Coll: {a.Name: b}}
		return a.Time(nbytes, t, mb)
	}
	t0, ok0 := with(0)
	t1, ok1 := with(1e-9)
	if !ok0 || !ok1 || t1 <= t0 {
		return 0, false
	}
	return max((measured-t0)/(t1-t0)*1e-9, 1e-12), true
}

// Select picks the algorithm of a call of c priced at nbytes (see
// Coll.PricedBytes) on t: the cheapest by m, the first in the table's
// order on a tie; a collective with one algorithm gets it unpriced. The
// prices of the candidates are appended to prices and returned (pass a
// reused slice to avoid allocation).
func Select(c Coll, nbytes int, t Topology, m Model, prices []Price) (*Algo, []Price, error) {
	var best *Algo
	var bestT float64
	var only *Algo
	n, start := 0, len(prices)
	for i := range algoTable {
		a := &algoTable[i]
		if a.Coll != c {
			continue
		}
		n++
		only = a
		sec, ok := a.Time(nbytes, t, m)
		if !ok {
			continue
		}
		prices = append(prices, Price{Algo: a, Seconds: sec})
		if best == nil || sec < bestT {
			best, bestT = a, sec
		}
	}
	if m.Crowded {
		for i := range algoTable {
			if a := &algoTable[i]; a.Coll == c && a.TakenCrowded(t, nbytes) {
				return a, prices, nil
			}
		}
	}
	switch {
	case n == 1:
		return only, prices[:start], nil
	case best == nil && n == 0:
		return nil, prices, fmt.Errorf("%s has no algorithm", c)
	case best == nil:
		return nil, prices, fmt.Errorf("%s: no algorithm has a cost model", c)
	}
	return best, prices, nil
}

// TakenCrowded reports whether the selector takes a without pricing on a
// crowded host (Model.Crowded) for a call priced at nbytes on t
// (Algo.CrowdedUpTo, CrowdedBelow, CrowdedRootBelow, CrowdedAnySizeUpTo,
// CrowdedOneHost, CrowdedFromRanks, CrowdedBlockFrom).
func (a *Algo) TakenCrowded(t Topology, nbytes int) bool {
	anySize := t.Size <= a.CrowdedAnySizeUpTo
	return t.Size <= a.CrowdedUpTo && t.Size >= a.CrowdedFromRanks && (anySize || a.CrowdedBelow <= 0 || nbytes < a.CrowdedBelow) &&
		(anySize || a.CrowdedRootBelow <= 0 || int64(t.Size-1)*int64(nbytes) < int64(a.CrowdedRootBelow)) &&
		(a.CrowdedBlockFrom <= 0 || t.Size > 0 && nbytes/t.Size >= a.CrowdedBlockFrom) &&
		(!a.CrowdedOneHost || t.Hosts <= 1)
}

// FormatPrices renders prices for logs: " ring=12.0us tree=15.2us".
func FormatPrices(prices []Price) string {
	var b strings.Builder
	for _, p := range prices {
		fmt.Fprintf(&b, " %s=%.1fus", p.Algo.Name, p.Seconds*1e6)
	}
	return b.String()
}
