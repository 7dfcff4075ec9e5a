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
// optional DIR/calib/oversub-ring-N.json and oversub-rd-N.json (N ranks on
// one host, more than the cores: ring and recursive doubling); DIR/runs/RATE/HxR/COLL-ALGO.json are `osu COLL
// --algorithm ALGO -o json` outputs of H hosts with R ranks each.
func validateCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("collsim validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cores := fs.Int("cores", runtime.NumCPU(), "cores of the machine the namespaces share")
	tol := fs.Float64("tolerance", 0.25, "relative error counted as a hit")
	plotFile := fs.String("plot", "", "write predicted against measured as a PNG")
	quiet := fs.Bool("q", false, "print the summary only, not every point")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("validate: want one directory")}
	}
	dir := fs.Arg(0)
	local, err := readCalibration(filepath.Join(dir, "calib", "local.json"))
	if err != nil {
		return err
	}
	// Optional: more ranks on one host than cores, at several levels
	// (simulate.Oversub): oversub-ring-N.json and oversub-rd-N.json for N
	// ranks.
	overFiles, err := filepath.Glob(filepath.Join(dir, "calib", "oversub-ring-*.json"))
	if err != nil {
		return err
	}
	type overPair struct{ ring, rd *calibration }
	var overs []overPair
	for _, f := range overFiles {
		var pair overPair
		if pair.ring, err = readCalibration(f); err != nil {
			return err
		}
		rdFile := strings.Replace(f, "oversub-ring-", "oversub-rd-", 1)
		if _, err := os.Stat(rdFile); err == nil {
			if pair.rd, err = readCalibration(rdFile); err != nil {
				return err
			}
		}
		overs = append(overs, pair)
	}
	slices.SortFunc(overs, func(a, b overPair) int { return a.ring.ranks - b.ring.ranks })
	nets, err := filepath.Glob(filepath.Join(dir, "calib", "net-*.json"))
	if err != nil || len(nets) == 0 {
		return fmt.Errorf("validate: no %s", filepath.Join(dir, "calib", "net-RATE.json"))
	}
	var all []vpoint
	for _, nf := range nets {
		rateName := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(nf), "net-"), ".json")
		cal, err := readCalibration(nf)
		if err != nil {
			return err
		}
		var cfg config
		fmt.Fprintf(stdout, "# rate %s: the model fitted on this machine's %d cores\n", rateName, *cores)
		if err := fitClass(&cfg, collectives.LinkLocal, local, *cores, stdout); err != nil {
			return fmt.Errorf("fit local: %w", err)
		}
		for _, c := range overs {
			o, err := fitOversub(&cfg, c.ring, c.rd, *cores, stdout)
			if err != nil {
				return fmt.Errorf("fit oversubscription: %w", err)
			}
			cfg.Oversub = append(cfg.Oversub, o)
		}
		if err := fitClass(&cfg, collectives.LinkNet, cal, *cores, stdout); err != nil {
			return fmt.Errorf("fit net %s: %w", rateName, err)
		}
		cfg.Cores = *cores
		cfg.Note = fmt.Sprintf("fitted by collsim validate on %s (TCP between network namespaces, links shaped to %s)", dir, rateName)
		b, _ := json.MarshalIndent(cfg, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "fit-"+rateName+".json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
		pts, err := predictRuns(filepath.Join(dir, "runs", rateName), rateName, cfg, *cores)
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
}

func (p *vpoint) ratio() float64 { return p.predicted / p.measured }

func (p *vpoint) hit(tol float64) bool { return math.Abs(p.ratio()-1) <= tol }

// predictRuns predicts every osu output under dir (HxR/COLL-ALGO.json).
func predictRuns(dir, rateName string, cfg config, cores int) ([]vpoint, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*x*", "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
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
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		recs, err := osu.ReadRecords(fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		p := h * r
		m := simulate.Machine{Ranks: p, RanksPerHost: r, Cores: cores, PoolRanks: p}
		for _, rec := range recs {
			if rec.AvgUs <= 0 {
				continue
			}
			bytes := rec.Size
			if c.Info().Blocked {
				bytes *= p
			}
			job := simulate.Job{Coll: c, Algo: algo, Bytes: bytes, Root: max(rec.Root, 0), OutOfPlace: c.Info().Reducing}
			res, err := simulate.Simulate(job, m, cfg.params(), simulate.Options{})
			if err != nil {
				return nil, fmt.Errorf("%s size %d: %w", f, rec.Size, err)
			}
			out = append(out, vpoint{rate: rateName, hosts: h, rph: r, coll: c.String(), algo: algo, size: rec.Size,
				measured: rec.AvgUs * 1e-6, predicted: res.MeanSeconds, method: res.Method.String()})
		}
	}
	return out, nil
}

func writePoints(w io.Writer, pts []vpoint, tol float64) {
	fmt.Fprintln(w, "\n## every point (time per call, the mean over ranks, as OSU reports it)")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rate\thosts x ranks\tcollective\talgorithm\tsize\tmeasured\tpredicted\tpred/meas\t\t")
	for _, p := range pts {
		mark := ""
		if !p.hit(tol) {
			mark = "MISS"
		}
		fmt.Fprintf(tw, "%s\t%dx%d\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t\n", p.rate, p.hosts, p.rph, p.coll, p.algo,
			sizeLabel(p.size), seconds(p.measured), seconds(p.predicted), p.ratio(), mark)
	}
	tw.Flush()
}

// writeSummary prints the share of hits overall and per group, and the
// median ratio per group: where the model is off and in which direction.
func writeSummary(w io.Writer, pts []vpoint, tol float64) {
	type agg struct {
		n, hits int
		ratios  []float64
	}
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
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "group\tpoints\twithin\tshare\tmedian pred/meas\tmiddle half of pred/meas")
	for _, k := range order {
		g := groups[k]
		slices.Sort(g.ratios)
		q := func(f float64) float64 { return g.ratios[int(f*float64(len(g.ratios)-1))] }
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f%%\t%.2f\t%.2f .. %.2f\n", k, g.n, g.hits, 100*float64(g.hits)/float64(g.n), q(0.5), q(0.25), q(0.75))
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
