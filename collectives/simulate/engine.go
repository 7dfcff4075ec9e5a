package simulate

import (
	"errors"
	"fmt"
	"slices"

	"github.com/goccl/goccl/collectives"
)

// The engine is a discrete-event simulation of the executor (see
// collectives.Executor) on every simulated rank at once. Per rank it keeps
// what the executor keeps: each chunk's count of unfinished dependencies,
// per peer the next send and the next receive in program order, per link
// the credits (free staging slots at the receiver) and the chunks arrived
// in staging and not yet consumed. A send leaves when its dependencies are
// done and its link has a credit; a receive is consumed when its chunk has
// arrived and its dependencies are done; consuming returns the credit.
//
// Time is spent in three kinds of resources:
//
//   - threads: each rank has an executor thread (consuming chunks: the
//     reduction or copy out of staging; local copies), a sending thread
//     (putting each posted message on the wire: Overhead + bytes x PerByte)
//     and a receiving thread (taking each arrived message off the
//     transport, the same). The executor decides at once what to post; a
//     thread runs one task at a time, in order. With Params.OneThread the
//     three are one thread (the waiting caller drives TCP's transport);
//     a write's message leaves Link.WriteTail before its thread is done
//     with it.
//   - cores: the threads of a CPU pool share its cores; a thread with work
//     waits for a free core, and gives it up after each task (round robin,
//     close to the kernel's fair sharing at the grain of one chunk).
//   - ports: every message passes its sender's output port and its
//     receiver's input port (a host's NIC for LinkNet, the rank's own for
//     LinkLocal), first come first served, at Beta seconds per byte, then
//     Alpha of latency.
//
// A send chunk is done when posted if it is at most Params.Inline bytes
// (the transport copied it), else when the receiver's acknowledgement
// arrives, Alpha after it took the message off the transport.
type engine struct {
	par     *Params
	over    Oversub // the costs at the pools' ranks per core
	now     float64
	heap    []event
	seq     uint64
	events  int
	limit   int
	ranks   []rstate
	links   []link
	threads []thread
	pools   []pool
	ports   []port
	imm     []int32 // threads whose current task costs nothing: done now
	immHead int
	tpr     int32 // threads per rank: threadsPerRank, or 1 (Params.OneThread)
	// enterAt is when each rank enters the call (nil: every rank at 0).
	enterAt []float64
	// ends counts, per rank, the message ends charged a message's
	// Overhead (posts and reads of data, credits written and read alone;
	// with Params.Coalesce, one for the data messages that share a write
	// or a read).
	ends []int32
}

type rstate struct {
	plan     *rankPlan
	left     []int32 // per chunk: dependencies not yet done
	sendHead []int32 // per entry
	recvHead []int32
	done     int
	finish   float64
	wakeAt   float64 // until then the rank is being woken (Oversub.Wake)
}

type link struct {
	from, to           int32 // simulated ranks
	fromEntry, toEntry int32
	class              collectives.LinkClass
	credits            int32
	arrived            int32 // in staging, not consumed
	out, in            int32 // ports
}

type port struct {
	free  float64
	tok   float64 // the bucket's bytes at free (Link.Burst)
	bytes float64
	net   bool
	owner int32 // host (net) or rank (local)
	dir   int8  // 0 out, 1 in
}

type taskKind uint8

const (
	tStart     taskKind = iota // the rank's Pre copies are done: start
	tPost                      // post send chunk to link
	tRead                      // take a message of link off the transport (chunk: the sender's)
	tConsume                   // consume receive chunk of link
	tCopy                      // a Copy chunk
	tCreditOut                 // write a credit of link that cannot ride with data (Params.CreditWrites)
	tCreditIn                  // read a credit of link written alone
	tTail                      // the rest of a write after its message left (Link.WriteTail)
)

type task struct {
	kind  taskKind
	link  int32
	chunk int32
	len   int32
	cost  float64
	// merged: the task shares its write or read with the one before it
	// on the thread (Params.Coalesce): no Overhead, and it runs on that
	// task's core right after it.
	merged bool
	// ride: the message was written with the one before it (a merged
	// post): its read can join that message's even if begun.
	ride bool
	at   float64 // when it was queued
}

// A rank's threads: the executor's, and the transport's sending and
// receiving sides (TCP's writer and reader goroutines and the kernel's
// work for them; an RDMA adapter's queues cost them nothing but the
// overheads). With Params.OneThread the three are one thread.
const threadsPerRank = 3

