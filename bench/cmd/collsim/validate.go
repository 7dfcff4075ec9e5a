package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/goccl/goccl/bench/osu"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/collectives/simulate"
)

// validateCmd reads what scripts/sim-validate.sh measured in DIR, fits the
// model per rate (DIR/calib), predicts every measured point (DIR/runs),
// prints predicted vs measured and writes the fitted models
// (DIR/fit-RATE.json, usable with -params).
//
// DIR/calib/local.json and DIR/calib/net-RATE.json are `collsim
// calibrate` outputs (2 ranks on one host; on two hosts), as are the
// optional DIR/calib/oversub-ring-N.json, oversub-rd-N.json,
// oversub-tree-N.json and oversub-a2a-N.json (N ranks on one host, more
// than the cores: ring, recursive doubling and tree allreduce, pairwise
// all-to-all) and crowd-RATE-ALGO-HxR.json (H
// hosts of R ranks, more than the cores, links at RATE);
// DIR/runs/RATE/HxR/COLL-ALGO.json are `osu COLL --algorithm ALGO -o json`
// outputs of H hosts with R ranks each. When DIR holds rounds of all this
// (DIR/round-1, round-2, ...), every calibration time and every point is
// the median of its rounds (-stat min: the fastest), and the summary says
// how far the rounds agree.
func validateCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collsim validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cores := fs.Int("cores", runtime.NumCPU(), "cores of the machine the namespaces share")
	tol := fs.Float64("tolerance", 0.25, "relative error counted as a hit")
	plotFile := fs.String("plot", "", "write predicted against measured as a PNG")
	quiet := fs.Bool("q", false, "print the summary only, not every point")
	paced := fs.Bool("paced", true, "simulate as OSU measures: each call after the barrier that follows the previous one, each rank timed from its own entry (false: every rank starts at once)")
	lowestSmall := fs.Bool("lowest-small-cpu", true, "the net class's CPU per call up to 8 KiB: the lowest of all the rates' calibrations (false: the fastest rate's)")
	credits := fs.Bool("credit-writes", true, "a credit that cannot ride with data costs a message's CPU at both ends, as goccl's executor sends it (false: credits cost no CPU)")
	coalesce := fs.Bool("coalesce", true, "data messages to one peer posted in the same step share one write and one read, as goccl's TCP transport writes them (simulate.Params.Coalesce; false: each costs a message's CPU)")
	oneThread := fs.Bool("one-thread", true, "a rank's executor and transport run on one thread, one task after another, as the waiting caller drives goccl's TCP transport (simulate.Params.OneThread; false: three threads per rank, as before 4 December, evening: a rank then reads while it writes, and a 2-rank barrier let the late rank out first)")
	writeTail := fs.Bool("write-tail", true, "-wall-split also fits the part of a write's CPU spent after its message is readable at the other end (simulate.Link.WriteTail: loopback and veth deliver within the sender's system call; false: none). With -one-thread it made the 2-rank broadcast's leaf right (9.3 us measured, 10.3 modelled, 13.6-15.1 without) and gained a point on each of two full runs (4 December)")
	bucket := fs.Bool("bucket", true, "model the token bucket of the links' shaper (calib/net-RATE.burst, else sim-validate.sh's default for the rate)")
	netLat := fs.Float64("net-latency", 0, "microseconds per rank per core that crowded cores add to a message between hosts (simulate.Oversub.NetLatency); negative: fitted from calib/crowd-RATE-ALGO-HxR.json (0 without them). 0 by default: fitting it gained on one quick run of three and lost on both full ones on 3 December; on the model of 5 December it gained 3-6 points on four full runs of six and lost 4-5 on the other two (svs1, svt1; with the all-to-all in the crowded levels' fit, 78% against 82% on svt1, 85% against 82% on svt2)")
	statName := fs.String("stat", "median", "how a time measured in several rounds counts, calibrations and points alike: median, or min (the fastest round: a shared machine's other work only adds time)")
	wallSplit := fs.Bool("wall-split", true, "split each class's CPU between a call and a message from wall times, a broadcast's root and leaf apart (calib/bcast-local.json, bcast-net-RATE.json; fitWallSplit), not from the calibrations' CPU times, which count their ranks' polling (false: the CPU times' split, as before 4 December; it scored 2-3 points less on both full runs that compared them)")
	overFit := fs.String("oversub-fit", "levels", "how the levels of ranks sharing cores are fitted: levels (each from its own calibrations: ring, recursive doubling and tree at 256 B) or joint (every level's at once, latency and wake-up in proportion to the other ranks on a core, one gap: fitOversubJoint); with -reuse-fit, given on the command line, the levels are fitted again")
	overA2A := fs.Bool("oversub-a2a", true, "the levels of ranks sharing cores are fitted to the pairwise all-to-all too (calib/oversub-a2a-N.json, where there), besides the allreduces; with -reuse-fit, the levels are fitted again when this is given on the command line")
	reuse := fs.Bool("reuse-fit", false, "predict with the model in DIR/fit-RATE.json (-stat min: fit-min-RATE.json), which an earlier validate of DIR fitted, instead of fitting it again (minutes); -wall-split=false: fit-cpu-split-RATE.json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("validate: want one directory")}
	}
	if *overFit != "levels" && *overFit != "joint" {
		return usageError{fmt.Errorf("validate: -oversub-fit %q: want levels or joint", *overFit)}
	}
	stat, ok := roundStats[*statName]
	if !ok {
		return usageError{fmt.Errorf("validate: -stat %q: want median or min", *statName)}
	}
	// A model fitted on the fastest rounds is kept apart from the
	// median's, so that -reuse-fit finds the one its -stat fitted.
	fitPrefix := "fit-"
	if *statName != "median" {
		fitPrefix += *statName + "-"
	}
	if !*wallSplit {
		fitPrefix += "cpu-split-"
	}
	fitFile := func(rateName string) string { return filepath.Join(fs.Arg(0), fitPrefix+rateName+".json") }
	dir := fs.Arg(0)
	rounds, err := roundDirs(dir)
	if err != nil {
		return err
	}
	if len(rounds) > 1 {
		fmt.Fprintf(stdout, "# %d rounds of measurement (%s .. %s): every calibration time and every point is the %s of its rounds\n",
			len(rounds), filepath.Base(rounds[0]), filepath.Base(rounds[len(rounds)-1]), *statName)
	}
	local, err := readCalibrationRounds(rounds, stat, filepath.Join("calib", "local.json"))
	if err != nil {
		return err
	}
	// Optional: recursive doubling on the local class's 2 ranks at 8 B (one
	// message each way per call where the ring has two), which tells the
	// CPU per call from the CPU per message (simulate.Params.CallOverhead).
	var localOthers []*calibration
	if rd, err := readCalibrationRounds(rounds, stat, filepath.Join("calib", "local-rd.json")); err == nil {
		localOthers = append(localOthers, rd)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Optional: more ranks on one host than cores, at several levels
	// (simulate.Oversub): oversub-ring-N.json, oversub-rd-N.json and
	// oversub-tree-N.json for N ranks (the tree: runs before midday on 2
	// December lack it, and their model has no Oversub.Wake).
	overFiles, err := globRounds(rounds, filepath.Join("calib", "oversub-ring-*.json"))
	if err != nil {
		return err
	}
	var overs []overCal
	for _, f := range overFiles {
		var pair overCal
		if pair.ring, err = readCalibrationRounds(rounds, stat, f); err != nil {
			return err
		}
		optional := func(algo, coll string) (*calibration, error) {
			c, err := readCalibrationRoundsOf(rounds, stat, strings.Replace(f, "oversub-ring-", "oversub-"+algo+"-", 1), coll)
			if errors.Is(err, os.ErrNotExist) {
				return nil, nil
			}
			return c, err
		}
		if pair.rd, err = optional("rd", "allreduce"); err != nil {
			return err
		}
		if pair.tree, err = optional("tree", "allreduce"); err != nil {
			return err
		}
		if *overA2A {
			if pair.a2a, err = optional("a2a", "alltoall"); err != nil {
				return err
			}
		}
		overs = append(overs, pair)
	}
	slices.SortFunc(overs, func(a, b overCal) int { return a.ring.ranks - b.ring.ranks })
	nets, err := globRounds(rounds, filepath.Join("calib", "net-*.json"))
	if err != nil || len(nets) == 0 {
		return fmt.Errorf("validate: no %s", filepath.Join(dir, "calib", "net-RATE.json"))
	}
	// The net class's CPU costs come from the fastest link's calibration
	// (fitClassCPU): on a slower one the ranks' polling while the link
	// drains counts as CPU time. Up to smallSize, where the rate does not
	// matter, from the lowest CPU per call of all the rates' calibrations:
	// polling and slow minutes only add to it. Measured (2 December, 3
	// rounds): 2 ranks on two hosts, 8 B, 31 us of CPU per call at 1
	// Gbit/s, 59 at 10 Gbit/s (wall 29 and 61; the points measured at 10
	// Gbit/s ran at 12-28 us), which put every small size at 10 Gbit/s
	// above its time.
	var cpuNet *calibration
	var allNets []*calibration
	fastest := 0.0
	for _, nf := range nets {
		rateName := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(nf), "net-"), ".json")
		c, err := readCalibrationRounds(rounds, stat, nf)
		if err != nil {
			return err
		}
		allNets = append(allNets, c)
		if bps := parseRate(rateName); bps > fastest {
			cpuNet, fastest = c, bps
		}
	}
	if *lowestSmall && cpuNet != nil {
		out := *cpuNet
		out.sizes = slices.Clone(cpuNet.sizes)
		for i := range out.sizes {
			if out.sizes[i].bytes > smallSize {
				continue
			}
			for _, c := range allNets {
				for _, sz := range c.sizes {
					if sz.bytes == out.sizes[i].bytes && sz.cpu < out.sizes[i].cpu {
						out.sizes[i].cpu = sz.cpu
					}
				}
			}
		}
		cpuNet = &out
	}
	// Optional: ranks on several hosts that outnumber the cores, per rate
	// (crowd-RATE-ALGO-HxR.json; runs before 3 December, midday, lack
	// them, and their model has no Oversub.NetLatency).
	crowd := map[string][]crowdCal{}
	crowdFiles, err := globRounds(rounds, filepath.Join("calib", "crowd-*.json"))
	if err != nil {
		return err
	}
	for _, f := range crowdFiles {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "crowd-"), ".json")
		parts := strings.Split(name, "-")
		var h, r int
		if len(parts) < 3 {
			return fmt.Errorf("validate: %s: want crowd-RATE-ALGO-HxR.json", f)
		}
		if _, err := fmt.Sscanf(parts[len(parts)-1], "%dx%d", &h, &r); err != nil || h < 2 || r < 1 {
			return fmt.Errorf("validate: %s: want crowd-RATE-ALGO-HxR.json", f)
		}
		c, err := readCalibrationRounds(rounds, stat, f)
		if err != nil {
			return err
		}
		if c.ranks != h*r {
			return fmt.Errorf("validate: %s: %d ranks, not %dx%d", f, c.ranks, h, r)
		}
		crowd[parts[0]] = append(crowd[parts[0]], crowdCal{c, h})
	}
	// setNetLatency sets what crowded cores add to a message between
	// hosts: -net-latency's, or fitted from the crowded calibrations.
	setNetLatency := func(cfg *config, rateName string) error {
		if *netLat >= 0 {
			for i := range cfg.Oversub {
				cfg.Oversub[i].NetLatency = *netLat * 1e-6 * cfg.Oversub[i].RanksPerCore
			}
		} else if len(crowd[rateName]) > 0 {
			if _, err := fitNetLatency(cfg, crowd[rateName], *cores, stdout); err != nil {
				return fmt.Errorf("fit crowded net %s: %w", rateName, err)
			}
		}
		return nil
	}
	// splitFromWalls is fitWallSplit with the broadcast calibration
	// calib/NAME of the rounds; without one the CPU fit's split stays.
	splitFromWalls := func(cfg *config, class collectives.LinkClass, cal, rd *calibration, name string) error {
		bc, err := readCalibrationRoundsOf(rounds, stat, filepath.Join("calib", name), "broadcast")
		if errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stdout, "# no calib/%s: the %s class's CPU split stays the CPU times'\n", name, class)
			return nil
		}
		if err != nil {
			return err
		}
		if err := fitWallSplit(cfg, class, cal, rd, bc, *cores, *writeTail, stdout); err != nil {
			return fmt.Errorf("fit %s from wall times: %w", class, err)
		}
		return nil
	}
	// fitLevels fits the levels of ranks sharing cores (-oversub-fit)
	// on the local class of cfg, with the CPU's reduction and copy speeds
	// of the local calibration (a fitted model keeps the net one's), once:
	// every rate's model has the same (the calibrations are on one host).
	var fittedLevels []simulate.Oversub
	levelsFitted := false
	fitLevels := func(cfg *config) error {
		if levelsFitted {
			cfg.Oversub = slices.Clone(fittedLevels)
			return nil
		}
		one := *cfg
		one.Oversub, one.Gamma, one.Copy = nil, local.gamma, local.copy
		if *overFit == "joint" {
			levels, err := fitOversubJoint(&one, overs, *cores, stdout)
			if err != nil {
				return fmt.Errorf("fit oversubscription: %w", err)
			}
			one.Oversub = levels
		} else {
			for _, c := range overs {
				o, err := fitOversub(&one, c, *cores, stdout)
				if err != nil {
					return fmt.Errorf("fit oversubscription: %w", err)
				}
				one.Oversub = append(one.Oversub, o)
			}
		}
		fittedLevels, levelsFitted = one.Oversub, true
		cfg.Oversub = slices.Clone(fittedLevels)
		return nil
	}
	var all []vpoint
	for i, nf := range nets {
		rateName := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(nf), "net-"), ".json")
		cal := allNets[i]
		cfg := config{Paced: *paced, CreditWrites: *credits, Coalesce: *coalesce, OneThread: *oneThread}
		fmt.Fprintf(stdout, "# rate %s: the model fitted on this machine's %d cores\n", rateName, *cores)
		if *bucket {
			if cfg.Net.Burst, err = shaperBurst(rounds, rateName); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "# the hosts' links: a token bucket of %s in front of each (tc tbf burst)\n", sizeLabel(int(cfg.Net.Burst)))
		}
		if *reuse {
			b, err := os.ReadFile(fitFile(rateName))
			if err != nil {
				return err
			}
			// Settings a fit leaves out (omitempty) are off in it.
			cfg.CreditWrites, cfg.Coalesce, cfg.OneThread = false, false, false
			if err := json.Unmarshal(b, &cfg); err != nil {
				return fmt.Errorf("%s: %w", fitFile(rateName), err)
			}
			// The executor's settings are the fit's (each was fitted
			// under them), unless the command line sets one.
			cfg.Paced = *paced
			overridden := reuseOverrides(fs, &cfg, *credits, *coalesce, *oneThread, *writeTail)
			if flagSet(fs, "oversub-fit") || flagSet(fs, "oversub-a2a") {
				// The levels again from the calibrations, the
				// rest of the model (which they build on) the fit's.
				if err := fitLevels(&cfg); err != nil {
					return err
				}
				overridden += fmt.Sprintf(" (the levels of ranks sharing cores fitted again: -oversub-fit=%s)", *overFit)
			}
			if err := setNetLatency(&cfg, rateName); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "# the model of %s%s\n", fitFile(rateName), overridden)
			pts, err := predictRuns(rounds, stat, filepath.Join("runs", rateName), rateName, cfg, *cores)
			if err != nil {
				return err
			}
			all = append(all, pts...)
			continue
		}
		if err := fitClassCPU(&cfg, collectives.LinkLocal, local, local, localOthers, *cores, stdout); err != nil {
			return fmt.Errorf("fit local: %w", err)
		}
		if *wallSplit {
			var rd *calibration
			if len(localOthers) > 0 {
				rd = localOthers[0]
			}
			if err := splitFromWalls(&cfg, collectives.LinkLocal, local, rd, "bcast-local.json"); err != nil {
				return err
			}
		}
		if err := fitLevels(&cfg); err != nil {
			return err
		}
		cpuCal := cal
		if cpuNet != nil {
			cpuCal = cpuNet
		}
		if err := fitClassCPU(&cfg, collectives.LinkNet, cal, cpuCal, nil, *cores, stdout); err != nil {
			return fmt.Errorf("fit net %s: %w", rateName, err)
		}
		if *wallSplit {
			if err := splitFromWalls(&cfg, collectives.LinkNet, cal, nil, "bcast-net-"+rateName+".json"); err != nil {
				return err
			}
		}
		if err := setNetLatency(&cfg, rateName); err != nil {
			return err
		}
		cfg.Cores = *cores
		cfg.Note = fmt.Sprintf("fitted by collsim validate on %s (TCP between network namespaces, links shaped to %s)", dir, rateName)
		b, _ := json.MarshalIndent(cfg, "", "  ")
		if err := os.WriteFile(fitFile(rateName), append(b, '\n'), 0o644); err != nil {
			return err
		}
		pts, err := predictRuns(rounds, stat, filepath.Join("runs", rateName), rateName, cfg, *cores)
		if err != nil {
			return err
		}
		all = append(all, pts...)
	}
	if len(all) == 0 {
		return errors.New("validate: no measured points")
	}
	if !*quiet {
		writePoints(stdout, all, *tol)
	}
	writeSummary(stdout, all, *tol)
	if *plotFile != "" {
		f, err := os.Create(*plotFile)
		if err != nil {
			return err
		}
		err = drawValidation(f, all, *tol)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// vpoint is one measured point and its prediction.
type vpoint struct {
	rate                string
	hosts, rph          int
	coll, algo          string
	size                int // as OSU prints it: the buffer, or one block of all-to-all
	measured, predicted float64
	method              string
	rounds              []float64 // the time in each round that measured it
}

// spread is the largest relative distance of a round's time from the
// point's (their median).
func (p *vpoint) spread() float64 {
	s := 0.0
	for _, t := range p.rounds {
		s = max(s, math.Abs(t/p.measured-1))
	}
	return s
}

// roundHits counts, for a point measured in more than one round, the
// rounds whose time lies within tol of the median of the other rounds':
// how well the typical time, known exactly, would predict one measurement.
func (p *vpoint) roundHits(tol float64) (n, hits int) {
	if len(p.rounds) < 2 {
		return 0, 0
	}
	for i, t := range p.rounds {
		rest := append(slices.Clone(p.rounds[:i]), p.rounds[i+1:]...)
		n++
		if math.Abs(t/median(rest)-1) <= tol {
			hits++
		}
	}
	return n, hits
}

func (p *vpoint) ratio() float64 { return p.predicted / p.measured }

func (p *vpoint) hit(tol float64) bool { return math.Abs(p.ratio()-1) <= tol }

// parseRate reads a link rate as tc writes it ("1gbit", "100mbit",
// "10gbit"): bits per second, 0 if it is not one.
func parseRate(s string) float64 {
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			if v, err := strconv.ParseFloat(num, 64); err == nil && v > 0 {
				return v * u.scale
			}
		}
	}
	return 0
}

