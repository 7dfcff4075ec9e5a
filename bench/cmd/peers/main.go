// Command peers compares goccl with Open MPI and Gloo on this machine, side
// by side in one run, and prints per message size the median time of each
// and the ratio peer_time / goccl_time (above 1: goccl is faster). It is how
// the README's performance tables are made.
//
//	peers [flags] OP [flags] [-- GOCCL_COMMAND...]
//	peers build [-bin DIR] [-peers LIST] [-no-install]
//
// OP is latency, allreduce, bcast, alltoall, allgather, reduce_scatter,
// reduce, gather or scatter (Open MPI only).
// Run from the repository root:
//
//	go build -o bin/ ./bench/cmd/peers
//	bin/peers -np 2 -m 8:4M -i 100 -rounds 5 allreduce
//	bin/peers -np 2 -m 8:64M -i 20 -peers mpi-tcp,mpi-shm,gloo-tcp -markdown allreduce
//	bin/peers -m 1:4M latency -- sh -c 'GOCCL_ALGO=... bin/gorun -n 2 bin/osu latency -m 1:4M -i 100 -x 11'
//
// Flags:
//
//	-np N            ranks (2; latency needs 2)
//	-m MIN:MAX       message sizes in bytes, doubling (8:4M); suffixes K, M, G
//	-i N             timed calls per size (100)
//	-x N             untimed warm-up calls per size (default: a tenth of -i, plus one)
//	-rounds N        times each program runs, alternating (3)
//	-peers LIST      mpi-tcp, mpi-shm, gloo-tcp, floor-tcp, comma-separated (mpi-tcp,gloo-tcp)
//	-transport T     goccl's transport in the default command (osu --transport; default: the peers' own when
//	                 they share one, tcp for mpi-tcp,gloo-tcp and shm for mpi-shm; otherwise goccl's choice)
//	-gloo-allreduce A  Gloo's allreduce: torch (default: gloo::allreduce, as torch.distributed calls it), ring_chunked, ring, halving_doubling
//	-bin DIR         where the peers' drivers are built (default: a directory in the user's cache)
//	-no-install      fail instead of installing missing Debian packages
//	-no-build        use bin/gorun, bin/osu and bin/tcpfloor as they are (default: go build them first)
//	-markdown        also print the table as markdown, for the README
//	-timeout D       bound on one run of one program (15m)
//	-q               no progress lines (by default a line per run on standard error)
//	-steady N        times a round runs again when the host's state changed during it (3; 0: report only; -1: no sampling)
//
// goccl's command defaults to
//
//	bin/gorun -n NP bin/osu OP -m MIN:MAX -i N -x N -T float32
//
// (no -T for latency), which the harness builds from the current module
// first (go build -o bin/ ./cmd/gorun ./bench/cmd/osu ./bench/cmd/tcpfloor)
// so that it measures the code checked out. A command after "--" replaces it; it must print
// OSU-style rows whose first two fields are the size in bytes and the
// average time in microseconds (gorun's "[r] " tags are stripped).
//
// The peers are small drivers (bench/peers/drivers) built against Debian's
// openmpi-bin, libopenmpi-dev and libgloo-dev, which the harness installs
// with apt-get when they are missing (as root, or with sudo). They time as
// osu does: each call alone, a barrier after it, the average over ranks of
// each rank's mean; see the bench/peers package documentation for the
// methodology and the settings of each peer. floor-tcp is no library: two
// bare Go processes doing the loop of latency or bcast (2 ranks, up to 1
// MiB) over loopback TCP and nothing else (bin/tcpfloor, timed the same
// way), the floor under every TCP column:
//
//	bin/peers -transport tcp -peers mpi-tcp,floor-tcp -m 8:64K bcast
//
// The host's state: on a shared VM the cache-line round trip between the
// ranks' CPUs changes every few seconds as the host moves the virtual CPUs
// (57-80, 130-170 or 500-590 ns on this project's VMs), and small-message
// times with it. The harness samples it before and after every run (a
// 3-12 ms ping-pong between two threads bound to the first two CPUs) and
// runs a round again, up to -steady times, when its samples spread more
// than 2.5x, so that the programs of a round meet the same machine; a '#'
// line says the range seen and how many rounds ran again (see
// peers.CompareSteady).
//
// Output: two '#' lines (what ran; how to read it), '#' lines on the
// host's state (below), a header "# bytes goccl_us mpi-tcp_us ratio
// gloo-tcp_us ratio", and one row per size; "-" marks a size a peer did
// not report. Wrong usage exits 2; a
// failed build or run exits 1 naming the program, the round and the end of
// its error output.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl/bench/peers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the parsed command line.
type options struct {
	cfg       peers.Config
	bin       string
	noInstall bool
	noBuild   bool
	markdown  bool
	quiet     bool
	steady    int      // -steady: retries of a round whose host state changed; -1: no sampling
	command   []string // after "--"
	build     bool     // the build subcommand
}

