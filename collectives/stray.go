package collectives

import "fmt"

// Point-to-point messages match by tag, as MPI's do: between two ranks,
// messages of one tag are received in the order they were sent, and a
// receive passes over messages of other tags. The peer's writes arrive in
// its slots in the order it sent them, so a receive whose message is not
// the first to arrive sets the ones before it aside (setAside: copied out
// of the slots, which go back to the peer, into memory of the link's
// own), and the receive of each takes it from there (takeStray), before
// anything of its tag that arrives later. A collective does the same with
// the point-to-point messages that arrive before its data. What is set aside at most is
// bounded (StrayLimit): past it the receive fails, naming both tags,
// rather than holding an unbounded part of the peer's sends.

// stray is a point-to-point message set aside: its tag, the bytes that
// arrived, and whether its last chunk did.
type stray struct {
	tag  uint32
	data []byte
	done bool
}

// DefaultStrayLimit is the most bytes of point-to-point messages an
// executor sets aside for later receives (Executor.StrayLimit 0), each
// message counted StrayOverhead bytes more (so that empty ones are
// bounded in number too).
const (
	DefaultStrayLimit = 64 << 20
	StrayOverhead     = 256
)

func (e *Executor) strayLimit() int {
	if e.StrayLimit > 0 {
		return e.StrayLimit
	}
	return DefaultStrayLimit
}

// strayOf returns the index of the oldest message with tag set aside on
// l, or -1.
func (l *Link) strayOf(tag uint32) int {
	for i := range l.strays {
		if l.strays[i].tag == tag {
			return i
		}
	}
	return -1
}

// setAside takes the oldest chunk that arrived from l's peer aside, for
// c, a point-to-point call that has received nothing from the peer yet,
// if it is not c's: a point-to-point message with another tag, or the
// rest of one that is being set aside; for c a collective, any
// point-to-point message (a Send between two collectives on the peer
// whose Recv comes after the second here: in MPI too, point-to-point
// messages and collectives do not match each other). It reports whether
// it did.
func (e *Executor) setAside(c *Call, l *Link) (bool, error) {
	slot := l.recvSlot
	if !l.arrP2P[slot] {
		return false, nil // not a message of a point-to-point call: consume says what it is
	}
	seq, fp, n := l.arrSeq[slot], l.arrFP[slot], l.arrLen[slot]
	tag := (uint32(seq)<<16 | uint32(fp)) & MaxTag
	var s *stray
	if k := len(l.strays); k > 0 && !l.strays[k-1].done {
		s = &l.strays[k-1]
		if s.tag != tag {
			return false, fmt.Errorf("%s (%s): rank %d <- %d: a chunk of the peer's message with tag %d arrived inside its message with tag %d",
				c.Desc(), c.Num(), e.Rank, l.Peer, tag, s.tag)
		}
	} else if c.P2P && tag == c.Seq {
		return false, nil
	}
	cost := n
	if s == nil {
		cost += StrayOverhead // a new message
	}
	if e.strayBytes+cost > e.strayLimit() {
		what := "its message"
		if s == nil {
			what = fmt.Sprintf("a message with tag %d", tag)
		}
		return false, fmt.Errorf("%s (%s): rank %d <- %d: the peer sent %s before what this call receives, and the messages this rank holds for receives not called yet would pass %d bytes (a receive of each, in the order the peer sends them, avoids holding them)",
			c.Desc(), c.Num(), e.Rank, l.Peer, what, e.strayLimit())
	}
	if l.steered != nil && l.steered[slot] {
		// Armed for a receive of this run: another tag's write is not
		// placed there (its immediate differs), so it is in the slot.
		l.steered[slot] = false
		l.steer.Unsteer(slot)
		if l.steerDst != nil {
			l.steerDst[slot] = nil
		}
	}
	if s == nil {
		l.strays = append(l.strays, stray{tag: tag})
		s = &l.strays[len(l.strays)-1]
	}
	s.data = append(s.data, l.Staging.Bytes()[slot*e.SlotSize:slot*e.SlotSize+n]...)
	s.done = endsMessage(seq, fp)
	e.strayBytes += cost
	l.recvSlot = (slot + 1) % e.NSlots
	l.arrived--
	// The slot's credit, as consume returns a point-to-point chunk's.
	if !l.returnCredit(false) {
		e.stall(l.Peer) // returned with the next credit write or after the next poll
	}
	return true, nil
}

// takeStray completes c's receives from l's peer (recvs, none taken yet)
// with the oldest message of c's tag set aside, if one is, whole, and
// their destinations may be written.
func (e *Executor) takeStray(c *Call, l *Link, recvs []int32) error {
	if !c.P2P {
		return nil // a collective's data is never set aside
	}
	i := l.strayOf(c.Seq)
	if i < 0 || !l.strays[i].done {
		return nil // the rest of it arrives first (setAside)
	}
	p, s := c.Plan, &l.strays[i]
	total := 0
	for _, idx := range recvs {
		if e.remaining[idx] > 0 {
			return nil // looked at again once ready
		}
		total += p.chunks[idx].len
	}
	if len(s.data) != total {
		return fmt.Errorf("%s (tag %d): rank %d <- %d: the peer's message has %d bytes where this rank's receive expects %d: the ranks' point-to-point calls have different sizes",
			c.Desc(), c.Seq, e.Rank, l.Peer, len(s.data), total)
	}
	off := 0
	for _, idx := range recvs {
		if ch := &p.chunks[idx]; ch.len > 0 {
			t := &c.Bufs[ch.buf]
			copy(t.Region.Bytes()[t.Off+ch.off:t.Off+ch.off+ch.len], s.data[off:off+ch.len])
			off += ch.len
		}
	}
	e.strayBytes -= len(s.data) + StrayOverhead
	copy(l.strays[i:], l.strays[i+1:])
	l.strays[len(l.strays)-1] = stray{}
	l.strays = l.strays[:len(l.strays)-1]
	peer := l.Peer
	for _, idx := range recvs {
		e.recvHead[peer]++
		e.finish(p, idx)
	}
	return nil
}

// strayWaits reports whether c is a receive from l's peer, none of it
// taken yet, whose whole message is set aside: takeStray completes it
// whatever became of the link since (a peer may send, then close while
// this rank still runs the calls before the receive).
func (e *Executor) strayWaits(c *Call, l *Link) bool {
	if !c.P2P || e.recvHead[l.Peer] != 0 || len(c.Plan.recvs[l.Peer]) == 0 {
		return false
	}
	i := l.strayOf(c.Seq)
	return i >= 0 && l.strays[i].done
}

// strayNote adds to err, the failure of c, a receive, that a peer c
// receives from sent a message of another tag before, which waits for a
// receive of its tag: the ranks' tags may not agree.
func (e *Executor) strayNote(c *Call, err error) error {
	for _, peer := range c.Plan.peers {
		if l := e.Links[peer]; l != nil && len(c.Plan.recvs[peer]) > 0 && len(l.strays) > 0 {
			return fmt.Errorf("%w (rank %d sent this rank a message with tag %d before it, which waits, set aside, for a receive of that tag)",
				err, peer, l.strays[len(l.strays)-1].tag)
		}
	}
	return err
}