func (e *engine) execThread(r int32) int32 { return e.tpr * r }
func (e *engine) sendThread(r int32) int32 { return e.tpr*r + min(1, e.tpr-1) }
func (e *engine) recvThread(r int32) int32 { return e.tpr*r + min(2, e.tpr-1) }

type thread struct {
	q    []task
	head int
	busy bool // running a task or waiting for a core
	// running: the task at head has its core, since startedAt.
	running   bool
	startedAt float64
	// tail: the Link.WriteTail taken off the write now running (or the
	// first of the writes merged with it), owed after the last of them.
	tail float64
	pool int32
	rank int32
}

type pool struct {
	free  int
	wait  []int32
	head  int
	cores int
	lo    int32 // its ranks: lo, lo+1, ..., hi-1
	hi    int32
}

type evKind uint8

const (
	evDone        evKind = iota // thread a's current task ends
	evArrive                    // a message of link a arrives: sender's chunk b, c bytes
	evCredit                    // a credit of link a arrives at its sender
	evAck                       // rank a's send chunk b is acknowledged
	evStart                     // rank a enters the call
	evRead                      // rank woken: take up link a's message, sender's chunk b, c bytes
	evCreditAlone               // a credit of link a written alone arrives at its sender
)

type event struct {
	t       float64
	seq     uint64
	kind    evKind
	ride    bool // evArrive, evRead: written with the message before it
	a, b, c int32
}

// scaledPerByte is class c's CPU cost per byte at Oversub.ByteCost f: the
// part a local link costs (the copies into and out of the socket) times
// f, and what a link of c costs beyond that (between hosts, the kernel's
// way through veth pairs, a bridge and shapers) as it is.
func scaledPerByte(p *Params, c collectives.LinkClass, f float64) float64 {
	pb := p.Links[c].PerByte
	if c == collectives.LinkLocal {
		return pb * f
	}
	copies := min(pb, p.Links[collectives.LinkLocal].PerByte)
	return copies*f + (pb - copies)
}

// errBudget is returned when a simulation would exceed its event budget.
var errBudget = errors.New("event budget exceeded")

// newEngine prepares plans (one per simulated rank, in world wd) on
// machine m.
func newEngine(plans []*rankPlan, wd *world, m Machine, par *Params, limit int) (*engine, error) {
	links, err := wd.links(plans)
	if err != nil {
		return nil, err
	}
	n := len(plans)
	tpr := int32(threadsPerRank)
	if par.OneThread {
		tpr = 1
	}
	e := &engine{par: par, limit: limit, links: links, ranks: make([]rstate, n), threads: make([]thread, int(tpr)*n), ends: make([]int32, n), tpr: tpr}
	poolRanks := m.poolRanks()
	if m.Cores == 0 {
		poolRanks = 1
	} else if poolRanks > m.Cores {
		e.over = par.oversub(float64(poolRanks) / float64(m.Cores))
		if f := e.over.ByteCost; f > 1 {
			// The CPU costs per byte, once, for the engine's own copy.
			scaled := *par
			scaled.Copy *= f
			scaled.Gamma *= f
			for c := range scaled.Links {
				scaled.Links[c].PerByte = scaledPerByte(par, collectives.LinkClass(c), f)
			}
			e.par = &scaled
		}
	}
	e.pools = make([]pool, (n+poolRanks-1)/poolRanks)
	for i := range e.pools {
		e.pools[i].lo, e.pools[i].hi = int32(i*poolRanks), int32(min(n, (i+1)*poolRanks))
		e.pools[i].free, e.pools[i].cores = m.Cores, m.Cores
		if m.Cores == 0 {
			e.pools[i].free = int(tpr) // a rank's threads run at once
		}
	}
	for r := range n {
		for k := range int(tpr) {
			e.threads[int(tpr)*r+k] = thread{pool: int32(r / poolRanks), rank: int32(r)}
		}
	}
	// Ports: per rank a local pair, per host a NIC pair.
	hosts := (n + wd.rph - 1) / wd.rph
	e.ports = make([]port, 2*n+2*hosts)
	for r := range n {
		e.ports[2*r] = port{owner: int32(r), dir: 0}
		e.ports[2*r+1] = port{owner: int32(r), dir: 1}
	}
	for h := range hosts {
		e.ports[2*n+2*h] = port{net: true, owner: int32(h), dir: 0}
		e.ports[2*n+2*h+1] = port{net: true, owner: int32(h), dir: 1}
	}
	for i := range e.ports {
		c := collectives.LinkLocal
		if e.ports[i].net {
			c = collectives.LinkNet
		}
		e.ports[i].tok = par.Links[c].Burst // full
	}
	for i := range e.links {
		l := &e.links[i]
		l.credits = int32(par.Slots)
		if l.class == collectives.LinkNet {
			l.out, l.in = int32(2*n+2*(int(l.from)/wd.rph)), int32(2*n+2*(int(l.to)/wd.rph)+1)
		} else {
			l.out, l.in = 2*l.from, 2*l.to+1
		}
	}
	for r, rp := range plans {
		st := &e.ranks[r]
		st.plan = rp
		st.left = make([]int32, len(rp.chunks))
		for i := range rp.chunks {
			st.left[i] = rp.chunks[i].nDeps
		}
		st.sendHead = make([]int32, len(rp.entries))
		st.recvHead = make([]int32, len(rp.entries))
	}
	return e, nil
}

