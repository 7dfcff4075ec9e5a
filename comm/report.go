package comm

// Failure reports: what a failed rank publishes in the bootstrap store
// (its call, the rank it blamed, the other side of a mismatch), and the
// headline of the error a user sees, composed from this rank's view and
// the reports of a few others.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
)

// report is what a failed rank publishes.
type report struct {
	reason collectives.NoticeReason
	root   int    // the rank at the root of the failure
	peer   int    // mismatch: the rank this one disagreed with; else -1
	seq    uint32 // collectives this rank started
	call   string // its call, e.g. "allreduce(float32, 8, sum) #3"; "" if none
	other  string // mismatch: the peer's call as this rank knows it
	cause  string
}

func (r report) encode() []byte {
	line := func(s string) string { return strings.ReplaceAll(s, "\n", " ") }
	return fmt.Appendf(nil, "%d %d %d %d\n%s\n%s\n%s", r.reason, r.root, r.peer, r.seq,
		line(r.call), line(r.other), r.cause)
}

func decodeReport(b []byte) (report, bool) {
	parts := strings.SplitN(string(b), "\n", 4)
	if len(parts) != 4 {
		return report{}, false
	}
	f := strings.Fields(parts[0])
	if len(f) != 4 {
		return report{}, false
	}
	reason, err1 := strconv.ParseUint(f[0], 10, 8)
	root, err2 := strconv.Atoi(f[1])
	peer, err3 := strconv.Atoi(f[2])
	seq, err4 := strconv.ParseUint(f[3], 10, 32)
	if errors.Join(err1, err2, err3, err4) != nil {
		return report{}, false
	}
	return report{reason: collectives.NoticeReason(reason), root: root, peer: peer, seq: uint32(seq),
		call: parts[1], other: parts[2], cause: parts[3]}, true
}

func (c *Comm) reportKey(rank int) string { return fmt.Sprintf("goccl/%s/report/%d", c.id, rank) }

