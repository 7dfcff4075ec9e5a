package comm_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/bootstrap"
	. "github.com/goccl/goccl/comm"
)

// closeStallChild is a rank of TestCloseNamesAStoppedReceiver: rank 0
// broadcasts 40 small messages (each done once sent) and closes; rank 1
// stops itself (SIGSTOP) before the last, which rank 0 sends once it sees
// rank 1 stopped.
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
	// The store is the test's (as gorun's): a rank hosting it would wait
	// in Close for the stopped one to leave it.
	secret := []byte("close-stall-test-secret-0123456789")
	srv, err := bootstrap.NewServer("127.0.0.1:0", secret, bootstrap.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	outs := make([]*bytes.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(launcherFreeEnv(), "GOCCL_TEST_CHILD=closestall", "GOCCL_TRANSPORT=tcp", "GOCCL_RANK="+strconv.Itoa(r), "GOCCL_SIZE="+strconv.Itoa(n),
			"GOCCL_LOCAL_RANK="+strconv.Itoa(r), "GOCCL_LOCAL_SIZE="+strconv.Itoa(n), "GOCCL_BOOTSTRAP="+srv.Addr(),
			"GOCCL_SECRET="+hex.EncodeToString(secret), "GOCCL_STALL_TIMEOUT="+stall.String())
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	done := make(chan error, 1)
	go func() { done <- cmds[0].Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("rank 0 did not end; its output:\n%s", outs[0])
	}
	line := lastLine(outs[0].String(), "after ")
	t.Logf("rank 0 %s", line)
	took, err := time.ParseDuration(strings.TrimSuffix(strings.Fields(line + " x")[1], ":"))
	switch {
	case line == "" || err != nil:
		t.Fatalf("rank 0 reported no Close:\n%s", outs[0])
	case !strings.Contains(line, "rank 1 did not acknowledge"):
		t.Errorf("Close does not name rank 1: %s", line)
	case took > stall+2*time.Second:
		t.Errorf("Close took %v with a stall timeout of %v", took, stall)
	}
}
