package peers

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The probe measures a round trip between two CPUs of this machine: a
// positive time well under a millisecond (57-590 ns on the project's VMs).
func TestHostProbe(t *testing.T) {
	probe, err := HostProbe()
	if err != nil {
		t.Skipf("SKIP: %v", err)
	}
	d, err := probe()
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || d > time.Millisecond {
		t.Errorf("cache-line round trip %v", d)
	}
}

// A CPU the process may not run on is an error naming it, not a hang.
func TestCacheLineTripBadCPU(t *testing.T) {
	a, _, err := probeCPUs()
	if err != nil || runtime.GOMAXPROCS(0) < 2 {
		t.Skipf("SKIP: needs two CPUs and GOMAXPROCS >= 2 (%v)", err)
	}
	_, err = CacheLineTrip(a, 1<<20, 10)
	if err == nil || !strings.Contains(err.Error(), "bind to CPU 1048576") {
		t.Errorf("err %v", err)
	}
	if _, err := CacheLineTrip(0, 1, 0); err == nil {
		t.Error("0 exchanges accepted")
	}
}

// A probe the scheduler starves (here: more exchanges than fit in the
// limit) gives up with an error instead of spinning on.
func TestCacheLineTripLimit(t *testing.T) {
	a, b, err := probeCPUs()
	if err != nil || runtime.GOMAXPROCS(0) < 2 {
		t.Skipf("SKIP: needs two CPUs and GOMAXPROCS >= 2 (%v)", err)
	}
	defer func(d time.Duration) { probeLimit = d }(probeLimit)
	probeLimit = time.Millisecond
	t0 := time.Now()
	_, err = CacheLineTrip(a, b, 1<<40)
	if err == nil || !strings.Contains(err.Error(), "took more than 1ms") {
		t.Errorf("err %v", err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("gave up after %v", took)
	}
}

// A round whose probe samples spread past the limit runs again, whole,
// and only its last try's rows are kept; after Retries more tries the
// round is kept as it is, and its state says so.
func TestCompareSteadyRunsMixedRoundsAgain(t *testing.T) {
	// Two programs: 4 samples per try (before and after each run).
	samples := []time.Duration{
		// round 1: steady
		100, 110, 120, 100,
		// round 2: mixed, then steady
		100, 500, 500, 100, 500, 550, 520, 510,
		// round 3: mixed on every try (Retries 1: two tries)
		100, 600, 100, 100, 600, 100, 100, 100,
	}
	next := 0
	probe := func() (time.Duration, error) {
		d := samples[next]
		next++
		return d, nil
	}
	var order []string
	runNo := map[string]int{}
	prog := func(name string) Program {
		return fake(name, &order, func(int) string {
			runNo[name]++
			return fmt.Sprintf("8 %d\n", runNo[name])
		})
	}
	var log strings.Builder
	runs, _, states, err := CompareSteady(context.Background(), []Program{prog("goccl"), prog("mpi")}, 3, time.Minute, &log,
		Steady{Probe: probe, Spread: 2.5, Retries: 1})
	if err != nil {
		t.Fatal(err)
	}
	if next != len(samples) {
		t.Errorf("%d samples taken, want %d", next, len(samples))
	}
	// goccl ran in round 1 once, round 2 twice, round 3 twice: its kept
	// rows are those of runs 1, 3 and 5.
	if got, want := runs["goccl"], []Rows{{8: 1}, {8: 3}, {8: 5}}; !reflect.DeepEqual(got, want) {
		t.Errorf("goccl's rounds %v, want %v", got, want)
	}
	want := []RoundState{{Min: 100, Max: 120, Tries: 1}, {Min: 500, Max: 550, Tries: 2}, {Min: 100, Max: 600, Tries: 2}}
	if !reflect.DeepEqual(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
	if !states[2].Mixed(2.5) || states[1].Mixed(2.5) {
		t.Errorf("Mixed: %v %v", states[1].Mixed(2.5), states[2].Mixed(2.5))
	}
	if n := strings.Count(log.String(), "the host's state changed during the round"); n != 2 {
		t.Errorf("%d rounds run again in the log, want 2:\n%s", n, log.String())
	}
}

// A probe that fails is reported once and dropped: the comparison goes on
// without states.
func TestCompareSteadyProbeFails(t *testing.T) {
	var order []string
	ok := fake("goccl", &order, func(int) string { return "8 1\n" })
	var log strings.Builder
	calls := 0
	probe := func() (time.Duration, error) { calls++; return 0, fmt.Errorf("no second CPU") }
	runs, _, states, err := CompareSteady(context.Background(), []Program{ok}, 2, time.Minute, &log, Steady{Probe: probe, Retries: 3})
	if err != nil || len(runs["goccl"]) != 2 || states != nil || calls != 1 {
		t.Errorf("runs %v states %v err %v probe calls %d", runs, states, err, calls)
	}
	if !strings.Contains(log.String(), "no second CPU: the host's state is not sampled") {
		t.Errorf("log %q", log.String())
	}
}
