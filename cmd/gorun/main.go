package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/goccl/goccl/internal/affinity"
)

func main() {
	if os.Getenv(shimEnv) != "" {
		os.Exit(shim(os.Args[1:]))
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

const maxRanks = 4096

// run is gorun's main, testable: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, code := parseArgs(args, os.LookupEnv, stdout, stderr)
	if code >= 0 {
		return code
	}
	return launch(ctx, cfg, stdout, stderr)
}

// parseArgs turns the command line into a config. A status >= 0 means
// gorun is done: 0 after --help, 2 after wrong usage (the message is on
// stderr).
func parseArgs(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) (config, int) {
	bad := func(format string, a ...any) (config, int) {
		fmt.Fprintf(stderr, "gorun: "+format+"\n", a...)
		fmt.Fprint(stderr, usageLine)
		return config{}, 2
	}
	f := newFlags(lookup)
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, manual)
			return config{}, 0
		}
		return bad("%v", err)
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usageLine)
		return config{}, 2
	}
	cfg, err := f.config(lookup)
	if err != nil {
		return bad("%v", err)
	}
	return cfg, -1
}

// flags are gorun's command-line flags, parsed into cfg and the values
// that need checking before they become part of it.
type flags struct {
	fs        *flag.FlagSet
	cfg       config
	exportErr error
	n         *int
	hostList  *string
	hostfile  *string
	sshCmd    *string
	srunCmd   *string
	launcher  *string
}

func newFlags(lookup func(string) (string, bool)) *flags {
	f := &flags{fs: flag.NewFlagSet("gorun", flag.ContinueOnError)}
	fs, cfg := f.fs, &f.cfg
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f.n = fs.Int("n", 0, "")
	fs.IntVar(f.n, "np", 0, "") // mpirun's spelling
	f.hostList = fs.String("H", "", "")
	f.hostfile = fs.String("hostfile", "", "")
	fs.BoolVar(&cfg.oversubscribe, "oversubscribe", false, "")
	fs.Func("x", "", func(s string) error {
		e, err := parseExport(s, lookup)
		if err != nil && f.exportErr == nil {
			f.exportErr = err
		}
		cfg.exports = append(cfg.exports, e)
		return nil
	})
	f.sshCmd = fs.String("ssh", envOr(lookup, "GORUN_SSH", defaultSSH), "")
	f.srunCmd = fs.String("srun", envOr(lookup, "GORUN_SRUN", "srun"), "")
	f.launcher = fs.String("launcher", "auto", "")
	fs.StringVar(&cfg.bootstrapAddr, "bootstrap-addr", "", "")
	fs.BoolVar(&cfg.timestamp, "timestamp", false, "")
	fs.BoolVar(&cfg.verbose, "v", false, "")
	fs.BoolVar(&cfg.verbose, "verbose", false, "")
	fs.StringVar(&cfg.outputDir, "output-dir", "", "")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "")
	fs.DurationVar(&cfg.grace, "grace", 3*time.Second, "")
	fs.StringVar(&cfg.bindTo, "bind-to", envOr(lookup, "GORUN_BIND_TO", envOr(lookup, "GOCCL_BIND", "auto")), "")
	return f
}

// config validates the parsed flags and completes the config: hosts,
// launcher, rank count, commands and program.
func (f *flags) config(lookup func(string) (string, bool)) (config, error) {
	cfg := f.cfg
	if f.exportErr != nil {
		return config{}, f.exportErr
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	set["n"] = set["n"] || set["np"]
	var err error
	if cfg.hosts, err = f.hosts(set); err != nil {
		return config{}, err
	}
	switch *f.launcher {
	case "auto":
		cfg.srun = cfg.hosts == nil && inSlurm(lookup)
	case "ssh":
	case "srun":
		if cfg.hosts != nil {
			return config{}, errors.New("--launcher srun places ranks itself: drop -H or --hostfile")
		}
		cfg.srun = true
	default:
		return config{}, fmt.Errorf("--launcher %q: want auto, ssh or srun", *f.launcher)
	}
	if !slices.Contains(affinity.Modes, cfg.bindTo) {
		from := "--bind-to"
		if !set["bind-to"] {
			from = "GORUN_BIND_TO"
			if v, _ := lookup("GORUN_BIND_TO"); v == "" {
				from = "GOCCL_BIND (gorun's --bind-to for the ranks it starts)"
			}
		}
		return config{}, fmt.Errorf("%s %q: want auto, core or none", from, cfg.bindTo)
	}
	cfg.n = *f.n
	if !set["n"] {
		switch {
		case cfg.hosts != nil:
			cfg.n = totalSlots(cfg.hosts)
		case cfg.srun:
			cfg.n = slurmDefaultRanks(lookup)
		}
	}
	if cfg.sshCmd = strings.Fields(*f.sshCmd); len(cfg.sshCmd) == 0 {
		return config{}, errors.New("--ssh is empty")
	}
	if cfg.srunCmd = strings.Fields(*f.srunCmd); len(cfg.srunCmd) == 0 {
		return config{}, errors.New("--srun is empty")
	}
	switch {
	case !set["n"] && cfg.n == 0:
		if slices.ContainsFunc(f.fs.Args(), func(a string) bool { return a == "-n" || a == "-np" || a == "--n" }) {
			return config{}, errors.New("-n is required (or -H, --hostfile, or a Slurm allocation); gorun's options go before the program: gorun -n 2 prog args...")
		}
		return config{}, errors.New("-n is required (or -H, --hostfile, or a Slurm allocation)")
	case cfg.n < 1 || cfg.n > maxRanks:
		return config{}, fmt.Errorf("-n must be between 1 and %d, got %d", maxRanks, cfg.n)
	case cfg.hosts != nil && cfg.n > totalSlots(cfg.hosts) && !cfg.oversubscribe:
		return config{}, fmt.Errorf("%d ranks asked for but the hosts have %d slots (give fewer ranks, more slots, or --oversubscribe)", cfg.n, totalSlots(cfg.hosts))
	case cfg.grace < 0:
		return config{}, fmt.Errorf("--grace must not be negative, got %v", cfg.grace)
	case cfg.timeout < 0:
		return config{}, fmt.Errorf("--timeout must not be negative, got %v", cfg.timeout)
	case f.fs.NArg() == 0:
		return config{}, errors.New("no program given")
	}
	if cfg.srun {
		if cpus := slurmCPUs(lookup); cpus > 0 && cfg.n > cpus {
			cfg.overcommit = true
		}
	}
	cfg.prog, cfg.args = f.fs.Arg(0), f.fs.Args()[1:]
	return cfg, nil
}

// hosts reads -H or --hostfile (nil if neither was given).
func (f *flags) hosts(set map[string]bool) ([]host, error) {
	switch {
	case set["H"] && set["hostfile"]:
		return nil, errors.New("give -H or --hostfile, not both")
	case set["H"]:
		return parseHostList(*f.hostList)
	case set["hostfile"]:
		file, err := os.Open(*f.hostfile)
		if err != nil {
			return nil, fmt.Errorf("--hostfile: %w", err)
		}
		defer file.Close()
		hosts, err := parseHostfile(*f.hostfile, file)
		if err != nil {
			return nil, fmt.Errorf("--hostfile: %w", err)
		}
		return hosts, nil
	}
	return nil, nil
}

func envOr(lookup func(string) (string, bool), name, def string) string {
	if v, ok := lookup(name); ok && v != "" {
		return v
	}
	return def
}
