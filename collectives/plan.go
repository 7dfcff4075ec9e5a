package collectives

import "fmt"

// Plan is a schedule cut into chunks, with the dependencies between chunks
// made explicit, ready for the executor. It is immutable once compiled and
// may be reused for every call with the same schedule and chunk size.
//
// A step is cut into chunks of at most ChunkSize bytes counted from the
// step's own start, so sender and receiver cut a message identically. A
// chunk depends on the earlier chunks of its rank that touch the same bytes
// (read after write, write after read, write after write), tracked exactly
// per byte range. Sends to one peer leave
// in program order and receives from one peer are matched in program order.
//
// A Copy step is cut the same way: its chunk i copies the same relative
// range of source and destination. A copy chunk reads its source range and
// writes its destination range, so it waits for the earlier chunks that
// write the source or touch the destination, and later chunks wait for it
// likewise; it needs no link and runs as soon as those are done. Compile
// refuses a copy whose source and destination overlap: cut into chunks it
// would not be a memmove, and no algorithm needs one.
type Plan struct {
	Name      string
	Rank      int
	Size      int
	ChunkSize int

	pre    []PreCopy // local copies before any step
	fused  bool      // some chunk reads BufInput for BufData (CompileFused)
	chunks []chunk
	outs   []int32   // dependents of chunk i: outs[chunks[i].outStart : +nOut]
	sends  [][]int32 // per peer: send chunks in order
	recvs  [][]int32 // per peer: receive chunks in order
	copies []int32   // Copy chunks, in program order
	peers  []int     // peers with any traffic
}

type chunk struct {
	kind     Kind
	buf      Buf
	srcBuf   Buf   // Copy: the source buffer
	peer     int32 // -1 for Copy
	off, len int
	srcOff   int  // Copy: the source range's first byte
	fused    bool // RecvReduce: BufData = BufInput op received (CompileFused)
	nDeps    int32
	outStart int32
	nOut     int32
}

// NumChunks is the number of chunks of the plan.
func (p *Plan) NumChunks() int { return len(p.chunks) }

// Peers lists the peers the plan talks to.
func (p *Plan) Peers() []int { return p.peers }

// span is a byte range of one buffer with the chunk that last wrote it and
// the chunks that read it since.
type span struct {
	a, b    int
	writer  int32 // -1 if none
	readers []int32
}

// hazards tracks, per buffer, which chunks touched which bytes, exactly (a
// sorted list of disjoint spans), so that a chunk depends only on the
// chunks whose bytes it really shares.
type hazards [numBufs][]span

// access records that chunk idx reads (or writes) [x, y) of buf and appends
// the chunks it must wait for to deps. An empty range is treated as the
// single byte at x, so zero-length steps order among themselves.
func (h *hazards) access(buf Buf, x, y int, write bool, idx int32, deps []int32) []int32 {
	if y <= x {
		y = x + 1
	}
	spans := h.split(buf, x, y)
	for i := range spans {
		sp := &spans[i]
		if sp.b <= x || sp.a >= y {
			continue
		}
		if sp.writer >= 0 {
			deps = addDep(deps, sp.writer)
		}
		if write {
			for _, r := range sp.readers {
				deps = addDep(deps, r)
			}
			sp.writer, sp.readers = idx, nil
		} else {
			sp.readers = append(sp.readers, idx)
		}
	}
	return deps
}

// split makes x and y span boundaries and fills the gaps of [x, y) with
// fresh spans, returning the buffer's span list.
func (h *hazards) split(buf Buf, x, y int) []span {
	old := h[buf]
	out := make([]span, 0, len(old)+3)
	pos := x // the first byte of [x, y) not yet covered
	for _, sp := range old {
		if sp.b <= x || sp.a >= y {
			if sp.a >= y && pos < y {
				out = append(out, span{a: pos, b: y, writer: -1})
				pos = y
			}
			out = append(out, sp)
			continue
		}
		if sp.a > pos {
			out = append(out, span{a: pos, b: sp.a, writer: -1})
		}
		cut := func(a, b int) span {
			return span{a: a, b: b, writer: sp.writer, readers: append([]int32(nil), sp.readers...)}
		}
		if sp.a < x {
			out = append(out, cut(sp.a, x))
		}
		out = append(out, cut(max(sp.a, x), min(sp.b, y)))
		if sp.b > y {
			out = append(out, cut(y, sp.b))
		}
		pos = max(pos, min(sp.b, y))
	}
	if pos < y {
		out = append(out, span{a: pos, b: y, writer: -1})
	}
	h[buf] = out
	return out
}

