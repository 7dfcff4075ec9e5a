package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/bench/osu"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/collectives/simulate"
	"github.com/goccl/goccl/transport/shm"
	"github.com/goccl/goccl/transport/tcp"
)

func TestTablesSmallGrid(t *testing.T) {
	var out, errs bytes.Buffer
	dir := t.TempDir()
	code := run([]string{"-ranks", "8,16", "-coll", "allreduce,alltoall", "-sizes", "8,1M", "-plot", dir}, &out, &errs)
	require.Equal(t, 0, code, errs.String())
	s := out.String()
	for _, want := range []string{
		"## allreduce on 8 ranks (1 host)", "## allreduce on 16 ranks (2 hosts)", "## alltoall on 16 ranks",
		"rabenseifner", "recursive-doubling", "fastest", "selector",
		"### allreduce: fastest simulated", "| size | 8 ranks | 16 ranks |", "| 1M |",
		"### alltoall: fastest simulated", "| block |",
	} {
		require.Contains(t, s, want)
	}
	for _, f := range []string{"collsim-allreduce.png", "collsim-alltoall.png"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Greater(t, st.Size(), int64(1000))
	}
}

func TestTablesJSON(t *testing.T) {
	var out, errs bytes.Buffer
	code := run([]string{"-ranks", "4", "-coll", "broadcast", "-sizes", "64K", "-o", "json", "-preset", "tcp"}, &out, &errs)
	require.Equal(t, 0, code, errs.String())
	var pt point
	require.NoError(t, json.Unmarshal(out.Bytes(), &pt))
	require.Equal(t, "broadcast", pt.Coll)
	require.Equal(t, 4, pt.Ranks)
	require.Len(t, pt.Algos, len(collectives.Algorithms("broadcast")), "every flat algorithm simulated")
	require.NotEmpty(t, pt.Best)
	require.NotEmpty(t, pt.Selector)
	for _, a := range pt.Algos {
		require.Empty(t, a.Err)
		require.Greater(t, a.Seconds, 0.0)
		require.Equal(t, "full", a.Method)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-ranks", "1"}, {"-ranks", "x"}, {"-coll", "bcast"}, {"-preset", "nope"}, {"-o", "xml"},
		{"stray"}, {"-nope"}, {"validate"}, {"calibrate", "-sizes", "zero"}, {"calibrate", "-coll", "gather"},
	} {
		var out, errs bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errs), "%v: %s", args, errs.String())
		require.Contains(t, errs.String(), "collsim:", "%v", args)
	}
	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"-h"}, &out, &errs))
	require.Contains(t, errs.String(), "usage: collsim")
}

// truth is a model to recover: a TCP-like machine of 2 cores.
func truth() config {
	return config{
		Local:      simulate.Link{Alpha: 30e-6, Overhead: 6e-6, PerByte: 0.4e-9},
		Net:        simulate.Link{Alpha: 70e-6, Beta: 8e-9, Overhead: 9e-6, PerByte: 0.6e-9, Burst: 128 << 10},
		Gamma:      0.1e-9,
		Copy:       0.05e-9,
		ChunkBytes: 512 << 10, Slots: 8, Inline: 4096, Cores: 2, Paced: true, CreditWrites: true, Coalesce: true,
		Oversub: []simulate.Oversub{{RanksPerCore: 2, Switch: 8e-6, Gap: 2e-6, Latency: 30e-6}, {RanksPerCore: 4, Switch: 12e-6, Gap: 4e-6, Latency: 60e-6, ByteCost: 1.5}},
	}
}

// writeCalibration writes what `collsim calibrate` would print on ranks
// ranks (on one host, or one per host for LinkNet) on a machine of 2
// cores that behaves exactly like cfg.
func writeCalibration(t *testing.T, path string, cfg config, class collectives.LinkClass, ranks int, sizes ...int) {
	writeCalibrationOf(t, path, cfg, class, "ring", ranks, sizes...)
}

func writeCalibrationOf(t *testing.T, path string, cfg config, class collectives.LinkClass, algo string, ranks int, sizes ...int) {
	rph := ranks
	link := cfg.Local
	if class == collectives.LinkNet {
		rph, link = 1, cfg.Net
	}
	writeCalibrationHosts(t, path, cfg, link, algo, ranks, rph, sizes...)
}

