package peers

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fake is a program that prints canned rows and records when it ran.
func fake(name string, order *[]string, out func(round int) string) Program {
	round := 0
	return Program{Name: name, Label: name, Run: func(ctx context.Context) ([]byte, error) {
		*order = append(*order, name)
		round++
		return []byte(out(round)), nil
	}}
}

// Each round runs every program once, starting one later each round, and
// each program's rows are kept per round.
func TestCompareAlternates(t *testing.T) {
	var order []string
	progs := []Program{
		fake("goccl", &order, func(r int) string { return fmt.Sprintf("[0] # Transport: tcp\n[0] 8 %d\n", r) }),
		fake("a", &order, func(r int) string { return fmt.Sprintf("8 %d\n", 10*r) }),
		fake("b", &order, func(r int) string { return fmt.Sprintf("8 %d\n", 100*r) }),
	}
	runs, transport, err := Compare(context.Background(), progs, 4, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"goccl", "a", "b", "a", "b", "goccl", "b", "goccl", "a", "goccl", "a", "b"}
	if !reflect.DeepEqual(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if transport != "tcp" {
		t.Errorf("transport %q", transport)
	}
	if got := runs["b"]; !reflect.DeepEqual(got, []Rows{{8: 100}, {8: 200}, {8: 300}, {8: 400}}) {
		t.Errorf("b's rounds %v", got)
	}
}

// A failing program, one that prints no row and one that outlives the
// timeout each stop the comparison with an error naming it and the round.
func TestCompareFailures(t *testing.T) {
	var order []string
	ok := fake("goccl", &order, func(int) string { return "8 1\n" })
	for _, c := range []struct {
		bad  Program
		want string
	}{
		{Program{Name: "mpi-tcp", Run: func(context.Context) ([]byte, error) { return nil, errors.New("mpirun: exit status 1") }},
			"mpi-tcp, round 1 of 2: mpirun: exit status 1"},
		{Program{Name: "gloo-tcp", Run: func(context.Context) ([]byte, error) { return []byte("# only a header\n"), nil }},
			"gloo-tcp, round 1 of 2: no rows \"bytes us\" in its output:\n# only a header"},
		{Program{Name: "slow", Run: func(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() }},
			"slow, round 1 of 2: no result after 50ms (raise -timeout?)"},
	} {
		_, _, err := Compare(context.Background(), []Program{ok, c.bad}, 2, 50*time.Millisecond, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err %v, want %q", err, c.want)
		}
	}
}

func needShell(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
}

func sh(script string, env ...string) proc { return proc{argv: []string{"sh", "-c", script}, env: env} }

func TestRunProcsOutputOfFirst(t *testing.T) {
	needShell(t)
	out, err := runProcs(context.Background(), []proc{sh(`echo "8 $X"`, "X=1.5"), sh(`echo ignored; echo noise >&2`)})
	if err != nil || string(out) != "8 1.5\n" {
		t.Fatalf("out %q, err %v", out, err)
	}
}

// When one process fails the others are killed at once (a Gloo rank would
// wait for its dead peer), and the error names the one that failed, with
// its last words.
func TestRunProcsFailureStopsTheOthers(t *testing.T) {
	needShell(t)
	t0 := time.Now()
	_, err := runProcs(context.Background(), []proc{sh(`sleep 30`), sh(`echo "gloo: connect: refused" >&2; exit 3`), sh(`sleep 30`)})
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("took %v: the other processes were not stopped", took)
	}
	if err == nil || !strings.Contains(err.Error(), "rank 1 (sh): exit status 3:\n    gloo: connect: refused") {
		t.Errorf("err %v", err)
	}
}

// A process that fails while the next is being started is the cause, not
// the start that its failure canceled (CI, 3 December: "start sh: context
// canceled" under -race on a busy machine). The hook holds the third
// start until the second process has failed.
func TestRunProcsFailureBeforeTheNextStart(t *testing.T) {
	needShell(t)
	beforeStart = func(ctx context.Context, i int) {
		if i == 2 {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Error("the failure of rank 1 did not stop the run")
			}
		}
	}
	defer func() { beforeStart = nil }()
	_, err := runProcs(context.Background(), []proc{sh(`sleep 30`), sh(`echo "gloo: connect: refused" >&2; exit 3`), sh(`sleep 30`)})
	if err == nil || !strings.Contains(err.Error(), "rank 1 (sh): exit status 3:\n    gloo: connect: refused") {
		t.Errorf("err %v", err)
	}
}

// A deadline kills the whole process group, grandchildren included (mpirun's
// ranks, gorun's ranks).
func TestRunProcsDeadlineKillsGroup(t *testing.T) {
	needShell(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := runProcs(ctx, []proc{sh(`sleep 30 & sleep 30; wait`)})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want the deadline", err)
	}
	if took := time.Since(t0); took > 3*time.Second { // WaitDelay (5 s) would end it otherwise
		t.Errorf("took %v: the group's background child kept the pipe open", took)
	}
}

func TestRunProcsMissingProgram(t *testing.T) {
	_, err := runProcs(context.Background(), []proc{{argv: []string{"/nonexistent/mpirun"}}})
	if err == nil || !strings.Contains(err.Error(), "start /nonexistent/mpirun") {
		t.Errorf("err %v", err)
	}
}