// shaperBurst is the token bucket, in bytes, of the tbf qdiscs that shaped
// the hosts' links at rateName: calib/net-RATE.burst of the first round
// that has it (sim-validate.sh writes it), else what sim-validate.sh set
// before it wrote one: 128 KiB up to 1 Gbit/s, 256 KiB above.
func shaperBurst(rounds []string, rateName string) (float64, error) {
	for _, rd := range rounds {
		b, err := os.ReadFile(filepath.Join(rd, "calib", "net-"+rateName+".burst"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s: want a number of bytes", filepath.Join(rd, "calib", "net-"+rateName+".burst"))
		}
		return float64(n), nil
	}
	if parseRate(rateName) <= 1e9 {
		return 128 << 10, nil
	}
	return 256 << 10, nil
}

// roundDirs returns the rounds of measurement under dir: dir/round-N, in
// the order of N (scripts/sim-validate.sh --rounds), or dir alone when it
// holds one round at its top.
func roundDirs(dir string) ([]string, error) {
	ms, err := filepath.Glob(filepath.Join(dir, "round-*"))
	if err != nil {
		return nil, err
	}
	type round struct {
		n   int
		dir string
	}
	var rs []round
	for _, m := range ms {
		var n int
		if _, err := fmt.Sscanf(filepath.Base(m), "round-%d", &n); err != nil {
			continue
		}
		if st, err := os.Stat(m); err == nil && st.IsDir() {
			rs = append(rs, round{n, m})
		}
	}
	if len(rs) == 0 {
		return []string{dir}, nil
	}
	slices.SortFunc(rs, func(a, b round) int { return a.n - b.n })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.dir
	}
	return out, nil
}

