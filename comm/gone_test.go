package comm_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
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

// TestMain runs this test binary as a rank of a job when a test started
// it so (GOCCL_TEST_CHILD), else the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("GOCCL_TEST_CHILD") {
	case "gone":
		os.Exit(goneChild())
	case "closestall":
		os.Exit(closeStallChild())
	case "subfail":
		os.Exit(subFailChild())
	case "initstop":
		os.Exit(initStopChild())
	case "stopcont":
		os.Exit(stopContChild())
	case "keptkill":
		os.Exit(keptKillChild())
	case "zombie":
		os.Exit(zombieChild())
	case "initfail":
		start := time.Now()
		c, err := Init(context.Background(), Options{})
		fmt.Printf("after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
		if err == nil {
			c.Close()
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// goneVictim is the rank that dies in TestPeerGoneBeforeConnecting.
const goneVictim = 2

// goneChild is a rank of TestPeerGoneBeforeConnecting: it splits off a
// communicator of every rank; the victim dies (SIGKILL) before the
// sub-communicator's first call, and the others run an allreduce on it,
// whose first call connects the peers.
func goneChild() int {
	ctx := context.Background()
	c, err := Init(ctx, Options{})
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	sub, err := c.Split(ctx, 0, c.Rank())
	if err != nil {
		fmt.Println("split:", err)
		return 1
	}
	if c.Rank() == goneVictim {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	start := time.Now()
	buf := make([]float32, 1<<16)
	err = Allreduce(ctx, sub, buf, buf, Sum)
	fmt.Printf("after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	return 0
}

// TestPeerGoneBeforeConnecting: a rank killed before a communicator's
// first call with some peer (links are made at first use) was found only
// by the peers' stall timeout, 60 s by default, when the launcher does
// not stop the job (gorun does, 250 ms after a death; a job under
// torchrun, mpirun or srun without --kill-on-bad-exit may go on). The
// store now sets a dead rank's will, and the peers that wait for its
// address fail at once naming it.
func TestPeerGoneBeforeConnecting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const n, stall = 4, 30 * time.Second
	outs, cmds := storeChildren(t, "gone", "tcp", n, "GOCCL_STALL_TIMEOUT="+stall.String())
	waitAll(t, cmds, 2*stall+30*time.Second)
	for r := range n {
		if r == goneVictim {
			continue
		}
		line := lastLine(outs[r].String(), "after ")
		if line == "" {
			t.Errorf("rank %d reported nothing:\n%s", r, outs[r])
			continue
		}
		t.Logf("rank %d %s", r, line)
		took, err := time.ParseDuration(strings.TrimSuffix(strings.Fields(line)[1], ":"))
		switch {
		case err != nil:
			t.Errorf("rank %d: no time in %q", r, line)
		case !strings.Contains(line, fmt.Sprintf("rank %d", goneVictim)):
			t.Errorf("rank %d does not name rank %d: %s", r, goneVictim, line)
		case took > 10*time.Second:
			t.Errorf("rank %d failed %v after its call started (stall timeout %v): %s", r, took, stall, line)
		}
	}
}

// TestInitFailureReachesTheOthers: a rank whose Init fails (here on a
// wrong GOCCL_CHUNK_SIZE, before it joined) left the others waiting for
// it until their InitTimeout (5 min by default) under a launcher that
// does not stop the job when a rank exits (srun without
// --kill-on-bad-exit); now it tells them through the store (hosting it
// for them if it is the rank that hosts it), and they fail at once
// naming it and its reason.
func TestInitFailureReachesTheOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	for _, victim := range []int{0, 2} {
		t.Run(fmt.Sprintf("rank%d", victim), func(t *testing.T) {
			const n, initTimeout = 4, 60 * time.Second
			outs := initChildren(t, n, initTimeout, func(r int) []string {
				if r == victim {
					return []string{"GOCCL_CHUNK_SIZE=1"}
				}
				return nil
			})
			for r := range n {
				line := lastLine(outs[r], "after ")
				t.Logf("rank %d %s", r, line)
				took, err := time.ParseDuration(strings.TrimSuffix(strings.Fields(line + " x x")[1], ":"))
				want := fmt.Sprintf("rank %d failed to join", victim)
				if r == victim {
					want = "GOCCL_CHUNK_SIZE"
				}
				switch {
				case line == "":
					t.Errorf("rank %d reported nothing:\n%s", r, outs[r])
				case err != nil:
					t.Errorf("rank %d: no time in %q", r, line)
				case !strings.Contains(line, want) || !strings.Contains(line, "GOCCL_CHUNK_SIZE"):
					t.Errorf("rank %d does not say %q and GOCCL_CHUNK_SIZE: %s", r, want, line)
				case r != victim && victim != 0 && strings.Contains(line, "rank 0 failed to join"):
					// Rank 0 relays the failure it found: the victim is
					// named, not the relay.
					t.Errorf("rank %d names rank 0 as failing to join: %s", r, line)
				case took > 10*time.Second:
					t.Errorf("rank %d failed %v after it started (InitTimeout %v): %s", r, took, initTimeout, line)
				}
			}
		})
	}
}

// TestRankKilledDuringInitWhileAnotherIsMissing: a rank killed during
// Init, after it joined, while another rank has not started (a launcher
// that does not stop the job, or a slow host): the others waited for the
// missing rank until GOCCL_INIT_TIMEOUT and named only it, as the gather
// watched only the ranks it still waited for (a launchers' hunt). Now a
// gather that stalls watches the ranks that joined too, and every rank
// fails within seconds naming the dead rank and the missing one.
func TestRankKilledDuringInitWhileAnotherIsMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const n, started, victim, initTimeout = 4, 3, 2, 60 * time.Second
	outs, cmds, addr := storeChildrenOf(t, "initfail", "tcp", n, started, "GOCCL_INIT_TIMEOUT="+initTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := bootstrap.Dial(ctx, addr, storeChildrenSecret)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The victim's value in Init's first gather: it joined.
	if _, err := cl.Get(ctx, "goccl/ag/1/"+strconv.Itoa(victim)); err != nil {
		t.Fatalf("rank %d did not join: %v", victim, err)
	}
	cmds[victim].Process.Kill()
	killed := time.Now()
	waitAll(t, cmds, initTimeout+30*time.Second)
	for r := range started {
		if r == victim {
			continue
		}
		line := lastLine(outs[r].String(), "after ")
		t.Logf("rank %d %s (%v after the kill)", r, line, time.Since(killed).Round(time.Millisecond))
		switch {
		case line == "":
			t.Errorf("rank %d reported nothing:\n%s", r, outs[r])
		case !strings.Contains(line, fmt.Sprintf("rank %d (pid", victim)) || !strings.Contains(line, "rank 3 has not joined"):
			t.Errorf("rank %d does not name dead rank %d and missing rank 3: %s", r, victim, line)
		}
	}
	if d := time.Since(killed); d > 15*time.Second {
		t.Errorf("the ranks ended %v after the kill (GOCCL_INIT_TIMEOUT %v), want a few seconds", d, initTimeout)
	}
}

// launcherFreeEnv is the environment without any launcher's variables.
func launcherFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GOCCL_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "SLURM_"), strings.HasPrefix(k, "PMIX_"):
		case k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE", k == "MASTER_ADDR", k == "MASTER_PORT":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// storeChildren starts n processes of this test binary as the ranks of
// a job in mode (GOCCL_TEST_CHILD) over transport, each with the
// variables extra adds, meeting at a store of the test's own (as gorun's:
// no rank hosts it, so none waits in Close for a stopped one to leave
// it). They are killed, if still running, when the test ends.
func storeChildren(t *testing.T, mode, transport string, n int, extra ...string) ([]*bytes.Buffer, []*exec.Cmd) {
	t.Helper()
	outs, cmds, _ := storeChildrenOf(t, mode, transport, n, n, extra...)
	return outs, cmds
}

// storeChildrenSecret is the secret of storeChildren's store.
var storeChildrenSecret = []byte("store-children-secret-0123456789ab")

// storeChildrenOf is storeChildren starting only the first started ranks
// of n; it returns the store's address too.
func storeChildrenOf(t *testing.T, mode, transport string, n, started int, extra ...string) ([]*bytes.Buffer, []*exec.Cmd, string) {
	t.Helper()
	secret := storeChildrenSecret
	srv, err := bootstrap.NewServer("127.0.0.1:0", secret, bootstrap.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	outs := make([]*bytes.Buffer, started)
	cmds := make([]*exec.Cmd, started)
	for r := range started {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(launcherFreeEnv(), "GOCCL_TEST_CHILD="+mode, "GOCCL_TRANSPORT="+transport, "GOCCL_RANK="+strconv.Itoa(r), "GOCCL_SIZE="+strconv.Itoa(n),
			"GOCCL_LOCAL_RANK="+strconv.Itoa(r), "GOCCL_LOCAL_SIZE="+strconv.Itoa(n), "GOCCL_BOOTSTRAP="+srv.Addr(),
			"GOCCL_SECRET="+hex.EncodeToString(secret))
		cmd.Env = append(cmd.Env, extra...)
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	return outs, cmds, srv.Addr()
}

// waitAll waits for cmds, killing them after d.
func waitAll(t *testing.T, cmds []*exec.Cmd, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		for _, cmd := range cmds {
			cmd.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		for _, cmd := range cmds {
			cmd.Process.Kill()
		}
		<-done
		t.Fatal("the job did not end")
	}
}

// lastLine is the last line of out that begins with prefix, trimmed.
func lastLine(out, prefix string) string {
	line := ""
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, prefix) {
			line = strings.TrimSpace(l)
		}
	}
	return line
}

// TestWrongSecretNamedAtInitTimeout: a rank started with another secret
// is refused by the store (rank 0 hosts it, under torchrun's variables)
// and fails at once; the others cannot hear from it and wait until
// GOCCL_INIT_TIMEOUT, and their error then says that the store refused a
// connection for a wrong secret (before, only "waiting for rank 2").
func TestWrongSecretNamedAtInitTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	sideBySide(t)
	const n, victim, initTimeout = 3, 2, 2 * time.Second
	outs := initChildren(t, n, initTimeout, func(r int) []string {
		b := byte(1)
		if r == victim {
			b = 2
		}
		return []string{"GOCCL_SECRET=" + strings.Repeat(fmt.Sprintf("%02x", b), 32)}
	})
	for r := range n {
		line := lastLine(outs[r], "after ")
		t.Logf("rank %d %s", r, line)
		want := "refused 1 connection with a wrong secret, the last from 127.0.0.1:"
		if r == victim {
			want = "wrong secret"
		}
		if !strings.Contains(line, want) {
			t.Errorf("rank %d does not say %q:\n%s", r, want, outs[r])
		}
	}
}

