package collectives

import (
	"context"
	"fmt"
	"math"
	"slices"
)

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

	pre     []PreCopy // local copies before any step
	fused   bool      // some chunk reads BufInput for BufData (CompileFused)
	chunks  []chunk
	outs    []int32   // dependents of chunk i: outs[chunks[i].outStart : +nOut]
	sends   [][]int32 // per peer: send chunks in order
	recvs   [][]int32 // per peer: receive chunks in order
	copies  []int32   // Copy chunks, in program order
	peers   []int     // peers with any traffic
	round   []int32   // Schedule.Rounds, nil for a schedule without rounds
	byRound []int     // peers with a round, by round
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

// access is a byte range [x, y) of one buffer that a chunk reads or
// writes. An empty range is treated as the single byte at x, so that
// zero-length steps order among themselves.
type access struct {
	buf   Buf
	x, y  int
	write bool
}

// accesses returns what chunk ch reads and writes, in order: a copy's
// source, then its destination (or the send's source, the receive's
// destination).
func (ch *chunk) accesses(out []access) []access {
	out = out[:0]
	if ch.kind == Copy && ch.len > 0 { // an empty copy only orders itself, by its destination
		out = append(out, access{buf: ch.srcBuf, x: ch.srcOff, y: ch.srcOff + ch.len})
	}
	return append(out, access{buf: ch.buf, x: ch.off, y: ch.off + ch.len, write: ch.kind != Send})
}

// hazards tracks, per buffer, which chunk last wrote each byte and which
// chunks read it since, exactly, so that a chunk depends only on the
// chunks whose bytes it really shares. Every access is known before the
// first is recorded, so each buffer is cut once into the elementary
// intervals between consecutive access boundaries, and an access visits
// the intervals it covers, found by binary search: compiling costs the
// number of chunks times the intervals one chunk covers (a few: where
// steps of different alignment meet), not the square of the chunk count.
type hazards struct {
	bufs  [numBufs]intervals
	nodes []readerNode // the readers lists of all intervals
	mark  []int32      // mark[c] == i+1: chunk c is already a dependency of chunk i
}

// intervals is one buffer cut at every access boundary: interval i is
// [at[i], at[i+1]).
type intervals struct {
	at      []int
	writer  []int32 // per interval: the chunk that last wrote it, -1 if none
	readers []int32 // per interval: its readers since (a list in nodes), -1 if none
}

type readerNode struct{ chunk, next int32 }

// newHazards prepares the tracking of accs (every access of nchunks
// chunks; others may not be recorded).
func newHazards(accs []access, nchunks int) *hazards {
	h := &hazards{mark: make([]int32, nchunks)}
	for _, a := range accs {
		iv := &h.bufs[a.buf]
		iv.at = append(iv.at, a.x, max(a.y, a.x+1))
	}
	for b := range h.bufs {
		iv := &h.bufs[b]
		slices.Sort(iv.at)
		iv.at = slices.Compact(iv.at)
		n := max(len(iv.at)-1, 0)
		iv.writer, iv.readers = make([]int32, n), make([]int32, n)
		for i := range n {
			iv.writer[i], iv.readers[i] = -1, -1
		}
	}
	return h
}

// access records that chunk idx makes access a (one newHazards was given)
// and appends the chunks it must wait for to deps, each once.
func (h *hazards) access(a access, idx int32, deps []int32) []int32 {
	iv := &h.bufs[a.buf]
	y := max(a.y, a.x+1)
	i, _ := slices.BinarySearch(iv.at, a.x)
	for ; i < len(iv.writer) && iv.at[i] < y; i++ {
		if w := iv.writer[i]; w >= 0 {
			deps = h.dep(deps, w, idx)
		}
		if a.write {
			for n := iv.readers[i]; n >= 0; n = h.nodes[n].next {
				deps = h.dep(deps, h.nodes[n].chunk, idx)
			}
			iv.writer[i], iv.readers[i] = idx, -1
		} else {
			h.nodes = append(h.nodes, readerNode{chunk: idx, next: iv.readers[i]})
			iv.readers[i] = int32(len(h.nodes) - 1)
		}
	}
	return deps
}

