package osu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport/mem"
)

// runRanks runs f on n ranks, goroutines connected by the in-memory
// transport, and returns rank 0's output.
func runRanks(t *testing.T, n int, f func(c *comm.Comm, out io.Writer) error) string {
	t.Helper()
	return runRanksOpts(t, n, func(int) comm.Options { return comm.Options{} }, f)
}

// runRanksOpts is runRanks with rank r's options opts(r).
func runRanksOpts(t *testing.T, n int, opts func(r int) comm.Options, f func(c *comm.Comm, out io.Writer) error) string {
	t.Helper()
	network := mem.NewNetwork(mem.Options{})
	g := comm.NewLocalGroup(n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, n)
	outs := make([]bytes.Buffer, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := opts(r)
			o.OwnDevice, o.Timeout = true, 30*time.Second
			c, err := comm.New(ctx, g.Member(r), network.NewDevice(), o)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = f(c, &outs[r])
			if err := c.Close(); err != nil && errs[r] == nil {
				errs[r] = err
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	return outs[0].String()
}

func parse(t *testing.T, name string, args ...string) *Config {
	t.Helper()
	b := Lookup(name)
	if b == nil {
		t.Fatalf("no benchmark %q", name)
	}
	cfg, err := Parse(b, args)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func runBench(t *testing.T, n int, name string, args ...string) string {
	t.Helper()
	cfg := parse(t, name, args...)
	return runRanks(t, n, func(c *comm.Comm, out io.Writer) error {
		return Run(context.Background(), c, cfg, out, io.Discard)
	})
}

// rows returns the lines that are not comments or blank.
func rows(out string) []string {
	var r []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			r = append(r, l)
		}
	}
	return r
}

func TestRunCollectives(t *testing.T) {
	// 3 ranks: roots 1 and 2 exist and blocks are not all alike.
	for _, c := range []struct {
		name string
		args []string
		row  string // regexp of every row
		n    int    // rows
	}{
		{"allreduce", []string{"-m", "4:64", "-i", "3", "-x", "1", "-c", "-T", "float32"}, `^\d+ +\d+\.\d\d +Pass$`, 5},
		{"osu_allreduce", []string{"-m", "1:4", "-i", "2", "-x", "0", "-f", "-c"}, `^\d+ +(\d+\.\d\d +){3} +2 +Pass$`, 3},
		{"bcast", []string{"-m", "1:16", "-i", "3", "-x", "1", "-c", "-k", "rotate", "-T", "int32"}, `^(4|8|16) +\d+\.\d\d +Pass$`, 3},
		{"barrier", []string{"-i", "3", "-x", "1", "-f"}, `^ +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +3$`, 1},
		{"iallreduce", []string{"-m", "8:16", "-i", "3", "-x", "1", "-c", "-t", "2"}, `^\d+( +\d+\.\d\d){4} +Pass$`, 2},
		{"ibcast", []string{"-m", "8:8", "-i", "2", "-x", "0", "-f"}, `^8( +\d+\.\d\d){9}$`, 1},
		{"reduce", []string{"-m", "4:32", "-i", "2", "-x", "1", "-c", "-k", "rotate", "-T", "int64"}, `^(8|16|32) +\d+\.\d\d +Pass$`, 3},
		{"alltoall", []string{"-m", "1:64", "-i", "2", "-x", "1", "-c", "-M", "1M"}, `^\d+ +\d+\.\d\d +Pass$`, 7},
		{"allgather", []string{"-m", "2:8", "-i", "2", "-x", "1", "-c", "-T", "uint8"}, `^\d+ +\d+\.\d\d +Pass$`, 3},
		{"reduce_scatter", []string{"-m", "3:48", "-i", "2", "-x", "1", "-c", "-T", "MPI_INT"}, `^\d+ +\d+\.\d\d +Pass$`, 3},
		{"gather", []string{"-m", "4:8", "-i", "2", "-x", "1", "-c", "-k", "2"}, `^\d+ +\d+\.\d\d +Pass$`, 2},
		{"scatter", []string{"-m", "4:8", "-i", "2", "-x", "1", "-c", "-k", "rotate", "-T", "float64"}, `^8 +\d+\.\d\d +Pass$`, 1},
		{"ialltoall", []string{"-m", "8:16", "-i", "2", "-x", "1", "-c"}, `^\d+( +\d+\.\d\d){4} +Pass$`, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := runBench(t, 3, c.name, c.args...)
			if !strings.Contains(out, "# OSU goccl ") || !strings.Contains(out, "Transport: mem") {
				t.Errorf("no title or transport line:\n%s", out)
			}
			re := regexp.MustCompile(c.row)
			r := rows(out)
			if len(r) != c.n {
				t.Errorf("%d rows, want %d:\n%s", len(r), c.n, out)
			}
			for _, l := range r {
				if !re.MatchString(l) {
					t.Errorf("row %q does not match %s", l, c.row)
				}
			}
		})
	}
}