// globRounds returns the paths, relative to a round, that pattern
// matches in any of the rounds, sorted.
func globRounds(rounds []string, pattern string) ([]string, error) {
	seen := map[string]bool{}
	for _, r := range rounds {
		ms, err := filepath.Glob(filepath.Join(r, pattern))
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			rel, err := filepath.Rel(r, m)
			if err != nil {
				return nil, err
			}
			seen[rel] = true
		}
	}
	out := make([]string, 0, len(seen))
	for rel := range seen {
		out = append(out, rel)
	}
	sort.Strings(out)
	return out, nil
}

// readCalibrationRounds reads the calibration rel from every round that
// has it and takes, size by size, stat (the median, or the minimum) of
// the rounds' wall and CPU times, and the median of the CPU's speeds: one
// slow minute on a shared machine then moves no parameter. Repeats of
// some of its sizes in jobs of their own (again/NAME-K.json beside rel,
// NAME without .json) join stat of those sizes: here a whole job runs slow or fast (2 ranks on two
// hosts, ring, 8 B-4 KiB: 22-30 us in one job, 35-48 in the next), so
// more jobs, not more calls, steady the latency that every small
// prediction rests on. os.ErrNotExist when no round has rel.
func readCalibrationRounds(rounds []string, stat func([]float64) float64, rel string) (*calibration, error) {
	return readCalibrationRoundsOf(rounds, stat, rel, "allreduce")
}

