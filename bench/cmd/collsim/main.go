// Command collsim predicts the time of goccl's collectives at scale, before
// any job runs, with the simulator of collectives/simulate: the plans the
// executor runs, replayed under a cost model with hosts, NICs shared by
// their ranks, CPU overheads and the executor's flow control.
//
// Usage:
//
//	collsim [flags]                       crossover tables (default scales)
//	collsim validate [flags] DIR          predicted vs measured (scripts/sim-validate.sh)
//	gorun -n 2 collsim calibrate [flags]  measure a link class (as a rank)
//
// The tables: for allreduce, broadcast and all-to-all (-coll) at 8, 64,
// 512, 4,096 and 65,536 ranks (-ranks), every priced algorithm's time at
// sizes from 8 bytes to 1 GiB (all-to-all: 8 bytes to 256 KiB per block;
// -sizes), the fastest, the selector's pick (collectives.Select on the
// same model) and how much slower that pick is, and the fastest's busiest
// port (the NIC or local port that carried the most bytes). Then a
// Markdown crossover matrix per collective. -plot DIR writes a PNG per
// collective.
//
// The model is a preset (-preset cluster: shared memory and 100 Gbit/s
// RDMA NICs, 8 ranks per host; -preset tcp: 10 Gbit/s TCP) or a JSON file
// (-params FILE, as `collsim validate` writes after fitting this machine).
// Times are the slowest rank's. A time marked ~ is extrapolated from two
// smaller sizes, one marked * is the registry's α-β-γ cost where the job
// is too large to simulate (see package simulate).
//
// Wrong usage exits 2; a failure exits 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goccl/goccl/collectives"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError marks command-line mistakes (exit 2).
type usageError struct{ error }

func run(args []string, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) > 0 && args[0] == "validate":
		err = validateCmd(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "calibrate":
		err = calibrateCmd(args[1:], stdout, stderr)
	default:
		err = tablesCmd(args, stdout, stderr)
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "collsim: %v (collsim -h for help)\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "collsim: %v\n", err)
	return 1
}

func tablesCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	colls := fs.String("coll", "allreduce,broadcast,alltoall", "collectives, comma-separated")
	ranks := fs.String("ranks", "8,64,512,4096,65536", "rank counts, comma-separated")
	sizes := fs.String("sizes", "", "sizes in bytes, comma-separated, suffixes K, M, G (all-to-all: per block); default 8 to 1G by factors of 8 (all-to-all: 8 to 256K)")
	preset := fs.String("preset", "cluster", "model preset: cluster or tcp")
	params := fs.String("params", "", "model file (JSON), instead of a preset")
	rph := fs.Int("rph", 0, "ranks per host (overrides the model's)")
	budget := fs.Int("budget", 20_000_000, "most events per simulation, past which a coarser method is used")
	jobs := fs.Int("j", 0, "simulations at once (default min(GOMAXPROCS, 4))")
	plotDir := fs.String("plot", "", "write a PNG per collective into this directory")
	out := fs.String("o", "text", "output: text (tables and crossover), json (one object per point)")
	verbose := fs.Bool("v", false, "print each simulation as it finishes, on standard error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: collsim [flags]\n       collsim validate [flags] DIR\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := loadConfig(*params, *preset)
	if err != nil {
		return usageError{err}
	}
	if *rph > 0 {
		cfg.RanksPerHost = *rph
	}
	g := &gridSpec{cfg: cfg, budget: *budget, jobs: *jobs, sizes: map[collectives.Coll][]int{}}
	for _, name := range strings.Split(*colls, ",") {
		c, err := collectives.CollByName(strings.TrimSpace(name))
		if err != nil {
			return usageError{err}
		}
		g.colls = append(g.colls, c)
	}
	if g.ranks, err = parseInts(*ranks); err != nil {
		return usageError{fmt.Errorf("-ranks: %w", err)}
	}
	for _, p := range g.ranks {
		if p < 2 {
			return usageError{fmt.Errorf("-ranks: %d ranks: want at least 2", p)}
		}
	}
	for _, c := range g.colls {
		g.sizes[c] = defaultSizes(c)
		if *sizes != "" {
			if g.sizes[c], err = parseInts(*sizes); err != nil {
				return usageError{fmt.Errorf("-sizes: %w", err)}
			}
		}
	}
	if *out != "text" && *out != "json" {
		return usageError{fmt.Errorf("-o %q: want text or json", *out)}
	}
	var progress func(string)
	if *verbose {
		progress = func(s string) { fmt.Fprintln(stderr, s) }
	}
	points, err := g.run(progress)
	if err != nil {
		return err
	}
	if *out == "json" {
		if err := writeJSON(stdout, points); err != nil {
			return err
		}
	} else {
		fmt.Fprint(stdout, cfg.describe())
		if err := writeTables(stdout, points); err != nil {
			return err
		}
		writeCrossover(stdout, points)
	}
	if *plotDir != "" {
		if err := os.MkdirAll(*plotDir, 0o755); err != nil {
			return err
		}
		for _, c := range g.colls {
			path := filepath.Join(*plotDir, "collsim-"+c.String()+".png")
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			err = drawCollective(f, c.String(), points)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			fmt.Fprintf(stderr, "collsim: wrote %s\n", path)
		}
	}
	return nil
}

// parseInts reads "8,64,1K,4M".
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "K"):
			mult, f = 1<<10, strings.TrimSuffix(f, "K")
		case strings.HasSuffix(f, "M"):
			mult, f = 1<<20, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "G"):
			mult, f = 1<<30, strings.TrimSuffix(f, "G")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}
