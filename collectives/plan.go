package collectives

import "fmt"

// Plan is a schedule cut into chunks, with the dependencies between chunks
// made explicit, ready for the executor. It is immutable once compiled and
// may be reused for every call with the same schedule and chunk size.
//
// A step is cut into chunks of at most ChunkSize bytes counted from the
// step's own start, so sender and receiver cut a message identically. A
// chunk depends on the earlier chunks of its rank that touch the same bytes
// (read after write, write after read, write after write); dependencies are
// tracked on a grid of ChunkSize-byte cells per buffer, which can only add
// dependencies between neighbours, never lose one. Sends to one peer leave
// in program order and receives from one peer are matched in program order.
type Plan struct {
	Name      string
	Rank      int
	Size      int
	ChunkSize int

	chunks []chunk
	outs   []int32   // dependents of chunk i: outs[chunks[i].outStart : +nOut]
	sends  [][]int32 // per peer: send chunks in order
	recvs  [][]int32 // per peer: receive chunks in order
	peers  []int     // peers with any traffic
}

type chunk struct {
	kind     Kind
	buf      Buf
	peer     int32
	off, len int
	nDeps    int32
	outStart int32
	nOut     int32
}

// NumChunks is the number of chunks of the plan.
func (p *Plan) NumChunks() int { return len(p.chunks) }

// Peers lists the peers the plan talks to.
func (p *Plan) Peers() []int { return p.peers }

type cellKey struct {
	buf  Buf
	cell int
}

type cellState struct {
	writer  int32 // last chunk that wrote the cell, or -1
	readers []int32
}

// Compile cuts s into chunks of at most chunkSize bytes and computes their
// dependencies.
func Compile(s Schedule, chunkSize int) (*Plan, error) {
	if chunkSize <= 0 {
		return nil, fmt.Errorf("compile %s: chunk size %d must be positive", s.Name, chunkSize)
	}
	p := &Plan{Name: s.Name, Rank: s.Rank, Size: s.Size, ChunkSize: chunkSize,
		sends: make([][]int32, s.Size), recvs: make([][]int32, s.Size)}
	cells := map[cellKey]*cellState{}
	deps := make([][]int32, 0, len(s.Steps))
	addDep := func(list []int32, d int32) []int32 {
		for _, x := range list {
			if x == d {
				return list
			}
		}
		return append(list, d)
	}
	for si, st := range s.Steps {
		if st.Peer < 0 || st.Peer >= s.Size || st.Peer == s.Rank {
			return nil, fmt.Errorf("compile %s: rank %d step %d (%v): bad peer", s.Name, s.Rank, si, st)
		}
		if st.Off < 0 || st.Len < 0 || st.Buf >= numBufs || (st.Buf == BufToken && st.Len != 0) {
			return nil, fmt.Errorf("compile %s: rank %d step %d (%v): bad range", s.Name, s.Rank, si, st)
		}
		for a := st.Off; ; {
			b := min(a+chunkSize, st.Off+st.Len)
			idx := int32(len(p.chunks))
			p.chunks = append(p.chunks, chunk{kind: st.Kind, buf: st.Buf, peer: int32(st.Peer), off: a, len: b - a})
			var d []int32
			first, last := a/chunkSize, a/chunkSize
			if b > a {
				last = (b - 1) / chunkSize
			}
			for c := first; c <= last; c++ {
				k := cellKey{st.Buf, c}
				cs := cells[k]
				if cs == nil {
					cs = &cellState{writer: -1}
					cells[k] = cs
				}
				if cs.writer >= 0 {
					d = addDep(d, cs.writer)
				}
				if st.Kind == Send {
					cs.readers = append(cs.readers, idx)
				} else {
					for _, r := range cs.readers {
						d = addDep(d, r)
					}
					cs.writer = idx
					cs.readers = cs.readers[:0]
				}
			}
			deps = append(deps, d)
			if st.Kind == Send {
				p.sends[st.Peer] = append(p.sends[st.Peer], idx)
			} else {
				p.recvs[st.Peer] = append(p.recvs[st.Peer], idx)
			}
			a = b
			if a >= st.Off+st.Len {
				break
			}
		}
	}
	// Invert the dependency lists into dependents (CSR layout).
	nOut := make([]int32, len(p.chunks))
	for i, d := range deps {
		p.chunks[i].nDeps = int32(len(d))
		for _, x := range d {
			nOut[x]++
		}
	}
	var pos int32
	for i := range p.chunks {
		p.chunks[i].outStart = pos
		p.chunks[i].nOut = nOut[i]
		pos += nOut[i]
	}
	p.outs = make([]int32, pos)
	fill := make([]int32, len(p.chunks))
	for i, d := range deps {
		for _, x := range d {
			p.outs[p.chunks[x].outStart+fill[x]] = int32(i)
			fill[x]++
		}
	}
	for peer := range s.Size {
		if len(p.sends[peer]) > 0 || len(p.recvs[peer]) > 0 {
			p.peers = append(p.peers, peer)
		}
	}
	return p, nil
}

func (p *Plan) dependents(i int32) []int32 {
	c := &p.chunks[i]
	return p.outs[c.outStart : c.outStart+c.nOut]
}