// enter starts rank r's call: its Pre copies and the call's own CPU work
// first, if any.
func (e *engine) enter(r int32) {
	st := &e.ranks[r]
	if cost := float64(st.plan.pre)*e.par.Copy + e.par.CallOverhead; cost > 0 {
		e.addTask(e.execThread(r), task{kind: tStart, cost: cost})
	} else {
		e.start(r)
	}
}

// run simulates until every rank is done.
func (e *engine) run() error {
	for r := range e.ranks {
		if e.enterAt != nil && e.enterAt[r] > 0 {
			e.push(event{t: e.enterAt[r], kind: evStart, a: int32(r)})
			continue
		}
		e.enter(int32(r))
	}
	for {
		for e.immHead < len(e.imm) {
			th := e.imm[e.immHead]
			e.immHead++
			e.taskDone(th)
		}
		e.imm, e.immHead = e.imm[:0], 0
		if len(e.heap) == 0 {
			break
		}
		ev := e.pop()
		e.now = ev.t
		e.events++
		if e.events > e.limit {
			return errBudget
		}
		switch ev.kind {
		case evDone:
			e.taskDone(ev.a)
		case evArrive:
			l := &e.links[ev.a]
			if at := e.wake(l.to); at > e.now {
				ev.kind, ev.t = evRead, at
				e.push(ev)
				break
			}
			fallthrough
		case evRead:
			l := &e.links[ev.a]
			cost := e.par.Links[l.class].Overhead + float64(ev.c)*e.par.Links[l.class].PerByte
			e.addTask(e.recvThread(l.to), task{kind: tRead, link: ev.a, chunk: ev.b, len: ev.c, cost: cost, ride: ev.ride})
		case evCredit:
			l := &e.links[ev.a]
			l.credits++
			e.tryPost(l.from, l.fromEntry)
		case evCreditAlone:
			l := &e.links[ev.a]
			e.addTask(e.recvThread(l.from), task{kind: tCreditIn, link: ev.a, cost: e.par.Links[l.class].Overhead})
		case evAck:
			e.finish(ev.a, ev.b)
		case evStart:
			e.enter(ev.a)
		}
	}
	for r := range e.ranks {
		st := &e.ranks[r]
		if st.done < len(st.plan.chunks) {
			return fmt.Errorf("simulate: deadlock: rank %d finished %d of %d chunks (%s)", r, st.done, len(st.plan.chunks), e.pending(r))
		}
	}
	return nil
}

// pending says what rank r waits for, for a deadlock error.
func (e *engine) pending(r int) string {
	st := &e.ranks[r]
	for k, en := range st.plan.entries {
		if int(st.sendHead[k]) < len(en.sends) || int(st.recvHead[k]) < len(en.recvs) {
			return fmt.Sprintf("peer %d: sent %d/%d, received %d/%d", en.peer, st.sendHead[k], len(en.sends), st.recvHead[k], len(en.recvs))
		}
	}
	return "local copies"
}

func (e *engine) start(r int32) {
	st := &e.ranks[r]
	rp := st.plan
	if len(rp.chunks) == 0 {
		st.finish = e.now
		return
	}
	for k, en := range rp.entries {
		if len(en.sends) > 0 {
			e.tryPost(r, int32(k))
		}
		if len(en.recvs) > 0 {
			e.tryConsume(r, int32(k))
		}
	}
	for _, c := range rp.copies {
		if rp.chunks[c].nDeps == 0 {
			e.addTask(e.execThread(r), task{kind: tCopy, chunk: c, cost: float64(rp.chunks[c].len) * e.par.Copy})
		}
	}
}

