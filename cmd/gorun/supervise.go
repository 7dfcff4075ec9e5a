package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// outputDrain bounds how long gorun waits, after every rank has exited and
// their process groups were killed, for the last output to arrive.
const outputDrain = 2 * time.Second

// failureSettle is how long gorun waits after a rank fails before it
// stops the others, gathering the failures that happen at about the same
// time: when one rank is killed, its peers often fail a moment later, and
// the summary should name the killed one.
const failureSettle = 250 * time.Millisecond

// exitTimeout is gorun's status when --timeout stopped the job.
const exitTimeout = 124

// supervise waits for every proc. The first failure, a signal to gorun,
// ctx's end or the timeout stops the others: the signal (or SIGTERM) at
// once, SIGKILL after the grace period. It returns gorun's exit status.
func (j *job) supervise(ctx context.Context, sig *signals) int {
	var (
		failures []exit             // procs that failed before gorun stopped the job
		clean    = map[*proc]bool{} // procs that exited with status 0 before that
		settle   <-chan time.Time
		gotSig   syscall.Signal
		timedOut []*proc // the procs still running when the timeout hit
		killTime <-chan time.Time
		timeout  <-chan time.Time
		ctxDone  = ctx.Done()
		stopping bool
	)
	if j.cfg.timeout > 0 {
		t := time.NewTimer(j.cfg.timeout)
		defer t.Stop()
		timeout = t.C
	}
	stopAll := func(s syscall.Signal) {
		for _, p := range j.procs {
			if !p.done {
				p.signal(s)
			}
		}
		if s != syscall.SIGKILL && killTime == nil {
			killTime = time.After(j.cfg.grace)
		}
		stopping = true
	}
	for running := len(j.procs); running > 0; {
		select {
		case e := <-j.exits:
			running--
			e.p.done = true
			if failed(e) && !stopping {
				failures = append(failures, e)
				if running > 0 && settle == nil {
					settle = time.After(failureSettle)
				}
			} else if !stopping {
				clean[e.p] = true
			}
		case <-settle:
			settle = nil
			if !stopping {
				stopAll(syscall.SIGTERM)
			}
		case s := <-sig.c:
			if gotSig != 0 {
				stopAll(syscall.SIGKILL)
				continue
			}
			gotSig = s
			stopAll(s)
		case <-ctxDone:
			ctxDone = nil
			if gotSig == 0 {
				gotSig = syscall.SIGTERM
				stopAll(syscall.SIGTERM)
			}
		case <-timeout:
			timeout = nil
			if !stopping {
				for _, p := range j.procs {
					if !p.done {
						timedOut = append(timedOut, p)
					}
				}
				stopAll(syscall.SIGTERM)
			}
		case <-killTime:
			stopAll(syscall.SIGKILL)
		}
	}
	j.finish()

	switch {
	case gotSig != 0:
		j.out.logf("stopped by signal: %v", gotSig)
		return 128 + int(gotSig)
	case timedOut != nil:
		j.out.logf("timed out after %v; ranks still running: %s", j.cfg.timeout, rankList(timedOut))
		return exitTimeout
	case failures != nil:
		first := rootCause(failures)
		j.srunMu.Lock()
		cause, code := first.p.describe(first, j.srunFail)
		j.srunMu.Unlock()
		shown := []*proc{first.p}
		if !killedBySignal(first) && j.blames != nil {
			// The rank the failed ranks name, if not the first to exit:
			// it exited a moment after they did, or was stopped, hung
			// or exited with status 0 and never failed by itself.
			if p, named := j.named(); p != nil && p != first.p {
				if e, ok := failureOf(failures, p); ok {
					cause, code = p.describe(e, nil)
					cause += "; " + named
					shown = []*proc{p}
				} else {
					state := "was still running when gorun stopped the job"
					if clean[p] {
						state = "had exited with status 0"
					}
					cause = fmt.Sprintf("%s (pid %d): %s; it %s; first to fail: %s", p.where(), p.pid, named, state, cause)
					shown = append(shown, p)
				}
			} else if p != nil {
				cause += "; " + named
			}
		}
		var also []*proc
		for _, e := range failures {
			if !slices.Contains(shown, e.p) {
				also = append(also, e.p)
			}
		}
		if len(also) > 0 {
			cause += "; also failed: rank " + rankList(also)
		}
		j.out.logf("%s", cause)
		if code == 0 {
			code = 1
		}
		return code
	}
	return 0
}

