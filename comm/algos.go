package comm

import (
	"fmt"
	"log"
	"os"
	"slices"
	"strings"

	"github.com/goccl/goccl/collectives"
)

// callArgs is what a schedule constructor needs beyond rank and size.
type callArgs struct {
	count    int // elements: of the buffer, or of one block
	elemSize int
	root     int
	// per-rank counts and displacements of the v collectives, in elements
	sendCounts, sendDispls, recvCounts, recvDispls []int
	peer, src, tag                                 int // point to point: destination, source, tag
	recvCount                                      int // point to point: elements received
}

type scheduleFunc func(rank, size int, a *callArgs) collectives.Schedule

// plain adapts a schedule constructor of (rank, size, count, elemSize).
func plain(f func(rank, size, count, elemSize int) collectives.Schedule) scheduleFunc {
	return func(r, n int, a *callArgs) collectives.Schedule { return f(r, n, a.count, a.elemSize) }
}

// rooted adapts a schedule constructor of (rank, size, root, count,
// elemSize).
func rooted(f func(rank, size, root, count, elemSize int) collectives.Schedule) scheduleFunc {
	return func(r, n int, a *callArgs) collectives.Schedule { return f(r, n, a.root, a.count, a.elemSize) }
}

// algorithms maps each collective to its algorithms by schedule name, in
// the order the selector prefers on a tie.
var algorithms = map[collKind]map[string]scheduleFunc{
	collAllreduce: {
		"ring":               plain(collectives.RingAllreduce),
		"tree":               plain(collectives.TreeAllreduce),
		"recursive-doubling": plain(collectives.RecursiveDoublingAllreduce),
		"rabenseifner":       plain(collectives.RabenseifnerAllreduce),
	},
	collBroadcast: {
		"binomial":          rooted(collectives.BinomialBroadcast),
		"pipeline":          rooted(collectives.PipelineBroadcast),
		"scatter-allgather": rooted(collectives.ScatterAllgatherBroadcast),
	},
	collReduce: {
		"binomial": rooted(collectives.BinomialReduce),
	},
	collAllgather: {
		"ring":               plain(collectives.RingAllgather),
		"recursive-doubling": plain(collectives.RecursiveDoublingAllgather),
		"bruck":              plain(collectives.BruckAllgather),
	},
	collAllgatherv: {
		"ring": func(r, n int, a *callArgs) collectives.Schedule {
			return collectives.RingAllgatherv(r, n, a.recvCounts, a.recvDispls, a.elemSize)
		},
	},
	collReduceScatter: {
		"ring":              plain(collectives.RingReduceScatter),
		"recursive-halving": plain(collectives.RecursiveHalvingReduceScatter),
	},
	collAlltoall: {
		"pairwise": plain(collectives.PairwiseAlltoall),
		"bruck":    plain(collectives.BruckAlltoall),
	},
	collAlltoallv: {
		"pairwise": func(r, n int, a *callArgs) collectives.Schedule {
			return collectives.PairwiseAlltoallv(r, n, a.sendCounts, a.sendDispls, a.recvCounts, a.recvDispls, a.elemSize)
		},
	},
	collGather: {
		"binomial": rooted(collectives.BinomialGather),
	},
	collScatter: {
		"binomial": rooted(collectives.BinomialScatter),
	},
	collBarrier: {
		"dissemination": func(r, n int, a *callArgs) collectives.Schedule {
			return collectives.DisseminationBarrier(r, n)
		},
	},
	collSend: {
		"direct": func(r, n int, a *callArgs) collectives.Schedule {
			return collectives.Schedule{Name: "direct", Rank: r, Size: n,
				Steps: []collectives.Step{{Kind: collectives.Send, Peer: a.peer, Buf: collectives.BufInput, Len: a.count * a.elemSize}}}
		},
	},
	collRecv: {
		"direct": func(r, n int, a *callArgs) collectives.Schedule {
			return collectives.Schedule{Name: "direct", Rank: r, Size: n,
				Steps: []collectives.Step{{Kind: collectives.Recv, Peer: a.src, Buf: collectives.BufData, Len: a.recvCount * a.elemSize}}}
		},
	},
	collSendRecv: {
		"direct": func(r, n int, a *callArgs) collectives.Schedule {
			return collectives.Schedule{Name: "direct", Rank: r, Size: n, Steps: []collectives.Step{
				{Kind: collectives.Send, Peer: a.peer, Buf: collectives.BufInput, Len: a.count * a.elemSize},
				{Kind: collectives.Recv, Peer: a.src, Buf: collectives.BufData, Len: a.recvCount * a.elemSize},
			}}
		},
	},
}