// writeCalibrationHosts is writeCalibrationOf on hosts of rph ranks, the
// CPU time counted at link's costs.
func writeCalibrationHosts(t *testing.T, path string, cfg config, link simulate.Link, algo string, ranks, rph int, sizes ...int) {
	if len(sizes) == 0 {
		sizes = []int{8, 64 << 10, 1 << 20, 4 << 20}
	}
	sw, bc := 0.0, 1.0
	for _, o := range cfg.Oversub {
		if o.RanksPerCore == float64(ranks)/2 {
			sw, bc = o.Switch, max(1, o.ByteCost)
		}
	}
	var b bytes.Buffer
	for _, n := range sizes {
		job := simulate.Job{Coll: collectives.CollAllreduce, Algo: algo, Bytes: n, OutOfPlace: true}
		r, err := cfg.osuSimulate(job, simulate.Machine{Ranks: ranks, RanksPerHost: rph, Cores: 2, PoolRanks: ranks})
		require.NoError(t, err)
		w, err := rankWork(job, ranks, &cfg)
		require.NoError(t, err)
		cpu := float64(w.events)*(link.Overhead+sw) + (w.wire*link.PerByte+w.reduce*cfg.Gamma+w.copy*cfg.Copy)*bc + cfg.CallOverhead
		for rank := range ranks {
			appendCalibRecord(t, &b, cfg, calibRecord{Algo: algo, Rank: rank, Ranks: ranks, Bytes: n, WallS: r.MeanSeconds, CPUS: cpu})
		}
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

// appendCalibRecord appends rec to b as gorun tags a rank's line, with
// cfg's CPU speeds and executor settings and 10 calls.
func appendCalibRecord(t *testing.T, b *bytes.Buffer, cfg config, rec calibRecord) {
	rec.Iters, rec.Gamma, rec.Copy = 10, cfg.Gamma, cfg.Copy
	rec.Chunk, rec.Slots, rec.Inline = cfg.ChunkBytes, cfg.Slots, cfg.Inline
	j, err := json.Marshal(rec)
	require.NoError(t, err)
	fmt.Fprintf(b, "[%d] %s\n", rec.Rank, j)
}

// skipFitShort skips a long fit under -short, which the race detector's
// pass of the CI runs with (scripts/test.sh): a fit is sequential
// arithmetic, in which the detector has nothing to look at and which it
// slows down tenfold (three such tests took 195 s of a 4-minute race pass
// on 2 cores, 5 December; the full pass, without -short, runs them in 25
// s). The pool that runs a grid's simulations at once (grid.go) keeps its
// race coverage through the tables' and validation's tests.
func skipFitShort(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
}

// TestFitRecoversTheModel checks the fit against a machine that is the
// model: every fitted parameter must come back.
func TestFitRecoversTheModel(t *testing.T) {
	skipFitShort(t, "the fit of every class and oversubscription takes 16 s with -race (3 without)")
	want := truth()
	dir := t.TempDir()
	writeCalibration(t, filepath.Join(dir, "local.json"), want, collectives.LinkLocal, 2)
	writeCalibration(t, filepath.Join(dir, "net.json"), want, collectives.LinkNet, 2)
	for _, n := range []int{4, 8} {
		// 8 ranks with a large size too: the factor on the CPU's per-byte
		// costs.
		sizes := []int{256}
		if n == 8 {
			sizes = append(sizes, 1<<20)
		}
		writeCalibration(t, filepath.Join(dir, fmt.Sprintf("oversub-ring-%d.json", n)), want, collectives.LinkLocal, n, sizes...)
		writeCalibrationOf(t, filepath.Join(dir, fmt.Sprintf("oversub-rd-%d.json", n)), want, collectives.LinkLocal, "recursive-doubling", n, 256)
	}
	// What the fit is told, not fitted: how the calls are timed (OSU's
	// loop) and the shaper's bucket.
	got := config{Paced: true, CreditWrites: true, Coalesce: true}
	got.Net.Burst = want.Net.Burst
	local, err := readCalibration(filepath.Join(dir, "local.json"))
	require.NoError(t, err)
	net, err := readCalibration(filepath.Join(dir, "net.json"))
	require.NoError(t, err)
	require.NoError(t, fitClass(&got, collectives.LinkLocal, local, 2, nil))
	for _, n := range []int{4, 8} {
		ring, err := readCalibration(filepath.Join(dir, fmt.Sprintf("oversub-ring-%d.json", n)))
		require.NoError(t, err)
		rd, err := readCalibration(filepath.Join(dir, fmt.Sprintf("oversub-rd-%d.json", n)))
		require.NoError(t, err)
		o, err := fitOversub(&got, overCal{ring: ring, rd: rd}, 2, nil)
		require.NoError(t, err)
		got.Oversub = append(got.Oversub, o)
	}
	require.NoError(t, fitClass(&got, collectives.LinkNet, net, 2, nil))
	near := func(want, got float64, what string) {
		t.Helper()
		require.InDelta(t, want, got, 0.02*want+1e-12, what)
	}
	near(want.Local.Alpha, got.Local.Alpha, "local alpha")
	near(want.Local.Overhead, got.Local.Overhead, "local overhead")
	near(want.Local.PerByte, got.Local.PerByte, "local per byte")
	require.Less(t, got.Local.Beta, 0.05e-9, "local beta: the CPU explains the time")
	near(want.Net.Alpha, got.Net.Alpha, "net alpha")
	near(want.Net.Beta, got.Net.Beta, "net beta")
	near(want.Net.Overhead, got.Net.Overhead, "net overhead")
	near(want.Net.PerByte, got.Net.PerByte, "net per byte")
	near(want.Gamma, got.Gamma, "gamma")
	require.Len(t, got.Oversub, 2)
	for i, o := range want.Oversub {
		require.Equal(t, o.RanksPerCore, got.Oversub[i].RanksPerCore)
		near(o.Switch, got.Oversub[i].Switch, "switch")
		// Both calibrations come out right (within 3%: on crowded cores
		// the reads of data that came in together share a read
		// (Coalesce), and the grid of gap and latency then lands 2.8% off
		// the ring on 8 ranks; 1% without)...
		for _, algo := range []string{"ring", "recursive-doubling"} {
			ranks := int(2 * o.RanksPerCore)
			job := simulate.Job{Coll: collectives.CollAllreduce, Algo: algo, Bytes: 256, OutOfPlace: true}
			m := simulate.Machine{Ranks: ranks, Cores: 2, PoolRanks: ranks}
			w, err := want.osuSimulate(job, m)
			require.NoError(t, err)
			g, err := got.osuSimulate(job, m)
			require.NoError(t, err)
			require.InEpsilon(t, w.MeanSeconds, g.MeanSeconds, 0.03, "%s on %d ranks", algo, ranks)
		}
	}
	// ... and where the ring is bound by the cores (8 ranks on 2), the gap
	// comes back, within 15%: the credits the ring writes alone
	// (CreditWrites) are tasks that wait on their peers too, and the gap
	// trades a little against the latency (3.5 us for 4 here). The latency does not here: in OSU's loop the ranks leave
	// each barrier at different times, and at this level both
	// calibrations are bound by the cores, whatever the latency (they come
	// out right above with none). With 4 ranks on 2 cores neither is.
	require.InEpsilon(t, want.Oversub[1].Gap, got.Oversub[1].Gap, 0.15, "gap")
	near(want.Oversub[1].ByteCost, got.Oversub[1].ByteCost, "CPU per byte factor")
	require.Zero(t, got.Oversub[0].ByteCost, "no large size calibrated on 4 ranks: no factor")
}

// wakeLevel is a machine whose ranks, 4 to a core, wait to be woken
// (Oversub.Wake), and a directory of its calibrations: local.json (2
// ranks), and ring.json, rd.json and tree.json (8 ranks on 2 cores, 256
// B).
func wakeLevel(t *testing.T) (config, string) {
	want := truth()
	want.Oversub = []simulate.Oversub{{RanksPerCore: 4, Switch: 12e-6, Gap: 4e-6, Latency: 60e-6, Wake: 40e-6}}
	dir := t.TempDir()
	writeCalibration(t, filepath.Join(dir, "local.json"), want, collectives.LinkLocal, 2)
	writeCalibration(t, filepath.Join(dir, "ring.json"), want, collectives.LinkLocal, 8, 256)
	writeCalibrationOf(t, filepath.Join(dir, "rd.json"), want, collectives.LinkLocal, "recursive-doubling", 8, 256)
	writeCalibrationOf(t, filepath.Join(dir, "tree.json"), want, collectives.LinkLocal, "tree", 8, 256)
	return want, dir
}

// TestFitWake: on a machine whose ranks, 4 to a core, wait Oversub.Wake to
// be woken, a chain of steps (the tree allreduce) takes another time than
// its other costs say. Fitted from the ring and recursive doubling alone
// the model cannot tell, and puts the tree more than 10% off (15% slow
// here, with the credits the ring writes alone; 23% fast without them);
// with the tree's calibration the fit reproduces the tree and the ring
// within 5% and a wake-up comes back. Not the truth's: the three small
// sizes do not pin gap, latency and wake-up one by one at 4 ranks a core
// (8 us here, for 40), and recursive doubling's 3 rounds in OSU's loop
// move by 25% between latencies 10% apart.
func TestFitWake(t *testing.T) {
	t.Parallel() // CPU-bound fits, each on its own files: the package's time on two cores
	skipFitShort(t, "three fits of a crowded level take 14 s (110 with -race)")
	want, dir := wakeLevel(t)
	read := func(name string) *calibration {
		c, err := readCalibration(filepath.Join(dir, name))
		require.NoError(t, err)
		return c
	}
	local, ring, rd, tree := read("local.json"), read("ring.json"), read("rd.json"), read("tree.json")
	m := simulate.Machine{Ranks: 8, Cores: 2, PoolRanks: 8}
	timeOf := func(cfg config, algo string) float64 {
		r, err := cfg.osuSimulate(simulate.Job{Coll: collectives.CollAllreduce, Algo: algo, Bytes: 256, OutOfPlace: true}, m)
		require.NoError(t, err)
		return r.MeanSeconds
	}
	fit := func(tree *calibration) config {
		got := config{Paced: true, CreditWrites: true, Coalesce: true}
		require.NoError(t, fitClass(&got, collectives.LinkLocal, local, 2, nil))
		o, err := fitOversub(&got, overCal{ring: ring, rd: rd, tree: tree}, 2, nil)
		require.NoError(t, err)
		got.Oversub = []simulate.Oversub{o}
		return got
	}
	treeTime := timeOf(want, "tree")
	blind := fit(nil)
	require.Zero(t, blind.Oversub[0].Wake)
	require.Greater(t, math.Abs(timeOf(blind, "tree")/treeTime-1), 0.1, "no chain calibrated: the tree comes out wrong")
	got := fit(tree)
	require.InEpsilon(t, treeTime, timeOf(got, "tree"), 0.05, "the tree")
	require.InEpsilon(t, timeOf(want, "ring"), timeOf(got, "ring"), 0.05, "the ring")
	w := got.Oversub[0].Wake
	require.Positive(t, w, "a wake-up")
}

// TestFitOversubAlltoall: the pairwise all-to-all's calibration (`collsim
// calibrate -coll alltoall`, read back from its file) joins a crowded
// level's fit: the fitted level prices it within 10% of the truth, and the
// allreduces it was fitted on as well as without it. Without it, the
// all-to-all comes out farther from the truth than with it.
func TestFitOversubAlltoall(t *testing.T) {
	t.Parallel() // CPU-bound fits, each on its own files: the package's time on two cores
	if testing.Short() {
		t.Skip("-short: two fits of a crowded level take 25 s (minutes with -race)")
	}
	want, dir := wakeLevel(t)
	m := simulate.Machine{Ranks: 8, Cores: 2, PoolRanks: 8}
	a2a := simulate.Job{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 256 * 8}
	truthA2A, err := want.osuSimulate(a2a, m)
	require.NoError(t, err)
	var b bytes.Buffer
	for rank := range 8 {
		appendCalibRecord(t, &b, want, calibRecord{Coll: "alltoall", Algo: "pairwise", Rank: rank, Ranks: 8, Bytes: 256, WallS: truthA2A.MeanSeconds})
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a2a.json"), b.Bytes(), 0o644))
	read := func(name, coll string) *calibration {
		c, err := readCalibrationOf(filepath.Join(dir, name), coll)
		require.NoError(t, err)
		return c
	}
	_, err = readCalibrationOf(filepath.Join(dir, "a2a.json"), "allreduce")
	require.ErrorContains(t, err, "a calibration of alltoall")
	cal := overCal{ring: read("ring.json", "allreduce"), rd: read("rd.json", "allreduce"), tree: read("tree.json", "allreduce"), a2a: read("a2a.json", "alltoall")}
	require.Equal(t, 256, cal.a2a.sizes[0].bytes, "a block per rank")
	local := read("local.json", "allreduce")
	fit := func(c overCal) config {
		got := config{Paced: true, CreditWrites: true, Coalesce: true}
		require.NoError(t, fitClass(&got, collectives.LinkLocal, local, 2, nil))
		var log bytes.Buffer
		o, err := fitOversub(&got, c, 2, &log)
		require.NoError(t, err)
		if c.a2a != nil {
			require.Contains(t, log.String(), "alltoall pairwise 256 wall")
		}
		got.Oversub = []simulate.Oversub{o}
		return got
	}
	timeOf := func(cfg config, job simulate.Job) float64 {
		r, err := cfg.osuSimulate(job, m)
		require.NoError(t, err)
		return r.MeanSeconds
	}
	with := fit(cal)
	blindCal := cal
	blindCal.a2a = nil
	blind := fit(blindCal)
	offWith := math.Abs(timeOf(with, a2a)/truthA2A.MeanSeconds - 1)
	offBlind := math.Abs(timeOf(blind, a2a)/truthA2A.MeanSeconds - 1)
	require.Less(t, offWith, 0.1, "the all-to-all, fitted on it")
	require.Less(t, offWith, offBlind, "the all-to-all comes out nearer the truth with its calibration")
	for _, algo := range []string{"ring", "recursive-doubling", "tree"} {
		job := simulate.Job{Coll: collectives.CollAllreduce, Algo: algo, Bytes: 256, OutOfPlace: true}
		require.InEpsilon(t, timeOf(want, job), timeOf(with, job), 0.1, algo)
	}
}

// TestFitOversubJoint: on a machine whose crowded levels take the joint
// fit's form (latency and wake-up in proportion to the other ranks on a
// core, one gap), where the 8-rank level's calibrations ran 25% fast (as
// a shared machine's fast spell took the 8-rank level's on 4 December),
// fitting 4, 8 and 16 ranks on 2 cores together reproduces the other
// levels' ring, recursive doubling and tree within 10% and prices the
// fast level within 20% of the truth, where the level's own fit
// reproduces its calibrations (TestFitWake) and takes the fast times
// whole.
func TestFitOversubJoint(t *testing.T) {
	t.Parallel() // CPU-bound fits, each on its own files: the package's time on two cores
	if testing.Short() {
		t.Skip("-short: a joint fit of 9 simulated calibrations takes 15 s (minutes with -race)")
	}
	want := truth()
	want.Oversub = nil
	for _, k := range []float64{2, 4, 8} {
		want.Oversub = append(want.Oversub, simulate.Oversub{RanksPerCore: k, Switch: 1e-6, Gap: 0.5e-6, Latency: 12e-6 * (k - 1), Wake: 4e-6 * (k - 1)})
	}
	dir := t.TempDir()
	writeCalibration(t, filepath.Join(dir, "local.json"), want, collectives.LinkLocal, 2)
	read := func(name string) *calibration {
		c, err := readCalibration(filepath.Join(dir, name))
		require.NoError(t, err)
		return c
	}
	// scaled is c with its times x f.
	scaled := func(c *calibration, f float64) *calibration {
		out := *c
		out.sizes = slices.Clone(c.sizes)
		for i := range out.sizes {
			out.sizes[i].wall *= f
			out.sizes[i].rankWall = slices.Clone(c.sizes[i].rankWall)
			for r := range out.sizes[i].rankWall {
				out.sizes[i].rankWall[r] *= f
			}
		}
		return &out
	}
	algos := []string{"ring", "recursive-doubling", "tree"}
	var cals []overCal
	for _, n := range []int{4, 8, 16} {
		var c [3]*calibration
		for i, algo := range algos {
			name := fmt.Sprintf("%s-%d.json", algo, n)
			writeCalibrationOf(t, filepath.Join(dir, name), want, collectives.LinkLocal, algo, n, 256)
			c[i] = read(name)
			if n == 8 {
				c[i] = scaled(c[i], 0.75)
			}
		}
		cals = append(cals, overCal{ring: c[0], rd: c[1], tree: c[2]})
	}
	got := config{Paced: true, CreditWrites: true, Coalesce: true}
	require.NoError(t, fitClass(&got, collectives.LinkLocal, read("local.json"), 2, nil))
	levels, err := fitOversubJoint(&got, cals, 2, nil)
	require.NoError(t, err)
	require.Len(t, levels, 3)
	got.Oversub = levels
	for i, o := range levels {
		k := o.RanksPerCore - 1
		require.InDelta(t, levels[0].Latency/(levels[0].RanksPerCore-1), o.Latency/k, 1e-12, "level %d: latency per other rank", i)
		require.InDelta(t, levels[0].Wake/(levels[0].RanksPerCore-1), o.Wake/k, 1e-12, "level %d: wake-up per other rank", i)
		require.Equal(t, levels[0].Gap, o.Gap, "level %d: one gap", i)
	}
	timeOf := func(cfg config, n int, algo string) float64 {
		r, err := cfg.osuSimulate(simulate.Job{Coll: collectives.CollAllreduce, Algo: algo, Bytes: 256, OutOfPlace: true}, simulate.Machine{Ranks: n, Cores: 2, PoolRanks: n})
		require.NoError(t, err)
		return r.MeanSeconds
	}
	for _, n := range []int{4, 8, 16} {
		for _, algo := range algos {
			r := timeOf(got, n, algo) / timeOf(want, n, algo)
			t.Logf("%s on %d ranks: %.2f of the truth", algo, n, r)
			if n == 8 {
				require.Less(t, math.Abs(r-1), 0.2, "%s on 8 ranks, calibrated 25%% fast: %.2f of the truth", algo, r)
			} else {
				require.Less(t, math.Abs(r-1), 0.1, "%s on %d ranks: %.2f of the truth", algo, n, r)
			}
		}
	}
}

// TestFitNetLatency: on a machine whose crowded cores add a latency per
// rank per core to every message between hosts, the fit of the factor
// from 2 hosts of 3 ranks (recursive doubling, tree at 256 B) gets
// it back, and with it the time of a layout it was not fitted on (4
// hosts of 2 ranks: a binomial broadcast and the pairwise all-to-all);
// without the crowded calibrations nothing is added, and the broadcast
// comes out short.
func TestFitNetLatency(t *testing.T) {
	const k = 8e-6
	want := truth()
	for i := range want.Oversub {
		want.Oversub[i].NetLatency = k * want.Oversub[i].RanksPerCore
	}
	dir := t.TempDir()
	var cals []crowdCal
	for _, algo := range []string{"recursive-doubling", "tree"} {
		path := filepath.Join(dir, algo+".json")
		writeCalibrationHosts(t, path, want, want.Net, algo, 6, 3, 256)
		c, err := readCalibration(path)
		require.NoError(t, err)
		cals = append(cals, crowdCal{c, 2})
	}
	got := want
	got.Oversub = slices.Clone(want.Oversub)
	for i := range got.Oversub {
		got.Oversub[i].NetLatency = 0
	}
	none := got
	none.Oversub = slices.Clone(got.Oversub)
	f, err := fitNetLatency(&none, nil, 2, nil)
	require.NoError(t, err)
	require.Zero(t, f)
	var log bytes.Buffer
	f, err = fitNetLatency(&got, cals, 2, &log)
	require.NoError(t, err)
	require.InEpsilon(t, k, f, 0.05, "the factor (the simulated times move in steps: 4% off here)")
	require.Contains(t, log.String(), "2x3 tree 256 wall")
	for i, o := range got.Oversub {
		require.InEpsilon(t, want.Oversub[i].NetLatency, o.NetLatency, 0.05)
	}
	m := simulate.Machine{Ranks: 8, RanksPerHost: 2, Cores: 2, PoolRanks: 8}
	for _, job := range []simulate.Job{
		{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: 64},
		{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 8 * 64},
	} {
		w, err := want.osuSimulate(job, m)
		require.NoError(t, err)
		g, err := got.osuSimulate(job, m)
		require.NoError(t, err)
		b, err := none.osuSimulate(job, m)
		require.NoError(t, err)
		require.InEpsilon(t, w.MeanSeconds, g.MeanSeconds, 0.03, "%s %s", job.Coll, job.Algo)
		if job.Coll == collectives.CollBroadcast {
			// (The all-to-all, bound by the crowded cores, comes out
			// about as long without: 3% longer here, its reads sharing
			// less.)
			require.Less(t, b.MeanSeconds, 0.9*w.MeanSeconds, "%s %s without the factor", job.Coll, job.Algo)
		}
	}
	// Layouts the fit cannot use.
	_, err = fitNetLatency(&got, []crowdCal{{cals[0].calibration, 4}}, 2, nil)
	require.ErrorContains(t, err, "as many ranks on every host")
}

// writeValidationRound lays out one round of what scripts/sim-validate.sh
// measures in dir, on a machine that is cfg, with every osu time
// multiplied by slow.
func writeValidationRound(t *testing.T, dir string, cfg config, slow float64) {
	t.Helper()
	writeCalibration(t, filepath.Join(dir, "calib", "local.json"), cfg, collectives.LinkLocal, 2)
	writeCalibration(t, filepath.Join(dir, "calib", "oversub-ring-4.json"), cfg, collectives.LinkLocal, 4, 256)
	writeCalibrationOf(t, filepath.Join(dir, "calib", "oversub-rd-4.json"), cfg, collectives.LinkLocal, "recursive-doubling", 4, 256)
	writeCalibration(t, filepath.Join(dir, "calib", "net-1gbit.json"), cfg, collectives.LinkNet, 2)
	for _, algo := range []string{"ring", "recursive-doubling"} {
		writeCalibrationHosts(t, filepath.Join(dir, "calib", "crowd-1gbit-"+algo+"-2x3.json"), cfg, cfg.Net, algo, 6, 3, 256)
	}
	runs := filepath.Join(dir, "runs", "1gbit", "2x2")
	require.NoError(t, os.MkdirAll(runs, 0o755))
	m := simulate.Machine{Ranks: 4, RanksPerHost: 2, Cores: 2, PoolRanks: 4}
	for _, tc := range []struct{ coll, file, algo string }{
		{"allreduce", "allreduce-ring.json", "ring"},
		{"broadcast", "bcast-binomial.json", "binomial"},
		{"alltoall", "alltoall-pairwise.json", "pairwise"},
	} {
		c, err := collectives.CollByName(tc.coll)
		require.NoError(t, err)
		var b bytes.Buffer
		for _, size := range []int{64, 4096, 1 << 20} {
			bytes := size
			if c.Info().Blocked {
				bytes *= 4
			}
			r, err := cfg.osuSimulate(simulate.Job{Coll: c, Algo: tc.algo, Bytes: bytes, OutOfPlace: c.Info().Reducing}, m)
			require.NoError(t, err)
			j, err := json.Marshal(osu.Record{Benchmark: tc.coll, Layout: "osu", Size: size, AvgUs: slow * r.MeanSeconds * 1e6, Ranks: 4})
			require.NoError(t, err)
			fmt.Fprintf(&b, "[0] %s\n", j)
		}
		require.NoError(t, os.WriteFile(filepath.Join(runs, tc.file), b.Bytes(), 0o644))
	}
}

// TestValidateEndToEnd runs `collsim validate` on a directory laid out as
// scripts/sim-validate.sh leaves it, measured on a machine that is the
// model: every point must be a hit.
func TestValidateEndToEnd(t *testing.T) {
	cfg := truth()
	dir := t.TempDir()
	writeValidationRound(t, dir, cfg, 1)
	var out, errs bytes.Buffer
	png := filepath.Join(dir, "v.png")
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", "-plot", png, dir}, &out, &errs), errs.String())
	s := out.String()
	require.Regexp(t, `(?m)^all\s+9\s+9\s+100%`, s)
	require.NotContains(t, s, "MISS")
	require.FileExists(t, filepath.Join(dir, "fit-1gbit.json"))
	require.FileExists(t, png)
	// The fitted model reads back as a -params file.
	var again bytes.Buffer
	require.Equal(t, 0, run([]string{"-params", filepath.Join(dir, "fit-1gbit.json"), "-ranks", "4", "-coll", "allreduce", "-sizes", "8"}, &again, &errs), errs.String())
	require.True(t, strings.Contains(again.String(), "fitted by collsim validate"))
}

// TestValidateRounds: with several rounds (sim-validate.sh --rounds), the
// calibrations and the points are the medians of the rounds, so one slow
// round (its calibration and every point) moves nothing, and the summary
// says how often a single round strays from the others.
func TestValidateRounds(t *testing.T) {
	cfg := truth()
	slowCfg := truth()
	slowCfg.Net.Alpha *= 3
	slowCfg.Net.Overhead *= 2
	slowCfg.Local.Overhead *= 2
	dir := t.TempDir()
	for i, c := range []config{cfg, slowCfg, cfg, cfg} {
		slow := 1.0
		if i == 1 {
			slow = 4
		}
		writeValidationRound(t, filepath.Join(dir, fmt.Sprintf("round-%d", i+1)), c, slow)
	}
	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", dir}, &out, &errs), errs.String())
	s := out.String()
	require.Contains(t, s, "# 4 rounds of measurement (round-1 .. round-4)")
	// Every point a hit, and 3 of each point's 4 rounds within 25% of the
	// median of the other 3.
	require.Regexp(t, `(?m)^all\s+9\s+9\s+100%.*\s75%$`, s)
	require.NotContains(t, s, "MISS")
	// Each point's spread: the slow round, 4 times the median.
	require.Regexp(t, `(?m)^\s+1gbit\s+2x2\s+allreduce\s+ring\s+1M\s+\S+\s+\S+\s+1.00\s+[34]\d\d%$`, s)

	// The fastest round of each time (-stat min): the same model and hits.
	var fastest bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", "-stat", "min", dir}, &fastest, &errs), errs.String())
	require.Contains(t, fastest.String(), "every point is the min of its rounds")
	require.Regexp(t, `(?m)^all\s+9\s+9\s+100%`, fastest.String())
	// Its model is kept beside the median's, and -reuse-fit finds it.
	require.FileExists(t, filepath.Join(dir, "fit-min-1gbit.json"))
	require.FileExists(t, filepath.Join(dir, "fit-1gbit.json"))
	fastest.Reset()
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", "-stat", "min", "-reuse-fit", dir}, &fastest, &errs), errs.String())
	require.Contains(t, fastest.String(), "fit-min-1gbit.json")
	errs.Reset()
	require.Equal(t, 2, run([]string{"validate", "-stat", "mean", dir}, &fastest, &errs))
	require.Contains(t, errs.String(), `-stat "mean": want median or min`)

	// Without the slow round's calibration the fit is the same.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "round-2", "calib")))
	var again bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", dir}, &again, &errs), errs.String())
	require.Regexp(t, `(?m)^all\s+9\s+9\s+100%`, again.String())
}

// TestInlineOf: the calibration records the inline size of the transport
// it ran on, as the executor uses it.
func TestInlineOf(t *testing.T) {
	require.Equal(t, (*tcp.Device)(nil).MaxInline(), inlineOf("tcp"))
	require.Equal(t, 32<<10, inlineOf("tcp"))
	require.Equal(t, (*shm.Device)(nil).MaxInline(), inlineOf("shm"))
	require.Equal(t, 0, inlineOf("verbs:rxe0"))
}

// TestValidateNetCPUFromFastestLink: the net class's CPU costs come from
// the fastest link's calibration; a slower link's CPU time (which counts
// the ranks' polling while it drains) does not move them.
func TestValidateNetCPUFromFastestLink(t *testing.T) {
	cfg := truth()
	slow := truth()
	slow.Net.Beta *= 10
	slow.Net.PerByte *= 5 // the polling, counted as CPU
	dir := t.TempDir()
	writeValidationRound(t, dir, cfg, 1)
	writeCalibration(t, filepath.Join(dir, "calib", "net-100mbit.json"), slow, collectives.LinkNet, 2)
	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", dir}, &out, &errs), errs.String())
	read := func(name string) config {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		var c config
		require.NoError(t, json.Unmarshal(b, &c))
		return c
	}
	fast, slowFit := read("fit-1gbit.json"), read("fit-100mbit.json")
	require.InDelta(t, cfg.Net.PerByte, fast.Net.PerByte, 0.02*cfg.Net.PerByte)
	require.Equal(t, fast.Net.PerByte, slowFit.Net.PerByte)
	require.Equal(t, fast.Net.Overhead, slowFit.Net.Overhead)
	require.InDelta(t, slow.Net.Beta, slowFit.Net.Beta, 0.1*slow.Net.Beta)
	require.Equal(t, 100e6, parseRate("100mbit"))
	require.Equal(t, 10e9, parseRate("10gbit"))
	require.Equal(t, 0.0, parseRate("fast"))
}

// TestFitCallOverhead: with recursive doubling's calibration at 8 B beside
// the ring's, the fit tells the CPU per call from the CPU per message, on
// a machine that is the model; the net class keeps the call's CPU.
func TestFitCallOverhead(t *testing.T) {
	want := truth()
	want.CallOverhead = 6e-6
	dir := t.TempDir()
	writeCalibration(t, filepath.Join(dir, "local.json"), want, collectives.LinkLocal, 2)
	writeCalibrationOf(t, filepath.Join(dir, "local-rd.json"), want, collectives.LinkLocal, "recursive-doubling", 2, 8)
	writeCalibration(t, filepath.Join(dir, "net.json"), want, collectives.LinkNet, 2)
	read := func(name string) *calibration {
		c, err := readCalibration(filepath.Join(dir, name))
		require.NoError(t, err)
		return c
	}
	local, rd, net := read("local.json"), read("local-rd.json"), read("net.json")
	got := config{Paced: true, CreditWrites: true, Coalesce: true}
	got.Net.Burst = want.Net.Burst
	require.NoError(t, fitClassCPU(&got, collectives.LinkLocal, local, local, []*calibration{rd}, 2, nil))
	require.NoError(t, fitClass(&got, collectives.LinkNet, net, 2, nil))
	require.InDelta(t, want.CallOverhead, got.CallOverhead, 0.02*want.CallOverhead, "call overhead")
	require.InDelta(t, want.Local.Overhead, got.Local.Overhead, 0.02*want.Local.Overhead, "local overhead")
	require.InDelta(t, want.Local.PerByte, got.Local.PerByte, 0.02*want.Local.PerByte, "local per byte")
	require.InDelta(t, want.Net.Overhead, got.Net.Overhead, 0.02*want.Net.Overhead, "net overhead")
	require.InDelta(t, want.Net.Alpha, got.Net.Alpha, 0.02*want.Net.Alpha, "net alpha")

	// Without it, the per-call CPU is spread over the messages: no call
	// overhead, and more per message.
	without := config{Paced: true}
	require.NoError(t, fitClass(&without, collectives.LinkLocal, local, 2, nil))
	require.Zero(t, without.CallOverhead)
	require.Greater(t, without.Local.Overhead, want.Local.Overhead)
}

// TestByteCostFromLargeSizes: the factor on the CPU's per-byte costs is
// the one that fits the ring's large sizes together (least squared log
// error), not the largest alone: with 1 MiB three times slower than the
// model (a cost that is not per byte), the factor lands between what 256
// KiB and 1 MiB want alone.
func TestByteCostFromLargeSizes(t *testing.T) {
	t.Parallel() // CPU-bound fits, each on its own files: the package's time on two cores
	skipFitShort(t, "five fits of a crowded level take 8 s (64 with -race)")
	want := truth()
	want.Inline = 32 << 10
	dir := t.TempDir()
	ringFile := filepath.Join(dir, "oversub-ring-8.json")
	writeCalibration(t, ringFile, want, collectives.LinkLocal, 8, 256, 256<<10, 1<<20)
	writeCalibrationOf(t, filepath.Join(dir, "oversub-rd-8.json"), want, collectives.LinkLocal, "recursive-doubling", 8, 256)
	ring, err := readCalibration(ringFile)
	require.NoError(t, err)
	rd, err := readCalibration(filepath.Join(dir, "oversub-rd-8.json"))
	require.NoError(t, err)
	got := want
	got.Oversub = nil
	o, err := fitOversub(&got, overCal{ring: ring, rd: rd}, 2, nil)
	require.NoError(t, err)
	require.InDelta(t, 1.5, o.ByteCost, 0.1, "the model's own times (gap and latency come back within a few percent here)")

	for i := range ring.sizes {
		if ring.sizes[i].bytes == 1<<20 {
			ring.sizes[i].wall *= 3
		}
	}
	o, err = fitOversub(&got, overCal{ring: ring, rd: rd}, 2, nil)
	require.NoError(t, err)
	only := func(bytes int) float64 {
		r := *ring
		r.sizes = slices.DeleteFunc(slices.Clone(ring.sizes), func(s calibSize) bool { return s.bytes >= 64<<10 && s.bytes != bytes })
		o, err := fitOversub(&got, overCal{ring: &r, rd: rd}, 2, nil)
		require.NoError(t, err)
		return o.ByteCost
	}
	lo, hi := only(256<<10), only(1<<20)
	require.Less(t, lo+0.5, hi)
	require.Greater(t, o.ByteCost, lo+0.1)
	require.Less(t, o.ByteCost, hi-0.1)
}

// TestCalibrationOfAnotherCollective: the fit reads allreduce
// calibrations; a broadcast's (collsim calibrate -coll broadcast) is an
// error naming it, not a ring's times.
func TestCalibrationOfAnotherCollective(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bcast-local.json")
	j, err := json.Marshal(calibRecord{Coll: "broadcast", Algo: "binomial", Ranks: 2, Bytes: 8, Iters: 10, WallS: 1e-5})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "[0] %s\n", j), 0o644))
	_, err = readCalibration(path)
	require.ErrorContains(t, err, "a calibration of broadcast")
}

