package collectives

// The quick way of a small call over the links: a Send or Recv whose
// message is one chunk, or a collective whose plan on this rank is one
// chunk to or from one peer (a broadcast of two ranks), with nothing
// unusual in the way, does what a Run of its plan does for it and nothing
// else. A Run costs its
// fixed work whatever the plan (the reset of the per-run state, the
// dependency bookkeeping, the dirty-peer loop, the completion check): over
// TCP, where an 8-byte message takes a few microseconds of the kernel's
// time, that work and the communicator's around it were a third of a
// ping-pong's time on the CPU (osu latency 8 B, 2 ranks: ~1.6 µs of user
// time per Send and ~1.9 per Recv besides the transport's own).
//
// Each quick call keeps the link's protocol exactly: the same slot,
// credit, immediate and completion id as its Run would use, so a peer
// cannot tell the ways apart and a later Run finds the link as a Run
// would have left it. Anything a Run would have to judge (no link or a
// transient one, the link down, a notice kept, owed posts, no credit, a
// message that is not exactly the one expected) makes it return false
// having changed nothing the general way depends on: the general way then
// runs the call and reports what stands in the way as always.

// quickLink returns the link to peer if a quick call may use it.
func (e *Executor) quickLink(peer int) *Link {
	if e.err != nil || e.noticeLater || e.win.on || len(e.dirty) != e.Size || uint(peer) >= uint(len(e.Links)) {
		return nil
	}
	l := e.Links[peer]
	if l == nil || l.Transient || l.down != nil || l.notice != 0 || l.owedTokens > 0 || l.owedCredits > 0 || l.deferred {
		return nil
	}
	return l
}

// oneChunk returns the only chunk of c's plan if the plan is one chunk to
// or from peer (kind Send or Recv), else nil. A collective's must be an
// Eager call whose count all ranks share (see Call), as a quick call
// neither waits for proof nor confirms.
func oneChunk(c *Call, peer int, kind Kind) *chunk {
	p := c.Plan
	if p == nil || len(p.chunks) != 1 || len(p.pre) != 0 || len(p.peers) != 1 || p.peers[0] != peer ||
		(!c.P2P && (!c.Eager || c.Confirm || c.VarCount)) {
		return nil
	}
	if ch := &p.chunks[0]; ch.kind == kind && int(ch.peer) == peer && ch.len > 0 {
		return ch
	}
	return nil
}

// QuickSend posts c, a call whose plan is one send (point-to-point, or a
// collective's) of at most Inline bytes (the transport copies it at post
// time, so the send is done once posted, as an inline send of a Run is),
// to peer. Without a credit for the peer's next slot it polls the
// completion queue for one at most polls times (a root that runs ahead
// of its receiver back to back meets this every few calls). It returns
// false, having posted nothing, where Run must run c; a failure the
// completions reveal fails the executor and is returned with true, as
// QuickRecv returns it.
func (e *Executor) QuickSend(c *Call, peer, polls int) (bool, error) {
	ch := oneChunk(c, peer, Send)
	if ch == nil || ch.len > e.Inline {
		return false, nil
	}
	l := e.quickLink(peer)
	if l == nil {
		return false, nil
	}
	if l.credits == 0 {
		e.sendHead[peer], e.recvHead[peer] = 0, 0
		if ok, err := e.quickPoll(c, l, polls, true); !ok || err != nil {
			return err != nil, err
		}
		if e.quickLink(peer) == nil {
			return false, nil
		}
	}
	region, off := e.source(c, ch)
	if region == nil {
		return false, nil
	}
	l.imm = c.chunkImm(true)
	if err := l.EP.PostWrite(withEpoch(makeID(idData, peer, inlineChunk), e.epoch), region, off, ch.len, l.Remote, uint64(l.sendSlot*e.SlotSize), &l.imm); err != nil {
		return false, nil // refused: Run posts it again and reports why
	}
	l.credits--
	l.sent++
	l.sendSlot = (l.sendSlot + 1) % e.NSlots
	e.inflight++
	l.inline++
	if !c.P2P {
		// As a Run of a collective that only sends ends.
		e.lastColl = c.Seq
		e.settle()
	}
	e.noteUnconfirmed(c)
	// As at the end of a Run: a transport that writes posts at the
	// caller's next poll gets it now, the peer waits for this message.
	e.CQ.Poll(e.compBuf()[:0])
	return true, nil
}