// tryPost queues the posts of rank r's ready sends to entry k, in order,
// while the link has credits.
func (e *engine) tryPost(r, k int32) {
	st := &e.ranks[r]
	en := &st.plan.entries[k]
	l := &e.links[en.sendLink]
	lc := &e.par.Links[l.class]
	for int(st.sendHead[k]) < len(en.sends) && l.credits > 0 {
		c := en.sends[st.sendHead[k]]
		if st.left[c] > 0 {
			return
		}
		l.credits--
		st.sendHead[k]++
		n := st.plan.chunks[c].len
		e.addTask(e.sendThread(r), task{kind: tPost, link: en.sendLink, chunk: c, len: n, cost: lc.Overhead + float64(n)*lc.PerByte})
	}
}

// tryConsume queues the consumption of rank r's arrived receives from
// entry k, in order, while their dependencies are done.
func (e *engine) tryConsume(r, k int32) {
	st := &e.ranks[r]
	en := &st.plan.entries[k]
	l := &e.links[en.recvLk]
	for int(st.recvHead[k]) < len(en.recvs) && l.arrived > 0 {
		c := en.recvs[st.recvHead[k]]
		if st.left[c] > 0 {
			return
		}
		l.arrived--
		st.recvHead[k]++
		ch := &st.plan.chunks[c]
		per := e.par.Copy
		if ch.kind == collectives.RecvReduce {
			per = e.par.Gamma
		}
		e.addTask(e.execThread(r), task{kind: tConsume, link: en.recvLk, chunk: c, len: ch.len, cost: float64(ch.len) * per})
	}
}

// finish marks rank r's chunk c done and releases what waits for it.
func (e *engine) finish(r, c int32) {
	st := &e.ranks[r]
	rp := st.plan
	st.done++
	ch := &rp.chunks[c]
	for _, o := range rp.outs[ch.outStart : ch.outStart+ch.nOut] {
		st.left[o]--
		if st.left[o] > 0 {
			continue
		}
		oc := &rp.chunks[o]
		switch oc.kind {
		case collectives.Copy:
			e.addTask(e.execThread(r), task{kind: tCopy, chunk: o, cost: float64(oc.len) * e.par.Copy})
		case collectives.Send:
			e.tryPost(r, oc.entry)
		default:
			e.tryConsume(r, oc.entry)
		}
	}
	if st.done == len(rp.chunks) {
		st.finish = e.now
	}
}

// wake returns when rank r, which a message reaches now, takes it up:
// now, unless its cores are crowded (Oversub.Wake), the rank has nothing
// to do (or is still being woken for an earlier message) and a core of
// its pool has no work either. Then it waits Wake for every other rank of
// its pool that has nothing to do, per core: those poll the idle cores in
// turn. Where every core has work the rank queues for one like any task.
func (e *engine) wake(r int32) float64 {
	st := &e.ranks[r]
	if st.wakeAt > e.now {
		return st.wakeAt
	}
	w := e.over.Wake
	if w <= 0 || e.busy(r) {
		return e.now
	}
	p := &e.pools[e.threads[e.execThread(r)].pool]
	if p.free == 0 {
		return e.now
	}
	idle := 0
	for q := p.lo; q < p.hi; q++ {
		if q != r && !e.busy(q) && e.ranks[q].wakeAt <= e.now && e.ranks[q].done < len(e.ranks[q].plan.chunks) {
			idle++
		}
	}
	st.wakeAt = e.now + w*float64(idle)/float64(max(p.cores, 1))
	return st.wakeAt
}

// busy reports whether any of rank r's threads has work.
func (e *engine) busy(r int32) bool {
	for k := range e.tpr {
		if e.threads[e.tpr*r+k].busy {
			return true
		}
	}
	return false
}

// isMessage reports whether a task of kind k puts a message on the
// transport or takes one off.
func isMessage(k taskKind) bool {
	return k == tPost || k == tRead || k == tCreditOut || k == tCreditIn
}

// peer is the rank at the other end of task t of rank r.
func (e *engine) peer(r int32, t *task) int32 {
	if l := &e.links[t.link]; l.from != r {
		return l.from
	}
	return e.links[t.link].to
}

