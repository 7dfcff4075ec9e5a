package collectives

import (
	"errors"
	"fmt"

	"github.com/goccl/goccl/transport"
)

// Link is one rank's connection to one peer as the executor uses it: a
// connected endpoint, this side's staging slots (registered, remote-writable)
// and the descriptor of the peer's staging slots.
//
// Flow control is credit based. Each side owns NSlots receive slots of
// SlotSize bytes. A sender holds one credit per free slot at the peer; it
// RDMA-writes a chunk into the next slot in order, with an immediate that
// says "data" and the collective's sequence number, spending a credit. The
// receiver consumes slots in order and, for each one it has consumed,
// returns a credit with an empty write-with-immediate. Every incoming
// message consumes one zero-length receive token, reposted at once.
//
// A link's state outlives a collective: a peer may already be sending data
// of the next collective, which waits in its slot until that collective
// runs here.
type Link struct {
	Peer    int
	EP      transport.Endpoint
	Staging transport.Region       // this side's slots
	Remote  transport.RemoteRegion // the peer's slots

	// lazy is EP's PostWriteLazy, if it has one (transport.LazyWriter).
	lazy transport.LazyWriter
	// quiet is EP's PostWriteQuiet, if it has one (transport.QuietWriter):
	// credits are posted through it (postCredit).
	quiet transport.QuietWriter
	// steer is EP's steering, if it has one (transport.Steerer); steered
	// marks the slots whose entry is armed; steerPos is the first of this
	// run's receives from the peer not yet considered (Executor.steerAhead).
	steer    transport.Steerer
	steered  []bool
	steerPos int
	// steerDst is the destination each armed slot's entry was given: a
	// chunk that lands in a slot armed for a later receive (the peer's
	// messages set aside before it moved this run's chunks on: strays) is
	// moved from there to its own place (consume).
	steerDst [][]byte

	// strays: the point-to-point messages from the peer that arrived
	// ahead of the one a receive waited for (another tag), set aside for
	// their own receives, oldest first; the last may still be arriving
	// (stray.go).
	strays []stray

	credits  int    // free slots at the peer
	sendSlot int    // next slot to write at the peer
	recvSlot int    // next slot to consume here
	arrived  int    // messages waiting in slots here
	down     error  // why the connection is gone; nil while it is up
	imm      uint32 // scratch for PostWrite's immediate (read at post time)
	// Posts the completion queue refused with ErrQueueFull, made again
	// after the next poll (Executor.repay).
	owedCredits int // credits consumed here and not yet returned
	owedTokens  int // receive tokens not reposted
	arrLen      []int
	arrSeq      []uint16
	arrFP       []uint16
	arrP2P      []bool // a point-to-point message: arrSeq<<16 | arrFP is its tag
	// sent and credited count the chunks written to the peer and the
	// credits it returned, since the link was made: credits come back in
	// order, so credited > n says the peer consumed (and checked) the
	// chunk sent after the first n.
	sent, credited uint64
	// proveAt: the credit count that proves the peer took the chunks of
	// Eager runs that only sent to it (0: none waits); proveSeq: the
	// first of those runs not yet proven (see Executor.Confirm); if
	// proveP2P, it is a point-to-point call, which proveCall names.
	proveAt   uint64
	proveSeq  uint32
	proveP2P  bool
	proveCall Call
	notice    uint32 // the peer's failure notice (immediate), 0 if none
	// strayP2P: a point-to-point message arrived after the last run
	// (recordOne), with tag strayTag: no receive took it (Unreceived).
	strayP2P bool
	strayTag uint32
	// postErr: a post on the link failed because its connection is gone
	// (Notify's); Confirm counts the link down once the completions
	// queued before have been taken.
	postErr  error
	deferred bool // a credit kept until the run completes (see deferCredit)
	unplaced int  // this run's sends posted and not yet placed at the peer
	inline   int  // sends done at post whose acknowledgement has not come
	// batched: credits returned lazily in a row by batchCredit since the
	// last credit written at once.
	batched int

	// Transient marks a link made for one batch of a windowed run
	// (window.go): the executor releases it once both ranks are done
	// with it. byeIn: the peer's bye has arrived; byeDone: this side's
	// bye is placed at the peer (and so is everything posted before it).
	Transient bool
	byeIn     bool
	byeDone   bool
}

// Immediate data layout: 2 bits of type, then
//   - collective data: 14 bits of collective sequence and 16 bits of the
//     fingerprint of the sender's call (a hash of collective, algorithm,
//     type, count, root and operation: receivers compare it with their
//     own, so ranks that called different collectives get an error instead
//     of a hang or corrupt data);
//   - point-to-point data: a bit set on the message's last chunk, then the
//     29-bit tag, whole (tags match exactly; the receiver checks the
//     length of every chunk, and that the sender's message ends where its
//     receive does: without the bit, a message longer than the receive by
//     whole chunks would end the receive early and leave its tail to the
//     next call);
//   - a credit: the number of credits in the low 16 bits; with bit 29 set
//     it is a failure notice instead (see notice.go).
const (
	immData   = 1 << 30
	immCredit = 2 << 30
	immP2P    = 3 << 30
	immType   = 3 << 30 // the mask of the type bits
	seqBits   = 14
	seqMask   = 1<<seqBits - 1
	// MaxTag is the largest point-to-point tag.
	MaxTag = 1<<29 - 1
	// p2pLast marks a point-to-point message's last chunk.
	p2pLast = 1 << 29
)

// credit counts the credits a credit immediate returns.
func (l *Link) credit(imm uint32) {
	n := int(imm & 0xffff)
	l.credits += n
	l.credited += uint64(n)
}

