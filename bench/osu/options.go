package osu

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pborman/getopt/v2"

	"github.com/goccl/goccl/comm"
)

// OSU's defaults (c/util/osu_util.h, OMB 7.4).
const (
	largeMessageSize = 8192 // sizes above use the "large" iteration counts
	maxMemLimit      = 512 << 20
	maxMemLowerLimit = 1 << 20
	windowSizeLarge  = 64
)

// Config is a parsed command line.
type Config struct {
	Bench *Benchmark

	MinSize, MaxSize int
	// Iterations and warm-up for sizes up to largeMessageSize, and above.
	Iters, ItersLarge int
	Skip, SkipLarge   int
	Full              bool
	Validate          bool
	Type              string // goccl type name
	OSUType           string // the name the user gave, for the Datatype line
	Root              int    // -k fixed:N; -1 means rotate
	Window            int
	MemLimit          int
	Probes            int // -t: Test calls during the compute of non-blocking tests
	NCCL              bool
	// BackToBack (--back-to-back, goccl's, not OSU's): a blocking
	// collective test times the calls of a size back to back, one span
	// for all of them, with no barrier between them (as nccl-tests and
	// back-to-back drivers do), in OSU's layout.
	BackToBack bool
	JSON       bool
	Transport  string // sets GOCCL_TRANSPORT before Init when not empty
	Algorithm  string // forced on every call (comm.WithAlgorithm)
	// WarmupTime (--warmup-time, goccl's, not OSU's): before the first
	// size of a blocking collective test or of latency, warm-up calls of
	// it until this much time has passed on every rank (default
	// defaultWarmupTime in OSU's layout); before each later size up to
	// largeMessageSize, sizeWarmupTime of them, unless it is 0.
	WarmupTime time.Duration

	sizeSet, itersSet, skipSet, typeSet, warmupTimeSet bool
}

// ErrUsage marks command-line errors (exit status 2): errors.Is(err,
// ErrUsage) holds for every error Parse returns but ErrHelp and the version
// request. Their text is the one-line complaint alone ("unknown option -q").
var ErrUsage = errors.New("usage")

// usageError is a command-line error; it matches ErrUsage.
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