// The banner's host count is the communicator's: ranks in network
// namespaces (or containers) of one machine share its host name, and the
// banner said "Hosts: 1" for jobs that spanned several.
func TestBannerCountsHostsAsTheCommunicator(t *testing.T) {
	cfg := parse(t, "allreduce", "-m", "4:4", "-i", "1", "-x", "0")
	out := runRanksOpts(t, 4, func(r int) comm.Options { return comm.Options{HostID: fmt.Sprintf("host%d", r/2)} },
		func(c *comm.Comm, out io.Writer) error { return Run(context.Background(), c, cfg, out, io.Discard) })
	if !strings.Contains(out, "Ranks: 4  Hosts: 2\n") {
		t.Errorf("want Ranks: 4  Hosts: 2 in the banner:\n%s", out)
	}
}

// TestWarmupTime: --warmup-time makes calls of the first size, with every
// rank agreeing on their number (a rank that made fewer would fail the
// run: collective mismatch), until the time has passed on every rank; then
// the sizes run as without it.
func TestWarmupTime(t *testing.T) {
	for _, c := range []struct {
		bench string
		ranks int
		sizes string // the first size that runs warms up, even after sizes skipped
		typ   string
	}{{"allreduce", 3, "4:8", "MPI_CHAR"}, {"latency", 2, "4:8", "MPI_CHAR"}, {"allreduce", 3, "1:8", "int32"}} {
		cfg := parse(t, c.bench, "-m", c.sizes, "-T", c.typ, "-i", "2", "-x", "1", "-c", "--warmup-time", "150ms")
		start := time.Now()
		out := runRanks(t, c.ranks, func(c *comm.Comm, out io.Writer) error {
			return Run(context.Background(), c, cfg, out, io.Discard)
		})
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Errorf("%s: the run took %v, less than the warm-up time", c.bench, d)
		}
		r := rows(out)
		if len(r) != 2 {
			t.Fatalf("%s: %d rows, want 2:\n%s", c.bench, len(r), out)
		}
		for _, l := range r {
			if !regexp.MustCompile(`^(4|8) +\d+\.\d\d +Pass$`).MatchString(l) {
				t.Errorf("%s: row %q", c.bench, l)
			}
		}
	}
}

func TestRunPointToPoint(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		row  string
		n    int
	}{
		{"latency", []string{"-m", ":16", "-i", "3", "-x", "1", "-c"}, `^(1|2|4|8|16) +\d+\.\d\d +Pass$`, 5},
		{"bw", []string{"-m", "4:64", "-i", "2", "-x", "1", "-W", "4", "-c", "-T", "int32"}, `^\d+ +\d+\.\d\d +Pass$`, 5},
		{"osu_bibw", []string{"-m", "8:1024", "-i", "2", "-x", "1", "-W", "3", "-c"}, `^\d+ +\d+\.\d\d +Pass$`, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := runBench(t, 2, c.name, c.args...)
			if !strings.Contains(out, "Transport: mem") {
				t.Errorf("no transport line:\n%s", out)
			}
			re := regexp.MustCompile(c.row)
			r := rows(out)
			if len(r) != c.n {
				t.Errorf("%d rows, want %d:\n%s", len(r), c.n, out)
			}
			for _, l := range r {
				if !re.MatchString(l) {
					t.Errorf("row %q does not match %s", l, c.row)
				}
			}
		})
	}
}

