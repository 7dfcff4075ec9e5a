package comm

// Questions between ranks about their state, through the bootstrap store,
// for the stall diagnosis (stall.go): each communicator runs a responder
// goroutine that answers whether the rank is in a collective, which, and
// whom it waits on, whether or not the rank's own goroutines are busy. A
// stopped process does not answer: that is how a stopped rank is told from
// a slow one.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/goccl/goccl/collectives"
)

// rankState is what a rank answers about itself.
type rankState struct {
	seq     uint32 // collectives started
	running bool   // in a call
	failed  bool   // the communicator failed; root is the rank it blamed
	root    int
	stalled bool   // the call below has had no progress for a while
	call    string // e.g. "broadcast(float32, 8, root=1) #5"
	fp      uint16
	p2p     bool
	waiting []int // the ranks the stalled call waits on
	// settled: the last collective after which everything the rank sent
	// is known to have arrived (collectives.Executor.Settled).
	settled uint32
	// unpolled: completions wait in the rank's queue that its executor
	// has not taken yet (transport.Readier), so waiting may be out of
	// date: what it waits for may have arrived. Not while it sets up
	// links (linking): nothing takes completions then.
	unpolled bool
	linking  bool // waiting names the peers of a link set-up (lazy.go)
	// elseCall, when the rank is in no call of this communicator, is a
	// call that another communicator of its family (split from this one,
	// or this one from it) runs in its process, with the communicator's
	// name ("allreduce(float32, 1, sum) #1 of communicator
	// world/split2/color0"); elseWaiting, the world ranks that call waits
	// on, if it is stalled. A rank that waits in another communicator's
	// call is not stopped: the ranks that wait for it here say where it
	// is (ranks that call two communicators' collectives in different
	// orders wait on each other, as in MPI).
	elseCall    string
	elseWaiting []int
}

func (s rankState) encode() []byte {
	w := make([]string, len(s.waiting))
	for i, r := range s.waiting {
		w[i] = strconv.Itoa(r)
	}
	ew := make([]string, len(s.elseWaiting))
	for i, r := range s.elseWaiting {
		ew[i] = strconv.Itoa(r)
	}
	return fmt.Appendf(nil, "%d %t %t %d %t %t %d %d %t %t\n%s\n%s\n%s\n%s", s.seq, s.running, s.stalled, s.fp, s.p2p, s.failed, s.root, s.settled, s.unpolled, s.linking,
		strings.Join(w, ","), line(s.call), line(s.elseCall), strings.Join(ew, ","))
}

// line is s on one line.
func line(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// rankList parses a comma-separated list of ranks ("" is none).
func rankList(s string) ([]int, bool) {
	if s == "" {
		return nil, true
	}
	var out []int
	for _, x := range strings.Split(s, ",") {
		r, err := strconv.Atoi(x)
		if err != nil || r < 0 {
			return nil, false
		}
		out = append(out, r)
	}
	return out, true
}

func decodeState(b []byte) (rankState, bool) {
	var s rankState
	parts := strings.SplitN(string(b), "\n", 5)
	if len(parts) != 5 {
		return s, false
	}
	f := strings.Fields(parts[0])
	if len(f) != 10 {
		return s, false
	}
	seq, err1 := strconv.ParseUint(f[0], 10, 32)
	run, err2 := strconv.ParseBool(f[1])
	stalled, err3 := strconv.ParseBool(f[2])
	fp, err4 := strconv.ParseUint(f[3], 10, 16)
	p2p, err5 := strconv.ParseBool(f[4])
	failed, err6 := strconv.ParseBool(f[5])
	root, err7 := strconv.Atoi(f[6])
	settled, err8 := strconv.ParseUint(f[7], 10, 32)
	unpolled, err9 := strconv.ParseBool(f[8])
	linking, err10 := strconv.ParseBool(f[9])
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8, err9, err10); err != nil {
		return s, false
	}
	s = rankState{seq: uint32(seq), running: run, stalled: stalled, fp: uint16(fp), p2p: p2p, failed: failed, root: root, call: parts[2], settled: uint32(settled), unpolled: unpolled, linking: linking}
	var ok1, ok2 bool
	s.waiting, ok1 = rankList(parts[1])
	s.elseCall = parts[3]
	s.elseWaiting, ok2 = rankList(parts[4])
	if !ok1 || !ok2 {
		return rankState{}, false
	}
	return s, true
}

// snapshot records the state of the stalled run for the ranks that ask.
func (c *Comm) snapshot(call *collectives.Call) rankState {
	st := rankState{seq: c.seq, running: true, stalled: true, call: c.callName(call),
		fp: call.Fingerprint(), p2p: call.P2P, waiting: c.waitingOn(call), settled: c.settled(), linking: len(c.connecting) > 0}
	c.recordSnap(st)
	return st
}