// readCalibrationRoundsOf is readCalibrationRounds for a calibration of
// coll (readCalibrationOf); each rank's wall time, too, is stat of the
// rounds'.
func readCalibrationRoundsOf(rounds []string, stat func([]float64) float64, rel, coll string) (*calibration, error) {
	var cals []*calibration
	for _, r := range rounds {
		c, err := readCalibrationOf(filepath.Join(r, rel), coll)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		cals = append(cals, c)
	}
	if len(cals) == 0 {
		return nil, fmt.Errorf("validate: %s in no round: %w", rel, os.ErrNotExist)
	}
	for _, r := range rounds {
		again, err := filepath.Glob(filepath.Join(r, filepath.Dir(rel), "again", strings.TrimSuffix(filepath.Base(rel), ".json")+"-*.json"))
		if err != nil {
			return nil, err
		}
		sort.Strings(again)
		for _, f := range again {
			c, err := readCalibrationOf(f, coll)
			if err != nil {
				return nil, err
			}
			if c.algo != cals[0].algo || c.ranks != cals[0].ranks {
				return nil, fmt.Errorf("validate: %s: %s on %d ranks, where %s has %s on %d", f, c.algo, c.ranks, rel, cals[0].algo, cals[0].ranks)
			}
			cals = append(cals, c)
		}
	}
	if len(cals) == 1 {
		return cals[0], nil
	}
	out := *cals[0]
	out.sizes = slices.Clone(cals[0].sizes)
	var gammas, copies []float64
	for _, c := range cals {
		gammas, copies = append(gammas, c.gamma), append(copies, c.copy)
	}
	out.gamma, out.copy = median(gammas), median(copies)
	for i := range out.sizes {
		var walls, cpus []float64
		ranks := make([][]float64, len(out.sizes[i].rankWall))
		for _, c := range cals {
			for _, s := range c.sizes {
				if s.bytes == out.sizes[i].bytes {
					walls, cpus = append(walls, s.wall), append(cpus, s.cpu)
					for r := range min(len(ranks), len(s.rankWall)) {
						ranks[r] = append(ranks[r], s.rankWall[r])
					}
				}
			}
		}
		out.sizes[i].wall, out.sizes[i].cpu = stat(walls), stat(cpus)
		out.sizes[i].rankWall = make([]float64, len(ranks))
		for r, ws := range ranks {
			out.sizes[i].rankWall[r] = stat(ws)
		}
	}
	return &out, nil
}