// TestNetCPUFromLowestSmall: the net class's CPU per message comes from
// the lowest CPU per call at small sizes of all the rates' calibrations; a
// faster rate's calibration that ran slow there does not raise it.
func TestNetCPUFromLowestSmall(t *testing.T) {
	cfg := truth()
	dir := t.TempDir()
	writeValidationRound(t, dir, cfg, 1)
	fast := cfg
	fast.Net.Beta /= 10
	file := filepath.Join(dir, "calib", "net-10gbit.json")
	writeCalibration(t, file, fast, collectives.LinkNet, 2)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var slow bytes.Buffer
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		prefix, js, _ := strings.Cut(line, " ")
		var rec calibRecord
		require.NoError(t, json.Unmarshal([]byte(js), &rec))
		if rec.Bytes <= smallSize {
			rec.CPUS *= 2
		}
		j, err := json.Marshal(rec)
		require.NoError(t, err)
		fmt.Fprintf(&slow, "%s %s\n", prefix, j)
	}
	require.NoError(t, os.WriteFile(file, slow.Bytes(), 0o644))
	overhead := func(args ...string) float64 {
		t.Helper()
		var out, errs bytes.Buffer
		require.Equal(t, 0, run(append(append([]string{"validate", "-cores", "2", "-q"}, args...), dir), &out, &errs), errs.String())
		b, err := os.ReadFile(filepath.Join(dir, "fit-1gbit.json"))
		require.NoError(t, err)
		var got config
		require.NoError(t, json.Unmarshal(b, &got))
		return got.Net.Overhead
	}
	require.InEpsilon(t, cfg.Net.Overhead, overhead(), 0.05)
	require.Greater(t, overhead("-lowest-small-cpu=false"), 1.3*cfg.Net.Overhead)
}