// elsewhere returns a call that another communicator of c's family runs
// in this process, named with its communicator, and the world ranks it
// waits on if it is stalled ("", nil if none runs): see
// rankState.elseCall. A stalled call comes before one that is not (with
// several goroutines, several may run).
func (c *Comm) elsewhere() (call string, waiting []int) {
	for _, o := range c.held.others(c) {
		n := o.callNo.Load()
		if n%2 == 0 || o.tuning.Load() {
			continue
		}
		what := fmt.Sprintf("collective #%d", o.seqNow.Load())
		var on []int
		if snap, ok := o.stalledSnap(n); ok {
			what = snap.call
			for _, r := range snap.waiting {
				if r >= 0 && r < o.size {
					on = append(on, o.worldRank(r))
				}
			}
		} else if p := int(o.boardStalledOn.Load()) - 1; p >= 0 && p < o.size {
			on = []int{o.worldRank(p)} // a board wait
		}
		if call == "" || len(waiting) == 0 && len(on) > 0 {
			slices.Sort(on)
			call, waiting = what+" of communicator "+o.id, slices.Compact(on)
		}
	}
	return call, waiting
}

// settled is this rank's collectives.Executor.Settled, 0 before it has
// an executor.
func (c *Comm) settled() uint32 {
	if c.exec == nil {
		return 0
	}
	return c.exec.Settled()
}

// stateNow is this rank's answer.
func (c *Comm) stateNow() rankState {
	n := c.callNo.Load()
	// The measurement at New (tune.go) numbers its calls as the first user
	// calls of ranks that finished it: not a call to compare with theirs.
	st := rankState{seq: c.seqNow.Load(), running: n%2 == 1 && !c.tuning.Load(), root: -1, settled: c.settled()}
	if root, failed := c.failedRoot(); failed {
		st.failed, st.root = true, root
		return st
	}
	if !st.running {
		st.elseCall, st.elseWaiting = c.elsewhere()
		return st
	}
	if v := c.runFP.Load(); v>>20 == n {
		// The running call's fingerprint, known once its plan is: a rank
		// in the same collective with a different one disagrees with it.
		st.fp, st.p2p = uint16(v), v&(1<<16) != 0
	}
	if snap, ok := c.stalledSnap(n); ok {
		snap.unpolled = !snap.linking && c.unpolled()
		return snap
	}
	return st
}

// unpolled reports whether completions wait in the rank's queue (see
// rankState.unpolled): with many more ranks than processors, its
// executor's thread may not run for seconds after the transport placed
// what it waits for (512 ranks on 2 cores over shared memory: a rank
// behind, stalled in the previous collective and waiting on a rank that
// had delivered everything, was taken for a sequence mismatch).
func (c *Comm) unpolled() bool {
	r := c.readier.Load()
	return r != nil && (*r).Ready()
}

// stale reports, on the goroutine that runs the calls, whether this
// rank's own waiting may be out of date: completions wait that the
// executor has not taken (not during a link set-up, which takes none).
func (c *Comm) stale() bool { return len(c.connecting) == 0 && c.unpolled() }

// callName names a call with its number, e.g. "allreduce(float32, 8, sum)
// #3" or, point to point, "send(float32, 8) tag 5 after collective #3".
func (c *Comm) callName(call *collectives.Call) string {
	if call.P2P {
		return fmt.Sprintf("%s tag %d after collective #%d", call.Desc(), call.Seq, c.seq)
	}
	return fmt.Sprintf("%s #%d", call.Desc(), call.Seq)
}

// The question protocol, per rank r, in the store under diagKey(r, ...):
// the rank's responder sets "next" to k and waits for "q/k"; a rank that
// asks reads k, sets "q/k" and reads "a/k". The responder then moves "next"
// on to k+1 first, and only then takes its state and sets "a/k": every
// asker that read k did so before the state was taken, so no answer is
// older than its question. Concurrent askers share an answer. (Answering
// first and moving on after let a rank whose responder was descheduled in
// between, 128 ranks on 2 cores, hand an answer from its previous call to
// askers in the next: a stall there looked like a sequence mismatch.)

func (c *Comm) diagKey(rank int, what string) string {
	return "goccl/" + c.id + "/diag/" + strconv.Itoa(rank) + "/" + what
}

// respond answers questions about this rank until ctx ends.
func (c *Comm) respond(ctx context.Context, kv keyValue) {
	defer close(c.respDone)
	if kv.Set(ctx, c.diagKey(c.rank, "next"), []byte("1")) != nil {
		return
	}
	for k := 1; ctx.Err() == nil; k++ {
		n := strconv.Itoa(k)
		if _, err := kv.Get(ctx, c.diagKey(c.rank, "q/"+n)); err != nil {
			return
		}
		if kv.Set(ctx, c.diagKey(c.rank, "next"), []byte(strconv.Itoa(k+1))) != nil {
			return
		}
		if kv.Set(ctx, c.diagKey(c.rank, "a/"+n), c.stateNow().encode()) != nil {
			return
		}
	}
}

// query asks the ranks for their state, concurrently, until ctx ends; a
// rank that does not answer in time is missing from the result.
func (c *Comm) query(ctx context.Context, kv keyValue, ranks []int) map[int]rankState {
	var mu sync.Mutex
	out := map[int]rankState{}
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := kv.Get(ctx, c.diagKey(r, "next"))
			if err != nil {
				return
			}
			if kv.Set(ctx, c.diagKey(r, "q/"+string(k)), []byte{1}) != nil {
				return
			}
			v, err := kv.Get(ctx, c.diagKey(r, "a/"+string(k)))
			if err != nil {
				return
			}
			if s, ok := decodeState(v); ok {
				mu.Lock()
				out[r] = s
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}