func (h *hazards) dep(deps []int32, d, idx int32) []int32 {
	if d == idx || h.mark[d] == idx+1 {
		return deps
	}
	h.mark[d] = idx + 1
	return append(deps, d)
}

// ctxCheckEvery is how many chunks Compile plans between looks at its
// context.
const ctxCheckEvery = 1 << 12

// Compile cuts s into chunks of at most chunkSize bytes and computes their
// dependencies. Its cost is linear in the number of chunks (see hazards).
func Compile(s Schedule, chunkSize int) (*Plan, error) {
	return CompileContext(context.Background(), s, chunkSize)
}

// CompileContext is Compile that gives up with ctx's cause when ctx ends.
func CompileContext(ctx context.Context, s Schedule, chunkSize int) (*Plan, error) {
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
	total := 0
	for si, st := range s.Steps {
		if err := checkStep(s, st); err != nil {
			return nil, fmt.Errorf("compile %s: rank %d step %d (%v): %s", s.Name, s.Rank, si, st, err)
		}
		total += max(1, (st.Len+chunkSize-1)/chunkSize)
		if total > math.MaxInt32 {
			return nil, fmt.Errorf("compile %s: rank %d: more than %d chunks of %d bytes", s.Name, s.Rank, math.MaxInt32, chunkSize)
		}
	}
	// Cut the steps into chunks.
	p.chunks = make([]chunk, 0, total)
	accs := make([]access, 0, total+total/4)
	var buf [2]access
	nextCheck := ctxCheckEvery
	for _, st := range s.Steps {
		for a := st.Off; ; {
			b := min(a+chunkSize, st.Off+st.Len)
			idx := int32(len(p.chunks))
			ch := chunk{kind: st.Kind, buf: st.Buf, peer: int32(st.Peer), off: a, len: b - a}
			switch st.Kind {
			case Send:
				p.sends[st.Peer] = append(p.sends[st.Peer], idx)
			case Copy:
				ch.peer, ch.srcBuf, ch.srcOff = -1, st.SrcBuf, st.SrcOff+(a-st.Off)
				p.copies = append(p.copies, idx)
			default:
				p.recvs[st.Peer] = append(p.recvs[st.Peer], idx)
			}
			p.chunks = append(p.chunks, ch)
			accs = append(accs, ch.accesses(buf[:0])...)
			a = b
			if a >= st.Off+st.Len {
				break
			}
		}
		if len(p.chunks) >= nextCheck {
			nextCheck += ctxCheckEvery
			if ctx.Err() != nil {
				return nil, fmt.Errorf("compile %s: rank %d: %w", s.Name, s.Rank, context.Cause(ctx))
			}
		}
	}
	// Dependencies, in program order, as lists in one array (deps of
	// chunk i at deps[depAt[i]:depAt[i+1]]).
	h := newHazards(accs, len(p.chunks))
	deps := make([]int32, 0, len(p.chunks))
	depAt := make([]int32, len(p.chunks)+1)
	for i := range p.chunks {
		if i%ctxCheckEvery == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("compile %s: rank %d: %w", s.Name, s.Rank, context.Cause(ctx))
		}
		for _, a := range p.chunks[i].accesses(buf[:0]) {
			deps = h.access(a, int32(i), deps)
		}
		depAt[i+1] = int32(len(deps))
	}
	// Invert the dependency lists into dependents (CSR layout).
	nOut := make([]int32, len(p.chunks))
	for i := range p.chunks {
		p.chunks[i].nDeps = depAt[i+1] - depAt[i]
		for _, x := range deps[depAt[i]:depAt[i+1]] {
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
	for i := range p.chunks {
		for _, x := range deps[depAt[i]:depAt[i+1]] {
			p.outs[p.chunks[x].outStart+fill[x]] = int32(i)
			fill[x]++
		}
	}
	for peer := range s.Size {
		if len(p.sends[peer]) > 0 || len(p.recvs[peer]) > 0 {
			p.peers = append(p.peers, peer)
		}
	}
	if s.Rounds != nil {
		if err := p.setRounds(s.Rounds, deps, depAt); err != nil {
			return nil, fmt.Errorf("compile %s: rank %d: %w", s.Name, s.Rank, err)
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
