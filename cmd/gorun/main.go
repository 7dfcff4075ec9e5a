package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
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
	fs := flag.NewFlagSet("gorun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var cfg config
	var exportErr error
	n := fs.Int("n", 0, "")
	hostList := fs.String("H", "", "")
	hostfile := fs.String("hostfile", "", "")
	fs.BoolVar(&cfg.oversubscribe, "oversubscribe", false, "")
	fs.Func("x", "", func(s string) error {
		e, err := parseExport(s, lookup)
		if err != nil && exportErr == nil {
			exportErr = err
		}
		cfg.exports = append(cfg.exports, e)
		return nil
	})
	sshCmd := fs.String("ssh", envOr(lookup, "GORUN_SSH", defaultSSH), "")
	srunCmd := fs.String("srun", envOr(lookup, "GORUN_SRUN", "srun"), "")
	launcher := fs.String("launcher", "auto", "")
	fs.StringVar(&cfg.bootstrapAddr, "bootstrap-addr", "", "")
	fs.BoolVar(&cfg.timestamp, "timestamp", false, "")
	fs.BoolVar(&cfg.verbose, "v", false, "")
	fs.BoolVar(&cfg.verbose, "verbose", false, "")
	fs.StringVar(&cfg.outputDir, "output-dir", "", "")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "")
	fs.DurationVar(&cfg.grace, "grace", 3*time.Second, "")
	bad := func(format string, a ...any) (config, int) {
		fmt.Fprintf(stderr, "gorun: "+format+"\n", a...)
		fmt.Fprint(stderr, usageLine)
		return config{}, 2
	}
	if err := fs.Parse(args); err != nil {
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
	if exportErr != nil {
		return bad("%v", exportErr)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["H"] && set["hostfile"] {
		return bad("give -H or --hostfile, not both")
	}
	if set["H"] {
		hosts, err := parseHostList(*hostList)
		if err != nil {
			return bad("%v", err)
		}
		cfg.hosts = hosts
	}
	if set["hostfile"] {
		f, err := os.Open(*hostfile)
		if err != nil {
			return bad("--hostfile: %v", err)
		}
		hosts, err := parseHostfile(*hostfile, f)
		f.Close()
		if err != nil {
			return bad("--hostfile: %v", err)
		}
		cfg.hosts = hosts
	}
	switch *launcher {
	case "auto":
		cfg.srun = cfg.hosts == nil && inSlurm(lookup)
	case "ssh":
	case "srun":
		if cfg.hosts != nil {
			return bad("--launcher srun places ranks itself: drop -H or --hostfile")
		}
		cfg.srun = true
	default:
		return bad("--launcher %q: want auto, ssh or srun", *launcher)
	}
	cfg.n = *n
	if !set["n"] {
		switch {
		case cfg.hosts != nil:
			cfg.n = totalSlots(cfg.hosts)
		case cfg.srun:
			cfg.n = slurmDefaultRanks(lookup)
		}
	}
	if cfg.sshCmd = strings.Fields(*sshCmd); len(cfg.sshCmd) == 0 {
		return bad("--ssh is empty")
	}
	if cfg.srunCmd = strings.Fields(*srunCmd); len(cfg.srunCmd) == 0 {
		return bad("--srun is empty")
	}
	switch {
	case !set["n"] && cfg.n == 0:
		return bad("-n is required (or -H, --hostfile, or a Slurm allocation)")
	case cfg.n < 1 || cfg.n > maxRanks:
		return bad("-n must be between 1 and %d, got %d", maxRanks, cfg.n)
	case cfg.hosts != nil && cfg.n > totalSlots(cfg.hosts) && !cfg.oversubscribe:
		return bad("%d ranks asked for but the hosts have %d slots (give fewer ranks, more slots, or --oversubscribe)", cfg.n, totalSlots(cfg.hosts))
	case cfg.grace < 0:
		return bad("--grace must not be negative, got %v", cfg.grace)
	case cfg.timeout < 0:
		return bad("--timeout must not be negative, got %v", cfg.timeout)
	case fs.NArg() == 0:
		return bad("no program given")
	}
	if cfg.srun {
		if cpus := slurmCPUs(lookup); cpus > 0 && cfg.n > cpus {
			cfg.overcommit = true
		}
	}
	cfg.prog, cfg.args = fs.Arg(0), fs.Args()[1:]
	return cfg, -1
}

func envOr(lookup func(string) (string, bool), name, def string) string {
	if v, ok := lookup(name); ok && v != "" {
		return v
	}
	return def
}