var usageLine = "usage: peers [flags] OP [-- GOCCL_COMMAND...]   (OP: " + strings.Join(peers.Ops, " ") + ")\n" +
	"       peers build [-bin DIR] [-peers LIST] [-no-install]\n"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usageLine)
		printDefaults(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v (peers -h lists the flags)\n", err)
		return 2
	}
	// A comparison runs for minutes: a line per run says how far it got.
	var log io.Writer = stderr
	if o.quiet {
		log = io.Discard
	}
	bopts := peers.BuildOptions{Dir: o.bin, Peers: o.cfg.Peers, Install: !o.noInstall, Log: stderr}
	if o.build {
		dir, err := peers.Build(ctx, bopts)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintln(stdout, dir)
		return 0
	}
	dir, err := peers.Build(ctx, bopts)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	command := o.command
	if (command == nil || slices.Contains(o.cfg.Peers, "floor-tcp")) && !o.noBuild {
		if err := buildGoccl(ctx, stderr); err != nil {
			fmt.Fprintf(stderr, "peers: %v\n", err)
			return 1
		}
	}
	if command == nil {
		command = peers.GocclCommand(&o.cfg, filepath.Join("bin", "gorun"), filepath.Join("bin", "osu"))
	}
	fmt.Fprintf(log, "peers: goccl: %s\n", strings.Join(command, " "))
	programs := []peers.Program{peers.GocclProgram(command)}
	for _, name := range o.cfg.Peers {
		programs = append(programs, peers.PeerProgram(peers.PeerNamed(name), dir, &o.cfg))
	}
	steady := peers.Steady{Spread: peers.SteadySpread, Retries: max(o.steady, 0)}
	var probeErr error
	if o.steady >= 0 {
		if steady.Probe, probeErr = peers.HostProbe(); probeErr != nil {
			fmt.Fprintf(log, "peers: %v: the host's state is not sampled\n", probeErr)
		}
	}
	runs, transport, states, err := peers.CompareSteady(ctx, programs, o.cfg.Rounds, o.cfg.RunTimeout, log, steady)
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	t := peers.NewTable(title(&o.cfg, transport), programs, runs)
	t.Notes = stateNotes(states, steady.Spread)
	if probeErr != nil {
		t.Notes = []string{fmt.Sprintf("host: not sampled (%v)", probeErr)}
	}
	if err := t.WriteText(stdout); err == nil && o.markdown {
		fmt.Fprintln(stdout)
		err = t.WriteMarkdown(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "peers: %v\n", err)
		return 1
	}
	return 0
}

// stateNotes says what the host probe saw (see peers.CompareSteady): the
// range of the cache-line round trip over the rounds kept, the rounds run
// again, and the rounds kept with their runs in different states.
func stateNotes(states []peers.RoundState, spread float64) []string {
	if len(states) == 0 {
		return nil
	}
	lo, hi, again := states[0].Min, states[0].Max, 0
	var mixed []string
	for i, s := range states {
		lo, hi = min(lo, s.Min), max(hi, s.Max)
		if s.Tries > 1 {
			again++
		}
		if s.Mixed(spread) {
			mixed = append(mixed, fmt.Sprintf("%d (%v to %v)", i+1, s.Min, s.Max))
		}
	}
	notes := []string{fmt.Sprintf("host: cache-line round trip between the ranks' first two CPUs, sampled around every run: %v to %v; rounds run again because it changed during them: %d of %d", lo, hi, again, len(states))}
	if len(mixed) > 0 {
		notes = append(notes, fmt.Sprintf("rounds kept with runs in different host states (their small sizes compare unlike machines): %s", strings.Join(mixed, ", ")))
	}
	return notes
}

func title(c *peers.Config, transport string) string {
	s := fmt.Sprintf("%s np=%d sizes %d..%d iterations=%d warmup=%d rounds=%d", c.Op, c.NP, c.Min, c.Max, c.Iters, c.Warmup, c.Rounds)
	if c.BackToBack() {
		s += "; timed back to back (not OSU's method)"
	}
	if transport != "" {
		s += "; goccl over " + transport
	}
	return s
}

// buildGoccl builds bin/gorun, bin/osu and bin/tcpfloor (floor-tcp's
// program) from the module in the current directory, which must be
// goccl's.
func buildGoccl(ctx context.Context, stderr io.Writer) error {
	mod, err := os.ReadFile("go.mod")
	if err != nil || !strings.Contains(string(mod), "module github.com/goccl/goccl\n") {
		return errors.New("the default goccl command needs goccl's repository root as the current directory (or -no-build with bin/gorun and bin/osu, or a command after --)")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", "bin"+string(os.PathSeparator), "./cmd/gorun", "./bench/cmd/osu", "./bench/cmd/tcpfloor")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build -o bin/ ./cmd/gorun ./bench/cmd/osu ./bench/cmd/tcpfloor: %w", err)
	}
	return nil
}