// TestRankWorkCredits: credits written alone count as messages at both
// ends. 2 ranks, 8 B: the ring sends 2 chunks each way, and the credit of
// the first goes alone (the second rides with the next data to the peer):
// 4 messages, 6 with credits, 6 with coalescing too (simulate's
// Coalesce leaves credits alone). Recursive doubling's one chunk each way
// rides: 2 in every case.
func TestRankWorkCredits(t *testing.T) {
	for _, c := range []struct {
		algo                    string
		without, with, together int
	}{{"ring", 4, 6, 6}, {"recursive-doubling", 2, 2, 2}} {
		job := simulate.Job{Coll: collectives.CollAllreduce, Algo: c.algo, Bytes: 8}
		cfg := config{ChunkBytes: 512 << 10, Inline: 32 << 10}
		w, err := rankWork(job, 2, &cfg)
		require.NoError(t, err)
		require.Equal(t, c.without, w.events, c.algo)
		cfg.CreditWrites = true
		w, err = rankWork(job, 2, &cfg)
		require.NoError(t, err)
		require.Equal(t, c.with, w.events, c.algo)
		cfg.Coalesce = true
		w, err = rankWork(job, 2, &cfg)
		require.NoError(t, err)
		require.Equal(t, c.together, w.events, c.algo)
	}
}

