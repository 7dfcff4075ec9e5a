package peers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ops are the operations the harness compares, in osu's names.
var Ops = []string{"latency", "allreduce", "bcast", "alltoall", "allgather", "reduce_scatter", "reduce", "gather", "scatter"}

// Config is one comparison.
type Config struct {
	Op         string   // one of Ops
	NP         int      // ranks (latency: 2)
	Min, Max   int      // message sizes in bytes, doubling from Min (>= 1) to Max
	Iters      int      // timed calls per size
	Warmup     int      // untimed calls per size before them
	Rounds     int      // times each program runs, alternating
	Peers      []string // names from Peers
	Transport  string   // goccl's transport for the default command (osu --transport); "" lets goccl choose
	GlooAlgo   string   // Gloo's allreduce: torch (default: gloo::allreduce), ring_chunked, ring, halving_doubling
	Method     string   // how every program times a size: MethodOSU ("" too) or MethodB2B
	RunTimeout time.Duration
}

// The timing methods (Config.Method). MethodOSU is OSU's: each call timed
// alone, an untimed barrier after it, a rank's latency the mean of its
// calls' times. MethodB2B times a size's calls together, with no barrier
// between them (a barrier before the first), a rank's latency their span
// over the calls, as nccl-tests and back-to-back drivers do: a rank with
// nothing to wait for (a broadcast's root) may run calls ahead of the
// others. goccl's side is osu --back-to-back. latency is timed the same
// either way (a ping-pong has no barrier between its exchanges).
const (
	MethodOSU = "osu"
	MethodB2B = "b2b"
)

// BackToBack reports whether c's programs time its calls back to back
// (MethodB2B; latency is a ping-pong either way).
func (c *Config) BackToBack() bool { return c.Method == MethodB2B && c.Op != "latency" }

// DefaultWarmup is the warm-up the harness uses for iters timed calls when
// none is given: a tenth, at least one.
func DefaultWarmup(iters int) int { return iters/10 + 1 }

// Validate checks c and the peers' support of its operation.
func (c *Config) Validate() error {
	if !slices.Contains(Ops, c.Op) {
		return fmt.Errorf("unknown operation %q (have %s)", c.Op, strings.Join(Ops, ", "))
	}
	if c.NP < 2 {
		return fmt.Errorf("-np %d: need at least 2 ranks", c.NP)
	}
	if c.Op == "latency" && c.NP != 2 {
		return fmt.Errorf("latency runs on exactly 2 ranks, not %d", c.NP)
	}
	if c.Min < 1 || c.Max < c.Min {
		return fmt.Errorf("sizes %d:%d: want 1 <= MIN <= MAX", c.Min, c.Max)
	}
	if len(Sizes(c.Op, c.NP, c.Min, c.Max)) == 0 {
		return fmt.Errorf("%s: no size in %d:%d holds a whole element per rank", c.Op, c.Min, c.Max)
	}
	if c.Iters < 1 || c.Warmup < 0 || c.Rounds < 1 {
		return fmt.Errorf("need at least 1 iteration and 1 round, and no negative warm-up (have %d, %d, %d)", c.Iters, c.Rounds, c.Warmup)
	}
	switch c.Method {
	case "", MethodOSU, MethodB2B:
	default:
		return fmt.Errorf("unknown timing method %q (have %s, %s)", c.Method, MethodOSU, MethodB2B)
	}
	switch c.GlooAlgo {
	case "", "ring_chunked", "ring", "halving_doubling", "torch":
	default:
		return fmt.Errorf("unknown Gloo allreduce %q (have ring_chunked, ring, halving_doubling, torch)", c.GlooAlgo)
	}
	seen := map[string]bool{}
	for _, name := range c.Peers {
		if PeerNamed(name) == nil {
			return fmt.Errorf("unknown peer %q (have %s)", name, strings.Join(PeerNames(), ", "))
		}
		if seen[name] {
			return fmt.Errorf("peer %s named twice", name)
		}
		if name == "floor-tcp" && (!slices.Contains(FloorOps, c.Op) || c.NP != 2 || c.Max > 1<<20) {
			return fmt.Errorf("floor-tcp times %s of 2 ranks up to 1 MiB (bench/cmd/tcpfloor), not %s of %d ranks up to %d bytes",
				strings.Join(FloorOps, " and "), c.Op, c.NP, c.Max)
		}
		seen[name] = true
	}
	return nil
}

// Sizes lists the message sizes of a run: doubling from min to max, as osu
// -m MIN:MAX, without those that hold no whole element per rank (the
// drivers and osu skip them too).
func Sizes(op string, np, min, max int) []int {
	var s []int
	for size := min; size <= max; size = nextSize(size) {
		if blockElems(op, size, np) > 0 {
			s = append(s, size)
		}
	}
	return s
}

func nextSize(s int) int {
	if s == 0 {
		return 1
	}
	return 2 * s
}

// blockElems is the block a size gives each rank, in elements (float32;
// bytes for latency).
func blockElems(op string, size, np int) int {
	switch op {
	case "latency":
		return size
	case "reduce_scatter":
		return size / 4 / np
	}
	return size / 4
}

// osuMemLimit is bench/osu's default -M (OSU's MAX_MEM_LIMIT).
const osuMemLimit = 512 << 20

// GocclCommand is goccl's side of c when the user gives none: gorun
// starting NP ranks of osu with the same sizes, counts and element type as
// the drivers (float32 for collectives; bytes for latency).
func GocclCommand(c *Config, gorun, osu string) []string {
	argv := []string{gorun, "-n", strconv.Itoa(c.NP), osu, c.Op,
		"-m", fmt.Sprintf("%d:%d", c.Min, c.Max), "-i", strconv.Itoa(c.Iters), "-x", strconv.Itoa(c.Warmup)}
	if c.Op != "latency" {
		argv = append(argv, "-T", "float32")
	}
	if need := c.Max * c.NP; need > osuMemLimit {
		argv = append(argv, "-M", strconv.Itoa(need))
	}
	if c.Transport != "" {
		argv = append(argv, "--transport", c.Transport)
	}
	if c.BackToBack() {
		argv = append(argv, "--back-to-back")
	}
	return argv
}