// roundStats are validate -stat's ways to count a time measured in
// several rounds.
var roundStats = map[string]func([]float64) float64{
	"median": median,
	"min":    func(xs []float64) float64 { return slices.Min(xs) },
}

// median of xs (the mean of the middle two when their number is even);
// xs is reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// predictRuns predicts every osu output under rel (HxR/COLL-ALGO.json) in
// the rounds; a point measured in several rounds counts as stat of their
// times, and is simulated as cfg says (config.osuSimulate).
func predictRuns(rounds []string, stat func([]float64) float64, rel, rateName string, cfg config, cores int) ([]vpoint, error) {
	files, err := globRounds(rounds, filepath.Join(rel, "*x*", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []vpoint
	for _, f := range files {
		var h, r int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(f)), "%dx%d", &h, &r); err != nil {
			return nil, fmt.Errorf("%s: directory is not HOSTSxRANKS", f)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		collName, algo, ok := strings.Cut(name, "-")
		if !ok {
			return nil, fmt.Errorf("%s: file is not COLL-ALGO.json", f)
		}
		if collName == "bcast" {
			collName = "broadcast"
		}
		c, err := collectives.CollByName(collName)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		// The point's times in every round that measured it, in the order
		// the first round lists the points.
		type key struct{ size, root int }
		times := map[key][]float64{}
		var order []key
		for _, rd := range rounds {
			fh, err := os.Open(filepath.Join(rd, f))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			recs, err := osu.ReadRecords(fh)
			fh.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(rd, f), err)
			}
			for _, rec := range recs {
				if rec.AvgUs <= 0 {
					continue
				}
				k := key{rec.Size, max(rec.Root, 0)}
				if _, ok := times[k]; !ok {
					order = append(order, k)
				}
				times[k] = append(times[k], rec.AvgUs*1e-6)
			}
		}
		p := h * r
		m := simulate.Machine{Ranks: p, RanksPerHost: r, Cores: cores, PoolRanks: p}
		for _, k := range order {
			ts := times[k]
			meas := stat(slices.Clone(ts))
			bytes := k.size
			if c.Info().Blocked {
				bytes *= p
			}
			job := simulate.Job{Coll: c, Algo: algo, Bytes: bytes, Root: k.root, OutOfPlace: c.Info().Reducing}
			res, err := cfg.osuSimulate(job, m)
			if err != nil {
				return nil, fmt.Errorf("%s size %d: %w", f, k.size, err)
			}
			out = append(out, vpoint{rate: rateName, hosts: h, rph: r, coll: c.String(), algo: algo, size: k.size,
				measured: meas, predicted: res.MeanSeconds, method: res.Method.String(), rounds: ts})
		}
	}
	return out, nil
}