// TestCalibrationRepeats: repeats of a calibration's small sizes in jobs
// of their own (calib/again/NAME-K.json) join those sizes' median (or
// minimum), and
// leave the others as the full calibration has them; a repeat of another
// algorithm or job size is refused.
func TestCalibrationRepeats(t *testing.T) {
	fast, slow := truth(), truth()
	slow.Net.Alpha *= 3
	dir := t.TempDir()
	round := filepath.Join(dir, "round-1")
	writeCalibration(t, filepath.Join(round, "calib", "net-1gbit.json"), fast, collectives.LinkNet, 2)
	rel := filepath.Join("calib", "net-1gbit.json")
	alone, err := readCalibrationRounds([]string{round}, median, rel)
	require.NoError(t, err)
	for _, k := range []string{"2", "3"} {
		writeCalibration(t, filepath.Join(round, "calib", "again", "net-1gbit-"+k+".json"), slow, collectives.LinkNet, 2, 8)
	}
	slowAlone, err := readCalibration(filepath.Join(round, "calib", "again", "net-1gbit-2.json"))
	require.NoError(t, err)
	got, err := readCalibrationRounds([]string{round}, median, rel)
	require.NoError(t, err)
	require.Len(t, got.sizes, len(alone.sizes))
	for i, s := range got.sizes {
		if s.bytes == 8 {
			require.Equal(t, slowAlone.sizes[0].wall, s.wall, "8 B: the median of one fast job and two slow ones")
			require.Greater(t, s.wall, 2*alone.sizes[i].wall)
		} else {
			require.Equal(t, alone.sizes[i].wall, s.wall, "%d B: the full calibration's", s.bytes)
		}
	}
	// validate -stat min: the fastest of the three jobs, the full one.
	fastest, err := readCalibrationRounds([]string{round}, roundStats["min"], rel)
	require.NoError(t, err)
	require.Equal(t, alone.sizes, fastest.sizes)
	writeCalibrationOf(t, filepath.Join(round, "calib", "again", "net-1gbit-4.json"), slow, collectives.LinkNet, "tree", 2, 8)
	_, err = readCalibrationRounds([]string{round}, median, rel)
	require.ErrorContains(t, err, "net-1gbit-4.json: tree on 2 ranks")
}