// joins reports whether data task t (a post or a read), about to be
// queued on thread x, shares the write or read of the task queued last on
// x (Params.Coalesce). The transport writes the frames a rank posts to a
// peer between two polls in one writev: a post joins a post to the same
// peer queued at this instant (in the same step; a post that waits for a
// core while the rank goes on is not waiting for a poll: the executor
// writes before it consumes more). One read takes the frames that came in
// together: a read joins a read from the same peer that has not begun, or
// began at this instant, or, for a message written with the one before it
// (ride), is still going on. Credits neither join nor are joined (see
// Params.Coalesce).
func (e *engine) joins(x *thread, t *task) bool {
	if !e.par.Coalesce || !x.busy || x.head >= len(x.q) || (t.kind != tPost && t.kind != tRead) {
		return false
	}
	last := len(x.q) - 1
	u := &x.q[last]
	if u.kind != t.kind || e.peer(x.rank, u) != e.peer(x.rank, t) {
		return false
	}
	if t.kind == tPost {
		return u.at == e.now
	}
	return last > x.head || !x.running || x.startedAt == e.now || t.ride
}

// addTask queues t on thread th.
func (e *engine) addTask(th int32, t task) {
	x := &e.threads[th]
	t.at = e.now
	if isMessage(t.kind) {
		if e.joins(x, &t) {
			t.merged = true
			t.cost = max(0, t.cost-e.par.Links[e.links[t.link].class].Overhead)
		} else {
			e.ends[x.rank]++
		}
	}
	if !x.busy && isMessage(t.kind) {
		// A message's end that finds its side of the transport idle
		// wakes it: with ranks sharing cores, a process switch
		// (Oversub.Switch). Posts and arrivals that queue behind one in
		// progress ride on that wake-up: 4 ranks' pairwise all-to-all
		// posts its 3 messages at once and took about as long as
		// recursive doubling's 2 rounds of one.
		t.cost += e.over.Switch
	}
	x.q = append(x.q, t)
	if !x.busy {
		x.busy = true
		p := &e.pools[x.pool]
		p.wait = append(p.wait, th)
		e.dispatch(x.pool)
	}
}

// dispatch starts waiting threads of pool pi on its free cores.
func (e *engine) dispatch(pi int32) {
	p := &e.pools[pi]
	for p.free > 0 && p.head < len(p.wait) {
		th := p.wait[p.head]
		p.head++
		if p.head == len(p.wait) {
			p.wait, p.head = p.wait[:0], 0
		}
		p.free--
		x := &e.threads[th]
		x.running, x.startedAt = true, e.now
		if cost := e.startCost(x) + e.over.Gap; cost > 0 {
			e.push(event{t: e.now + cost, kind: evDone, a: th})
		} else {
			e.imm = append(e.imm, th)
		}
	}
}

// taskDone ends thread th's current task: the core goes back to the pool,
// the task takes effect, and the thread queues again if it has more.
func (e *engine) taskDone(th int32) {
	x := &e.threads[th]
	t := x.q[x.head]
	x.head++
	if x.head == len(x.q) {
		x.q, x.head = x.q[:0], 0
	}
	// A task merged with this one (Params.Coalesce) is the same system
	// call: it runs next on this core.
	keep := x.head < len(x.q) && x.q[x.head].merged
	if !keep && x.tail > 0 && (t.kind == tPost || t.kind == tCreditOut) {
		// The write's message has left; its system call goes on.
		x.q = slices.Insert(x.q, x.head, task{kind: tTail, cost: x.tail, merged: true, at: e.now})
		x.tail = 0
		keep = true
	}
	if !keep {
		x.running = false
		e.pools[x.pool].free++
	}
	e.apply(x.rank, t)
	x = &e.threads[th]
	if keep {
		x.startedAt = e.now
		if cost := e.startCost(x); cost > 0 {
			e.push(event{t: e.now + cost, kind: evDone, a: th})
		} else {
			e.imm = append(e.imm, th)
		}
		return
	}
	p := &e.pools[x.pool]
	if x.head < len(x.q) {
		p.wait = append(p.wait, th)
	} else {
		x.busy = false
	}
	e.dispatch(x.pool)
}

// startCost is the time the task at thread x's head runs before it takes
// effect: its cost, less the Link.WriteTail of a write that is not merged
// with the one before it, which x then owes after the last write merged
// with this one.
func (e *engine) startCost(x *thread) float64 {
	t := &x.q[x.head]
	if (t.kind != tPost && t.kind != tCreditOut) || t.merged {
		return t.cost
	}
	x.tail = min(t.cost, e.par.Links[e.links[t.link].class].WriteTail)
	return t.cost - x.tail
}