func addDep(list []int32, d int32) []int32 {
	for _, x := range list {
		if x == d {
			return list
		}
	}
	return append(list, d)
}

// Compile cuts s into chunks of at most chunkSize bytes and computes their
// dependencies.
func Compile(s Schedule, chunkSize int) (*Plan, error) {
	if chunkSize <= 0 {
		return nil, fmt.Errorf("compile %s: chunk size %d must be positive", s.Name, chunkSize)
	}
	p := &Plan{Name: s.Name, Rank: s.Rank, Size: s.Size, ChunkSize: chunkSize,
		sends: make([][]int32, s.Size), recvs: make([][]int32, s.Size), pre: s.Pre}
	for _, cp := range s.Pre {
		if cp.Len < 0 || cp.SrcOff < 0 || cp.DstOff < 0 || cp.Src >= BufToken || cp.Dst >= BufToken || cp.Dst == BufInput {
			return nil, fmt.Errorf("compile %s: rank %d: bad local copy %+v", s.Name, s.Rank, cp)
		}
	}
	var h hazards
	deps := make([][]int32, 0, len(s.Steps))
	for si, st := range s.Steps {
		if err := checkStep(s, st); err != nil {
			return nil, fmt.Errorf("compile %s: rank %d step %d (%v): %s", s.Name, s.Rank, si, st, err)
		}
		for a := st.Off; ; {
			b := min(a+chunkSize, st.Off+st.Len)
			idx := int32(len(p.chunks))
			ch := chunk{kind: st.Kind, buf: st.Buf, peer: int32(st.Peer), off: a, len: b - a}
			var d []int32
			if st.Kind == Copy {
				ch.peer, ch.srcBuf, ch.srcOff = -1, st.SrcBuf, st.SrcOff+(a-st.Off)
				if ch.len > 0 { // an empty copy only orders itself, by its destination
					d = h.access(ch.srcBuf, ch.srcOff, ch.srcOff+ch.len, false, idx, nil)
				}
			}
			p.chunks = append(p.chunks, ch)
			d = h.access(st.Buf, a, b, st.Kind != Send, idx, d)
			deps = append(deps, d)
			switch st.Kind {
			case Send:
				p.sends[st.Peer] = append(p.sends[st.Peer], idx)
			case Copy:
				p.copies = append(p.copies, idx)
			default:
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

// checkStep says what is wrong with step st of s, if anything.
func checkStep(s Schedule, st Step) error {
	if st.Off < 0 || st.Len < 0 || st.Buf >= numBufs || (st.Buf == BufToken && st.Len != 0) {
		return fmt.Errorf("bad range")
	}
	switch st.Kind {
	case Send, Recv, RecvReduce:
		if st.Peer < 0 || st.Peer >= s.Size || st.Peer == s.Rank {
			return fmt.Errorf("bad peer")
		}
		if st.SrcBuf != 0 || st.SrcOff != 0 {
			return fmt.Errorf("a source on a %s", st.Kind)
		}
	case Copy:
		if st.SrcOff < 0 || st.SrcBuf >= BufToken || st.Buf == BufToken || st.Buf == BufInput {
			return fmt.Errorf("bad copy")
		}
		if st.SrcBuf == st.Buf && st.Len > 0 && st.SrcOff < st.Off+st.Len && st.Off < st.SrcOff+st.Len {
			return fmt.Errorf("copy within overlapping ranges")
		}
	default:
		return fmt.Errorf("unknown kind")
	}
	return nil
}

func (p *Plan) dependents(i int32) []int32 {
	c := &p.chunks[i]
	return p.outs[c.outStart : c.outStart+c.nOut]
}