// initChildren runs n processes of this test binary that only Init (the
// initfail child) under torchrun's variables, rank 0 hosting the store,
// over TCP with initTimeout, each with the variables extra(rank) adds,
// and returns their outputs.
func initChildren(t *testing.T, n int, initTimeout time.Duration, extra func(r int) []string) []string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	outs := make([]*bytes.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(launcherFreeEnv(), "GOCCL_TEST_CHILD=initfail", "GOCCL_TRANSPORT=tcp", "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GOCCL_INIT_TIMEOUT="+initTimeout.String())
		cmd.Env = append(cmd.Env, extra(r)...)
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	waitAll(t, cmds, initTimeout+30*time.Second)
	text := make([]string, n)
	for r, o := range outs {
		text[r] = o.String()
	}
	return text
}

// keptKillChild is a rank of TestCloseAfterKeptCopiesToAKilledRank: rank
// 0 sends rank 1 three messages of 1 MiB over shared memory, which the
// board keeps copies of (rank 1 takes none), then closes; rank 1 kills
// itself 300 ms in.
func keptKillChild() int {
	ctx := context.Background()
	c, err := Init(ctx, Options{})
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	if c.Rank() == 1 {
		time.Sleep(300 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	buf := make([]float32, 1<<18)
	for i := range 3 {
		if err := Send(ctx, c, buf, 1, i); err != nil {
			fmt.Println("send:", err)
			return 1
		}
	}
	start := time.Now()
	err = c.Close()
	fmt.Printf("after %v: close: %v\n", time.Since(start).Round(time.Millisecond), err)
	return 0
}

// TestCloseAfterKeptCopiesToAKilledRank: the Close of a rank whose large
// Sends over shared memory completed on kept copies waits for the
// receiver to take them, but not for a receiver that was killed (its
// board state stays live): it ends at once. Before, it waited 10 s and
// said the receiver had not taken 3 messages (a helper's hunt).
func TestCloseAfterKeptCopiesToAKilledRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	outs, cmds := storeChildren(t, "keptkill", "shm", 2, "GOCCL_STALL_TIMEOUT=30s")
	waitAll(t, cmds, 60*time.Second)
	line := lastLine(outs[0].String(), "after ")
	if line == "" {
		t.Fatalf("rank 0 reported nothing:\n%s", outs[0])
	}
	t.Log(line)
	took, err := time.ParseDuration(strings.TrimSuffix(strings.Fields(line)[1], ":"))
	if err != nil || took > 5*time.Second || strings.Contains(line, "has not taken") {
		t.Errorf("rank 0's Close: %s; want it to end at once", line)
	}
}

// zombieChild is a rank of TestBoardWaitEndsOnAZombie: rank 1 kills
// itself while rank 0 waits for it over the board, in the call that
// GOCCL_ZOMBIE_CALL names.
func zombieChild() int {
	ctx := context.Background()
	c, err := Init(ctx, Options{})
	if err != nil {
		fmt.Println("init:", err)
		return 1
	}
	if err := c.Barrier(ctx); err != nil {
		fmt.Println("barrier:", err)
		return 1
	}
	if c.Rank() == 1 {
		time.Sleep(100 * time.Millisecond)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	start := time.Now()
	switch os.Getenv("GOCCL_ZOMBIE_CALL") {
	case "recv":
		err = Recv(ctx, c, make([]float32, 4), 1, 0)
	case "send":
		err = Send(ctx, c, make([]float32, 1<<21), 1, 0) // more than kept copies hold: waits for its receiver
	default:
		err = c.Barrier(ctx)
	}
	fmt.Printf("after %v: %v\n", time.Since(start).Round(time.Millisecond), err)
	return 0
}

// TestBoardWaitEndsOnAZombie: a rank that waits over the shared-memory
// board (a Recv, a large Send, a collective) for a rank that was killed
// fails at once naming it, also while the dead rank is a zombie its
// launcher has not reaped (the test reaps rank 0 first, as a shell's wait
// does). The signal 0 by which the board looked for a dead process finds
// a zombie: the waits went on until the stall timeout (10 s here), which
// blamed rank 1 as "stopped, hung, or not in this call"; rank 1 found rank
// 0 dead at once when rank 0 was killed, as its process was reaped.
func TestBoardWaitEndsOnAZombie(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	for _, call := range []string{"recv", "send", "barrier"} {
		t.Run(call, func(t *testing.T) {
			outs, cmds := storeChildren(t, "zombie", "shm", 2, "GOCCL_STALL_TIMEOUT=10s", "GOCCL_ZOMBIE_CALL="+call)
			waitAll(t, cmds, 60*time.Second) // rank 0 first: rank 1 stays a zombie until it ends
			line := lastLine(outs[0].String(), "after ")
			if line == "" {
				t.Fatalf("rank 0 reported nothing:\n%s", outs[0])
			}
			t.Log(line)
			took, err := time.ParseDuration(strings.TrimSuffix(strings.Fields(line)[1], ":"))
			if err != nil || took > 5*time.Second || !strings.Contains(line, "rank 1 failed: its process") {
				t.Errorf("rank 0: %s; want it to name rank 1's process as gone at once", line)
			}
		})
	}
}