// osuSimulate simulates job on m with c's parameters, every rank in full:
// if c.Paced, as OSU's timed loop (and collsim calibrate) makes the calls,
// each after the barrier that follows the previous one (osuBarrier), each
// rank timed from its own entry, the ports' buckets in their steady
// state; else every rank starting at once.
func (c *config) osuSimulate(job simulate.Job, m simulate.Machine) (simulate.Result, error) {
	return c.osuSimulateWith(job, m, nil)
}

// osuSimulateWith is osuSimulate with the compiled schedules kept in
// plans (simulate.Options.Plans; nil: compiled every time).
func (c *config) osuSimulateWith(job simulate.Job, m simulate.Machine, plans *simulate.Plans) (simulate.Result, error) {
	par := c.params()
	opt := simulate.Options{Method: simulate.Full, Plans: plans}
	if c.Paced {
		bar, err := osuBarrier(m, &par)
		if err != nil {
			return simulate.Result{}, err
		}
		opt.Barrier = bar
	}
	return simulate.Simulate(job, m, par, opt)
}

// osuBarrier is the barrier OSU's timed loop calls after every call on m
// (simulate.Options.Barrier): the one the job's communicator picks, its
// ranks told to yield where they outnumber the cores (sim-validate.sh sets
// GOCCL_YIELD_WHEN_IDLE so), as on a crowded host.
func osuBarrier(m simulate.Machine, par *simulate.Params) (string, error) {
	sm := par.SelectorModel()
	sm.Crowded = m.Cores > 0 && m.Ranks > m.Cores
	a, _, err := collectives.Select(collectives.CollBarrier, 0, m.Topology(), sm, nil)
	if err != nil {
		return "", err
	}
	return a.Name, nil
}

