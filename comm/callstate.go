package comm

import (
	"slices"
	"time"
)

// callState is what the runs of calls carry from one to the next: the
// collectives' numbering and summaries (for failure reports), the cache
// of compiled plans, the registered scratch buffers, and the messages this
// rank sent itself.
//
// It belongs to whichever goroutine runs a request, one at a time (see
// callQueue): the worker, or a blocking call running inline; tune resets
// seq once its measuring calls have returned, and Close reads it once
// every run has finished.
// Other goroutines never touch it: the responder reads stallWatch.seqNow,
// which the run publishes.
type callState struct {
	seq   uint32      // collectives started (point-to-point calls excluded)
	cur   callSummary // this collective (number seq), for failure reports
	prev  callSummary // the one before
	plans map[planKey]planEntry
	// The last two plans looked up, most recent first, in front of the
	// map: a loop of the same call, or of two that alternate (OSU's call
	// and barrier, a step's allreduce and broadcast), finds them without
	// hashing the key (BenchmarkCallOverhead).
	recent  [2]recentPlan
	scratch [numScratch]scratchBuf
	wide    []byte        // registered float32 buffer of half-type reductions
	selfq   []selfMessage // messages this rank sent itself, oldest first
	// mailStrays: messages from the mailboxes set aside for receives of
	// their tags, oldest first, by sender; mailStrayBytes their size
	// (board_p2p.go).
	mailStrays     map[int][]mailStray
	mailStrayBytes int
	// splits counts the Split calls run so far: it names the children,
	// numbered in the order the calls run, which is the same on every
	// rank (Split's caller counting them after its call returned named
	// two concurrent Splits in the order their goroutines woke).
	splits int
	// hoisting: the running call's wait runs Sends queued after it
	// (hoist.go); hoistPushed and hoistAt: the queue's count and the time
	// of its last look.
	hoisting    bool
	hoistPushed uint64
	hoistAt     time.Time
	// waitingRecv is the Recv whose run in the executor may yield to the
	// Sends queued behind it (recvWaits).
	waitingRecv *Request
}

// maxPlans bounds the plan cache: past it, it starts over.
const maxPlans = 512

// newCallState returns the state before the first call.
func newCallState() callState {
	return callState{plans: map[planKey]planEntry{}}
}

// beginRequest numbers a new collective, r, and returns its number; the
// current one becomes the previous. It sets the summary's fields one by
// one: a summary built in a temporary and copied whole stalls the
// processor (the wide loads cannot take the narrow stores' values from the
// store buffer).
func (s *callState) beginRequest(r *Request) uint32 {
	s.seq++
	s.prev = s.cur
	s.cur.kind, s.cur.dt, s.cur.op, s.cur.count, s.cur.root = r.kind, r.calledType(), r.op, r.count, r.root
	return s.seq
}

// recentPlan is an entry of callState.recent.
type recentPlan struct {
	key planKey
	e   planEntry
	ok  bool
}

// cachedPlan returns the plan compiled for k, if cached.
func (s *callState) cachedPlan(k planKey) (planEntry, bool) {
	if r := &s.recent[0]; r.ok && k == r.key {
		return r.e, true
	}
	if r := s.recent[1]; r.ok && k == r.key {
		s.recent[1] = s.recent[0]
		s.recent[0] = r
		return r.e, true
	}
	e, ok := s.plans[k]
	if ok {
		s.noteRecent(k, e)
	}
	return e, ok
}

// noteRecent puts k's plan in front of the recent ones.
func (s *callState) noteRecent(k planKey, e planEntry) {
	s.recent[1] = s.recent[0]
	s.recent[0] = recentPlan{key: k, e: e, ok: true}
}

// rememberPlan caches the plan compiled for k.
func (s *callState) rememberPlan(k planKey, e planEntry) {
	if len(s.plans) >= maxPlans {
		clear(s.plans)
	}
	s.plans[k] = e
	s.noteRecent(k, e)
}

// sendSelf keeps a copy of a message this rank sends itself.
func (s *callState) sendSelf(tag int, data []byte) {
	s.selfq = append(s.selfq, selfMessage{tag: tag, data: slices.Clone(data)})
}

// oldestSelf returns the oldest message this rank sent itself and has not
// received, if any.
func (s *callState) oldestSelf() (selfMessage, bool) {
	if len(s.selfq) == 0 {
		return selfMessage{}, false
	}
	return s.selfq[0], true
}

// selfWithTag returns the index of the oldest message with tag this rank
// sent itself and has not received, or -1.
func (s *callState) selfWithTag(tag int) int {
	for i := range s.selfq {
		if s.selfq[i].tag == tag {
			return i
		}
	}
	return -1
}

// dropSelf removes the i-th oldest message this rank sent itself (once
// received).
func (s *callState) dropSelf(i int) {
	copy(s.selfq[i:], s.selfq[i+1:])
	s.selfq[len(s.selfq)-1] = selfMessage{}
	s.selfq = s.selfq[:len(s.selfq)-1]
}