// TestRunNCCLCollectives runs every collective in nccl-tests' layout with
// checking, on 3 ranks.
func TestRunNCCLCollectives(t *testing.T) {
	for _, c := range []struct{ name, op, root, in string }{
		{"bcast", "none", "1", ` +\d+(\.\d+)? +\d+\.\d\d +\d+\.\d\d +0`},
		{"reduce", "sum", "1", ` +\d+(\.\d+)? +\d+\.\d\d +\d+\.\d\d +0`},
		{"allgather", "none", "-1", ` +\d+(\.\d+)? +\d+\.\d\d +\d+\.\d\d +0`},
		{"alltoall", "none", "-1", ` +N/A +N/A +N/A +N/A`},
		{"reduce_scatter", "sum", "-1", ` +N/A +N/A +N/A +N/A`},
		{"gather", "none", "1", ` +N/A +N/A +N/A +N/A`},
		{"scatter", "none", "1", ` +N/A +N/A +N/A +N/A`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := runBench(t, 3, c.name, "--nccl", "-m", "24:96", "-i", "2", "-x", "1", "-k", "1", "-T", "int32")
			re := regexp.MustCompile(`^ +\d+ +\d+ +int32 +` + c.op + ` +` + c.root + ` +\d+(\.\d+)? +\d+\.\d\d +\d+\.\d\d +0` + c.in + `$`)
			r := rows(out)
			if len(r) != 3 {
				t.Errorf("%d rows, want 3:\n%s", len(r), out)
			}
			for _, l := range r {
				if !re.MatchString(l) {
					t.Errorf("row %q does not match %s", l, re)
				}
			}
		})
	}
}

func TestRunNCCL(t *testing.T) {
	out := runBench(t, 3, "allreduce", "--nccl", "-m", "12:96", "-i", "2", "-x", "1")
	re := regexp.MustCompile(`^ +\d+ +\d+ +float +sum +-1( +\d+(\.\d+)? +\d+\.\d\d +\d+\.\d\d +0){2}$`)
	r := rows(out)
	if len(r) != 4 {
		t.Errorf("%d rows, want 4:\n%s", len(r), out)
	}
	for _, l := range r {
		if !re.MatchString(l) {
			t.Errorf("row %q does not match %s", l, re)
		}
	}
	if !strings.Contains(out, "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : ") {
		t.Errorf("no footer:\n%s", out)
	}
}

// The JSON rows as gorun passes them on, tagged with the rank, read as
// they are: "gorun -n 2 osu allreduce -o json > run.json; osu plot run.json"
// works.
func TestReadRecordsTaggedByGorun(t *testing.T) {
	out := runBench(t, 2, "allreduce", "-m", "8:32", "-i", "2", "-x", "0", "-o", "json")
	var tagged strings.Builder
	tagged.WriteString("[0] \n")
	for _, line := range strings.SplitAfter(out, "\n") {
		if line != "" {
			tagged.WriteString("[0] " + line)
		}
	}
	recs, err := ReadRecords(strings.NewReader(tagged.String()))
	if err != nil || len(recs) != 3 {
		t.Fatalf("%d records, err %v:\n%s", len(recs), err, tagged.String())
	}
	for _, bad := range []string{"[0 {}", "[x] {}", "[] {}"} {
		if _, err := ReadRecords(strings.NewReader(bad)); err == nil {
			t.Errorf("%q read without an error", bad)
		}
	}
}

func TestRunJSON(t *testing.T) {
	out := runBench(t, 2, "allreduce", "-m", "8:32", "-i", "2", "-x", "0", "-o", "json", "-T", "float64")
	recs, err := ReadRecords(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3:\n%s", len(recs), out)
	}
	for i, r := range recs {
		if r.Size != 8<<i || r.Count != r.Size/8 || r.Type != "float64" || !strings.HasPrefix(r.Transport, "mem") || r.Ranks != 2 ||
			r.Hosts != 1 || r.Algorithm == "" || r.Date == "" || r.Version == "" || r.AvgUs <= 0 || r.BusBW <= 0 {
			t.Errorf("record %d: %+v", i, r)
		}
	}
}