// multiRound reports whether any point was measured in more than one
// round.
func multiRound(pts []vpoint) bool {
	return slices.ContainsFunc(pts, func(p vpoint) bool { return len(p.rounds) > 1 })
}

func writePoints(w io.Writer, pts []vpoint, tol float64) {
	rounds := multiRound(pts)
	fmt.Fprintln(w, "\n## every point (time per call, the mean over ranks, as OSU reports it)")
	if rounds {
		fmt.Fprintln(w, "# measured: the median of the rounds; spread: the farthest round from it")
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	head := "rate\thosts x ranks\tcollective\talgorithm\tsize\tmeasured\tpredicted\tpred/meas\t\t"
	if rounds {
		head += "spread\t"
	}
	fmt.Fprintln(tw, head)
	for _, p := range pts {
		mark := ""
		if !p.hit(tol) {
			mark = "MISS"
		}
		fmt.Fprintf(tw, "%s\t%dx%d\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t", p.rate, p.hosts, p.rph, p.coll, p.algo,
			sizeLabel(p.size), seconds(p.measured), seconds(p.predicted), p.ratio(), mark)
		if rounds {
			fmt.Fprintf(tw, "%.0f%%\t", 100*p.spread())
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// writeSummary prints the share of hits overall and per group, and the
// median ratio per group: where the model is off and in which direction.
// With several rounds it also prints, per group, the share of rounds whose
// time lies within the tolerance of the median of the other rounds (of the
// points measured in more than one): how far the measurement repeats
// itself, about the most any model could match.
func writeSummary(w io.Writer, pts []vpoint, tol float64) {
	type agg struct {
		n, hits        int
		rounds, steady int
		ratios         []float64
	}
	rounds := multiRound(pts)
	groups := map[string]*agg{}
	var order []string
	add := func(key string, p *vpoint) {
		g := groups[key]
		if g == nil {
			g = &agg{}
			groups[key] = g
			order = append(order, key)
		}
		g.n++
		if p.hit(tol) {
			g.hits++
		}
		rn, rh := p.roundHits(tol)
		g.rounds += rn
		g.steady += rh
		g.ratios = append(g.ratios, p.ratio())
	}
	for i := range pts {
		p := &pts[i]
		add("all", p)
		add("rate "+p.rate, p)
		add("collective "+p.coll+" "+p.algo, p)
		add(fmt.Sprintf("hosts x ranks %dx%d", p.hosts, p.rph), p)
		add("size "+sizeBand(p.size), p)
	}
	fmt.Fprintf(w, "\n## summary: predictions within %.0f%% of measurement\n", tol*100)
	if rounds {
		fmt.Fprintf(w, "# round vs rest: the share of single rounds within %.0f%% of the median of the other rounds\n", tol*100)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	head := "group\tpoints\twithin\tshare\tmedian pred/meas\tmiddle half of pred/meas"
	if rounds {
		head += "\tround vs rest"
	}
	fmt.Fprintln(tw, head)
	for _, k := range order {
		g := groups[k]
		slices.Sort(g.ratios)
		q := func(f float64) float64 { return g.ratios[int(f*float64(len(g.ratios)-1))] }
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f%%\t%.2f\t%.2f .. %.2f", k, g.n, g.hits, 100*float64(g.hits)/float64(g.n), q(0.5), q(0.25), q(0.75))
		switch {
		case rounds && g.rounds > 0:
			fmt.Fprintf(tw, "\t%.0f%%", 100*float64(g.steady)/float64(g.rounds))
		case rounds:
			fmt.Fprint(tw, "\t-")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func sizeBand(n int) string {
	switch {
	case n <= 4<<10:
		return "<= 4K"
	case n <= 256<<10:
		return "8K..256K"
	}
	return ">= 512K"
}

// reuseOverrides applies to a model read back for -reuse-fit the
// executor's settings the command line sets explicitly (-credit-writes,
// -coalesce, -one-thread, -write-tail=false), and says which, for the
// report's line naming the model; the settings it does not set stay the
// fit's, under which its costs were fitted (before, the flags' defaults
// replaced them, so a fit made with -one-thread=false was predicted on
// one thread).
// flagSet says whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// overCal is one level's calibrations of ranks sharing cores: N ranks on
// one host, the ring, and recursive doubling and the tree if calibrated.
type overCal struct{ ring, rd, tree, a2a *calibration }

func reuseOverrides(fs *flag.FlagSet, cfg *config, credits, coalesce, oneThread, writeTail bool) string {
	var names []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "credit-writes":
			cfg.CreditWrites = credits
		case "coalesce":
			cfg.Coalesce = coalesce
		case "one-thread":
			cfg.OneThread = oneThread
		case "write-tail":
			if writeTail {
				return // a fit without a tail has none to keep
			}
			cfg.Local.WriteTail, cfg.Net.WriteTail = 0, 0
		default:
			return
		}
		names = append(names, "-"+f.Name+"="+f.Value.String())
	})
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, " ") + " in place of the fit's)"
}