// writeWallCalibration writes a `collsim calibrate` output of coll (algo)
// on 2 ranks of class as cfg's model times it, each rank its own wall time
// (OSU's way), and as CPU time that wall time and poll more: the ranks of
// a real calibration poll while they wait.
func writeWallCalibration(t *testing.T, path string, cfg config, coll collectives.Coll, algo string, class collectives.LinkClass, poll float64, sizes ...int) {
	t.Helper()
	rph := 2
	if class == collectives.LinkNet {
		rph = 1
	}
	name := ""
	if coll != collectives.CollAllreduce {
		name = coll.String()
	}
	var b bytes.Buffer
	for _, n := range sizes {
		job := simulate.Job{Coll: coll, Algo: algo, Bytes: n, OutOfPlace: coll.Info().Reducing}
		r, err := cfg.osuSimulate(job, simulate.Machine{Ranks: 2, RanksPerHost: rph, Cores: 2, PoolRanks: 2})
		require.NoError(t, err)
		for rank := range 2 {
			appendCalibRecord(t, &b, cfg, calibRecord{Coll: name, Algo: algo, Rank: rank, Ranks: 2, Bytes: n, WallS: r.RankSeconds[rank], CPUS: r.RankSeconds[rank] + poll})
		}
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

// writeLocalWallCalibrations writes into dir the local class's
// calibrations that the wall split reads (the ring, recursive doubling,
// the broadcast's root and leaf) of a machine that is cfg, whose ranks
// poll 2 us more than they work.
func writeLocalWallCalibrations(t *testing.T, dir string, cfg config) {
	t.Helper()
	ar, bc := collectives.CollAllreduce, collectives.CollBroadcast
	file := func(n string) string { return filepath.Join(dir, n) }
	writeWallCalibration(t, file("local.json"), cfg, ar, "ring", collectives.LinkLocal, 2e-6, 8, 64, 512, 4096, 64<<10, 1<<20)
	writeWallCalibration(t, file("local-rd.json"), cfg, ar, "recursive-doubling", collectives.LinkLocal, 2e-6, 8)
	writeWallCalibration(t, file("bcast-local.json"), cfg, bc, "binomial", collectives.LinkLocal, 2e-6, 8, 4096, 64<<10)
}

// TestFitWallSplit: on a machine that is the model (3 us of CPU per call,
// 5 per local message end, 7 per net one, local alpha 2 us), whose
// calibrations' CPU times are their ranks' wall times and 2 us more (they
// poll while they wait), the split of the CPU time charges the waiting to
// the call; the split from wall times, a broadcast's root and leaf apart,
// finds the costs again, and the model then times the one-message calls
// it was not fitted on.
func TestFitWallSplit(t *testing.T) {
	skipFitShort(t, "the wall split's fit takes 6 s with -race (1 without)")
	truthCfg := truth()
	truthCfg.Local = simulate.Link{Alpha: 2e-6, Overhead: 5e-6, PerByte: 0.4e-9}
	truthCfg.Net = simulate.Link{Alpha: 20e-6, Beta: 0.1e-9, Overhead: 7e-6, PerByte: 0.6e-9}
	truthCfg.CallOverhead = 3e-6
	truthCfg.Oversub = nil
	dir := t.TempDir()
	file := func(n string) string { return filepath.Join(dir, n) }
	ar, bc := collectives.CollAllreduce, collectives.CollBroadcast
	writeLocalWallCalibrations(t, dir, truthCfg)
	writeWallCalibration(t, file("net.json"), truthCfg, ar, "ring", collectives.LinkNet, 2e-6, 8, 64, 512, 4096, 64<<10, 1<<20)
	writeWallCalibration(t, file("bcast-net.json"), truthCfg, bc, "binomial", collectives.LinkNet, 2e-6, 8, 4096, 64<<10)
	read := func(n, coll string) *calibration {
		c, err := readCalibrationOf(file(n), coll)
		require.NoError(t, err)
		return c
	}
	local, rd, net := read("local.json", "allreduce"), read("local-rd.json", "allreduce"), read("net.json", "allreduce")

	cfg := config{Paced: true, CreditWrites: true, Coalesce: true, Inline: truthCfg.Inline}
	require.NoError(t, fitClassCPU(&cfg, collectives.LinkLocal, local, local, []*calibration{rd}, 2, nil))
	require.NoError(t, fitClassCPU(&cfg, collectives.LinkNet, net, net, nil, 2, nil))
	require.Greater(t, cfg.CallOverhead, 4e-6, "the CPU times' split charges the polling to the call")

	require.NoError(t, fitWallSplit(&cfg, collectives.LinkLocal, local, rd, read("bcast-local.json", "broadcast"), 2, false, nil))
	require.NoError(t, fitWallSplit(&cfg, collectives.LinkNet, net, nil, read("bcast-net.json", "broadcast"), 2, false, nil))
	require.InDelta(t, 3e-6, cfg.CallOverhead, 0.3e-6, "CPU per call")
	require.InDelta(t, 5e-6, cfg.Local.Overhead, 0.3e-6, "CPU per local message end")
	require.InDelta(t, 2e-6, cfg.Local.Alpha, 0.5e-6, "local alpha")
	require.InDelta(t, 7e-6, cfg.Net.Overhead, 0.3e-6, "CPU per net message end")
	require.InEpsilon(t, 20e-6, cfg.Net.Alpha, 0.05, "net alpha")

	// The all-to-all on 2 ranks of two hosts, one message each way.
	job := simulate.Job{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 16}
	m := simulate.Machine{Ranks: 2, RanksPerHost: 1, Cores: 2, PoolRanks: 2}
	want, err := truthCfg.osuSimulate(job, m)
	require.NoError(t, err)
	got, err := cfg.osuSimulate(job, m)
	require.NoError(t, err)
	require.InEpsilon(t, want.MeanSeconds, got.MeanSeconds, 0.05)
}

// TestFitWallSplitTail: on a synthetic machine whose ranks run on one
// thread and whose local writes deliver their message 3 us before they
// return (simulate.Link.WriteTail, of a 5 us overhead; 3 us per call,
// alpha 2 us), the wall split with the tail's search finds the CPU per
// message end again, and a model that predicts calls it was not fitted on
// (4 and 8 ranks on one host) as the machine takes them. It does not find
// the call, the tail and alpha apart: a message that leaves earlier and a
// call that costs more take the calibrated calls the same time (found: 2.4,
// 2.3 and 1.6 us), so those are not asserted.
func TestFitWallSplitTail(t *testing.T) {
	skipFitShort(t, "the wall split's search with the tail takes 3 s (21 with -race)")
	truthCfg := truth()
	truthCfg.Local = simulate.Link{Alpha: 2e-6, Overhead: 5e-6, PerByte: 0.4e-9, WriteTail: 3e-6}
	truthCfg.Net = simulate.Link{Alpha: 20e-6, Beta: 0.1e-9, Overhead: 7e-6, PerByte: 0.6e-9}
	truthCfg.CallOverhead = 3e-6
	truthCfg.Oversub = nil
	truthCfg.OneThread = true
	dir := t.TempDir()
	file := func(n string) string { return filepath.Join(dir, n) }
	writeLocalWallCalibrations(t, dir, truthCfg)
	read := func(n, coll string) *calibration {
		c, err := readCalibrationOf(file(n), coll)
		require.NoError(t, err)
		return c
	}
	local, rd := read("local.json", "allreduce"), read("local-rd.json", "allreduce")
	cfg := config{Paced: true, CreditWrites: true, Coalesce: true, OneThread: true, Inline: truthCfg.Inline}
	require.NoError(t, fitClassCPU(&cfg, collectives.LinkLocal, local, local, []*calibration{rd}, 2, nil))
	require.NoError(t, fitWallSplit(&cfg, collectives.LinkLocal, local, rd, read("bcast-local.json", "broadcast"), 2, true, nil))
	t.Logf("call %.2f us, overhead %.2f us, tail %.2f us, alpha %.2f us", cfg.CallOverhead*1e6, cfg.Local.Overhead*1e6, cfg.Local.WriteTail*1e6, cfg.Local.Alpha*1e6)
	require.InDelta(t, 5e-6, cfg.Local.Overhead, 0.3e-6, "CPU per local message end")
	require.Greater(t, cfg.Local.WriteTail, 0.0, "the messages leave before their writes return")
	cfg.Gamma, cfg.Copy = truthCfg.Gamma, truthCfg.Copy
	for _, job := range []simulate.Job{
		{Coll: collectives.CollAllreduce, Algo: "recursive-doubling", Bytes: 64, OutOfPlace: true},
		{Coll: collectives.CollAlltoall, Algo: "pairwise", Bytes: 256},
		{Coll: collectives.CollBroadcast, Algo: "binomial", Bytes: 1024},
	} {
		for _, p := range []int{4, 8} {
			m := simulate.Machine{Ranks: p, Cores: p, PoolRanks: p}
			want, err := truthCfg.osuSimulate(job, m)
			require.NoError(t, err)
			got, err := cfg.osuSimulate(job, m)
			require.NoError(t, err)
			require.InEpsilon(t, want.MeanSeconds, got.MeanSeconds, 0.1, "%s %s on %d ranks", job.Coll, job.Algo, p)
		}
	}
}

// TestValidateReuseKeepsFitSettings: -reuse-fit predicts with the
// executor's settings the model was fitted under (its one_thread,
// credit_writes, coalesce), not the flags' defaults; a flag set on the
// command line replaces the fit's, and the report says so.
func TestValidateReuseKeepsFitSettings(t *testing.T) {
	cfg := truth()
	dir := t.TempDir()
	writeValidationRound(t, dir, cfg, 1)
	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", dir}, &out, &errs), errs.String())
	editFit(t, dir, func(fit *config) { require.True(t, fit.OneThread, "the default fit is made on one thread") })
	points := func(args ...string) string {
		t.Helper()
		rows, _ := reusePoints(t, dir, args...)
		return rows
	}
	oneThread := points()
	threeThreads := points("-one-thread=false")
	require.NotEqual(t, oneThread, threeThreads, "the setting must change some prediction for this test to tell")

	// The same model fitted without one thread: reused as it is, it
	// predicts on three threads although -one-thread defaults to true.
	editFit(t, dir, func(fit *config) { fit.OneThread = false })
	require.Equal(t, threeThreads, points())
	require.Equal(t, oneThread, points("-one-thread"))
	out.Reset()
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", "-reuse-fit", "-one-thread", "-write-tail=false", dir}, &out, &errs), errs.String())
	require.Contains(t, out.String(), "fit-1gbit.json (-one-thread=true -write-tail=false in place of the fit's)")
}

// TestValidateReuseRefitsLevels: -reuse-fit with -oversub-fit on the
// command line fits the levels of ranks sharing cores again from the
// calibrations, the rest of the model the fit's: a fit whose levels were
// spoilt predicts as the fresh fit did once they are fitted again.
func TestValidateReuseRefitsLevels(t *testing.T) {
	dir := t.TempDir()
	writeValidationRound(t, dir, truth(), 1)
	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"validate", "-cores", "2", dir}, &out, &errs), errs.String())
	fresh, _ := reusePoints(t, dir)
	editFit(t, dir, func(fit *config) {
		require.NotEmpty(t, fit.Oversub, "the fit has levels")
		for i := range fit.Oversub {
			fit.Oversub[i].Latency += 1e-3
		}
	})
	spoilt, _ := reusePoints(t, dir)
	require.NotEqual(t, fresh, spoilt, "the levels must change some prediction for this test to tell")
	again, report := reusePoints(t, dir, "-oversub-fit", "levels")
	require.Equal(t, fresh, again)
	require.Contains(t, report, "(the levels of ranks sharing cores fitted again: -oversub-fit=levels)")
	require.Contains(t, report, "ranks on 2 cores: ring")

	code := run([]string{"validate", "-oversub-fit", "both", dir}, &out, &errs)
	require.Equal(t, 2, code)
	require.Contains(t, errs.String(), `-oversub-fit "both": want levels or joint`)
}

// reusePoints runs collsim validate -reuse-fit (and args) on dir and
// returns the predicted times of every point, as the report lists them,
// and the whole report.
func reusePoints(t *testing.T, dir string, args ...string) (rows, report string) {
	t.Helper()
	var o, e bytes.Buffer
	require.Equal(t, 0, run(append(append([]string{"validate", "-cores", "2", "-reuse-fit"}, args...), dir), &o, &e), e.String())
	var lines []string
	for _, l := range strings.Split(o.String(), "\n") {
		if strings.HasPrefix(l, "  1gbit") {
			lines = append(lines, l)
		}
	}
	require.NotEmpty(t, lines)
	return strings.Join(lines, "\n"), o.String()
}

// editFit reads dir's fit-1gbit.json, lets edit look at or change it,
// and writes it back.
func editFit(t *testing.T, dir string, edit func(*config)) {
	t.Helper()
	path := filepath.Join(dir, "fit-1gbit.json")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var fit config
	require.NoError(t, json.Unmarshal(b, &fit))
	edit(&fit)
	b, err = json.Marshal(fit)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}