func (e *engine) apply(r int32, t task) {
	switch t.kind {
	case tStart:
		e.start(r)
	case tPost:
		l := &e.links[t.link]
		lc := &e.par.Links[l.class]
		arrive := e.transmit(l, float64(t.len), lc)
		e.push(event{t: arrive, kind: evArrive, a: t.link, b: t.chunk, c: t.len, ride: t.merged})
		if int(t.len) <= e.par.Inline {
			e.finish(r, t.chunk)
		}
	case tRead:
		l := &e.links[t.link]
		l.arrived++
		if int(t.len) > e.par.Inline {
			e.push(event{t: e.after(e.now, l.class), kind: evAck, a: l.from, b: t.chunk})
		}
		e.tryConsume(l.to, l.toEntry)
	case tConsume:
		l := &e.links[t.link]
		e.finish(r, t.chunk)
		if e.par.CreditWrites && !e.creditRides(r, l, t) {
			e.addTask(e.sendThread(r), task{kind: tCreditOut, link: t.link, cost: e.par.Links[l.class].Overhead})
			break
		}
		e.push(event{t: e.after(e.now, l.class), kind: evCredit, a: t.link})
	case tCopy:
		e.finish(r, t.chunk)
	case tCreditOut:
		l := &e.links[t.link]
		e.push(event{t: e.after(e.now, l.class), kind: evCreditAlone, a: t.link})
	case tCreditIn:
		l := &e.links[t.link]
		l.credits++
		e.tryPost(l.from, l.fromEntry)
	}
}

// creditRides reports whether the credit of receive chunk t.chunk of link l,
// just consumed by rank r, waits for r's next data to the peer instead of
// being written alone (collectives' lazyCredit): r sends to that peer in
// the call, the chunk is the last r expects from it, and it is small.
func creditRides(rp *rankPlan, entry int32, chunk int32, n int32, inline int) bool {
	en := &rp.entries[entry]
	return len(en.sends) > 0 && len(en.recvs) > 0 && en.recvs[len(en.recvs)-1] == chunk && int(n) <= inline
}

func (e *engine) creditRides(r int32, l *link, t task) bool {
	return creditRides(e.ranks[r].plan, l.toEntry, t.chunk, t.len, e.par.Inline)
}

// transmit passes n bytes through l's ports from now and returns when they
// arrive.
func (e *engine) transmit(l *link, n float64, lc *Link) float64 {
	out, in := &e.ports[l.out], &e.ports[l.in]
	s1 := max(e.now, out.free)
	out.free = s1 + out.pass(s1, n, lc)
	s2 := max(s1, in.free)
	in.free = s2 + in.pass(s2, n, lc)
	out.bytes += n
	in.bytes += n
	return e.after(max(out.free, in.free), l.class)
}

// after is when a message that leaves at t on a link of class c arrives,
// besides its bytes: the link's Alpha and what crowded cores add to it
// (Oversub.Latency, and between hosts Oversub.NetLatency), added in that
// order (a sum grouped otherwise rounds differently, and the order of
// events at equal times with it).
func (e *engine) after(t float64, c collectives.LinkClass) float64 {
	t = t + e.par.Links[c].Alpha + e.over.Latency
	if c == collectives.LinkNet {
		t += e.over.NetLatency
	}
	return t
}

// pass is how long the port, free from t, takes to pass n bytes: n·β, or
// with a token bucket (Link.Burst) what the bucket lacks of n, at β: the
// bucket, refilled at 1/β bytes a second since the port's last message,
// lets its bytes through at once.
func (p *port) pass(t, n float64, lc *Link) float64 {
	if lc.Burst <= 0 || lc.Beta <= 0 {
		return n * lc.Beta
	}
	tok := min(lc.Burst, p.tok+(t-p.free)/lc.Beta)
	if n <= tok {
		p.tok = tok - n
		return 0
	}
	p.tok = 0
	return (n - tok) * lc.Beta
}

// push and pop keep the event heap, ordered by time then insertion.
func (e *engine) push(ev event) {
	e.seq++
	ev.seq = e.seq
	h := append(e.heap, ev)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !less(&h[i], &h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	e.heap = h
}

func (e *engine) pop() event {
	h := e.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && less(&h[r], &h[l]) {
			m = r
		}
		if !less(&h[m], &h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	e.heap = h
	return top
}

func less(a, b *event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}