// quickPoll polls the completion queue for a quick call of c with l's
// peer, handling what it takes as a Run handles it, until l has a credit
// (credit) or a message arrived from the peer (otherwise): false if that
// did not come within polls polls, or the completions brought what a Run
// must judge (the link down, a notice, owed tokens). A failure the
// completions reveal fails the executor and is returned with true.
func (e *Executor) quickPoll(c *Call, l *Link, polls int, credit bool) (bool, error) {
	comps := e.compBuf()
	for i := 0; (credit && l.credits == 0) || (!credit && l.arrived == 0); i++ {
		if i == polls {
			return false, nil
		}
		n := e.CQ.Poll(comps)
		if n == 0 {
			continue
		}
		e.progressed()
		for k := range n {
			if err := e.handle(c, &comps[k]); err != nil {
				e.quickTidy()
				e.Fail(err)
				return true, err
			}
		}
		e.quickTidy()
		if l.down != nil || e.noticeLater || l.notice != 0 || l.owedTokens > 0 {
			return false, nil // Run says what it means for this call
		}
	}
	return true, nil
}

// QuickRecv takes the message of c, whose plan is one chunk received
// from peer, into dst (the chunk's length; a collective's goes into its
// buffer of c.Bufs, and dst is not used), polling the
// completion queue at most polls times while it has not arrived. It
// returns false where Run must run c: the message did not arrive within
// the polls, or what arrived first from peer is not exactly it (another
// tag or length, a collective's data), or the link is not one a quick
// call uses. What the polls took is handled as a Run handles it (the
// links' state is a Run's). A failure that the completions reveal (a
// peer's failure notice, a protocol error) fails the executor and is
// returned with true, as Run returns it.
func (e *Executor) QuickRecv(c *Call, peer int, dst []byte, polls int) (bool, error) {
	ch := oneChunk(c, peer, Recv)
	if ch == nil || (c.P2P && ch.len != len(dst)) {
		return false, nil
	}
	l := e.quickLink(peer)
	if l == nil || len(l.strays) > 0 {
		return false, nil // a message set aside may be this one's: Run takes it
	}
	// What a Run's reset sets for its peers, read by handle's checks.
	e.sendHead[peer], e.recvHead[peer] = 0, 0
	if ok, err := e.quickPoll(c, l, polls, false); !ok || err != nil {
		return err != nil, err
	}
	slot := l.recvSlot
	seq, fp := l.arrSeq[slot], l.arrFP[slot]
	if !c.P2P {
		// A collective's chunk goes where the call's buffers say, with
		// the credit a Run returns for it (consume).
		if l.arrP2P[slot] || seq != uint16(c.Seq&seqMask) || fp != c.fingerprint() || l.arrLen[slot] != ch.len ||
			(l.steered != nil && l.steered[slot]) || c.Bufs[ch.buf].Region == nil {
			return false, nil // Run consumes it and says what is wrong
		}
		if err := e.consume(c, l, ch); err != nil {
			return false, nil // not with the checks above; Run says it
		}
		e.recvHead[peer] = 1
		e.lastColl = c.Seq
		e.settle()
		return true, nil
	}
	if !l.arrP2P[slot] || (uint32(seq)<<16|uint32(fp))&MaxTag != c.Seq || !endsMessage(seq, fp) ||
		l.arrLen[slot] != len(dst) || (l.steered != nil && l.steered[slot]) {
		return false, nil // Run consumes it and says what is wrong
	}
	copy(dst, l.Staging.Bytes()[slot*e.SlotSize:slot*e.SlotSize+len(dst)])
	l.recvSlot = (slot + 1) % e.NSlots
	l.arrived--
	// The credit, as consume returns a point-to-point chunk's (if the
	// queue refuses it, the next Run with the peer repays it).
	l.returnCredit(false)
	return true, nil
}

// quickTidy leaves the per-run state that handle touched as a Run leaves
// it: no peer marked dirty, none stalled (what the completion queue
// refused stays owed to its link, and the next Run with that peer repays
// it).
func (e *Executor) quickTidy() {
	for _, peer := range e.stalled {
		e.isStalled[peer] = false
	}
	e.stalled = e.stalled[:0]
	for _, peer := range e.dirtyList {
		e.dirty[peer] = false
	}
	e.dirtyList = e.dirtyList[:0]
}
