package collectives

// FromInput rewrites the schedule of a reducing collective that works in
// place on BufData (allreduce, reduce, reduce-scatter) for a call whose
// input is a separate buffer, BufInput, of the same length dataLen: the
// result is what the in-place schedule computes after BufData was set to
// BufInput, without copying the whole input first.
//
// The steps run in program order, so it is known at each step which bytes
// of BufData were written already ("defined") and which still hold, in the
// in-place schedule, the input. A send of bytes not yet defined sends them
// from BufInput; a receive that reduces into bytes not yet defined first
// gets them copied from BufInput (a Copy step, cut into chunks like the
// reduction, so the bytes are in cache when it runs); a receive that
// overwrites bytes defines them. Bytes no step defines are copied before
// the steps. So a 2-rank reduce-scatter + allgather copies half of the
// input instead of all of it, and sends the other half straight from it.
//
// A send of a range partly defined keeps its one message: the undefined
// part is copied first. Schedules whose BufData steps already read
// BufInput, or that have local copies before their steps, are returned
// unchanged with ok false (the caller copies the input as before).
func FromInput(s Schedule, dataLen int) (out Schedule, ok bool) {
	if len(s.Pre) > 0 || dataLen <= 0 {
		return s, false
	}
	for _, st := range s.Steps {
		if st.Buf == BufInput || (st.Kind == Copy && st.SrcBuf == BufInput) {
			return s, false
		}
	}
	out = s
	out.Steps = make([]Step, 0, len(s.Steps)+len(s.Steps)/2)
	var def ranges // bytes of BufData defined so far
	// fill copies the undefined part of [a, b) of BufData from the input.
	fill := func(a, b int) {
		for _, g := range def.gaps(a, b) {
			out.copyStep(BufInput, g[0], BufData, g[0], g[1]-g[0])
		}
		def.add(a, b)
	}
	for _, st := range s.Steps {
		a, b := st.Off, st.Off+st.Len
		switch {
		case st.Kind == Send && st.Buf == BufData:
			switch {
			case st.Len == 0:
			case def.none(a, b):
				st.Buf = BufInput
			default:
				fill(a, b)
			}
		case st.Kind == RecvReduce && st.Buf == BufData:
			fill(a, b)
		case st.Kind == Recv && st.Buf == BufData:
			def.add(a, b)
		case st.Kind == Copy:
			if st.SrcBuf == BufData && st.Len > 0 {
				sa, sb := st.SrcOff, st.SrcOff+st.Len
				if def.none(sa, sb) {
					st.SrcBuf = BufInput
				} else {
					fill(sa, sb)
				}
			}
			if st.Buf == BufData {
				def.add(a, b)
			}
		}
		out.Steps = append(out.Steps, st)
	}
	out.Pre = nil
	for _, g := range def.gaps(0, dataLen) {
		out.copyPre(BufInput, g[0], BufData, g[0], g[1]-g[0])
	}
	return out, true
}

// ranges is a sorted list of disjoint, non-adjacent half-open byte ranges.
type ranges [][2]int

// add merges [a, b) in.
func (r *ranges) add(a, b int) {
	if b <= a {
		return
	}
	var out ranges
	placed := false
	for _, x := range *r {
		switch {
		case x[1] < a:
			out = append(out, x)
		case x[0] > b:
			if !placed {
				out = append(out, [2]int{a, b})
				placed = true
			}
			out = append(out, x)
		default: // overlapping or adjacent: absorb
			a, b = min(a, x[0]), max(b, x[1])
		}
	}
	if !placed {
		out = append(out, [2]int{a, b})
	}
	*r = out
}

// gaps returns the parts of [a, b) not covered.
func (r ranges) gaps(a, b int) [][2]int {
	var g [][2]int
	for _, x := range r {
		if x[1] <= a || x[0] >= b {
			continue
		}
		if x[0] > a {
			g = append(g, [2]int{a, x[0]})
		}
		a = max(a, x[1])
	}
	if a < b {
		g = append(g, [2]int{a, b})
	}
	return g
}

// none reports whether no byte of [a, b) is covered.
func (r ranges) none(a, b int) bool {
	for _, x := range r {
		if x[0] < b && x[1] > a {
			return false
		}
	}
	return true
}
