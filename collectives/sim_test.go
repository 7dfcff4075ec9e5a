package collectives

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// sim runs the plans of all ranks of one collective with no network: each
// rank's data is symbolic (per element, the set of ranks whose input it
// holds, as a bitmask), messages are queued per (from, to) pair, and at each
// step one ready chunk of one rank (a send, a receive or a local copy),
// picked by a seeded random generator, runs. Only BufData is modelled: a
// copy from another buffer into it leaves elements holding no input. It checks that every message is received exactly once with the
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
		copyIdx    int32 // a Copy chunk, or -1
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
					ready = append(ready, cand{r, peer, true, -1})
				}
				if h := st[r].recvHead[peer]; h < len(p.recvs[peer]) && st[r].remaining[p.recvs[peer][h]] == 0 &&
					len(s.queues[[2]int{peer, r}]) > 0 {
					ready = append(ready, cand{r, peer, false, -1})
				}
			}
			for _, idx := range p.copies {
				if st[r].remaining[idx] == 0 { // -1 once done
					ready = append(ready, cand{r, -1, false, idx})
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
		if c.copyIdx >= 0 {
			idx = c.copyIdx
			st[c.rank].remaining[idx] = -1
			ch := p.chunks[idx]
			if ch.buf == BufData {
				dst := s.data[c.rank][ch.off/s.elemSize : (ch.off+ch.len)/s.elemSize]
				if ch.srcBuf == BufData {
					copy(dst, s.data[c.rank][ch.srcOff/s.elemSize:(ch.srcOff+ch.len)/s.elemSize])
				} else {
					clear(dst)
				}
			}
		} else if c.send {
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

// xsim is the simulator for every collective: like sim, but each element of
// each buffer (BufData, BufInput, BufScratch) holds an expression, so a
// test can check exactly what ends where:
//
//   - an atom names where an element came from (origin rank, buffer and
//     element index): gather, scatter, alltoall and allgather must deliver
//     exactly the right atoms to the right places;
//   - a reduction is a tree of atoms, interned so that two trees are the
//     same id if and only if they are equal up to swapping the operands of
//     a node (a+b == b+a bitwise in IEEE arithmetic, but (a+b)+c is not
//     a+(b+c)): allreduce must leave the same id on every rank.
//
// It runs the schedules' Pre copies first and Copy chunks in the random
// order like sends and receives, once the planner's dependencies allow.
// It also checks that every step (and a copy's source) stays
// inside its buffer (BufScratch is Schedule.ScratchBytes long), that no
// step writes BufInput, that no data step is empty, that a reduction
// combines the same element of the same buffer of disjoint sets of ranks
// and never an undefined value, and, when slots > 0, it models the
// executor's credits: at most slots chunks in flight from one rank to a
// peer until the peer consumes them.
type xsim struct {
	scheds []Schedule
	plans  []*Plan
	elem   int
	slots  int
	bufs   [][NumBufs][]uint32 // per rank, per buffer, per element: expression id
	know   []uint64
	ex     *exprs
	queues [][]xmsg // per from*size+to
	rng    *rand.Rand
	// window, if positive, runs windowed plans as an executor with that
	// Window does (simWindow) and checks how many peers each rank has
	// live traffic with.
	window int
	win    *simWindow // the last run's
}

type xmsg struct {
	vals []uint32
	know uint64
	n    int
}

// exprs interns expressions; id 0 is "undefined".
type exprs struct {
	nodes []exprNode
	atoms map[atomKey]uint32
	pairs map[[2]uint32]uint32
}

type atomKey struct {
	rank int
	buf  Buf
	idx  int
}

type exprNode struct {
	leaves uint64 // ranks whose inputs the value combines
	buf    Buf    // buffer and element index of the inputs
	idx    int
	atom   bool
	rank   int    // atoms: origin rank
	a, b   uint32 // reductions: operands, a <= b
}

func newExprs() *exprs {
	return &exprs{nodes: make([]exprNode, 1), atoms: map[atomKey]uint32{}, pairs: map[[2]uint32]uint32{}}
}

func (e *exprs) atom(rank int, buf Buf, idx int) uint32 {
	k := atomKey{rank, buf, idx}
	if id, ok := e.atoms[k]; ok {
		return id
	}
	id := uint32(len(e.nodes))
	e.nodes = append(e.nodes, exprNode{leaves: 1 << rank, buf: buf, idx: idx, atom: true, rank: rank})
	e.atoms[k] = id
	return id
}

func (e *exprs) reduce(x, y uint32) (uint32, error) {
	if x == 0 || y == 0 {
		return 0, fmt.Errorf("reduces an undefined value")
	}
	nx, ny := e.nodes[x], e.nodes[y]
	if nx.buf != ny.buf || nx.idx != ny.idx {
		return 0, fmt.Errorf("reduces element %d of buffer %d with element %d of buffer %d", nx.idx, nx.buf, ny.idx, ny.buf)
	}
	if nx.leaves&ny.leaves != 0 {
		return 0, fmt.Errorf("input of ranks %b reduced twice", nx.leaves&ny.leaves)
	}
	if x > y {
		x, y = y, x
	}
	k := [2]uint32{x, y}
	if id, ok := e.pairs[k]; ok {
		return id, nil
	}
	id := uint32(len(e.nodes))
	e.nodes = append(e.nodes, exprNode{leaves: nx.leaves | ny.leaves, buf: nx.buf, idx: nx.idx, a: x, b: y})
	e.pairs[k] = id
	return id, nil
}

// String writes an expression out, for failure messages.
func (e *exprs) String(id uint32) string {
	if id == 0 {
		return "undef"
	}
	n := e.nodes[id]
	if n.atom {
		return fmt.Sprintf("r%d.b%d[%d]", n.rank, n.buf, n.idx)
	}
	return "(" + e.String(n.a) + "+" + e.String(n.b) + ")"
}

// newXsim takes every rank's schedule and plan and allocates its buffers: dataElems(r) and inputElems(r) elements of BufData and BufInput,
// and Schedule.ScratchBytes of BufScratch. Every element starts undefined.
func newXsim(scheds []Schedule, plans []*Plan, elem int, dataElems, inputElems func(r int) int, slots int, seed uint64, ex *exprs) (*xsim, error) {
	n := len(scheds)
	s := &xsim{scheds: scheds, elem: elem, slots: slots, ex: ex,
		bufs: make([][NumBufs][]uint32, n), know: make([]uint64, n),
		queues: make([][]xmsg, n*n), rng: rand.New(rand.NewPCG(seed, 11))}
	for r, sc := range scheds {
		if sc.Rank != r || sc.Size != n {
			return nil, fmt.Errorf("rank %d: schedule says rank %d of %d", r, sc.Rank, sc.Size)
		}
		if sc.ScratchBytes%elem != 0 || sc.ScratchBytes < 0 {
			return nil, fmt.Errorf("rank %d: scratch of %d bytes is not whole elements", r, sc.ScratchBytes)
		}
		s.bufs[r][BufData] = make([]uint32, dataElems(r))
		s.bufs[r][BufInput] = make([]uint32, inputElems(r))
		s.bufs[r][BufScratch] = make([]uint32, sc.ScratchBytes/elem)
		s.know[r] = 1 << r
		inside := func(buf Buf, off, l int) bool {
			if buf == BufToken {
				return l == 0
			}
			return buf < BufToken && off >= 0 && l >= 0 && off%elem == 0 && l%elem == 0 && off+l <= len(s.bufs[r][buf])*elem
		}
		for i, st := range sc.Steps {
			if !inside(st.Buf, st.Off, st.Len) || (st.Kind == Copy && !inside(st.SrcBuf, st.SrcOff, st.Len)) {
				return nil, fmt.Errorf("rank %d step %d (%v): outside its buffer or not whole elements", r, i, st)
			}
			if st.Len == 0 && st.Buf != BufToken {
				return nil, fmt.Errorf("rank %d step %d (%v): empty data message or copy", r, i, st)
			}
			if st.Kind != Send && st.Buf == BufInput {
				return nil, fmt.Errorf("rank %d step %d (%v): writes the input buffer", r, i, st)
			}
		}
		for i, c := range sc.Pre {
			if !inside(c.Src, c.SrcOff, c.Len) || !inside(c.Dst, c.DstOff, c.Len) || c.Dst == BufInput || c.Dst == BufToken {
				return nil, fmt.Errorf("rank %d pre-copy %d (%+v): bad range", r, i, c)
			}
		}
	}
	s.plans = plans
	return s, nil
}

// fill makes every element of rank r's buf an atom of its own.
func (s *xsim) fill(r int, buf Buf) {
	for i := range s.bufs[r][buf] {
		s.bufs[r][buf][i] = s.ex.atom(r, buf, i)
	}
}

func (s *xsim) elems(r int, buf Buf, off, n int) []uint32 {
	return s.bufs[r][buf][off/s.elem : (off+n)/s.elem]
}

func (s *xsim) run() error {
	n := len(s.plans)
	for r, p := range s.plans {
		for _, c := range p.pre { // the schedule's, or CompileFused's
			copy(s.elems(r, c.Dst, c.DstOff, c.Len), s.elems(r, c.Src, c.SrcOff, c.Len))
		}
	}
	remaining := make([][]int32, n)
	sendHead := make([][]int, n)
	recvHead := make([][]int, n)
	total := 0
	for r, p := range s.plans {
		remaining[r] = make([]int32, len(p.chunks))
		for i, c := range p.chunks {
			remaining[r][i] = c.nDeps
		}
		sendHead[r] = make([]int, n)
		recvHead[r] = make([]int, n)
		total += len(p.chunks)
	}
	// The ready set: candidates (rank, peer, send or receive) whose head
	// chunk can run now, and Copy chunks that can run now, kept up to date
	// as events change them. A copy's key is 2*n*n plus its place in
	// copyOf.
	key := func(r, peer int, send bool) int {
		k := (r*n + peer) * 2
		if send {
			k++
		}
		return k
	}
	type copyRef struct {
		r   int
		idx int32
	}
	var copyOf []copyRef
	copyKey := make([]map[int32]int, n)
	for r, p := range s.plans {
		copyKey[r] = map[int32]int{}
		for _, idx := range p.copies {
			copyKey[r][idx] = 2*n*n + len(copyOf)
			copyOf = append(copyOf, copyRef{r, idx})
		}
	}
	pos := make([]int, 2*n*n+len(copyOf))
	for i := range pos {
		pos[i] = -1
	}
	s.win = newSimWindow(s.plans, s.window)
	win := s.win
	var ready []int
	set := func(k int, ok bool) {
		switch {
		case ok && pos[k] < 0:
			pos[k] = len(ready)
			ready = append(ready, k)
		case !ok && pos[k] >= 0:
			last := ready[len(ready)-1]
			ready[pos[k]] = last
			pos[last] = pos[k]
			ready = ready[:len(ready)-1]
			pos[k] = -1
		}
	}
	evalCopy := func(r int, idx int32) {
		set(copyKey[r][idx], remaining[r][idx] == 0) // -1 once done
	}
	eval := func(r, peer int, send bool) {
		p := s.plans[r]
		ok := false
		if send {
			h := sendHead[r][peer]
			ok = h < len(p.sends[peer]) && remaining[r][p.sends[peer][h]] == 0 &&
				(s.slots <= 0 || len(s.queues[r*n+peer]) < s.slots)
		} else {
			h := recvHead[r][peer]
			ok = h < len(p.recvs[peer]) && remaining[r][p.recvs[peer][h]] == 0 && len(s.queues[peer*n+r]) > 0
		}
		set(key(r, peer, send), ok && win.admitted(r, peer))
	}
	for r, p := range s.plans {
		for _, peer := range p.peers {
			eval(r, peer, true)
			eval(r, peer, false)
		}
		for _, idx := range p.copies {
			evalCopy(r, idx)
		}
	}
	for done := 0; done < total; done++ {
		if len(ready) == 0 {
			return fmt.Errorf("deadlock after %d of %d chunks: no rank can make progress", done, total)
		}
		k := ready[s.rng.IntN(len(ready))]
		send := k%2 == 1
		r, peer := k/2/n, k/2%n
		var idx int32
		if k >= 2*n*n {
			r, idx = copyOf[k-2*n*n].r, copyOf[k-2*n*n].idx
		}
		p := s.plans[r]
		if k >= 2*n*n {
			ch := p.chunks[idx]
			copy(s.elems(r, ch.buf, ch.off, ch.len), s.elems(r, ch.srcBuf, ch.srcOff, ch.len))
			remaining[r][idx] = -1
			evalCopy(r, idx)
		} else if send {
			idx = p.sends[peer][sendHead[r][peer]]
			sendHead[r][peer]++
			ch := p.chunks[idx]
			m := xmsg{n: ch.len, know: s.know[r]}
			if ch.buf != BufToken {
				m.vals = append([]uint32(nil), s.elems(r, ch.buf, ch.off, ch.len)...)
			}
			s.queues[r*n+peer] = append(s.queues[r*n+peer], m)
			eval(r, peer, true)
			eval(peer, r, false)
			if err := win.chunk(r, peer, true, eval); err != nil {
				return err
			}
		} else {
			idx = p.recvs[peer][recvHead[r][peer]]
			recvHead[r][peer]++
			ch := p.chunks[idx]
			q := s.queues[peer*n+r]
			m := q[0]
			s.queues[peer*n+r] = q[1:]
			if m.n != ch.len {
				return fmt.Errorf("rank %d receives %d bytes from %d, which sent %d", r, ch.len, peer, m.n)
			}
			s.know[r] |= m.know
			if ch.buf != BufToken {
				dst := s.elems(r, ch.buf, ch.off, ch.len)
				for i, v := range m.vals {
					if ch.kind == RecvReduce {
						a := dst[i]
						if ch.fused {
							a = s.elems(r, BufInput, ch.off, ch.len)[i]
						}
						id, err := s.ex.reduce(a, v)
						if err != nil {
							return fmt.Errorf("rank %d <- %d, buffer %d element %d: %v", r, peer, ch.buf, ch.off/s.elem+i, err)
						}
						dst[i] = id
					} else {
						dst[i] = v
					}
				}
			}
			eval(r, peer, false)
			eval(peer, r, true)
			if err := win.chunk(r, peer, false, eval); err != nil {
				return err
			}
		}
		for _, o := range p.dependents(idx) {
			remaining[r][o]--
			if remaining[r][o] == 0 {
				if c := p.chunks[o]; c.kind == Copy {
					evalCopy(r, o)
				} else {
					eval(r, int(c.peer), c.kind == Send)
				}
			}
		}
	}
	for k, q := range s.queues {
		if len(q) != 0 {
			return fmt.Errorf("%d messages from %d to %d never received", len(q), k/n, k%n)
		}
	}
	return nil
}

// xcase is one collective to check with xsim for one rank count: how to
// build each rank's schedule, how large its buffers are, what they hold
// before, and what must hold after.
type xcase struct {
	size int
	elem int
	mk   func(r int) Schedule
	// phases, instead of mk, gives each rank's schedules of a collective
	// that runs as several schedules in order over the same buffers (all
	// ranks run phase k before phase k+1 here; each rank's messages of
	// phase k precede those of phase k+1 to any peer, so the order holds
	// in the executor too).
	phases     func(r int) []Schedule
	dataElems  func(r int) int
	inputElems func(r int) int
	init       func(s *xsim) // fills the buffers (atoms)
	check      func(s *xsim) error
	// fuse compiles with CompileFused: BufInput holds what BufData would
	// start with (init fills it), BufData starts undefined. keep (nil: all
	// of dataElems) is the part of BufData each rank keeps, in elements
	// (CompileFused's keepLo and keepHi).
	fuse bool
	keep func(r int) (lo, hi int)
	// window runs windowed plans (Plan.Windowed) through a window of
	// that many peers, as the executor does, and checks the bound.
	window int
	// twice runs each configuration a second time, in another random
	// order, and requires every element to end the same: for reductions,
	// whose trees the final check does not pin down.
	twice bool
}

// xchunks are the chunk sizes in elements each case runs with: one element,
// a few, larger than any buffer. Each runs with a different credit limit
// (unbounded, one, two chunks in flight per peer).
var xchunks = []int{1, 3, 1 << 20}

// xchunkOneMax is the largest buffer, in elements, run with one-element
// chunks.
const xchunkOneMax = 64

// runX runs c with every chunk size. With c.twice it runs the
// configuration with a few elements per chunk and one credit twice, with
// different seeds and one expression table, and requires the two runs to
// end with the same expressions everywhere: the schedule, not the order
// messages happen to arrive in, fixes every result.
func runX(t *testing.T, desc string, c xcase) {
	t.Helper()
	if err := c.run(); err != nil {
		t.Fatalf("%s %v", desc, err)
	}
}

// run is runX's work: it returns the first failure.
func (c xcase) run() error {
	phases := make([][]Schedule, 0) // per phase, per rank
	for r := range c.size {
		var ps []Schedule
		if c.phases != nil {
			ps = c.phases(r)
		} else {
			ps = []Schedule{c.mk(r)}
		}
		if r == 0 {
			phases = make([][]Schedule, len(ps))
		}
		if len(ps) != len(phases) {
			return fmt.Errorf("rank %d has %d phases, rank 0 %d", r, len(ps), len(phases))
		}
		for k, sc := range ps {
			if sc.ScratchBytes != ps[0].ScratchBytes {
				return fmt.Errorf("rank %d: phase %d needs %d bytes of scratch, phase 0 %d", r, k, sc.ScratchBytes, ps[0].ScratchBytes)
			}
			phases[k] = append(phases[k], sc)
		}
	}
	if c.inputElems == nil {
		c.inputElems = func(int) int { return 0 }
	}
	big := 0
	for r := range c.size {
		big = max(big, c.dataElems(r), c.inputElems(r), phases[0][r].ScratchBytes/c.elem)
	}
	for ci, ch := range xchunks {
		if ch == 1 && big > xchunkOneMax {
			continue // as thorough as 3 and slow to plan
		}
		plans := make([][]*Plan, len(phases))
		for k, scheds := range phases {
			plans[k] = make([]*Plan, c.size)
			for r := range c.size {
				p, err := Compile(scheds[r], ch*c.elem)
				if c.fuse {
					lo, hi := 0, c.dataElems(r)
					if c.keep != nil {
						lo, hi = c.keep(r)
					}
					p, err = CompileFused(scheds[r], ch*c.elem, lo*c.elem, hi*c.elem)
				}
				if err != nil {
					return fmt.Errorf("chunk=%d: %v", ch, err)
				}
				plans[k][r] = p
			}
		}
		ex := newExprs()
		var first *xsim
		runs := 1
		if c.twice && ch == xchunks[1] {
			runs = 2 // in the run with one credit, which reorders most
		}
		for run := range runs {
			var s *xsim
			for k, scheds := range phases {
				next, err := newXsim(scheds, plans[k], c.elem, c.dataElems, c.inputElems, ci%3, uint64(c.size*7919+ci*31+run*7+k), ex)
				if err != nil {
					return fmt.Errorf("chunk=%d phase %d: %v", ch, k, err)
				}
				next.window = c.window
				if s == nil {
					c.init(next)
				} else {
					next.bufs, next.know = s.bufs, s.know
				}
				s = next
				if err := s.run(); err != nil {
					return fmt.Errorf("chunk=%d slots=%d phase %d: %v", ch, ci%3, k, err)
				}
			}
			if err := c.check(s); err != nil {
				return fmt.Errorf("chunk=%d: %v", ch, err)
			}
			if run == 0 {
				first = s
				continue
			}
			for r := range c.size {
				for b := range BufToken {
					for i, v := range s.bufs[r][b] {
						if v != first.bufs[r][b][i] {
							return fmt.Errorf("chunk=%d: rank %d buffer %d element %d differs between two runs: %s vs %s",
								ch, r, b, i, ex.String(first.bufs[r][b][i]), ex.String(v))
						}
					}
				}
			}
		}
	}
	return nil
}

// wantAtom checks that rank r's buf holds at element i the element src of
// rank from's buffer fromBuf.
func (s *xsim) wantAtom(r int, buf Buf, i, from int, fromBuf Buf, src int) error {
	got, want := s.bufs[r][buf][i], s.ex.atom(from, fromBuf, src)
	if got != want {
		return fmt.Errorf("rank %d buffer %d element %d holds %s, want %s", r, buf, i, s.ex.String(got), s.ex.String(want))
	}
	return nil
}

// wantReduced checks that rank r's BufData holds at element i the
// reduction of element i of every rank's BufData, and returns its tree.
func (s *xsim) wantReduced(r, i int) (uint32, error) {
	id := s.bufs[r][BufData][i]
	n := s.ex.nodes[id]
	full := uint64(1)<<len(s.plans) - 1
	if id == 0 || n.leaves != full || n.buf != BufData || n.idx != i {
		return id, fmt.Errorf("rank %d element %d holds %s, want the reduction of element %d of all %d ranks",
			r, i, s.ex.String(id), i, len(s.plans))
	}
	return id, nil
}

// simSizes are the rank counts the schedules are checked with: every count
// from 1 to 33, or with -short the counts up to 9 and the powers of two up
// to 32 with their neighbours.
func simSizes() []int {
	var sizes []int
	for size := 1; size <= 33; size++ {
		if !testing.Short() || size <= 9 || size&(size-1) == 0 || (size+1)&size == 0 || (size-1)&(size-2) == 0 {
			sizes = append(sizes, size)
		}
	}
	return sizes
}