// costName is the collective's name in collectives.CostOf: the v-variants
// are priced as their regular collective.
func (k collKind) costName() string {
	switch k {
	case collAllgatherv:
		return "allgather"
	case collAlltoallv:
		return "alltoall"
	}
	return k.String()
}

// Algorithms lists, sorted, the algorithms goccl has for a collective,
// named canonically: "allreduce", "broadcast", "reduce", "allgather",
// "allgatherv", "reduce-scatter", "alltoall", "alltoallv", "gather",
// "scatter", "barrier", "send", "recv", "sendrecv". Any other name, other
// spellings included ("bcast"), gives nil; Comm.Algorithm and GOCCL_ALGO
// report them as errors that name the canonical spelling.
func Algorithms(collective string) []string {
	k, err := collByName(collective)
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(algorithms[k]))
	for name := range algorithms[k] {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// parseAlgoEnv reads GOCCL_ALGO, e.g. "allreduce:tree,broadcast:pipeline":
// per collective, the algorithm every call uses unless the call names its
// own. Unknown collectives or algorithms are an error.
func parseAlgoEnv(v string) (map[collKind]string, error) {
	out := map[collKind]string{}
	if strings.TrimSpace(v) == "" {
		return out, nil
	}
	for _, item := range strings.Split(v, ",") {
		coll, algo, ok := strings.Cut(strings.TrimSpace(item), ":")
		if !ok {
			return nil, fmt.Errorf("GOCCL_ALGO=%q: item %q is not collective:algorithm", v, item)
		}
		k, err := collByName(coll)
		if err != nil {
			return nil, fmt.Errorf("GOCCL_ALGO=%q: %w", v, err)
		}
		if _, ok := algorithms[k][algo]; !ok {
			return nil, fmt.Errorf("GOCCL_ALGO=%q: %s has no algorithm %q (have %s)", v, k, algo, strings.Join(Algorithms(k.String()), ", "))
		}
		out[k] = algo
	}
	return out, nil
}

// collByName finds a collective by its canonical name (collKind.String).
// Another spelling of one ("bcast", "reduce_scatter", "AllReduce") is an
// error that names the canonical one.
func collByName(name string) (collKind, error) {
	var names []string
	for k := collKind(1); k <= numColls; k++ {
		if k.String() == name {
			return k, nil
		}
		names = append(names, k.String())
	}
	loose := func(s string) string {
		s = strings.ToLower(s)
		if s == "bcast" {
			return "broadcast"
		}
		return strings.NewReplacer("-", "", "_", "", " ", "").Replace(s)
	}
	for k := collKind(1); k <= numColls; k++ {
		if loose(k.String()) == loose(name) {
			return 0, fmt.Errorf("unknown collective %q: goccl spells it %q", name, k)
		}
	}
	return 0, fmt.Errorf("unknown collective %q (have %s)", name, strings.Join(names, ", "))
}

// allreducePreference is the order in which the selector considers the
// allreduce algorithms; the first of equally priced ones wins.
var allreducePreference = []string{"rabenseifner", "ring", "recursive-doubling", "tree"}

// choiceKey caches the selector's choice per collective and size (the
// cost model is fixed once the communicator has measured it).
type choiceKey struct {
	kind   collKind
	nbytes int
}

// Algorithm returns the algorithm the selector picks for a call of the
// collective (its canonical name, see Algorithms) on nbytes bytes of
// elements of type dt (priced as collectives.CostOf counts them: the full
// buffer), honouring GOCCL_ALGO; a call forced with WithAlgorithm uses its
// own. Reductions of float16 and bfloat16 run in float32 and are priced
// so.
func (c *Comm) Algorithm(collective string, dt DataType, nbytes int) (string, error) {
	if c == nil {
		return "", errNilComm("algorithm")
	}
	k, err := collByName(collective)
	if err != nil {
		return "", fmt.Errorf("comm: algorithm: %w", err)
	}
	if !dt.Valid() {
		return "", fmt.Errorf("comm: algorithm of %s: unsupported data type %s", k, dt)
	}
	if forced := c.algoEnv[k]; forced != "" {
		return forced, nil
	}
	if widened(k, dt) {
		nbytes *= 2 // float32 partial results: twice the bytes
	}
	return c.pick(k, nbytes, nil)
}

// choose picks the algorithm of a call: the call's own choice, else
// GOCCL_ALGO's, else the cheapest by the cost model with the communicator's
// measured α and β. Every rank computes the same choice from the same
// inputs (α and β are agreed at Init).
func (c *Comm) choose(k collKind, forced string, nbytes int) (string, error) {
	m := algorithms[k]
	if forced == "" {
		forced = c.algoEnv[k]
	}
	if forced != "" {
		if _, ok := m[forced]; !ok {
			return "", fmt.Errorf("%s has no algorithm %q (have %s)", k, forced, strings.Join(Algorithms(k.String()), ", "))
		}
		if c.debug {
			c.debugf("%s(%d bytes) #%d: algorithm %s (forced)", k, nbytes, c.seq, forced)
		}
		return forced, nil
	}
	key := choiceKey{k, nbytes}
	if name, ok := c.choices[key]; ok {
		if c.debug {
			c.debugf("%s(%d bytes) #%d: algorithm %s (cost model, priced at this size's first call)", k, nbytes, c.seq, name)
		}
		return name, nil
	}
	if len(m) == 1 {
		for name := range m {
			if c.debug {
				c.debugf("%s(%d bytes) #%d: algorithm %s (the only one)", k, nbytes, c.seq, name)
			}
			return name, nil
		}
	}
	var why *strings.Builder
	if c.debug {
		why = &strings.Builder{}
	}
	best, err := c.pick(k, nbytes, why)
	if err != nil {
		return "", err
	}
	if c.debug {
		c.debugf("%s(%d bytes) #%d: algorithm %s (cost model, α=%.1fus β=%.3fns/B:%s)", k, nbytes, c.seq, best, c.alpha*1e6, c.beta*1e9, why.String())
	}
	if len(c.choices) >= 4096 {
		clear(c.choices)
	}
	c.choices[key] = best
	return best, nil
}

// pick prices every algorithm of k with the cost model and returns the
// cheapest (the first in collectives.Algorithms order on a tie); why, if
// not nil, receives the prices. It reads only what New fixed, so any
// goroutine may call it.
func (c *Comm) pick(k collKind, nbytes int, why *strings.Builder) (string, error) {
	m := algorithms[k]
	if len(m) == 1 {
		for name := range m {
			return name, nil
		}
	}
	best, bestT := "", 0.0
	order := collectives.Algorithms(k.costName())
	if k == collAllreduce {
		// Ties go to Rabenseifner over ring (equal α-β cost at 2 ranks,
		// where Rabenseifner measures faster: fewer, larger exchanges).
		order = allreducePreference
	}
	for _, name := range order {
		if _, ok := m[name]; !ok {
			continue
		}
		cost, ok := collectives.CostOf(k.costName(), name, c.size, nbytes)
		if !ok {
			continue
		}
		t := cost.Time(c.alpha, c.beta, c.opts.ChunkSize) + reducedBytes(k, name, c.size, nbytes)*c.gamma
		if why != nil {
			fmt.Fprintf(why, " %s=%.1fus", name, t*1e6)
		}
		if best == "" || t < bestT {
			best, bestT = name, t
		}
	}
	if best == "" {
		return "", fmt.Errorf("%s: no algorithm with a cost model", k)
	}
	return best, nil
}

func (c *Comm) debugf(format string, args ...any) {
	if c.debug {
		log.Printf("goccl: rank %d: "+format, append([]any{c.rank}, args...)...)
	}
}

func debugEnabled() bool {
	v := os.Getenv("GOCCL_DEBUG")
	return v != "" && v != "0"
}

// reducedBytes estimates how many bytes the busiest rank runs through the
// reduction kernel (the γ term the α-β model leaves out, which matters on
// a host where the kernel is not much faster than the wire).
func reducedBytes(k collKind, algo string, p, n int) float64 {
	if p <= 1 {
		return 0
	}
	fn := float64(n)
	lg, p2 := 0, 1
	for p2*2 <= p {
		p2 *= 2
		lg++
	}
	fold := 0.0
	if p2 != p {
		fold = fn
	}
	switch k {
	case collAllreduce:
		switch algo {
		case "ring":
			return float64(p-1) / float64(p) * fn
		case "recursive-doubling":
			return float64(lg)*fn + fold
		case "rabenseifner":
			return float64(p2-1)/float64(p2)*fn + fold
		case "tree":
			return fn // two children's halves at an inner node
		}
	case collReduceScatter:
		return float64(p-1) / float64(p) * fn
	case collReduce:
		return float64(lg) * fn
	}
	return 0
}
