package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/comm"
)

// blameChild is a goccl program whose rank 2 stops taking part after a few
// allreduces: it hangs outside any call (blamehang), or aborts and exits
// with status 1 a moment after the others have failed for it
// (blameabort). The others return 1 on their first error.
func blameChild(mode string, rank int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c, err := comm.Init(ctx, comm.Options{})
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	buf := []float32{1}
	for i := 0; ; i++ {
		if rank == 2 && i == 5 {
			if mode == "blamehang" {
				time.Sleep(time.Minute)
				return 0
			}
			c.Abort(errors.New("rank 2 gives up"))
			time.Sleep(150 * time.Millisecond)
			return 1
		}
		if err := comm.Allreduce(ctx, c, buf, buf, comm.Sum); err != nil {
			fmt.Println("allreduce:", err)
			return 1
		}
	}
}

// The summary names the rank the others failed for, which was not the
// first process to exit: one that hung in no call (gorun stopped it),
// or one that exited a moment after the ranks that failed for it. It
// named the first rank to exit, a healthy one.
func TestSummaryNamesTheRankTheOthersBlame(t *testing.T) {
	for _, tc := range []struct {
		mode, transport string
		code            int
		want            string
	}{
		{"blamehang", "", 1, `rank 2 on \S+ \(pid \d+\): named by ranks? [01](, 1)?: [^;]*rank 2[^;]*; it was still running when gorun stopped the job; first to fail: rank [01] on \S+ \(pid \d+\) exited with status 1(; also failed: rank [01] on \S+)?`},
		{"blamehang", "tcp", 1, `rank 2 on \S+ \(pid \d+\): named by ranks? [01](, 1)?: [^;]*stall[^;]*; it was still running when gorun stopped the job; first to fail: rank [01] on \S+ \(pid \d+\) exited with status 1(; also failed: rank [01] on \S+)?`},
		{"blameabort", "", 1, `rank 2 on \S+ \(pid \d+\) exited with status 1; named by ranks? [0-2](, [12])*: [^;]*abort[^;]*(; also failed: rank [01] on \S+(, [01] on \S+)?)?`},
	} {
		t.Run(tc.mode+"/"+tc.transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			t.Setenv("GOCCL_STALL_TIMEOUT", "1s")
			t.Setenv("GOCCL_TRANSPORT", tc.transport)
			code, stdout, stderr, _ := gorun(t, ctx, tc.mode, "-n", "3")
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if !regexp.MustCompile(`(?m)^gorun: ` + tc.want + `\n\z`).MatchString(stderr) {
				t.Errorf("summary does not name rank 2 as the others' cause; stderr:\n%s\nstdout:\n%s", stderr, stdout)
			}
		})
	}
}

// TestNamedUnderSrun: under srun one process holds every rank, and the
// summary's first rank is srun's report; the rank the others name (a
// stopped one, which srun never reports) is named too. Before, named gave
// nothing under srun and the summary named only the first rank to exit
// (a helper's hunt: rank 3 stopped, every rank named it, gorun's line
// named rank 2).
func TestNamedUnderSrun(t *testing.T) {
	p := &proc{kind: kindSrun, ranks: []int{0, 1, 2, 3}}
	j := &job{procs: []*proc{p}, blames: func() map[int]bootstrap.Blame {
		why := "rank 3 is at the root of a stall: rank 3 does not answer (stopped, hung or unreachable)"
		return map[int]bootstrap.Blame{0: {Root: 3, Reason: why}, 1: {Root: 3, Reason: why}, 2: {Root: 3, Reason: why}}
	}}
	got, words := j.named()
	if got != p || words != "rank 3 named by ranks 0, 1, 2: rank 3 is at the root of a stall: rank 3 does not answer (stopped, hung or unreachable)" {
		t.Errorf("named() = %v, %q", got, words)
	}
}
