// Command gorun starts the ranks of a goccl program on this host.
//
// Usage:
//
//	gorun [-grace D] -n N prog [args...]
//
// gorun runs N copies of prog, the ranks 0..N-1, and gives each the
// environment that goccl's bootstrap package reads:
//
//	GOCCL_RANK, GOCCL_SIZE             this rank and the number of ranks
//	GOCCL_LOCAL_RANK, GOCCL_LOCAL_SIZE the same, counted on this host
//	GOCCL_BOOTSTRAP                    host:port of the store gorun hosts
//	GOCCL_SECRET                       hex secret that admits a rank to the store
//
// and, so that torchrun-style programs work unchanged, RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (127.0.0.1) and MASTER_PORT. The
// store listens on 127.0.0.1 on a free port with a fresh random secret.
// MASTER_PORT is a second free port, not the store's, so that a program
// whose rank 0 binds MASTER_PORT itself (as torch.distributed does) can.
//
// Every line a rank writes to its standard output or standard error is
// copied to gorun's, prefixed with "[rank] ". Lines are never interleaved;
// a line longer than 64 KiB is split.
//
// When a rank exits with a non-zero status or is killed by a signal, gorun
// stops the others: SIGTERM to each rank's process group (every rank runs in
// its own, so its children are stopped too), then SIGKILL after the grace
// period (-grace, default 3s). It then prints one line naming the first
// rank that failed and why, for example
//
//	gorun: rank 2 (pid 1234) killed by signal: killed
//
// and exits 1. SIGINT and SIGTERM sent to gorun are forwarded to every rank;
// a second one kills them. gorun then exits 128 + the signal number. gorun
// exits 0 only when every rank exited 0. Wrong usage exits 2.
//
// When all ranks have exited, whatever they left running in their process
// groups is killed.
//
// gorun may import the standard library, golang.org/x/sys and goccl's
// bootstrap package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() { os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage: gorun [-grace D] -n N prog [args...]

Runs N ranks of prog on this host with the environment goccl's bootstrap
reads (GOCCL_RANK, GOCCL_SIZE, ...; RANK, WORLD_SIZE, MASTER_ADDR, ... for
torchrun-style programs). Output lines are prefixed with "[rank] ". If a rank
fails, the others are stopped and gorun exits non-zero.

flags:
  -n N       number of ranks (1-4096, required)
  -grace D   time between SIGTERM and SIGKILL when stopping ranks (default 3s)
  -h         show this help
`

const maxRanks = 4096

// run is gorun's main, testable: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	n := fs.Int("n", 0, "")
	grace := fs.Duration("grace", 3*time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "gorun: %v\n", err)
		fmt.Fprint(stderr, usage)
		return 2
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gorun: "+format+"\n", a...)
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch {
	case *n < 1 || *n > maxRanks:
		return bad("-n must be between 1 and %d, got %d", maxRanks, *n)
	case *grace < 0:
		return bad("-grace must not be negative, got %v", *grace)
	case fs.NArg() == 0:
		return bad("no program given")
	}
	return launch(ctx, config{n: *n, grace: *grace, prog: fs.Arg(0), args: fs.Args()[1:]}, stdout, stderr)
}