// finish kills whatever the ranks left behind (their process groups; a
// remote rank's wrapper does the same when its control channel closes),
// then waits (bounded) for their output to drain.
func (j *job) finish() {
	for _, p := range j.procs {
		if p.kind == kindSSH {
			p.sendControl(syscall.SIGKILL) // closes the channel
		}
		p.signalGroup(syscall.SIGKILL)
	}
	drained := make(chan struct{})
	go func() { j.pumps.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(outputDrain):
		// A process outside the groups holds a pipe open; stop reading.
		for _, p := range j.procs {
			for _, f := range p.pipes {
				f.Close()
			}
		}
		<-drained
	}
	for _, p := range j.procs {
		for _, f := range p.pipes {
			f.Close()
		}
	}
}

// rootCause picks, among failures gathered in the settle window, the one
// most likely to have caused the others: the first rank killed by a signal
// (a crash, the OOM killer, kill -9), else the first to fail.
func rootCause(failures []exit) exit {
	for _, e := range failures {
		if e.p.kind == kindSrun {
			break
		}
		if killedBySignal(e) {
			return e
		}
	}
	return failures[0]
}

// killedBySignal reports whether e is a rank killed by a signal (a remote
// one through its wrapper's 128+N), which rootCause takes as the cause.
func killedBySignal(e exit) bool {
	if e.state == nil || e.p.kind == kindSrun {
		return false
	}
	if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return true
	}
	code := e.state.ExitCode()
	return e.p.kind == kindSSH && code > 128 && code < 128+65
}

// named is the proc of the rank that most of the ranks' published blames
// name as the root of their failure (bootstrap.Blame; ties: the lowest
// rank), with the words for the summary: "named by ranks 0, 1: stalled
// (...)"; under srun, whose one process holds every rank, "rank 3 named
// by ranks 0, 1, 2: ...". nil if no rank published one.
func (j *job) named() (*proc, string) {
	blames := j.blames()
	votes := map[int][]int{}
	for r, b := range blames {
		votes[b.Root] = append(votes[b.Root], r)
	}
	root := -1
	for r, by := range votes {
		if root < 0 || len(by) > len(votes[root]) || len(by) == len(votes[root]) && r < root {
			root = r
		}
	}
	if root < 0 {
		return nil, ""
	}
	by := votes[root]
	slices.Sort(by)
	var p *proc
	for _, q := range j.procs {
		if slices.Contains(q.ranks, root) {
			p = q
		}
	}
	if p == nil {
		return nil, ""
	}
	nums := make([]string, len(by))
	for i, r := range by {
		nums[i] = strconv.Itoa(r)
	}
	who := "rank "
	if len(by) > 1 {
		who = "ranks "
	}
	if p.kind == kindSrun {
		// One srun process holds every rank, so the summary's first
		// rank is srun's report: say which rank the others named (a
		// stopped one, say, that srun never reports). Before, the
		// summary named only the first rank to exit.
		return p, fmt.Sprintf("rank %d named by %s%s: %s", root, who, strings.Join(nums, ", "), blames[by[0]].Reason)
	}
	if len(by) == 1 && by[0] == root {
		return p, "by its own account: " + blames[root].Reason
	}
	return p, "named by " + who + strings.Join(nums, ", ") + ": " + blames[by[0]].Reason
}

// failureOf is p's exit among failures.
func failureOf(failures []exit, p *proc) (exit, bool) {
	for _, e := range failures {
		if e.p == p {
			return e, true
		}
	}
	return exit{}, false
}

func failed(e exit) bool {
	return e.state == nil || !e.state.Success()
}
