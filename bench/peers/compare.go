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
	runs = map[string][]Rows{}
	for r := range rounds {
		for k := range programs {
			p := programs[(r+k)%len(programs)]
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
				return nil, "", fmt.Errorf("%s, round %d of %d: %w", p.Name, r+1, rounds, err)
			}
			rows, tr := ParseRows(out)
			if len(rows) == 0 {
				return nil, "", fmt.Errorf("%s, round %d of %d: no rows \"bytes us\" in its output:\n%s", p.Name, r+1, rounds, lastBytes(out, 2000))
			}
			if p.Name == programs[0].Name && transport == "" {
				transport = tr
			}
			runs[p.Name] = append(runs[p.Name], rows)
			if log != nil {
				fmt.Fprintf(log, "peers: round %d/%d: %s: %d sizes in %.1fs\n", r+1, rounds, p.Name, len(rows), time.Since(t0).Seconds())
			}
		}
	}
	return runs, transport, nil
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
