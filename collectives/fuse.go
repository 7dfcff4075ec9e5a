package collectives

import (
	"context"
	"fmt"
	"sort"
)

// CompileFused compiles the schedule of an out-of-place reduction (its
// BufData starts as a copy of BufInput: allreduce, reduce
// and reduce-scatter with separate send and receive buffers) so that the
// copy is not made: a receive-and-reduce into bytes of BufData that no
// earlier step wrote becomes the fused out = input op received
// (ReduceTo), which reads and writes each byte once instead of copying it
// first and reducing it after; a send or local copy of such bytes reads
// them from BufInput. Only bytes that a step reads while partly written,
// and bytes of BufData the call keeps that no step writes at all, are
// copied from BufInput before the first step. A ring allreduce copies
// nothing.
//
// The call keeps bytes [keepLo, keepHi) of BufData once it is done: all
// of them where BufData is the result (an allreduce, a reduce's root),
// this rank's block where the rest is working space (a reduce-scatter:
// the block a recursive-halving rank sends away first is then not
// copied), none where all of it is (a reduce's other ranks, whose BufData
// is scratch: a leaf that only sends its input copies nothing).
//
// The call must then provide BufInput, registered like BufData (sends read
// it). A schedule with local copies before its steps (Schedule.Pre) is
// compiled as Compile does.
func CompileFused(s Schedule, chunkSize, keepLo, keepHi int) (*Plan, error) {
	return CompileFusedContext(context.Background(), s, chunkSize, keepLo, keepHi)
}

// CompileFusedContext is CompileFused under ctx (see CompileContext).
func CompileFusedContext(ctx context.Context, s Schedule, chunkSize, keepLo, keepHi int) (*Plan, error) {
	p, err := CompileContext(ctx, s, chunkSize)
	if err != nil || len(s.Pre) > 0 {
		return p, err
	}
	var written, need spans
	for i := range p.chunks {
		ch := &p.chunks[i]
		a, b := ch.off, ch.off+ch.len
		if ch.len == 0 {
			continue
		}
		switch {
		case ch.kind == Copy:
			if ch.srcBuf == BufData {
				if written.disjoint(ch.srcOff, ch.srcOff+ch.len) {
					ch.srcBuf, p.fused = BufInput, true
				} else {
					need.addMissing(&written, ch.srcOff, ch.srcOff+ch.len)
				}
			}
			if ch.buf == BufData {
				written.add(a, b)
			}
		case ch.buf != BufData:
		case ch.kind == Send:
			if written.disjoint(a, b) {
				ch.buf, p.fused = BufInput, true // the same bytes; later writers still wait for it
			} else {
				need.addMissing(&written, a, b)
			}
		case ch.kind == Recv:
			written.add(a, b)
		case ch.kind == RecvReduce:
			if written.disjoint(a, b) {
				ch.fused = true
				p.fused = true
			} else {
				need.addMissing(&written, a, b)
			}
			written.add(a, b)
		}
	}
	if keepLo < keepHi {
		need.addMissing(&written, keepLo, keepHi)
	}
	for _, r := range need {
		p.pre = append(p.pre, PreCopy{Src: BufInput, SrcOff: r[0], Dst: BufData, DstOff: r[0], Len: r[1] - r[0]})
	}
	return p, nil
}

// spans is a sorted list of disjoint half-open byte ranges.
type spans [][2]int

// add adds [a, b), merging.
func (s *spans) add(a, b int) {
	if a >= b {
		return
	}
	l := *s
	i := sort.Search(len(l), func(i int) bool { return l[i][1] >= a }) // first that ends at or after a
	j := i
	for j < len(l) && l[j][0] <= b {
		a, b = min(a, l[j][0]), max(b, l[j][1])
		j++
	}
	*s = append(l[:i], append([][2]int{{a, b}}, l[j:]...)...)
}

// disjoint reports whether [a, b) shares no byte with s.
func (s spans) disjoint(a, b int) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i][1] > a })
	return i == len(s) || s[i][0] >= b
}

// addMissing adds the parts of [a, b) that have is missing.
func (s *spans) addMissing(has *spans, a, b int) {
	for _, r := range *has {
		if r[1] <= a {
			continue
		}
		if r[0] >= b {
			break
		}
		s.add(a, r[0])
		a = r[1]
		if a >= b {
			return
		}
	}
	s.add(a, b)
}

func (s spans) String() string { return fmt.Sprint([][2]int(s)) }
