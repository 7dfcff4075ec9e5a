package comm_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
)

// subFailChild is a rank of TestParentCloseAfterSubFailure: 4 ranks split
// by parity; rank 2 aborts its sub-communicator and stays alive outside
// any call; rank 0's allreduce on that sub-communicator fails and it
// closes the world (as a program closes everything on an error); ranks 1
// and 3 finish theirs and wait in a world barrier.
func subFailChild() int {
	ctx := context.Background()
	c, err := Init(ctx, Options{})
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	sub, err := c.Split(ctx, c.Rank()%2, c.Rank())
	if err != nil {
		fmt.Println("split:", err)
		return 1
	}
	if c.Rank() == 2 {
		sub.Abort(errors.New("rank 2 gives up on its sub-communicator"))
		time.Sleep(time.Minute)
		return 0
	}
	buf := make([]float32, 1024)
	if err := Allreduce(ctx, sub, buf, buf, Sum); err != nil {
		fmt.Println("sub:", err)
		c.Close()
		return 0
	}
	start := time.Now()
	err = c.Barrier(ctx)
	fmt.Printf("after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	return 0
}

// TestParentCloseAfterSubFailure: a rank whose sub-communicator failed
// (its peer there aborted, or died) closes the parent while other ranks
// wait in a parent call. They blamed it ("rank 0 closed the communicator
// after 2 collectives" over shared memory, a sequence mismatch naming its
// Close over TCP): they now learn the root of the failure from its close.
func TestParentCloseAfterSubFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	for _, transport := range []string{"auto", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			const n, stall = 4, 30 * time.Second
			outs, cmds := storeChildren(t, "subfail", transport, n, "GOCCL_STALL_TIMEOUT="+stall.String())
			waitAll(t, []*exec.Cmd{cmds[0], cmds[1], cmds[3]}, stall+30*time.Second)
			t.Logf("rank 0: %s", strings.TrimSpace(outs[0].String()))
			for _, r := range []int{1, 3} {
				line := lastLine(outs[r].String(), "after ")
				t.Logf("rank %d %s", r, line)
				took, err := time.ParseDuration(strings.TrimSuffix(strings.Fields(line + " x")[1], ":"))
				switch {
				case line == "" || err != nil:
					t.Errorf("rank %d reported no barrier:\n%s", r, outs[r])
				case !strings.Contains(line, "rank 2 aborted") && !strings.Contains(line, "rank 2 failed"):
					t.Errorf("rank %d does not blame rank 2: %s", r, line)
				case took > 10*time.Second:
					t.Errorf("rank %d failed after %v", r, took)
				}
			}
		})
	}
}