func TestNotSupported(t *testing.T) {
	for _, b := range Benchmarks {
		err := CheckSupported(b)
		if supported(b.Coll) != (err == nil) {
			t.Errorf("%s: supported %v but CheckSupported = %v", b.Name, supported(b.Coll), err)
		}
		if err != nil && !errors.Is(err, ErrNotSupported) {
			t.Errorf("%s: %v is not ErrNotSupported", b.Name, err)
		}
	}
	for _, b := range Benchmarks {
		if err := CheckSupported(b); err != nil {
			t.Errorf("%s: %v", b.Name, err)
		}
	}
	err := CheckSupported(&Benchmark{Name: "future", Coll: "future"})
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "comm.future") {
		t.Errorf("a collective comm lacks: %v", err)
	}
}

// TestValidationCatchesErrors checks that check() sees a wrong element in
// every collective's output.
func TestValidationCatchesErrors(t *testing.T) {
	const n, block, root, iter = 3, 5, 0, 2
	for _, coll := range []string{"allreduce", "reduce", "bcast", "alltoall", "allgather", "gather", "scatter", "reduce_scatter"} {
		wrong := 0
		for rank := range n {
			sendLen, recvLen, blk := layout(coll, block*n, n, true)
			send, recv := make([]float32, sendLen), make([]float32, recvLen)
			fill(coll, send, recv, blk, rank, n, root, iter)
			wrong += check(coll, recv, blk, rank, n, root, iter)
		}
		if wrong == 0 {
			t.Errorf("%s: outputs left as filled passed validation on every rank", coll)
		}
	}
}