func usageErr(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// defaultWarmupTime is --warmup-time's default: a job's first
// milliseconds run slower than the rest (a fresh process and its first
// calls; 2 ranks over shared memory, 8-byte allreduces timed 2,000 at a
// time: 0.27-0.51 us each for the first 2-4 ms after Init, then
// 0.20-0.23), and OSU's warm-up, a count, ends long before that at the
// first sizes: with -i 20000 the first size of an 8-byte allreduce took
// 0.24-0.27 us where the second took 0.23, and 0.23 both once the first
// had warmed up for 100 ms (5 December).
const defaultWarmupTime = 50 * time.Millisecond

// sizeWarmupTime is how long each later size up to largeMessageSize warms
// up (when WarmupTime is not 0): the row printed for the size before
// wakes the launcher that forwards it (gorun, mpirun) on a core that the
// ranks spin on, and with OSU's -i 20 a size's timed calls last a few
// microseconds, within reach of that stall. 2 ranks over shared memory,
// osu alltoall -m 8:1024 -i 20, 10 runs: 18 rows 2-9 times slower than
// their neighbours without it, 6 with 300 us of it (5 December).
const sizeWarmupTime = time.Millisecond

// ErrHelp is returned for -h.
var ErrHelp = errors.New("help requested")

// defaults fills OSU's defaults for the benchmark's kind.
func (c *Config) defaults() {
	c.MinSize, c.MaxSize = 1, 1<<20
	c.Iters, c.Skip, c.ItersLarge, c.SkipLarge = 1000, 100, 100, 10
	c.Type, c.OSUType = "int8", "MPI_CHAR"
	c.Window = windowSizeLarge
	c.MemLimit = maxMemLimit
	switch c.Bench.Kind {
	case KindLatency:
		c.MinSize, c.MaxSize = 0, 1<<22
		c.Iters, c.Skip, c.ItersLarge, c.SkipLarge = 10000, 100, 1000, 10
	case KindBandwidth, KindBiBandwidth:
		c.MinSize, c.MaxSize = 1, 1<<22
		c.Iters, c.Skip, c.ItersLarge, c.SkipLarge = 100, 10, 20, 2
	}
}

// ncclDefaults switches to nccl-tests' defaults where the user gave none:
// 20 iterations after 5 warm-ups at every size, float, check on.
func (c *Config) ncclDefaults() {
	if !c.itersSet {
		c.Iters, c.ItersLarge = 20, 20
	}
	if !c.skipSet {
		c.Skip, c.SkipLarge = 5, 5
	}
	c.Validate = true // nccl-tests checks by default (-c 1)
	if !c.typeSet {
		c.Type, c.OSUType = "float32", "float"
	}
}

// option describes one flag: short letter, long name, whether it takes a value.
type option struct {
	short byte
	long  string
	arg   bool
	help  string
}

var options = []option{
	{'h', "help", false, "print this help"},
	{'v', "version", false, "print the version"},
	{'f', "full", false, "print min and max latency and the iteration count"},
	{'m', "message-size", true, "[MIN:]MAX message sizes in bytes (suffixes K, M, G allowed)"},
	{'i', "iterations", true, "iterations per size"},
	{'x', "warmup", true, "warm-up iterations per size"},
	{'c', "validation", false, "check every result"},
	{'T', "type", true, "data type: MPI_CHAR, MPI_INT, MPI_FLOAT or a goccl type (int8 uint8 int32 uint32 int64 uint64 float32 float64 float16 bfloat16; half for float16)"},
	{'k', "root-rank", true, "root: fixed:N, N, or rotate"},
	{'W', "window-size", true, "messages in flight per iteration (bw, bibw)"},
	{'M', "mem-limit", true, "memory limit per rank in bytes"},
	{'t', "num-test-calls", true, "Test calls during the compute of non-blocking tests"},
	{'o', "output", true, "text (default) or json (one JSON object per row, with run metadata)"},
	{0, "nccl", false, "print nccl-tests' layout (size count type redop root time algbw busbw #wrong), with its defaults where -i, -x, -T are not given: 20 iterations after 5 warm-ups, float32, every result checked"},
	{0, "back-to-back", false, "blocking collectives: time the calls of a size back to back, one span over all of them with no barrier between (not OSU's method: a rank may run ahead of a slower one, as in nccl-tests); OSU's layout"},
	{0, "transport", true, "transport: auto, shm, tcp or verbs (sets GOCCL_TRANSPORT)"},
	{0, "algorithm", true, "algorithm of every call (comm.WithAlgorithm; GOCCL_ALGO works too)"},
	{0, "warmup-time", true, "latency and blocking collectives: before the first size, warm-up calls of it for this long on every rank, and 1ms before each later size up to 8 KiB (default 50ms, 0 for none; not an OSU option)"},
}

// Parse parses the options of benchmark b with POSIX getopt's syntax, as
// OSU's getopt_long does: "-m 8:1024", "-m8:1024", "-fc", "-fcm8:1K",
// "--message-size=8:1024", "--message-size 8:1024"; "--" ends the
// options. Long names are not abbreviated, except that "--f" is "-f".
// github.com/pborman/getopt/v2 splits the arguments; set reads each option
// in the order given.
func Parse(b *Benchmark, args []string) (*Config, error) {
	c := &Config{Bench: b, Root: 0}
	c.defaults()
	set := getopt.New()
	for i := range options {
		o := &options[i]
		opt := set.FlagLong(&optionValue{c: c, o: o}, o.long, rune(o.short), o.help)
		if !o.arg {
			opt.SetFlag()
		}
	}
	if err := set.Getopt(append([]string{b.Name}, args...), nil); err != nil {
		return nil, getoptErr(err)
	}
	if rest := set.Args(); len(rest) > 0 {
		return nil, usageErr("unexpected argument %q", rest[0])
	}
	if c.NCCL {
		c.ncclDefaults()
	}
	if c.MinSize > c.MaxSize {
		return nil, usageErr("minimum message size %d is above the maximum %d", c.MinSize, c.MaxSize)
	}
	if c.BackToBack && (b.Kind != KindColl || c.NCCL || c.Validate) {
		why := b.Name + " is not a blocking collective test"
		switch {
		case b.Kind != KindColl:
		case c.NCCL:
			why = "--nccl times back to back already"
		default:
			why = "-c checks each call, between barriers"
		}
		return nil, usageErr("--back-to-back applies to the blocking collective tests in OSU's layout without -c: %s", why)
	}
	warms := (b.Kind == KindColl || b.Kind == KindLatency) && !c.NCCL
	if c.WarmupTime > 0 && !warms {
		return nil, usageErr("--warmup-time applies to latency and the blocking collective tests in OSU's layout only, not to %s%s",
			b.Name, map[bool]string{true: " --nccl"}[c.NCCL])
	}
	if warms && !c.warmupTimeSet {
		c.WarmupTime = defaultWarmupTime
	}
	return c, nil
}

// optionValue is the getopt.Value of one option: Set hands the value to
// Config.set.
type optionValue struct {
	c *Config
	o *option
}

func (v *optionValue) Set(val string, opt getopt.Option) error {
	if !v.o.arg && val != "" { // "--full=1"
		return usageErr("option %s takes no value", opt.Name())
	}
	return v.c.set(v.o.long, val)
}

func (v *optionValue) String() string { return "" }

// getoptErr turns getopt's complaints into usage errors in our words;
// errors of Config.set (usage errors, ErrHelp, the version request) pass
// as they are.
func getoptErr(err error) error {
	var e *getopt.Error
	if !errors.As(err, &e) {
		return usageErr("%v", err)
	}
	switch e.ErrorCode {
	case getopt.UnknownOption:
		return usageErr("unknown option %s", e.Name)
	case getopt.MissingParameter:
		return usageErr("option %s needs a value", e.Name)
	case getopt.Invalid:
		return e.Err
	}
	return usageErr("%s: %v", e.Name, e.Err)
}

func (c *Config) set(name, val string) error {
	num := func(min int) (int, error) {
		n, err := strconv.Atoi(val)
		if err != nil || n < min {
			return 0, usageErr("invalid value %q for --%s", val, name)
		}
		return n, nil
	}
	var err error
	switch name {
	case "help":
		return ErrHelp
	case "version":
		return errVersion
	case "full":
		c.Full = true
	case "validation":
		c.Validate = true
	case "nccl":
		c.NCCL = true
	case "back-to-back":
		c.BackToBack = true
	case "message-size":
		err = c.setSizes(val)
	case "iterations":
		var n int
		if n, err = num(1); err == nil {
			c.Iters, c.ItersLarge, c.itersSet = n, n, true
		}
	case "warmup":
		var n int
		if n, err = num(0); err == nil {
			c.Skip, c.SkipLarge, c.skipSet = n, n, true
		}
	case "type":
		err = c.setType(val)
		c.typeSet = true
	case "root-rank":
		err = c.setRoot(val)
	case "window-size":
		c.Window, err = num(1)
	case "mem-limit":
		var n int64
		if n, err = parseSize(val); err == nil {
			c.MemLimit = int(max(n, maxMemLowerLimit))
		}
	case "num-test-calls":
		c.Probes, err = num(0)
	case "output":
		switch val {
		case "text":
			c.JSON = false
		case "json":
			c.JSON = true
		default:
			err = usageErr("invalid output %q: want text or json", val)
		}
	case "transport":
		c.Transport = val
	case "warmup-time":
		var d time.Duration
		if d, err = time.ParseDuration(val); err == nil && d < 0 {
			err = usageErr("invalid warm-up time %q: want a duration of 0 or more", val)
		} else if err != nil {
			err = usageErr("invalid warm-up time %q: want a duration such as 300ms", val)
		}
		c.WarmupTime, c.warmupTimeSet = d, true
	case "algorithm":
		algos := comm.Algorithms(commName(c.Bench.Coll))
		if !slices.Contains(algos, val) {
			sort.Strings(algos)
			return usageErr("%s has no algorithm %q (have %s)", c.Bench.Name, val, strings.Join(algos, ", "))
		}
		c.Algorithm = val
	}
	return err
}

// errVersion is returned for -v.
var errVersion = errors.New("version requested")

// ErrVersion reports whether err asks for the version.
func IsVersion(err error) bool { return errors.Is(err, errVersion) }

func (c *Config) setSizes(val string) error {
	lo, hi, hasMin := strings.Cut(val, ":")
	if !hasMin {
		lo, hi = "", val
	}
	if lo != "" {
		n, err := parseSize(lo)
		if err != nil || n <= 0 {
			return usageErr("invalid message size %q", val)
		}
		c.MinSize = int(n)
	}
	if hi != "" {
		n, err := parseSize(hi)
		if err != nil || n < 0 {
			return usageErr("invalid message size %q", val)
		}
		c.MaxSize = int(n)
	}
	if lo == "" && hi == "" {
		return usageErr("invalid message size %q", val)
	}
	c.sizeSet = true
	return nil
}

// parseSize reads a byte count with an optional K, M or G suffix (powers of 2).
func parseSize(s string) (int64, error) {
	mult := int64(1)
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
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<46)/mult {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return n * mult, nil
}

func (c *Config) setType(val string) error {
	switch strings.ToUpper(val) {
	case "MPI_CHAR":
		c.Type, c.OSUType = "int8", "MPI_CHAR"
		return nil
	case "MPI_INT":
		c.Type, c.OSUType = "int32", "MPI_INT"
		return nil
	case "MPI_FLOAT":
		c.Type, c.OSUType = "float32", "MPI_FLOAT"
		return nil
	}
	t := strings.ToLower(val)
	switch t {
	case "float":
		t = "float32"
	case "double":
		t = "float64"
	case "half":
		t = "float16"
	}
	if _, ok := typeByName(t); !ok {
		return usageErr("unknown data type %q", val)
	}
	c.Type, c.OSUType = t, t
	return nil
}

func (c *Config) setRoot(val string) error {
	v := strings.ToLower(val)
	if v == "rotate" {
		c.Root = -1
		return nil
	}
	v = strings.TrimPrefix(v, "fixed:")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return usageErr("invalid root %q: want fixed:N, N or rotate", val)
	}
	c.Root = n
	return nil
}

// Usage writes the help text of benchmark b.
func Usage(b *Benchmark, prog string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Usage: %s [options]\n", prog)
	fmt.Fprintf(&sb, "%s: OSU Micro-Benchmarks' %s over goccl.\n", b.Name, b.Title)
	fmt.Fprintf(&sb, "Options:\n")
	def := Config{Bench: b}
	def.defaults()
	for _, o := range options {
		short := "    "
		if o.short != 0 {
			short = fmt.Sprintf("  -%c,", o.short)
		}
		help := o.help
		switch o.short {
		case 'm':
			help += fmt.Sprintf(" (default %d:%d)", def.MinSize, def.MaxSize)
		case 'i':
			help += fmt.Sprintf(" (default %d; %d above %d bytes)", def.Iters, def.ItersLarge, largeMessageSize)
		case 'x':
			help += fmt.Sprintf(" (default %d; %d above %d bytes)", def.Skip, def.SkipLarge, largeMessageSize)
		}
		fmt.Fprintf(&sb, "%s --%-20s%s\n", short, o.long, help)
	}
	return sb.String()
}
