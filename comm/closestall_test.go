package comm_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/goccl/goccl/comm"
)

// closeStallChild is a rank of TestCloseNamesAStoppedReceiver: rank 0
// broadcasts 40 small messages (each done once sent) and closes; rank 1
// stops itself (SIGSTOP) before the last (after a barrier), which rank 0
// sends once it sees rank 1 stopped.
func closeStallChild() int {
	ctx := context.Background()
	c, err := Init(ctx, Options{})
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	pids := make([]int64, 2)
	if err := Allgather(ctx, c, []int64{int64(os.Getpid())}, pids); err != nil {
		fmt.Println("allgather:", err)
		return 1
	}
	buf := make([]float32, 4)
	for i := range 40 {
		if i == 39 {
			// Rank 1's credits for the broadcasts so far leave with its
			// barrier message: stopped with them still held (lazy, or
			// queued for its next poll), it left rank 0 without a slot
			// for the last one under load (the broadcast then stalled,
			// rightly naming rank 1, before Close).
			if err := c.Barrier(ctx); err != nil {
				fmt.Println("barrier:", err)
				return 1
			}
		}
		switch {
		case c.Rank() == 1 && i == 39:
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case c.Rank() == 0 && i == 39:
			// The last one is sent to a stopped rank: it cannot
			// acknowledge it.
			for !stopped(int(pids[1])) {
				time.Sleep(time.Millisecond)
			}
		}
		if err := Broadcast(ctx, c, buf, 0); err != nil {
			fmt.Println("broadcast:", err)
			return 1
		}
	}
	start := time.Now()
	err = c.Close()
	fmt.Printf("after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	return 0
}

// stopped reports whether process pid is stopped (by a signal).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}

// TestCloseNamesAStoppedReceiver: the root of small broadcasts closes
// while a receiver is stopped. Close waited 10 s for the receiver to
// acknowledge them, then the notices' 2 s and the stall timeout again,
// and said "waiting for 8 sends to be acknowledged: context deadline
// exceeded", naming nobody. It now waits the stall timeout and names the
// rank.
func TestCloseNamesAStoppedReceiver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const n, stall = 2, 2 * time.Second
	outs, cmds := storeChildren(t, "closestall", "tcp", n, "GOCCL_STALL_TIMEOUT="+stall.String())
	done := make(chan error, 1)
	go func() { done <- cmds[0].Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("rank 0 did not end; its output:\n%s", outs[0])
	}
	line := lastLine(outs[0].String(), "after ")
	t.Logf("rank 0 %s", line)
	if line == "" {
		t.Fatalf("rank 0 reported no Close:\n%s\nrank 1:\n%s", outs[0], outs[1])
	}
	took, err := time.ParseDuration(strings.TrimSuffix(strings.Fields(line + " x")[1], ":"))
	switch {
	case err != nil:
		t.Fatalf("rank 0 reported no Close:\n%s", outs[0])
	case !strings.Contains(line, "rank 1 did not acknowledge"):
		t.Errorf("Close does not name rank 1: %s", line)
	case took > stall+2*time.Second:
		t.Errorf("Close took %v with a stall timeout of %v", took, stall)
	}
}