func newFlagSet(o *options, sizes *string) *flag.FlagSet {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &o.cfg
	fs.IntVar(&c.NP, "np", 2, "ranks (latency: 2)")
	fs.StringVar(sizes, "m", "8:4M", "MIN:MAX message sizes in bytes, doubling; suffixes K, M, G")
	fs.IntVar(&c.Iters, "i", 100, "timed calls per size")
	c.Warmup = -1
	fs.Func("x", "untimed warm-up calls per size (default: a tenth of -i, plus one)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("invalid warm-up count %q", s)
		}
		c.Warmup = n
		return nil
	})
	fs.IntVar(&c.Rounds, "rounds", 3, "times each program runs, alternating")
	fs.Func("peers", "peers, comma-separated: "+strings.Join(peers.PeerNames(), ", ")+" (default mpi-tcp,gloo-tcp)", func(s string) error {
		c.Peers = nil
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.Peers = append(c.Peers, p)
			}
		}
		return nil
	})
	fs.StringVar(&c.Transport, "transport", "", "goccl's transport in the default command (osu --transport; default: the peers' own if they share one, else goccl's choice)")
	fs.StringVar(&c.GlooAlgo, "gloo-allreduce", "torch", "Gloo's allreduce: torch (gloo::allreduce, as torch.distributed calls it), ring_chunked, ring, halving_doubling")
	fs.StringVar(&c.Method, "method", peers.MethodOSU, "how every program times a size: osu (each call alone, a barrier after it) or b2b (the calls together, no barrier between them; goccl's osu --back-to-back)")
	fs.DurationVar(&c.RunTimeout, "timeout", 15*time.Minute, "bound on one run of one program")
	fs.StringVar(&o.bin, "bin", "", "where the peers' drivers are built (default: a directory in the user's cache)")
	fs.BoolVar(&o.noInstall, "no-install", false, "fail instead of installing missing Debian packages")
	fs.BoolVar(&o.noBuild, "no-build", false, "use bin/gorun, bin/osu and bin/tcpfloor as they are")
	fs.BoolVar(&o.markdown, "markdown", false, "also print the table as markdown")
	fs.BoolVar(&o.quiet, "q", false, "no progress lines (by default a line per run on standard error)")
	fs.Bool("v", true, "a line per run on standard error (the default; older command lines give it)")
	fs.IntVar(&o.steady, "steady", 3, "times a round runs again when the host's state changed during it (0: sample and report only; -1: no sampling)")
	return fs
}

func printDefaults(w io.Writer) {
	var o options
	var sizes string
	fs := newFlagSet(&o, &sizes)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseArgs reads [flags] OP [flags] [-- COMMAND...], or build [flags].
func parseArgs(args []string) (*options, error) {
	o := &options{}
	o.cfg.Peers = []string{"mpi-tcp", "gloo-tcp"}
	for i, a := range args {
		if a == "--" {
			o.command = args[i+1:]
			if len(o.command) == 0 {
				return nil, errors.New(`no command after "--"`)
			}
			args = args[:i]
			break
		}
	}
	var sizes string
	fs := newFlagSet(o, &sizes)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return nil, errors.New("no operation given")
	}
	op := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (a goccl command goes after --)", fs.Arg(0))
	}
	if op == "build" {
		if o.command != nil {
			return nil, errors.New("build takes no command")
		}
		for _, name := range o.cfg.Peers {
			if peers.PeerNamed(name) == nil {
				return nil, fmt.Errorf("unknown peer %q (have %s)", name, strings.Join(peers.PeerNames(), ", "))
			}
		}
		o.build = true
		return o, nil
	}
	o.cfg.Op = op
	var err error
	if o.cfg.Min, o.cfg.Max, err = parseSizes(sizes); err != nil {
		return nil, err
	}
	if o.cfg.Warmup < 0 {
		o.cfg.Warmup = peers.DefaultWarmup(o.cfg.Iters)
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	if o.cfg.Transport == "" && o.command == nil {
		o.cfg.Transport = peersTransport(o.cfg.Peers)
	}
	return o, nil
}

// peersTransport is the transport every peer uses (tcp for mpi-tcp and
// gloo-tcp, shm for mpi-shm), or "" if they differ: goccl's default in a
// comparison, so that it runs on the same footing as the peers and not on
// its own choice (shared memory on one host) against their TCP.
func peersTransport(names []string) string {
	t := ""
	for i, name := range names {
		_, suffix, _ := strings.Cut(name, "-")
		if i > 0 && suffix != t {
			return ""
		}
		t = suffix
	}
	return t
}

// parseSizes reads MIN:MAX (or MAX alone, from 1) with K, M, G suffixes.
func parseSizes(s string) (min, max int, err error) {
	lo, hi, ok := strings.Cut(s, ":")
	if !ok {
		lo, hi = "1", s
	}
	if min, err = parseSize(lo); err == nil {
		max, err = parseSize(hi)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("-m %s: %v", s, err)
	}
	return min, max, nil
}

func parseSize(s string) (int, error) {
	mult := 1
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'k', 'K':
			mult, s = 1<<10, s[:n-1]
		case 'm', 'M':
			mult, s = 1<<20, s[:n-1]
		case 'g', 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return n * mult, nil
}
