package simulate

import (
	"fmt"

	"github.com/goccl/goccl/collectives"
)

// symmetry is how an algorithm's schedules map onto each other: rank r+k's
// is rank r's with every peer moved by k (shift: rings, pairwise exchange
// on any size, Bruck's all-to-all, dissemination), or rank r^k's is rank
// r's with every peer XORed by k (xor: recursive doubling, pairwise
// exchange on a power of two).
//
// Symmetric messages are not enough: the chunks' dependencies must map too.
// Rabenseifner's and recursive halving's reduce-scatter are not symmetric
// in that sense: a rank that keeps the lower half of its range forwards the
// first chunks it reduced, one that keeps the upper half the last ones, so
// their pipelines differ (TestPeriodicMatchesFull caught it, 14% off);
// recursive doubling's allgather likewise sends its group's blocks before
// or after the ones it just received; and Bruck's allgather cuts a message
// in two where its blocks wrap. On a machine whose hosts are alike, such a job is
// periodic: ranks r and r+W (or r^W...) see the same times whenever W is a
// multiple of the ranks per host (and of the CPU pool), so simulating a
// window of W ranks gives every rank's time.
type symmetry uint8

const (
	symNone symmetry = iota
	symShift
	symXor
)

func (s symmetry) String() string {
	return [...]string{"none", "shift", "xor"}[s]
}

// symmetries lists the algorithms whose schedules are symmetric, with the
// condition on the rank count. TestSymmetriesHold checks every claim
// against the schedules.
//
// The ring allreduce cuts its buffer into segments of count/ranks elements:
// it is symmetric only when they are all the same length.
func symmetryOf(c collectives.Coll, algo string, ranks, count int) symmetry {
	pow2 := ranks&(ranks-1) == 0
	switch {
	case c == collectives.CollAllreduce && algo == "ring":
		if count%ranks == 0 {
			return symShift
		}
	case c == collectives.CollAllgather && algo == "ring",
		c == collectives.CollReduceScatter && algo == "ring",
		c == collectives.CollAlltoall && algo == "bruck",
		c == collectives.CollBarrier && algo == "dissemination":
		return symShift
	case c == collectives.CollAlltoall && algo == "pairwise":
		if pow2 {
			return symXor
		}
		return symShift
	case pow2 && (c == collectives.CollAllreduce || c == collectives.CollBarrier) && algo == "recursive-doubling":
		return symXor
	}
	return symNone
}

// world maps the simulated ranks 0..w-1 to the job's ranks 0..p-1: the
// identity when w == p; else the window of a periodic job, in which rank
// r's peer t is simulated by rank t mod w and the link from r to t is the
// link from r' to t' for the pair moved into the window by the symmetry.
type world struct {
	p, w int
	sym  symmetry
	rph  int // ranks per host
}

// window is the simulated rank standing for job rank r.
func (wd *world) window(r int) int { return r % wd.w }

// canon moves the pair (a, t) by the symmetry so that a is in the window.
func (wd *world) canon(a, t int) (int, int) {
	switch wd.sym {
	case symShift:
		k := a - a%wd.w
		return a - k, ((t-k)%wd.p + wd.p) % wd.p
	case symXor:
		k := a &^ (wd.w - 1)
		return a ^ k, t ^ k
	}
	return a, t
}

// class is the link class between job ranks a and t.
func (wd *world) class(a, t int) collectives.LinkClass {
	if a/wd.rph == t/wd.rph {
		return collectives.LinkLocal
	}
	return collectives.LinkNet
}

// periodicWindow is the smallest window for a job of p ranks with rph
// ranks per host and CPU pools of pool ranks (0: no pools), under sym; 0
// if there is none smaller than p.
func periodicWindow(sym symmetry, p, rph, pool int) int {
	if sym == symNone || p%rph != 0 || (pool > 0 && p%pool != 0) {
		return 0
	}
	unit := rph
	if pool > 0 {
		unit = lcm(unit, pool)
	}
	for w := unit; w < p; w += unit {
		if w < 4 && p > 4 {
			continue // at least a few ranks, so each link's ends are distinct ranks
		}
		if p%w != 0 || (sym == symXor && w&(w-1) != 0) {
			continue
		}
		return w
	}
	return 0
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// links builds the links of the simulated ranks' plans: one per directed
// pair of job ranks as the window sees it, joining a sender's entry to the
// receiver's. A link that only one side knows, or whose two sides count
// different numbers of chunks, is a schedule that does not match itself
// (or a symmetry claim that does not hold).
func (wd *world) links(plans []*rankPlan) ([]link, error) {
	var out []link
	index := map[int64]int32{}
	get := func(a, t int) int32 {
		key := int64(a)*int64(wd.p) + int64(t)
		if i, ok := index[key]; ok {
			return i
		}
		i := int32(len(out))
		index[key] = i
		out = append(out, link{from: int32(wd.window(a)), to: int32(wd.window(t)), class: wd.class(a, t),
			fromEntry: -1, toEntry: -1})
		return i
	}
	for r, rp := range plans {
		for k := range rp.entries {
			e := &rp.entries[k]
			if len(e.sends) > 0 {
				e.sendLink = get(wd.canon(r, e.peer))
				out[e.sendLink].fromEntry = int32(k)
			}
			if len(e.recvs) > 0 {
				e.recvLk = get(wd.canon(e.peer, r))
				if out[e.recvLk].to != int32(r) {
					return nil, fmt.Errorf("simulate: rank %d's receives from %d map to rank %d", r, e.peer, out[e.recvLk].to)
				}
				out[e.recvLk].toEntry = int32(k)
			}
		}
	}
	for i := range out {
		l := &out[i]
		if l.fromEntry < 0 || l.toEntry < 0 {
			return nil, fmt.Errorf("simulate: rank %d -> %d: messages sent but never received, or received but never sent", l.from, l.to)
		}
		ns := len(plans[l.from].entries[l.fromEntry].sends)
		nr := len(plans[l.to].entries[l.toEntry].recvs)
		if ns != nr {
			return nil, fmt.Errorf("simulate: rank %d -> %d: %d chunks sent, %d received", l.from, l.to, ns, nr)
		}
	}
	return out, nil
}
