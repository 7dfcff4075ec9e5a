// Command osu runs OSU Micro-Benchmarks-compatible measurements of goccl,
// and draws their results.
//
// Run it under gorun, one benchmark per invocation:
//
//	gorun -n 2 osu allreduce -m 8:67108864 -c
//	gorun -n 2 osu_allreduce -m 8:67108864    (invoked as osu_allreduce)
//	gorun -n 2 osu allreduce --nccl -m 8:64M  (nccl-tests layout and busbw)
//	gorun -n 2 osu allreduce -o json > run.json
//	osu plot -o out.png tcp.json verbs.json
//	osu list
//
// Benchmarks: latency, bw, bibw (2 ranks); allreduce, bcast, reduce,
// alltoall, allgather, reduce_scatter, gather, scatter, gatherv, scatterv,
// barrier;
// iallreduce, ibcast, ialltoall (overlap with compute). Each answers to
// its OSU name (osu_allreduce) too, as a first argument or as the name the
// program was invoked under (a link named osu_allreduce).
//
// Options follow OSU's: -m [MIN:]MAX, -i ITERS, -x WARMUP, -f, -c, -T TYPE,
// -k ROOT, -W WINDOW, -M MEMLIMIT, -t TESTCALLS, with OSU's defaults and
// output layout; plus -o json, --nccl, --transport (which sets
// GOCCL_TRANSPORT), --algorithm and --warmup-time (latency and the
// blocking collectives warm up on their first size for 50 ms by default
// and on each later size up to 8 KiB for 1 ms, on top of -x: a job's
// first milliseconds run slower, and a printed row disturbs the next
// size), and --back-to-back (a blocking collective's calls of a size timed
// together, no barrier between them, as nccl-tests times; not OSU's
// method). A benchmark whose collective goccl's comm package does not
// offer yet fails with "not yet supported" and exit status 1.
// Wrong usage exits 2 with a one-line error naming the problem and the help
// (osu BENCHMARK -h); under a launcher only rank 0 prints it. So are, once
// the ranks know their number, a number of processes the test cannot run
// on, a root (-k) that is no rank, and a size range in which no message
// holds an element of the type (or one for each rank, where the test
// divides the message). A failed run
// or a validation error exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/bench/osu"
	"github.com/goccl/goccl/bench/plot"
	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/comm"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run is the program: args[0] is the name it was invoked under.
func run(args []string, stdout, stderr io.Writer) int {
	prog := "osu"
	if len(args) > 0 {
		prog = filepath.Base(args[0])
		args = args[1:]
	}
	b := osu.Lookup(prog)
	if b == nil {
		if len(args) == 0 {
			return complain(stderr, strings.TrimSuffix(usage(prog), "\n"))
		}
		switch args[0] {
		case "plot":
			return runPlot(args[1:], stdout, stderr)
		case "list":
			for _, b := range osu.Benchmarks {
				status := ""
				if err := osu.CheckSupported(b); err != nil {
					status = "  (not yet supported)"
				}
				fmt.Fprintf(stdout, "%-16s %-20s %s%s\n", b.Name, b.OSU, b.Title, status)
			}
			return 0
		case "-h", "--help", "help":
			fmt.Fprint(stdout, usage(prog))
			return 0
		}
		if b = osu.Lookup(args[0]); b == nil {
			return complain(stderr, fmt.Sprintf("%s: unknown benchmark %q (%s list names them)", prog, args[0], prog))
		}
		prog += " " + args[0]
		args = args[1:]
	}
	cfg, err := osu.Parse(b, args)
	switch {
	case errors.Is(err, osu.ErrHelp):
		fmt.Fprint(stdout, osu.Usage(b, prog))
		return 0
	case osu.IsVersion(err):
		fmt.Fprintf(stdout, "# OSU goccl %s %s\n", b.Title, osu.Version())
		return 0
	case err != nil:
		return complain(stderr, fmt.Sprintf("%s: %v (%s -h lists the options)", prog, err, prog))
	}
	if err := osu.CheckSupported(b); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if cfg.Transport != "" {
		os.Setenv("GOCCL_TRANSPORT", cfg.Transport)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	initCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	c, err := comm.Init(initCtx, comm.Options{})
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prog, err)
		return 1
	}
	err = osu.Run(ctx, c, cfg, stdout, stderr)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = cerr
	}
	switch {
	case errors.Is(err, osu.ErrUsage):
		// Found once the ranks know their number: the options or the
		// launch do not fit the test. The message names the option.
		return complain(stderr, fmt.Sprintf("%s: %v", prog, err))
	case err != nil:
		fmt.Fprintf(stderr, "%s: rank %d: %v\n", prog, c.Rank(), err)
		return 1
	}
	return 0
}

