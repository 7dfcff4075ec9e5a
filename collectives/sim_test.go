package collectives

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// sim runs the plans of all ranks of one collective with no network: each
// rank's data is symbolic (per element, the set of ranks whose input it
// holds, as a bitmask), messages are queued per (from, to) pair, and at each
// step one ready chunk of one rank, picked by a seeded random generator,
// runs. It checks that every message is received exactly once with the
// length it was sent with, that no reduction uses an input twice, and that
// nothing deadlocks.
type sim struct {
	plans    []*Plan
	elemSize int
	data     [][]uint64 // per rank, per element of BufData
	know     []uint64   // per rank, what it has heard on BufToken (barrier)
	queues   map[[2]int][]msg
	rng      *rand.Rand
}

type msg struct {
	vals []uint64
	know uint64
	n    int
}

func newSim(plans []*Plan, elemSize, count int, seed uint64) *sim {
	s := &sim{plans: plans, elemSize: elemSize, queues: map[[2]int][]msg{},
		rng: rand.New(rand.NewPCG(seed, 7))}
	s.data = make([][]uint64, len(plans))
	s.know = make([]uint64, len(plans))
	for r := range plans {
		s.data[r] = make([]uint64, count)
		s.know[r] = 1 << r
	}
	return s
}

func (s *sim) run() error {
	type state struct {
		remaining []int32
		sendHead  []int
		recvHead  []int
		done      int
	}
	st := make([]state, len(s.plans))
	for r, p := range s.plans {
		st[r].remaining = make([]int32, len(p.chunks))
		for i, c := range p.chunks {
			st[r].remaining[i] = c.nDeps
		}
		st[r].sendHead = make([]int, p.Size)
		st[r].recvHead = make([]int, p.Size)
	}
	type cand struct {
		rank, peer int
		send       bool
	}
	for {
		var ready []cand
		allDone := true
		for r, p := range s.plans {
			if st[r].done < len(p.chunks) {
				allDone = false
			}
			for _, peer := range p.peers {
				if h := st[r].sendHead[peer]; h < len(p.sends[peer]) && st[r].remaining[p.sends[peer][h]] == 0 {
					ready = append(ready, cand{r, peer, true})
				}
				if h := st[r].recvHead[peer]; h < len(p.recvs[peer]) && st[r].remaining[p.recvs[peer][h]] == 0 &&
					len(s.queues[[2]int{peer, r}]) > 0 {
					ready = append(ready, cand{r, peer, false})
				}
			}
		}
		if allDone {
			break
		}
		if len(ready) == 0 {
			return fmt.Errorf("deadlock: no rank can make progress")
		}
		c := ready[s.rng.IntN(len(ready))]
		p := s.plans[c.rank]
		var idx int32
		if c.send {
			idx = p.sends[c.peer][st[c.rank].sendHead[c.peer]]
			st[c.rank].sendHead[c.peer]++
			ch := p.chunks[idx]
			m := msg{n: ch.len, know: s.know[c.rank]}
			if ch.buf == BufData {
				m.vals = append([]uint64(nil), s.data[c.rank][ch.off/s.elemSize:(ch.off+ch.len)/s.elemSize]...)
			}
			k := [2]int{c.rank, c.peer}
			s.queues[k] = append(s.queues[k], m)
		} else {
			idx = p.recvs[c.peer][st[c.rank].recvHead[c.peer]]
			st[c.rank].recvHead[c.peer]++
			ch := p.chunks[idx]
			k := [2]int{c.peer, c.rank}
			m := s.queues[k][0]
			s.queues[k] = s.queues[k][1:]
			if m.n != ch.len {
				return fmt.Errorf("rank %d receives %d bytes from %d, which sent %d", c.rank, ch.len, c.peer, m.n)
			}
			s.know[c.rank] |= m.know
			if ch.buf == BufData {
				dst := s.data[c.rank][ch.off/s.elemSize : (ch.off+ch.len)/s.elemSize]
				for i, v := range m.vals {
					if ch.kind == RecvReduce {
						if dst[i]&v != 0 {
							return fmt.Errorf("rank %d element %d: input of ranks %b reduced twice", c.rank, ch.off/s.elemSize+i, dst[i]&v)
						}
						dst[i] |= v
					} else {
						dst[i] = v
					}
				}
			}
		}
		st[c.rank].done++
		for _, o := range p.dependents(idx) {
			st[c.rank].remaining[o]--
		}
	}
	for k, q := range s.queues {
		if len(q) != 0 {
			return fmt.Errorf("%d messages from %d to %d never received", len(q), k[0], k[1])
		}
	}
	return nil
}

func popcount(x uint64) int { return bits.OnesCount64(x) }
