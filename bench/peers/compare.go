package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Compare runs every program once per round, alternating: round r starts
// with program r mod len(programs) and goes on in order, so each program
// runs first in some round and none always follows the same one. It
// returns each program's rows per round, by name, and the transport goccl's
// output named (see ParseRows). A run that fails, exceeds timeout (when
// positive) or prints no row stops the comparison with an error naming the
// program and round. log, when not nil, gets a line per run.
func Compare(ctx context.Context, programs []Program, rounds int, timeout time.Duration, log io.Writer) (runs map[string][]Rows, transport string, err error) {
	runs, transport, _, err = CompareSteady(ctx, programs, rounds, timeout, log, Steady{})
	return runs, transport, err
}

// Steady asks CompareSteady to keep the host's state alike within a round.
type Steady struct {
	// Probe samples the host's state (HostProbe: a cache-line round
	// trip); nil: no sampling.
	Probe func() (time.Duration, error)
	// A round whose samples (before and after each of its runs) spread
	// more than Spread times (largest over smallest; below 1:
	// SteadySpread) is run again, at most Retries times; the last try is
	// kept either way.
	Spread  float64
	Retries int
}

// SteadySpread is the spread past which a round is run again: it tells the
// host's slow state (500-590 ns) from the others (57-80 and 130-170 ns,
// see probe.go), which are closer to each other.
const SteadySpread = 2.5

// A RoundState is what the probe saw during the round that was kept:
// the smallest and largest sample, and how many times the round ran.
type RoundState struct {
	Min, Max time.Duration
	Tries    int
}

// Mixed says whether the round's samples spread past spread.
func (s RoundState) Mixed(spread float64) bool {
	return s.Min > 0 && float64(s.Max) > spread*float64(s.Min)
}

// CompareSteady is Compare with the host's state sampled before and after
// every run (s.Probe), and each round run again while its samples spread
// past s.Spread, up to s.Retries times: the programs of a round are then
// compared in the same state of the host. It returns what it saw per round
// kept (nil without a probe). A probe that fails is reported on log and
// not used again.
func CompareSteady(ctx context.Context, programs []Program, rounds int, timeout time.Duration, log io.Writer, s Steady) (runs map[string][]Rows, transport string, states []RoundState, err error) {
	runs = map[string][]Rows{}
	probe, spread := s.Probe, s.Spread
	if spread < 1 {
		spread = SteadySpread
	}
	sample := func(st *RoundState) {
		if probe == nil {
			return
		}
		d, err := probe()
		if err != nil {
			if log != nil {
				fmt.Fprintf(log, "peers: %v: the host's state is not sampled\n", err)
			}
			probe, states = nil, nil
			return
		}
		if st.Min == 0 || d < st.Min {
			st.Min = d
		}
		st.Max = max(st.Max, d)
	}
	for r := range rounds {
		var st RoundState
		var kept map[string]Rows
		for {
			st.Tries++
			st.Min, st.Max = 0, 0
			kept = map[string]Rows{}
			for k := range programs {
				p := programs[(r+k)%len(programs)]
				sample(&st)
				t0 := time.Now()
				rctx, cancel := ctx, context.CancelFunc(func() {})
				if timeout > 0 {
					rctx, cancel = context.WithTimeout(ctx, timeout)
				}
				out, err := p.Run(rctx)
				cancel()
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					err = fmt.Errorf("no result after %v (raise -timeout?)", timeout)
				}
				if err != nil {
					return nil, "", nil, fmt.Errorf("%s, round %d of %d: %w", p.Name, r+1, rounds, err)
				}
				rows, tr := ParseRows(out)
				if len(rows) == 0 {
					return nil, "", nil, fmt.Errorf("%s, round %d of %d: no rows \"bytes us\" in its output:\n%s", p.Name, r+1, rounds, lastBytes(out, 2000))
				}
				if p.Name == programs[0].Name && transport == "" {
					transport = tr
				}
				kept[p.Name] = rows
				sample(&st)
				if log != nil {
					fmt.Fprintf(log, "peers: round %d/%d: %s: %d sizes in %.1fs%s\n", r+1, rounds, p.Name, len(rows), time.Since(t0).Seconds(), stateNote(probe, st))
				}
			}
			if probe == nil || !st.Mixed(spread) || st.Tries > s.Retries {
				break
			}
			if log != nil {
				fmt.Fprintf(log, "peers: round %d/%d: the host's state changed during the round (cache-line round trip %v to %v): running it again\n", r+1, rounds, st.Min, st.Max)
			}
		}
		for name, rows := range kept {
			runs[name] = append(runs[name], rows)
		}
		if probe != nil {
			states = append(states, st)
		}
	}
	return runs, transport, states, nil
}

// stateNote is a run's log-line tail: the samples so far in its round.
func stateNote(probe func() (time.Duration, error), st RoundState) string {
	if probe == nil {
		return ""
	}
	return fmt.Sprintf(" (host: cache-line round trip %v-%v so far in the round)", st.Min, st.Max)
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
