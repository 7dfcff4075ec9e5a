package collectives

import "fmt"

// imm is the immediate of the call's data writes (of a point-to-point
// message's chunks but the last: chunkImm).
func (c *Call) imm() uint32 { return c.chunkImm(false) }

// chunkImm is the immediate of a data write; last: the write is the last
// chunk of a point-to-point message.
func (c *Call) chunkImm(last bool) uint32 {
	if c.P2P {
		return p2pImm(c.Seq, last)
	}
	return dataImm(c.Seq, c.fingerprint())
}

// endsMessage reports whether a point-to-point write whose immediate
// carried seq and fp (its tag's high and low bits) is its message's last.
func endsMessage(seq, fp uint16) bool { return (uint32(seq)<<16|uint32(fp))&p2pLast != 0 }

// checkEnd checks that a point-to-point chunk from peer that ends the
// peer's message (last, its immediate's bit) ends this rank's receive
// from it (ends) too.
func (e *Executor) checkEnd(c *Call, peer int, last, ends bool) error {
	switch {
	case last && !ends:
		return fmt.Errorf("%s (tag %d): rank %d <- %d: the peer's message ended before this rank's receive was full: the ranks' point-to-point calls have different sizes",
			c.Desc(), c.Seq, e.Rank, peer)
	case !last && ends:
		return fmt.Errorf("%s (tag %d): rank %d <- %d: the peer's message is longer than this rank's receive: the ranks' point-to-point calls have different sizes",
			c.Desc(), c.Seq, e.Rank, peer)
	}
	return nil
}

// checkTag checks a message that arrived from peer for a call when either
// is point-to-point: both must be, with the same tag. seq and fp are the
// immediate's fields (for a point-to-point message, its tag's high and low
// bits); p2p says whether the message is point-to-point.
func (e *Executor) checkTag(c *Call, peer int, seq, fp uint16, p2p bool) error {
	tag := (uint32(seq)<<16 | uint32(fp)) & MaxTag
	switch {
	case p2p && c.P2P && tag == c.Seq:
		return nil
	case p2p && c.P2P:
		return fmt.Errorf("%s (tag %d): rank %d <- %d: the peer sent a message with tag %d: the ranks' point-to-point calls do not match",
			c.Desc(), c.Seq, e.Rank, peer, tag)
	case p2p:
		return fmt.Errorf("%s #%d (%s): rank %d <- %d: the peer sent a point-to-point message (tag %d): the ranks called different operations",
			c.Desc(), c.Seq, c.Plan.Name, e.Rank, peer, tag)
	default:
		return fmt.Errorf("%s (tag %d): rank %d <- %d: the peer sent data of its collective #%d (mod %d): the ranks called different operations",
			c.Desc(), c.Seq, e.Rank, peer, seq, 1<<seqBits)
	}
}