// readReports reads the reports of ranks, concurrently, waiting at most
// wait for those not yet published.
func (c *Comm) readReports(kv keyValue, ranks []int, wait time.Duration) map[int]report {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var mu sync.Mutex
	out := map[int]report{}
	var wg sync.WaitGroup
	for _, r := range ranks {
		if r < 0 || r == c.rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := kv.Get(ctx, c.reportKey(r)); err == nil {
				if rep, ok := decodeReport(v); ok {
					mu.Lock()
					out[r] = rep
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func (c *Comm) publish(kv keyValue, r report) {
	ctx, cancel := context.WithTimeout(context.Background(), queryWait)
	defer cancel()
	if kv.Set(ctx, c.reportKey(c.rank), r.encode()) == nil {
		// Ranks waiting to set up a link with anyone learn that the
		// communicator is broken (lazy.go).
		kv.Set(ctx, c.failedKey(), []byte(strconv.Itoa(c.rank)))
	}
	// The launcher's summary (gorun) names the rank this one failed for:
	// the process's first failure, in world ranks.
	if r.root >= 0 && r.root < c.size {
		c.familyFailed(ctx, kv, c.worldRank(r.root), r.reason, blameReason(r, r.root == c.rank))
	}
}

// familyFailed records the first failure of the process's communicators
// (holders.familyFailure; world rank root, in a notice's terms reason, in
// words why) and publishes it
// for the launcher (bootstrap.Blame).
func (c *Comm) familyFailed(ctx context.Context, kv keyValue, root int, reason collectives.NoticeReason, why string) {
	h := c.held
	if h == nil || h.blamed.Load() {
		return
	}
	h.mu.Lock()
	first := !h.blamed.Load()
	if first {
		h.famRoot, h.famReason, h.famWhy = root, reason, why
		h.famCalls = make(map[*Comm]uint64, len(h.comms))
		for m := range h.comms {
			h.famCalls[m] = m.callNo.Load()
		}
		h.blamed.Store(true)
	}
	h.mu.Unlock()
	if first {
		kv.Set(ctx, bootstrap.BlameKey(c.worldRank(c.rank)), bootstrap.Blame{Root: root, Reason: why}.Encode())
	}
}

// blameReason says in a few words what the root of r did, for a launcher's
// summary ("rank 3 ...: named by ranks 0-2: stalled ...").
func blameReason(r report, self bool) string {
	switch r.reason {
	case collectives.NoticeLost:
		if self {
			return "lost its connections"
		}
		return "failed or lost its connection (its process is gone or unreachable)"
	case collectives.NoticeMismatch:
		return "called a different collective (or a different number of them) than its peers"
	case collectives.NoticeBadArgs:
		return "refused its arguments to the call"
	case collectives.NoticeStall:
		return "stalled (stopped, hung, or not in the call the others wait in)"
	case collectives.NoticeAborted:
		return "aborted its communicator"
	case collectives.NoticeClosed:
		return "closed the communicator while its peers still needed it"
	}
	cause, _, _ := strings.Cut(r.cause, "\n")
	if len(cause) > 160 {
		// Up to its last clause that fits.
		if i := strings.LastIndex(cause[:160], ": "); i > 0 {
			cause = cause[:i]
		} else {
			cause = cause[:160] + "..."
		}
	}
	switch {
	case cause == "":
		return "failed"
	case self:
		return "failed: " + cause
	}
	return cause // "rank 2 failed: its process is gone (...)"
}

// headline says what failed, naming the rank at the root, with the
// details other ranks' reports give.
func (c *Comm) headline(kv keyValue, f fault) string {
	by := ""
	if f.via >= 0 && f.via != f.root { // not "rank 1 failed (reported by rank 1)"
		by = fmt.Sprintf(" (reported by rank %d)", f.via)
	}
	var reps map[int]report
	read := func(ranks ...int) {
		if kv != nil {
			reps = c.readReports(kv, ranks, reportWait)
		}
	}
	switch f.reason {
	case collectives.NoticeMismatch:
		return c.mismatchHeadline(kv, f)
	case collectives.NoticeLost:
		if b := c.board; b != nil && f.root >= 0 && f.root < b.n && f.root != c.rank && b.stateOf(f.root).Load() == boardMismatched {
			// It broke its links on finding the calls differ (a call
			// this rank runs off the board, say: boardLook).
			return fmt.Sprintf("collective mismatch: rank %d found that the ranks called different collectives (its error names the calls)%s", f.root, by)
		}
		if f.root == c.rank {
			return fmt.Sprintf("rank %d lost its connection to every peer", c.rank)
		}
		if f.via == f.root {
			return fmt.Sprintf("rank %d lost its connection to every peer%s", f.root, by)
		}
		return fmt.Sprintf("rank %d failed or lost its connection%s", f.root, by)
	case collectives.NoticeStall:
		why := f.detail
		if f.via >= 0 {
			read(f.via)
			why = reps[f.via].cause
		}
		if why == "" {
			why = fmt.Sprintf("rank %d makes no progress", f.root)
		}
		return fmt.Sprintf("rank %d is at the root of a stall: %s%s", f.root, why, by)
	case collectives.NoticeBadArgs:
		if f.root == c.rank {
			return fmt.Sprintf("rank %d refused its arguments", c.rank)
		}
		read(f.root)
		if r, ok := reps[f.root]; ok {
			return fmt.Sprintf("rank %d refused its arguments to %s: %s", f.root, r.call, r.cause)
		}
		return fmt.Sprintf("rank %d refused its arguments%s", f.root, by)
	case collectives.NoticeAborted:
		if f.root == c.rank {
			return fmt.Sprintf("rank %d aborted", c.rank)
		}
		// With the cause it gave Abort, which it published before it
		// sent its notice (as the board's reportedCause says it).
		read(f.root)
		if r, ok := reps[f.root]; ok && r.reason == collectives.NoticeAborted && r.cause != "" {
			return fmt.Sprintf("rank %d aborted%s: %s", f.root, by, r.cause)
		}
		return fmt.Sprintf("rank %d aborted%s", f.root, by)
	}
	if f.root == c.rank {
		if f.detail != "" {
			return fmt.Sprintf("rank %d failed: %s", c.rank, f.detail)
		}
		return fmt.Sprintf("rank %d failed", c.rank)
	}
	read(f.root)
	if r, ok := reps[f.root]; ok {
		return fmt.Sprintf("rank %d failed%s: %s", f.root, by, r.cause)
	}
	return fmt.Sprintf("rank %d failed%s", f.root, by)
}

// side is one rank's call in a mismatch.
type side struct {
	rank int
	seq  uint32
	call string
}

// mismatchHeadline names the two calls that differ, the rank whose call
// differs from the others' first. It knows this rank's call, the culprit's
// (f.root) when it found the mismatch itself or from a report, and reads a
// third rank's (the one that reported it, or any other) to tell which of
// the two differs from the rest.
func (c *Comm) mismatchHeadline(kv keyValue, f fault) string {
	b := f.root
	sides := map[int]side{}
	switch {
	case !f.earlier:
		sides[c.rank] = side{rank: c.rank, seq: f.seq, call: f.call}
	case f.prev != "":
		sides[c.rank] = side{rank: c.rank, seq: f.seq - 1, call: f.prev}
	}
	if f.via < 0 && f.other != "" {
		sides[b] = side{rank: b, call: f.other, seq: seqOf(f.other, f.seq)}
	}
	if kv != nil {
		// First the reports of the rank that told this one and of a third
		// rank (they may quote b's call, and say who told them: maybe the
		// odd one); then those, and b's own if still unknown (b may be
		// gone).
		var first []int
		if f.via >= 0 && f.via != c.rank {
			first = append(first, f.via)
		}
		for r := range c.size {
			if r != c.rank && r != b && r != f.via {
				first = append(first, r)
				break
			}
		}
		reps := c.readReports(kv, first, reportWait)
		var more []int
		for _, rep := range reps {
			if rep.root == b && rep.other != "" {
				if _, ok := sides[b]; !ok {
					sides[b] = side{rank: b, call: rep.other, seq: seqOf(rep.other, rep.seq)}
				}
			}
			if p := rep.peer; p >= 0 && p != c.rank && p != b && !slices.Contains(first, p) && !slices.Contains(more, p) {
				more = append(more, p)
			}
		}
		if _, ok := sides[b]; !ok && b != c.rank {
			more = append(more, b)
		}
		for r, rep := range c.readReports(kv, more, reportWait) {
			reps[r] = rep
		}
		addSides(sides, reps)
		// Every call known so far is the same: the ranks read only
		// passed the verdict on (a notice relayed from rank to rank names
		// the rank that detected the mismatch as its root's counterpart,
		// not the rank whose call differs). Read the others' reports, a
		// bounded number, to find the call that differs.
		if distinctCalls(sides) < 2 {
			var rest []int
			for r := 0; r < c.size && len(rest) < maxExtraReports; r++ {
				if r != c.rank && !slices.Contains(first, r) && !slices.Contains(more, r) {
					rest = append(rest, r)
				}
			}
			addSides(sides, c.readReports(kv, rest, reportWait))
		}
	}
	sb, ok := sides[b]
	if !ok {
		if f.via < 0 {
			return "collective mismatch" // the run's error says what differs
		}
		return fmt.Sprintf("collective mismatch with rank %d (reported by rank %d)", b, f.via)
	}
	// Group the known calls: the odd one out is a rank of the smaller
	// group (b's, on a tie), named against a rank of the larger.
	groups := map[string][]side{}
	for _, s := range sides {
		groups[s.call] = append(groups[s.call], s)
	}
	if len(groups) < 2 {
		if f.via < 0 { // not "(reported by rank -1)"
			return fmt.Sprintf("collective mismatch with rank %d", b)
		}
		return fmt.Sprintf("collective mismatch with rank %d (reported by rank %d)", b, f.via)
	}
	calls := make([]string, 0, len(groups))
	for call, g := range groups {
		slices.SortFunc(g, func(x, y side) int { return x.rank - y.rank })
		calls = append(calls, call)
	}
	slices.SortFunc(calls, func(x, y string) int { // larger groups first, b's last on a tie
		if d := len(groups[y]) - len(groups[x]); d != 0 {
			return d
		}
		if x == sb.call {
			return 1
		}
		if y == sb.call {
			return -1
		}
		return strings.Compare(x, y)
	})
	major, minor := groups[calls[0]], groups[calls[len(calls)-1]]
	odd, other := minor[0], major[0]
	what := "collective mismatch"
	if odd.seq != other.seq {
		// Different numbers of collectives, or an earlier rooted call
		// that a rank which only sent completed once sent (Call.Eager),
		// taking another rank for its root.
		what = "sequence mismatch (the ranks called different numbers of collectives, or some completed an earlier rooted call they disagreed on)"
		if strings.HasPrefix(odd.call, "alltoallv(") || strings.HasPrefix(other.call, "alltoallv(") {
			// The usual cause: a rank sent a peer fewer elements than
			// the peer's counts expect, completed the call and went on.
			what = "collective mismatch (the ranks' alltoallv counts disagree: a rank sent a peer fewer elements than the peer expects from it, and went on; or they called different numbers of collectives)"
		}
	}
	if f.earlier {
		what += " in an earlier collective, which this rank completed"
	}
	return fmt.Sprintf("%s: rank %d called %s while rank %d called %s", what, odd.rank, odd.call, other.rank, other.call)
}

// maxExtraReports bounds the reports a mismatch headline reads beyond the
// first few (the failure path of a large job must not read them all).
const maxExtraReports = 32

// addSides adds the calls of reps to sides, for the ranks not known yet.
func addSides(sides map[int]side, reps map[int]report) {
	for r, rep := range reps {
		if _, ok := sides[r]; !ok && rep.call != "" {
			sides[r] = side{rank: r, seq: rep.seq, call: rep.call}
		}
	}
}

// distinctCalls is the number of different calls in sides.
func distinctCalls(sides map[int]side) int {
	calls := map[string]bool{}
	for _, s := range sides {
		calls[s.call] = true
	}
	return len(calls)
}

// seqOf reads the number at the end of a call's name ("... #12"), or def.
func seqOf(call string, def uint32) uint32 {
	i := strings.LastIndex(call, "#")
	if i < 0 {
		return def
	}
	n, err := strconv.ParseUint(strings.Fields(call[i+1:] + " ")[0], 10, 32)
	if err != nil {
		return def
	}
	return uint32(n)
}

// callSummary is what names a collective call in a failure report; the
// worker keeps the current and the previous one (copied, not formatted,
// per call).
type callSummary struct {
	kind  collKind
	dt    DataType
	op    Op
	count int
	root  int
}

// prevName names the collective before the current one, e.g.
// "broadcast(float32, 8, root=0) #4"; "" if there is none.
func (c *Comm) prevName() string {
	p := c.prev
	if p.kind == 0 || c.seq < 2 {
		return ""
	}
	call := collectives.Call{Coll: p.kind.String(), Type: p.dt, Op: p.op, Count: p.count, Root: p.root}
	return fmt.Sprintf("%s #%d", call.Desc(), c.seq-1)
}
