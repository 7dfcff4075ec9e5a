package comm

import (
	"fmt"

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
	// spare keeps the storage of a reused request's copies of the
	// counts and displacements above (in that order) from call to call,
	// so that a blocking v-collective allocates nothing in steady state;
	// the fields above stay nil for the other collectives.
	spare [4][]int
}

// keep copies counts into a's storage i (see spare) and returns the copy.
func (a *callArgs) keep(i int, counts []int) []int {
	s := append(a.spare[i][:0], counts...)
	a.spare[i] = s
	return s
}

// schedArgs is a's schedule arguments as the registry takes them.
func (a *callArgs) schedArgs() collectives.Args {
	return collectives.Args{Count: a.count, ElemSize: a.elemSize, Root: a.root,
		SendCounts: a.sendCounts, SendDispls: a.sendDispls, RecvCounts: a.recvCounts, RecvDispls: a.recvDispls,
		Peer: a.peer, Src: a.src, RecvCount: a.recvCount}
}

// The collectives and their algorithms are described once, in the
// registry of package collectives (collectives.Collectives and
// collectives.Algos); comm names a collective by its registry entry.
type collKind = collectives.Coll

const (
	collAllreduce     = collectives.CollAllreduce
	collBroadcast     = collectives.CollBroadcast
	collBarrier       = collectives.CollBarrier
	collReduce        = collectives.CollReduce
	collAllgather     = collectives.CollAllgather
	collAllgatherv    = collectives.CollAllgatherv
	collReduceScatter = collectives.CollReduceScatter
	collAlltoall      = collectives.CollAlltoall
	collAlltoallv     = collectives.CollAlltoallv
	collGather        = collectives.CollGather
	collScatter       = collectives.CollScatter
	collSend          = collectives.CollSend
	collRecv          = collectives.CollRecv
	collSendRecv      = collectives.CollSendRecv
	collGatherv       = collectives.CollGatherv
	collScatterv      = collectives.CollScatterv
	collScan          = collectives.CollScan
	collExscan        = collectives.CollExscan
)

// Algorithms lists, sorted, the algorithms goccl has for a collective,
// named canonically: "allreduce", "broadcast", "reduce", "allgather",
// "allgatherv", "reduce-scatter", "alltoall", "alltoallv", "gather",
// "scatter", "barrier", "send", "recv", "sendrecv", "gatherv", "scatterv".
// Any other name, other
// spellings included ("bcast"), gives nil; Comm.Algorithm and GOCCL_ALGO
// report them as errors that name the canonical spelling.
func Algorithms(collective string) []string {
	k, err := collectives.CollByName(collective)
	if err != nil {
		return nil
	}
	return collectives.AlgoNames(k)
}

// parseAlgorithms reads Options.Algorithms (GOCCL_ALGO), e.g.
// "allreduce:tree,broadcast:pipeline": per collective, the algorithm every
// call uses unless the call names its own. Unknown collectives or
// algorithms are an error.
func parseAlgorithms(v string) (map[collKind]string, error) {
	m, err := collectives.ParseAlgoSpec(v)
	if err != nil {
		return nil, err
	}
	out := make(map[collKind]string, len(m))
	for k, a := range m {
		out[k] = a.Name
	}
	return out, nil
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
	k, err := collectives.CollByName(collective)
	if err != nil {
		return "", fmt.Errorf("comm: algorithm: %w", err)
	}
	if !dt.Valid() {
		return "", fmt.Errorf("comm: algorithm of %s: unsupported data type %s", k, dt)
	}
	if forced := c.forcedFor(k, ""); forced != "" {
		return collectives.RunsAs(k, forced, c.size, c.hosts), nil
	}
	if widened(k, dt) {
		nbytes *= 2 // float32 partial results: twice the bytes
	}
	algo, err := c.pick(k, nbytes)
	return collectives.RunsAs(k, algo, c.size, c.hosts), err
}

