package simulate

import (
	"fmt"
	"slices"
	"sync"

	"github.com/goccl/goccl/collectives"
)

// rankPlan is one simulated rank's collectives.Plan in the compact form the
// engine walks: what the executor reads of a plan (kinds, lengths,
// dependencies, per-peer order), with peers numbered by entry and the
// buffers' offsets dropped. The Plan itself is dropped after conversion:
// at 65,536 ranks a Plan's per-peer tables alone would not fit.
type rankPlan struct {
	chunks  []cchunk
	outs    []int32 // dependents of chunk i: outs[outStart : outStart+nOut]
	entries []entry // one per peer the plan talks to
	copies  []int32 // Copy chunks
	pre     int     // bytes of the Pre copies
}

type cchunk struct {
	kind     collectives.Kind
	entry    int32 // index into entries; -1 for a Copy
	len      int32
	nDeps    int32
	outStart int32
	nOut     int32
}

// entry is one peer of a plan: the job rank, its send and receive chunks in
// order, and the engine's links that carry them (-1 if none).
type entry struct {
	peer             int
	sends, recvs     []int32
	sendLink, recvLk int32
}

// compileRank compiles s with collectives.Compile, as the executor's
// communicator does, and converts the plan. The schedule's peers are
// renumbered 1..k first (rank 0 is the rank itself), which changes
// nothing of the plan but its peer names and keeps Compile's per-peer
// tables as small as the rank's peer list whatever the job's size.
func compileRank(s collectives.Schedule, chunkBytes int) (*rankPlan, error) {
	var peers []int
	index := map[int]int{}
	label := func(peer int) int {
		if i, ok := index[peer]; ok {
			return i
		}
		peers = append(peers, peer)
		index[peer] = len(peers)
		return len(peers)
	}
	steps := make([]collectives.Step, len(s.Steps))
	for i, st := range s.Steps {
		if st.Kind != collectives.Copy {
			if st.Peer < 0 || st.Peer >= s.Size || st.Peer == s.Rank {
				return nil, fmt.Errorf("simulate: %s rank %d step %d: bad peer %d", s.Name, s.Rank, i, st.Peer)
			}
			st.Peer = label(st.Peer)
		}
		steps[i] = st
	}
	rs := s
	rs.Rank, rs.Size, rs.Steps = 0, len(peers)+1, steps
	p, err := collectives.Compile(rs, chunkBytes)
	if err != nil {
		return nil, fmt.Errorf("simulate: rank %d: %w", s.Rank, err)
	}
	rp := &rankPlan{chunks: make([]cchunk, p.NumChunks())}
	for _, cp := range p.PreCopies() {
		rp.pre += cp.Len
	}
	rp.entries = make([]entry, len(peers))
	for i, peer := range peers {
		rp.entries[i] = entry{peer: peer, sends: p.Sends(i + 1), recvs: p.Recvs(i + 1), sendLink: -1, recvLk: -1}
	}
	rp.copies = p.Copies()
	var nOut int32
	for i := range rp.chunks {
		nOut += int32(len(p.Dependents(i)))
	}
	rp.outs = make([]int32, 0, nOut)
	for i := range rp.chunks {
		c := p.Chunk(i)
		if c.Len > 1<<31-1 {
			return nil, fmt.Errorf("simulate: rank %d: chunk of %d bytes", s.Rank, c.Len)
		}
		deps := p.Dependents(i)
		rp.chunks[i] = cchunk{kind: c.Kind, entry: int32(c.Peer - 1), len: int32(c.Len), nDeps: int32(c.Deps),
			outStart: int32(len(rp.outs)), nOut: int32(len(deps))}
		rp.outs = append(rp.outs, deps...)
	}
	return rp, nil
}

// chunkCount is how many chunks the executor cuts s into with chunks of
// chunkBytes: the engine's work, known without compiling.
func chunkCount(s collectives.Schedule, chunkBytes int) (messages, copies int) {
	for _, st := range s.Steps {
		n := max(1, (st.Len+chunkBytes-1)/chunkBytes)
		if st.Kind == collectives.Copy {
			copies += n
		} else {
			messages += n
		}
	}
	return messages, copies
}

// Plans keeps compiled schedules for the simulations that share it
// (Options.Plans). A fit simulates the same few jobs under thousands of
// parameter sets, and compiled every rank's schedule anew each time:
// 13% of collsim's TestFitOversubAlltoall in compiling, and the garbage
// it left; with the plans kept, that test and TestFitWake took 33-35 s
// instead of 46-47. A Plans grows by one entry per rank of each
// distinct job, algorithm and chunk size it sees (so it belongs to one
// fit, not to a whole grid of jobs), and is safe for concurrent use.
type Plans struct {
	mu sync.Mutex
	m  map[planKey]*rankPlan
}

type planKey struct {
	algo                         *collectives.Algo
	rank, size                   int
	count, elemSize, root, chunk int
}

// rank is rank's plan of algo on size ranks with arguments a, compiled
// with chunks of chunkBytes: from ps if it has it, else compiled (and kept
// if ps is not nil). Each call returns a plan of its own, which the
// simulation may change (its peers' links, its Pre bytes); the tables it
// shares with ps's copy are only read.
func (ps *Plans) rank(algo *collectives.Algo, rank, size int, a *collectives.Args, chunkBytes int) (*rankPlan, error) {
	cacheable := ps != nil && a.SendCounts == nil && a.SendDispls == nil && a.RecvCounts == nil &&
		a.RecvDispls == nil && a.Hosts == nil && a.Peer == 0 && a.Src == 0 && a.RecvCount == 0
	if !cacheable {
		return compileRank(algo.Schedule(rank, size, a), chunkBytes)
	}
	k := planKey{algo: algo, rank: rank, size: size, count: a.Count, elemSize: a.ElemSize, root: a.Root, chunk: chunkBytes}
	ps.mu.Lock()
	rp := ps.m[k]
	ps.mu.Unlock()
	if rp == nil {
		var err error
		if rp, err = compileRank(algo.Schedule(rank, size, a), chunkBytes); err != nil {
			return nil, err
		}
		ps.mu.Lock()
		if ps.m == nil {
			ps.m = map[planKey]*rankPlan{}
		}
		ps.m[k] = rp
		ps.mu.Unlock()
	}
	own := *rp
	own.entries = slices.Clone(rp.entries)
	return &own, nil
}