func dataImm(seq uint32, fp uint16) uint32 { return immData | (seq&seqMask)<<16 | uint32(fp) }
func p2pImm(tag uint32, last bool) uint32 {
	if last {
		return immP2P | p2pLast | tag&MaxTag
	}
	return immP2P | tag&MaxTag
}
func creditImm(n int) uint32 { return immCredit | uint32(n)&0xffff }

// Work request ids: the low 32 bits carry the chunk index (writes of data
// the run waits for: inlineChunk for a write done at post) or nothing,
// bits 32..47 the peer, bits 48..55 the run's epoch, the top byte the
// kind.
const (
	idData   = 1 << 56
	idCredit = 2 << 56
	idToken  = 3 << 56
	idNotice = 4 << 56
	idBye    = 5 << 56 // a windowed run's bye (window.go)
	idKind   = 0xff << 56
)

func makeID(kind uint64, peer int, idx int32) uint64 {
	return kind | uint64(uint32(peer)&0xffff)<<32 | uint64(uint32(idx))
}
func withEpoch(id uint64, epoch uint8) uint64 { return id | uint64(epoch)<<48 }
func idEpoch(id uint64) uint8                 { return uint8(id >> 48) }
func idPeer(id uint64) int                    { return int(id>>32) & 0xffff }
func idChunk(id uint64) int32                 { return int32(uint32(id)) }

// inlineChunk is the chunk index in the id of a data write that the
// transport copied at post time (an inline send: done for its run once
// posted, see Executor.Inline), whose acknowledgement only confirms it,
// whenever it comes: never a chunk of a plan. Its own chunk index in the
// id told it apart from the run's other chunks only with the epoch's
// help, and the epoch is 8 bits: a peer may hold an acknowledgement back
// for hundreds of runs (lazy output with nothing else to send this rank),
// and one that came back 256 runs later, in a run whose chunk of that
// index was not done, finished that chunk: a leaf of a broadcast back to
// back (4 ranks on 2 cores over TCP, about one run in 300) then waited
// for ever with one chunk too many done, or completed without the
// root's data and failed its next call on "rank 0 sent data of its
// collective #N".
const inlineChunk int32 = -1

// returnCredit returns the credit of a slot consumed here (with the
// credits owed before it), lazily if lazy (see Executor.lazyCredit); false
// if the completion queue refused the write: the credits stay owed, and
// the next credit write or the next run with the peer repays them
// (Executor.repay). A connection that is gone is no failure here: fine if
// the peer needs nothing more, which the flushed receive tokens tell
// (Executor.checkDown).
func (l *Link) returnCredit(lazy bool) bool {
	if !lazy {
		l.batched = 0
	}
	l.owedCredits++
	l.imm = creditImm(l.owedCredits)
	if err := l.postCredit(lazy); errors.Is(err, transport.ErrQueueFull) {
		return false
	}
	l.owedCredits = 0
	return true
}

// postCredit writes l.imm, a credit, to the peer (notices, which share
// the credit's immediate type, go through notice.go), lazily (transport.LazyWriter, which the link must have) if
// lazy. Its success completes nothing where the endpoint can say so
// (transport.QuietWriter): a credit's completion was never looked at, and
// over TCP each cost a queue operation and a pass of the executor's
// handling on the caller's path. A failure still completes, with its
// error, and tells the executor that the connection is gone.
func (l *Link) postCredit(lazy bool) error {
	id := makeID(idCredit, l.Peer, 0)
	switch {
	case l.quiet != nil:
		return l.quiet.PostWriteQuiet(id, l.Staging, 0, 0, l.Remote, 0, &l.imm, lazy)
	case lazy:
		return l.lazy.PostWriteLazy(id, l.Staging, 0, 0, l.Remote, 0, &l.imm)
	}
	return l.EP.PostWrite(id, l.Staging, 0, 0, l.Remote, 0, &l.imm)
}

// StagingSize is the size of the staging region a link needs.
func StagingSize(nslots, slotSize int) int { return nslots * slotSize }

// TokensPerLink is how many receive tokens a link keeps posted: enough for
// a full window of data and a full window of credits.
func TokensPerLink(nslots int) int { return 2*nslots + 4 }

// CQEntriesPerLink is how many entries of the completion queue one link
// holds at most (transport.CompletionQueue: a posted request holds one
// until its completion is taken out): its receive tokens, one data write
// per credit and one credit write per slot. A queue of this many entries per
// link never refuses a post in the steady state; if it does (a transport
// that reports a write's completion after the peer's answer to it), the
// executor takes completions out and posts again.
func CQEntriesPerLink(nslots int) int { return TokensPerLink(nslots) + 2*nslots }

// NewLink wraps a connected endpoint. staging must be this side's region of
// nslots*slotSize bytes (remote write and local write access); remote is
// the peer's. NewLink posts the receive tokens.
func NewLink(peer int, ep transport.Endpoint, staging transport.Region, remote transport.RemoteRegion, nslots int) (*Link, error) {
	l := &Link{Peer: peer, EP: ep, Staging: staging, Remote: remote, credits: nslots,
		arrLen: make([]int, nslots), arrSeq: make([]uint16, nslots), arrFP: make([]uint16, nslots),
		arrP2P: make([]bool, nslots)}
	l.lazy, _ = ep.(transport.LazyWriter)
	l.quiet, _ = ep.(transport.QuietWriter)
	if st, ok := ep.(transport.Steerer); ok && nslots <= transport.MaxSteer {
		l.steer, l.steered = st, make([]bool, nslots)
	}
	for range TokensPerLink(nslots) {
		if err := ep.PostRecv(makeID(idToken, peer, 0), staging, 0, 0); err != nil {
			return nil, fmt.Errorf("link to rank %d: post receive: %w", peer, err)
		}
	}
	return l, nil
}