func TestParse(t *testing.T) {
	cfg := parse(t, "allreduce")
	if cfg.MinSize != 1 || cfg.MaxSize != 1<<20 || cfg.Iters != 1000 || cfg.ItersLarge != 100 || cfg.Skip != 100 ||
		cfg.SkipLarge != 10 || cfg.Type != "int8" || cfg.MemLimit != 512<<20 {
		t.Errorf("collective defaults: %+v", cfg)
	}
	cfg = parse(t, "latency")
	if cfg.MinSize != 0 || cfg.MaxSize != 1<<22 || cfg.Iters != 10000 || cfg.ItersLarge != 1000 {
		t.Errorf("latency defaults: %+v", cfg)
	}
	cfg = parse(t, "bw")
	if cfg.Iters != 100 || cfg.ItersLarge != 20 || cfg.Skip != 10 || cfg.SkipLarge != 2 || cfg.Window != 64 {
		t.Errorf("bw defaults: %+v", cfg)
	}
	cfg = parse(t, "allreduce", "-fcm8:64K", "-i20", "--warmup=3", "-T", "MPI_FLOAT", "-k", "fixed:1", "-M", "2M", "-o", "json")
	if !cfg.Full || !cfg.Validate || cfg.MinSize != 8 || cfg.MaxSize != 64<<10 || cfg.Iters != 20 || cfg.ItersLarge != 20 ||
		cfg.Skip != 3 || cfg.Type != "float32" || cfg.OSUType != "MPI_FLOAT" || cfg.Root != 1 || cfg.MemLimit != 2<<20 || !cfg.JSON {
		t.Errorf("parsed: %+v", cfg)
	}
	cfg = parse(t, "allreduce", "-m", ":4096", "--nccl")
	if cfg.MinSize != 1 || cfg.MaxSize != 4096 || cfg.Iters != 20 || cfg.Skip != 5 || cfg.Type != "float32" || !cfg.Validate {
		t.Errorf("nccl defaults: %+v", cfg)
	}
	cfg = parse(t, "allreduce", "-T", "MPI_CHAR", "--nccl")
	if cfg.Type != "int8" {
		t.Errorf("--nccl replaced the type the user gave: %+v", cfg)
	}
	cfg = parse(t, "bcast", "--warmup-time", "250ms")
	if cfg.WarmupTime != 250*time.Millisecond {
		t.Errorf("--warmup-time 250ms: %v", cfg.WarmupTime)
	}
	for _, bad := range [][]string{{"--warmup-time", "-1s"}, {"--warmup-time", "3"}, {"--warmup-time", "1s", "--nccl"}} {
		if _, err := Parse(Lookup("allreduce"), bad); !errors.Is(err, ErrUsage) {
			t.Errorf("%q: err %v, want a usage error", bad, err)
		}
	}
	if _, err := Parse(Lookup("bw"), []string{"--warmup-time", "1s"}); !errors.Is(err, ErrUsage) {
		t.Errorf("bw --warmup-time: err %v, want a usage error", err)
	}
	// The default: latency and the blocking collectives in OSU's layout
	// warm up for defaultWarmupTime, unless told otherwise.
	for _, c := range []struct {
		bench string
		args  []string
		want  time.Duration
	}{
		{"allreduce", nil, defaultWarmupTime},
		{"latency", nil, defaultWarmupTime},
		{"barrier", nil, defaultWarmupTime},
		{"latency", []string{"--warmup-time", "0"}, 0},
		{"latency", []string{"--warmup-time", "1s"}, time.Second},
		{"allreduce", []string{"--nccl"}, 0},
		{"bw", nil, 0},
		{"iallreduce", nil, 0},
	} {
		cfg, err := Parse(Lookup(c.bench), c.args)
		if err != nil {
			t.Fatalf("%s %q: %v", c.bench, c.args, err)
		}
		if cfg.WarmupTime != c.want {
			t.Errorf("%s %q: warm-up time %v, want %v", c.bench, c.args, cfg.WarmupTime, c.want)
		}
	}
	for _, bad := range [][]string{{"-m", "x"}, {"-i", "0"}, {"-q"}, {"--nope"}, {"-m"}, {"-T", "bf16"}, {"-k", "-1"},
		{"-m", "64:8"}, {"stray"}, {"-o", "xml"}, {"--full=1"}} {
		if _, err := Parse(Lookup("allreduce"), bad); !errors.Is(err, ErrUsage) {
			t.Errorf("%q: err %v, want a usage error", bad, err)
		}
	}
	if _, err := Parse(Lookup("allreduce"), []string{"-h"}); !errors.Is(err, ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestParseGetoptSyntax: the spellings getopt_long accepts in OSU's
// benchmarks give the same Config, and getopt's errors are usage errors in
// our words.
func TestParseGetoptSyntax(t *testing.T) {
	want := parse(t, "allreduce", "-f", "-c", "-m", "8:64K", "-i", "20")
	for _, args := range [][]string{
		{"-f", "-c", "-m8:64K", "-i20"},
		{"-fc", "-m", "8:64K", "-i", "20"},
		{"-fcm", "8:64K", "-i20"},
		{"-cfm8:64K", "--iterations=20"},
		{"--full", "--validation", "--message-size", "8:64K", "--iterations", "20"},
		{"--full", "--validation", "--message-size=8:64K", "--iterations=20", "--"},
		{"--f", "-c", "-m", "8:64K", "-i", "20"}, // --f is -f
	} {
		got := parse(t, "allreduce", args...)
		if *got != *want {
			t.Errorf("%q: %+v, want %+v", args, got, want)
		}
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-q"}, "unknown option -q"},
		{[]string{"-fq"}, "unknown option -q"},
		{[]string{"--nope=1"}, "unknown option --nope"},
		{[]string{"-i"}, "option -i needs a value"},
		{[]string{"-c", "--iterations"}, "option --iterations needs a value"},
		{[]string{"--full=1"}, "option --full takes no value"},
		{[]string{"-m=8:64"}, `invalid message size "=8:64"`}, // getopt: the value is "=8:64"
		{[]string{"-i", "20", "stray"}, `unexpected argument "stray"`},
		{[]string{"--", "stray"}, `unexpected argument "stray"`},
		{[]string{"-"}, `unexpected argument "-"`},
	} {
		_, err := Parse(Lookup("allreduce"), c.args)
		if !errors.Is(err, ErrUsage) || err.Error() != c.msg {
			t.Errorf("%q: %v, want the usage error %q", c.args, err, c.msg)
		}
	}
	if _, err := Parse(Lookup("allreduce"), []string{"-c", "-h", "-q"}); !errors.Is(err, ErrHelp) {
		t.Errorf("-c -h -q: %v, want help (options are read in order)", err)
	}
	if _, err := Parse(Lookup("allreduce"), []string{"--version"}); !IsVersion(err) {
		t.Errorf("--version: %v", err)
	}
}

func ExampleUsage() {
	lines := strings.Split(Usage(Lookup("bcast"), "osu bcast"), "\n")
	fmt.Println(strings.Join(lines[:3], "\n"))
	// Output:
	// Usage: osu bcast [options]
	// bcast: OSU Micro-Benchmarks' Broadcast Latency Test over goccl.
	// Options:
}

// TestPatterns checks the fast fill and check against val element by
// element, at lengths around the period.
func TestPatterns(t *testing.T) {
	for _, n := range []int{0, 1, 60, 61, 62, 122, 1000} {
		for _, off := range []int{0, 5, 61, 130} {
			buf := make([]int8, n)
			fillFrom(buf, pattern[int8](3, 4), off)
			for i, v := range buf {
				if want := val[int8](3, off+i, 4); v != want {
					t.Fatalf("n=%d off=%d: element %d is %d, want %d", n, off, i, v, want)
				}
			}
			if w := wrongFrom(buf, pattern[int8](3, 4), off); w != 0 {
				t.Errorf("n=%d off=%d: %d wrong in a correct buffer", n, off, w)
			}
			if n > 0 {
				buf[n-1]++
				if w := wrongFrom(buf, pattern[int8](3, 4), off); w != 1 {
					t.Errorf("n=%d off=%d: %d wrong, want 1", n, off, w)
				}
			}
		}
	}
	s := sumPattern[float32](3, 2)
	for k := range period {
		if want := val[float32](0, k, 2) + val[float32](1, k, 2) + val[float32](2, k, 2); s[k] != want {
			t.Errorf("sum %d: %v, want %v", k, s[k], want)
		}
	}
}

// TestWarmupFor: the first size warms up for --warmup-time, each later
// size up to largeMessageSize for sizeWarmupTime, larger ones not at
// all, and --warmup-time 0 turns both off.
func TestWarmupFor(t *testing.T) {
	r := &runner[float32]{cfg: parse(t, "allreduce")}
	for _, c := range []struct {
		size  int
		first bool
		want  time.Duration
	}{
		{8, true, defaultWarmupTime},
		{1 << 20, true, defaultWarmupTime},
		{16, false, sizeWarmupTime},
		{largeMessageSize, false, sizeWarmupTime},
		{largeMessageSize * 2, false, 0},
	} {
		if got := r.warmupFor(c.size, c.first); got != c.want {
			t.Errorf("size %d (first %v): %v, want %v", c.size, c.first, got, c.want)
		}
	}
	r.cfg = parse(t, "allreduce", "--warmup-time", "0")
	if got := r.warmupFor(8, true) + r.warmupFor(16, false); got != 0 {
		t.Errorf("--warmup-time 0: %v", got)
	}
}

// TestBackToBack: --back-to-back times a blocking collective's calls of a
// size together (OSU's layout, a line that says so, JSON's timing field),
// with rotating roots agreed by every rank; it refuses the tests it does
// not apply to and -c, which needs a barrier around each call.
func TestBackToBack(t *testing.T) {
	out := runBench(t, 3, "bcast", "-m", "4:16", "-i", "5", "-x", "2", "-k", "rotate", "-f", "--back-to-back")
	if !strings.Contains(out, "# Timing: back to back") {
		t.Errorf("no timing line:\n%s", out)
	}
	r := rows(out)
	if len(r) != 3 {
		t.Fatalf("%d rows, want 3:\n%s", len(r), out)
	}
	for _, l := range r {
		if !regexp.MustCompile(`^(4|8|16) +(\d+\.\d\d +){3} +5$`).MatchString(l) {
			t.Errorf("row %q", l)
		}
	}
	out = runBench(t, 2, "allreduce", "-m", "8:16", "-i", "3", "-x", "1", "-o", "json", "--back-to-back")
	recs, err := ReadRecords(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(recs), out)
	}
	for _, rec := range recs {
		if rec.Timing != "back-to-back" || rec.Layout != "osu" || rec.Iterations != 3 || rec.AvgUs <= 0 {
			t.Errorf("record %+v", rec)
		}
	}
	if cfg := parse(t, "alltoall", "--back-to-back"); !cfg.BackToBack {
		t.Errorf("alltoall --back-to-back: %+v", cfg)
	}
	for _, bad := range []struct {
		bench string
		args  []string
	}{
		{"latency", nil}, {"bw", nil}, {"iallreduce", nil}, {"allreduce", []string{"-c"}}, {"allreduce", []string{"--nccl"}},
	} {
		_, err := Parse(Lookup(bad.bench), append([]string{"--back-to-back"}, bad.args...))
		if !errors.Is(err, ErrUsage) || !strings.Contains(fmt.Sprint(err), "--back-to-back") {
			t.Errorf("%s --back-to-back %q: err %v, want a usage error about it", bad.bench, bad.args, err)
		}
	}
}

// TestBackToBackLetsTheRootRunAhead: timed back to back, a broadcast's
// root waits for a slow receiver only once it has run out of room ahead
// of it (the executor's slots), so it finishes calls before the receiver
// does; timed as OSU does, the barrier after each call absorbs the
// receiver's delays, untimed. A receiver that sleeps 2 ms after each of
// 30 calls: back to back, the root's span is tens of milliseconds and
// several naps shorter than the receiver's (a barrier between the calls
// would make them equal); its OSU time is a small fraction of that.
func TestBackToBackLetsTheRootRunAhead(t *testing.T) {
	const iters, nap = 30, 2 * time.Millisecond
	var b2b, osuT [2]time.Duration
	runRanks(t, 2, func(c *comm.Comm, out io.Writer) error {
		cfg := parse(t, "bcast", "-k", "0")
		r := &runner[float32]{ctx: context.Background(), c: c, cfg: cfg, b: cfg.Bench, rank: c.Rank(), n: c.Size()}
		r.impl.Run = func(ctx context.Context, c *comm.Comm, send, recv []float32, _ comm.Op, root int, _ []comm.CallOption) error {
			err := comm.Broadcast(ctx, c, recv, root)
			if c.Rank() != root {
				time.Sleep(nap)
			}
			return err
		}
		buf := make([]float32, 2)
		tb, err := r.backToBack(buf, buf, iters, 2)
		if err != nil {
			return err
		}
		to, _, err := r.osuLoop(buf, buf, 2, iters, 2)
		if err != nil {
			return err
		}
		b2b[r.rank], osuT[r.rank] = tb, to
		return nil
	})
	t.Logf("back to back: root %v, receiver %v; as OSU times: root %v", b2b[0], b2b[1], osuT[0])
	if b2b[0] < iters*nap/3 || osuT[0]*5 > b2b[0] {
		t.Errorf("root: %v back to back, %v as OSU times, for %d calls whose receiver naps %v after each", b2b[0], osuT[0], iters, nap)
	}
	if b2b[1]-b2b[0] < 3*nap {
		t.Errorf("back to back, the root (%v) did not finish ahead of the receiver (%v) by several naps of %v", b2b[0], b2b[1], nap)
	}
}

// The 16-bit float types (-T float16, bfloat16; nccl-tests' "half"), whose
// values a plain conversion would take as bits: every result checked, on 3
// ranks, for the reductions and a copy; nccl-tests' layout names them.
func TestHalfTypes(t *testing.T) {
	for _, typ := range []string{"float16", "bfloat16", "half"} {
		for _, b := range []string{"allreduce", "reduce_scatter", "alltoall"} {
			t.Run(typ+"/"+b, func(t *testing.T) {
				out := runBench(t, 3, b, "-m", "6:96", "-i", "2", "-x", "1", "-c", "-T", typ)
				r := rows(out)
				if len(r) < 4 {
					t.Fatalf("%d rows:\n%s", len(r), out)
				}
				for _, l := range r {
					if !strings.HasSuffix(l, "Pass") {
						t.Errorf("row %q: not Pass", l)
					}
				}
			})
		}
	}
	out := runBench(t, 2, "allreduce", "--nccl", "-m", "8:16", "-T", "float16")
	if !strings.Contains(out, " half ") {
		t.Errorf("nccl-tests' layout does not name float16 half:\n%s", out)
	}
}
