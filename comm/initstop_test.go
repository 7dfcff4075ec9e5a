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

// initStopChild is a rank of TestInitNamesAStoppedRank: rank 2 stops
// itself (SIGSTOP) 30 ms into its Init, the others report how their Init
// ended.
func initStopChild() int {
	if os.Getenv("GOCCL_RANK") == "2" {
		time.AfterFunc(30*time.Millisecond, func() { syscall.Kill(os.Getpid(), syscall.SIGSTOP) })
	}
	c, err := Init(context.Background(), Options{})
	fmt.Printf("after: %v\n", err)
	if err == nil {
		c.Close()
	}
	return 0
}

// TestInitNamesAStoppedRank: a rank stopped during Init (in the exchange
// of addresses, or in the measurement of the transport that follows) is
// named by the others at the init timeout. They said "waiting for rank 0"
// or "rank 1 failed: ... not every rank joined within 3s", blaming a rank
// that was there.
func TestInitNamesAStoppedRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	for _, transport := range []string{"auto", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			const n, initTimeout = 3, 3 * time.Second
			outs, cmds := storeChildren(t, "initstop", transport, n, "GOCCL_INIT_TIMEOUT="+initTimeout.String())
			waitAll(t, cmds[:2], initTimeout+30*time.Second)
			for r := range 2 {
				line := lastLine(outs[r].String(), "after: ")
				t.Logf("rank %d %s", r, line)
				if !strings.Contains(line, "rank 2 ") {
					t.Errorf("rank %d does not name rank 2: %s", r, line)
				}
			}
		})
	}
}
