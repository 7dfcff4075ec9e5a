package collectives

import "fmt"

// A schedule is what one rank does in one collective: an ordered list of
// steps. Each step sends a byte range of one of the collective's buffers to
// a peer, receives a byte range from a peer (copying it in place, or
// reducing it into what is there), or copies a byte range locally from one
// buffer to another. Schedules are pure functions of (rank, size, count,
// element size, root): they never touch a network, so they are tested alone
// for every rank count.
//
// Messages between two ranks are matched in order: the k-th send from a to b
// is the k-th receive on b from a, and both have the same length. Order
// within a rank's list is program order: the planner keeps every step after
// the earlier steps whose bytes it depends on (read after write, write after
// read, write after write), and otherwise lets steps run concurrently.

// Kind is what a step does.
type Kind uint8

const (
	// Send sends Buf[Off:Off+Len] to Peer.
	Send Kind = iota + 1
	// Recv receives Len bytes from Peer into Buf[Off:Off+Len].
	Recv
	// RecvReduce receives Len bytes from Peer and reduces them into
	// Buf[Off:Off+Len] (dst = dst op received).
	RecvReduce
	// Copy copies SrcBuf[SrcOff:SrcOff+Len] to Buf[Off:Off+Len] locally,
	// between steps: it waits for the earlier steps that write its source
	// or touch its destination, and later steps wait for it likewise. Peer
	// is ignored (constructors set -1). Buf is never BufInput or BufToken,
	// and source and destination must not overlap.
	Copy
)

func (k Kind) String() string {
	switch k {
	case Send:
		return "send"
	case Recv:
		return "recv"
	case RecvReduce:
		return "recv-reduce"
	case Copy:
		return "copy"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Buf names one of a collective's buffers.
type Buf uint8

const (
	// BufData is the collective's result buffer, on which in-place
	// collectives work (allreduce, broadcast) and into which the others
	// deliver (the receive buffer of allgather, alltoall, gather, ...).
	BufData Buf = iota
	// BufInput is the send buffer of out-of-place collectives (alltoall,
	// allgather, gather, scatter, reduce-scatter): only ever read.
	BufInput
	// BufScratch is temporary space of Schedule.ScratchBytes bytes that the
	// algorithm needs (Bruck's rotations, a reduction's partial results).
	BufScratch
	// BufToken carries no bytes: zero-length steps on it only order
	// themselves (barrier rounds).
	BufToken
	numBufs
)

// NumBufs is the number of buffer kinds.
const NumBufs = int(numBufs)

// Step is one send, receive or local copy of a schedule. Off, SrcOff and
// Len are in bytes.
type Step struct {
	Kind Kind
	Peer int
	Buf  Buf
	Off  int
	Len  int
	// SrcBuf and SrcOff are a Copy's source; zero for the other kinds.
	SrcBuf Buf
	SrcOff int
}

func (s Step) String() string {
	if s.Kind == Copy {
		return fmt.Sprintf("copy buf=%d [%d,%d) <- buf=%d [%d,%d)", s.Buf, s.Off, s.Off+s.Len, s.SrcBuf, s.SrcOff, s.SrcOff+s.Len)
	}
	return fmt.Sprintf("%s peer=%d buf=%d [%d,%d)", s.Kind, s.Peer, s.Buf, s.Off, s.Off+s.Len)
}

// Schedule is one rank's steps in one collective.
type Schedule struct {
	Name  string
	Rank  int
	Size  int
	Steps []Step
	// ScratchBytes is the size of BufScratch the steps use.
	ScratchBytes int
	// Pre are local copies the rank makes, in order, before any of its
	// steps starts: an out-of-place collective's own block (BufInput to
	// BufData), or packing into BufScratch. A copy may read what an
	// earlier one wrote. Schedules of in-place collectives have none.
	// Copies between steps are steps of kind Copy.
	Pre []PreCopy
	// Rounds, if not nil, lets the executor run the schedule through a
	// bounded window of peers (Executor.Window; see window.go): Rounds[q]
	// is the round in which this rank exchanges with peer q, from 0, or -1
	// for this rank and for peers it may exchange with at any time. A
	// schedule with rounds promises that the round of a pair is the same
	// on both of its ranks, that a rank has at most two peers in one
	// round, and that no step with a peer waits for a step with a peer of
	// a later round (Compile checks the last).
	Rounds []int32
}

// PreCopy is a local copy of Len bytes from Src[SrcOff:] to Dst[DstOff:]
// before a schedule's steps. Dst is never BufInput.
type PreCopy struct {
	Src    Buf
	SrcOff int
	Dst    Buf
	DstOff int
	Len    int
}

func (s *Schedule) copyPre(src Buf, srcOff int, dst Buf, dstOff, n int) {
	if n > 0 {
		s.Pre = append(s.Pre, PreCopy{Src: src, SrcOff: srcOff, Dst: dst, DstOff: dstOff, Len: n})
	}
}

// copyStep adds a Copy step of n bytes from src[srcOff:] to dst[dstOff:];
// an empty copy adds nothing.
func (s *Schedule) copyStep(src Buf, srcOff int, dst Buf, dstOff, n int) {
	if n > 0 {
		s.Steps = append(s.Steps, Step{Kind: Copy, Peer: -1, Buf: dst, Off: dstOff, Len: n, SrcBuf: src, SrcOff: srcOff})
	}
}

func (s *Schedule) add(k Kind, peer int, buf Buf, off, n int) {
	s.Steps = append(s.Steps, Step{Kind: k, Peer: peer, Buf: buf, Off: off, Len: n})
}

// segments splits count elements of elemSize bytes into n contiguous
// segments whose lengths differ by at most one element; it returns the byte
// offset and length of segment i.
func segment(count, elemSize, n, i int) (off, length int) {
	base, extra := count/n, count%n
	start := i*base + min(i, extra)
	l := base
	if i < extra {
		l++
	}
	return start * elemSize, l * elemSize
}

func mod(a, n int) int { return ((a % n) + n) % n }