// choose picks the algorithm of a call: the call's own choice, else
// GOCCL_ALGO's, else the cheapest by the cost model with the communicator's
// measured α and β. Every rank computes the same choice from the same
// inputs (α and β are agreed at Init).
func (c *Comm) choose(k collKind, forced string, nbytes int) (string, error) {
	if forced = c.forcedFor(k, forced); forced != "" {
		if _, err := collectives.LookupAlgo(k, forced); err != nil {
			return "", err
		}
		if c.debug {
			c.debugf("%s(%d bytes) #%d: algorithm %s (forced)", k, nbytes, c.seq, forced)
		}
		return forced, nil
	}
	if name, ok := c.cachedChoice(k, nbytes); ok {
		if c.debug {
			c.debugf("%s(%d bytes) #%d: algorithm %s (cost model, priced at this size's first call)", k, nbytes, c.seq, name)
		}
		return name, nil
	}
	a, prices, err := c.priceAll(k, nbytes, c.topology(), c.model())
	if err != nil {
		return "", err
	}
	if c.debug {
		if len(prices) == 0 {
			c.debugf("%s(%d bytes) #%d: algorithm %s (the only one)", k, nbytes, c.seq, a.Name)
		} else if c.selection.crowded && a.TakenCrowded(c.topology(), nbytes) {
			ranks := fmt.Sprintf("up to %d", a.CrowdedUpTo)
			if a.CrowdedFromRanks > 0 {
				ranks = fmt.Sprintf("from %d to %d ranks", a.CrowdedFromRanks, a.CrowdedUpTo)
			}
			bound := ""
			if a.CrowdedBlockFrom > 0 {
				bound += fmt.Sprintf(" from %d bytes a rank", a.CrowdedBlockFrom)
			}
			if a.CrowdedBelow > 0 {
				bound += fmt.Sprintf(" below %d bytes", a.CrowdedBelow)
			}
			if a.CrowdedRootBelow > 0 {
				bound += fmt.Sprintf(" while the root sends under %d bytes in all", a.CrowdedRootBelow)
			}
			if a.CrowdedAnySizeUpTo > 0 && bound != "" {
				bound += fmt.Sprintf(" (any size up to %d ranks)", a.CrowdedAnySizeUpTo)
			}
			c.debugf("%s(%d bytes) #%d: algorithm %s (%d ranks on a host of fewer processors: taken %s%s, as measured; cost model, α=%.1fus β=%.3fns/B:%s)", k, nbytes, c.seq, a.Name, c.size, ranks, bound, c.alpha*1e6, c.beta*1e9, collectives.FormatPrices(prices))
		} else {
			c.debugf("%s(%d bytes) #%d: algorithm %s (cost model, α=%.1fus β=%.3fns/B:%s)", k, nbytes, c.seq, a.Name, c.alpha*1e6, c.beta*1e9, collectives.FormatPrices(prices))
		}
	}
	c.rememberChoice(k, nbytes, a.Name)
	return a.Name, nil
}

// pick returns the algorithm the cost model picks for k on nbytes. It
// reads only what New fixed, so any goroutine may call it.
func (c *Comm) pick(k collKind, nbytes int) (string, error) {
	a, _, err := collectives.Select(k, nbytes, c.topology(), c.model(), nil)
	if err != nil {
		return "", err
	}
	return a.Name, nil
}

// topology is where the communicator's ranks are, for the selector.
func (c *Comm) topology() collectives.Topology {
	t := collectives.Topology{Size: c.size, Hosts: max(c.nHosts, 1)}
	if len(c.hosts) == c.size {
		per := make([]int, t.Hosts)
		for _, h := range c.hosts {
			per[h]++
		}
		for _, n := range per {
			t.Uneven = t.Uneven || n != per[0]
		}
	}
	return t
}

// model is the selector's cost model: the α and β measured at New on the
// transport in use, the kernel's γ and the chunk size.
func (c *Comm) model() collectives.Model {
	m := c.modelFor(c.opts.ChunkSize)
	m.Window = c.opts.PeerWindow
	return m
}
