// Command collcheck runs every goccl collective with every algorithm on a
// real job and checks every result: the end-to-end test of a deployment
// (real processes, the real transport, the real bootstrap).
//
//	gorun -n 4 ./collcheck -counts 0,1,7,1000 -types float32,int64
//
// For each type and count it runs allreduce (each algorithm, then the
// selector's choice) with sum, prod, min, max and avg, reduce, broadcast,
// allgather(v), reduce-scatter, alltoall(v), gather(v), scatter(v), scan and
// exscan, sendrecv and send/recv, on plain slices or (-buffers registered) on buffers from
// comm.Alloc, and prints one line per (type, count) on rank 0. It exits 1 on
// the first wrong result or error, 2 on bad flags. With -stats every rank
// prints its Init time, connected peers, memory and descriptors at the
// end.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/comm/commtest"
	"github.com/goccl/goccl/examples/internal/rankstats"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type checkFunc = func(context.Context, *comm.Comm, int, []comm.Op, bool, func(string, time.Duration)) error

// checks are commtest's, per type (on plain or on registered buffers).
var checks = map[string]checkFunc{
	"float32": commtest.CheckEach[float32],
	"float64": commtest.CheckEach[float64],
	"int32":   commtest.CheckEach[int32],
	"int64":   commtest.CheckEach[int64],
	"int8":    commtest.CheckEach[int8],
	"uint8":   commtest.CheckEach[uint8],
	"uint32":  commtest.CheckEach[uint32],
	"uint64":  commtest.CheckEach[uint64],
	// Reduced in float32 and rounded once; the checks' small integers
	// are exact up to halfRanks ranks.
	"float16":  commtest.CheckEach[comm.Float16],
	"bfloat16": commtest.CheckEach[comm.BFloat16],
}

// halfRanks is the largest job in which each half type's results are
// exact, and so compare bitwise: commtest's inputs are integers of at
// most 4 in magnitude, and a sum of n of them is at most 4n, within
// float16's exact integers (2048) up to 512 ranks and bfloat16's (256)
// up to 64.
var halfRanks = map[string]int{"float16": 512, "bfloat16": 64}

// tooLarge refuses the types not checked exactly in a job of size ranks.
func tooLarge(types []string, size int) error {
	for _, t := range types {
		if limit, ok := halfRanks[t]; ok && size > limit {
			return fmt.Errorf("%s is checked exactly up to %d ranks (sums of integers up to 4 per rank), not %d", t, limit, size)
		}
	}
	return nil
}

// progressRanks is the job size from which collcheck shows its progress
// without -progress: there a run takes minutes.
const progressRanks = 128

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("collcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	countsFlag := fs.String("counts", "0,1,7,13,1000", "comma-separated element counts")
	stats := fs.Bool("stats", false, "print each rank's Init time, peers, memory and descriptors at the end")
	typesFlag := fs.String("types", "float32,int64", "comma-separated types: "+strings.Join(typeNames(), ","))
	buffersFlag := fs.String("buffers", "plain", "comma-separated buffers: plain (slices), registered (comm.Alloc)")
	progress := fs.Bool("progress", false, fmt.Sprintf("rank 0 prints a line to stderr as each collective passes (always from %d ranks on)", progressRanks))
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var counts []int
	for _, s := range strings.Split(*countsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			fmt.Fprintf(stderr, "collcheck: bad count %q\n", s)
			return 2
		}
		counts = append(counts, n)
	}
	var buffers []int // indexes of checks' pairs
	for _, b := range strings.Split(*buffersFlag, ",") {
		switch strings.TrimSpace(b) {
		case "plain":
			buffers = append(buffers, 0)
		case "registered":
			buffers = append(buffers, 1)
		default:
			fmt.Fprintf(stderr, "collcheck: unknown buffers %q (have plain,registered)\n", b)
			return 2
		}
	}
	types := strings.Split(*typesFlag, ",")
	for _, t := range types {
		if _, ok := checks[t]; !ok {
			fmt.Fprintf(stderr, "collcheck: unknown type %q (have %s)\n", t, strings.Join(typeNames(), ","))
			return 2
		}
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "collcheck: no arguments are taken")
		return 2
	}
	start := time.Now()
	c, err := comm.Init(ctx, comm.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "collcheck:", err)
		return 1
	}
	defer c.Close()
	if err := tooLarge(types, c.Size()); err != nil {
		if c.Rank() == 0 {
			fmt.Fprintln(stderr, "collcheck:", err)
		}
		return 2
	}
	initTime := time.Since(start)
	show := c.Rank() == 0 && (*progress || c.Size() >= progressRanks)
	nchecks := len(commtest.Checks())
	for _, b := range buffers {
		for _, t := range types {
			for _, n := range counts {
				start := time.Now()
				var done func(string, time.Duration)
				if show {
					i := 0
					done = func(check string, took time.Duration) {
						i++
						fmt.Fprintf(stderr, "collcheck: %s done for %s x %d%s (%d of %d collectives, %v)\n",
							check, t, n, []string{"", " on registered buffers"}[b], i, nchecks, took.Round(time.Millisecond))
					}
				}
				if err := checks[t](ctx, c, n, commtest.AllOps, b == 1, done); err != nil {
					fmt.Fprintf(stderr, "collcheck: rank %d: %v\n", c.Rank(), err)
					return 1
				}
				if c.Rank() == 0 {
					fmt.Fprintf(stdout, "collcheck: %d ranks via %s: every collective and algorithm verified for %s x %d%s (%v)\n",
						c.Size(), c.Transport(), t, n, []string{"", " on registered buffers"}[b], time.Since(start).Round(time.Millisecond))
				}
			}
		}
	}
	if *stats {
		fmt.Fprintln(stdout, rankstats.Line(c.Rank(), initTime, c.ConnectedPeers(), c.PeakPeers()))
	}
	return 0
}

func typeNames() []string {
	return []string{"float32", "float64", "int32", "int64", "int8", "uint8", "uint32", "uint64", "float16", "bfloat16"}
}