// otherRankWait is how long a rank other than 0 keeps a usage error to
// itself: rank 0 reports the same error, and the launcher (gorun, mpirun,
// srun) stops the other ranks once rank 0 has failed.
var otherRankWait = 5 * time.Second

// rankFromEnv is bootstrap.RankFromEnv; tests replace it.
var rankFromEnv = bootstrap.RankFromEnv

// complain prints a command-line error (one line naming the problem and
// where the help is) and returns exit status 2. Every rank parses the same
// command line, so under a launcher only rank 0 prints at once; another
// rank prints only if it is still running otherRankWait later (rank 0 was
// not started with it, say), so the error is never lost.
func complain(stderr io.Writer, msg string) int {
	if r, ok := rankFromEnv(); ok && r != 0 {
		// The launcher's SIGTERM ends the wait at once: not caught (as
		// the run's context does) and waited out until its SIGKILL.
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		time.Sleep(otherRankWait)
	}
	fmt.Fprintln(stderr, msg)
	return 2
}

func usage(prog string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Usage: %s BENCHMARK [options]   (gorun -n 2 %s allreduce -m 8:1M -c)\n", prog, prog)
	fmt.Fprintf(&sb, "       %s plot -o OUT.png RUN.json...\n", prog)
	fmt.Fprintf(&sb, "       %s list\n", prog)
	fmt.Fprintf(&sb, "Benchmarks:")
	for _, b := range osu.Benchmarks {
		fmt.Fprintf(&sb, " %s", b.Name)
	}
	fmt.Fprintf(&sb, "\n%s BENCHMARK -h lists the options.\n", prog)
	return sb.String()
}

// runPlot is "osu plot": it reads -o json outputs and draws them.
func runPlot(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("osu plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "osu.png", "PNG file to write")
	title := fs.String("title", "", "title prefix of both panels")
	var labels labelList
	fs.Var(&labels, "label", "label of the next run (repeat, in file order); default: file name, transport, algorithm, ranks")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: osu plot [-o OUT.png] [-title T] [-label L]... RUN.json...\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if len(labels) > fs.NArg() {
		fmt.Fprintf(stderr, "osu plot: %d labels for %d files\n", len(labels), fs.NArg())
		return 2
	}
	var runs []plot.Run
	for i, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "osu plot: %v\n", err)
			return 1
		}
		recs, err := osu.ReadRecords(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "osu plot: %s: %v\n", name, err)
			return 1
		}
		label := plot.Label(strings.TrimSuffix(filepath.Base(name), filepath.Ext(name)), recs)
		if i < len(labels) {
			label = labels[i]
		}
		runs = append(runs, plot.Run{Label: label, Records: recs})
	}
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintf(stderr, "osu plot: %v\n", err)
		return 1
	}
	err = plot.Draw(f, runs, plot.Options{Title: *title})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "osu plot: %v\n", err)
		os.Remove(*out)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return 0
}

type labelList []string

func (l *labelList) String() string     { return strings.Join(*l, ",") }
func (l *labelList) Set(s string) error { *l = append(*l, s); return nil }
