// Package plot draws goccl benchmark results (the rows of `osu ... -o
// json`) as bus bandwidth and latency against message size, both on log
// scales, one line per run, into a PNG.
package plot

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/goccl/goccl/bench/osu"
)

// Run is one JSON file's rows under a label.
type Run struct {
	Label   string
	Records []osu.Record
}

// Options tune the picture.
type Options struct {
	Title         string
	Width, Height vg.Length // whole image; default 12 x 5 inches
}

// series is one line: the rows of one run that belong together (same
// benchmark, layout and in-place flag), by size.
type series struct {
	label   string
	size    []float64
	busbw   []float64
	latency []float64
}

// group splits runs into series. A run that mixes benchmarks or layouts
// gives one series for each.
func group(runs []Run) []series {
	var out []series
	for _, run := range runs {
		type key struct {
			bench, layout string
			inPlace       bool
		}
		byKey := map[key]*series{}
		var order []key
		for _, r := range run.Records {
			k := key{r.Benchmark, r.Layout, r.InPlace}
			s := byKey[k]
			if s == nil {
				s = &series{}
				byKey[k] = s
				order = append(order, k)
			}
			s.size = append(s.size, float64(r.Size))
			s.busbw = append(s.busbw, r.BusBW)
			lat := r.AvgUs
			if r.CommUs > 0 {
				lat = r.CommUs
			}
			s.latency = append(s.latency, lat)
		}
		for _, k := range order {
			s := byKey[k]
			s.label = run.Label
			if len(order) > 1 {
				s.label += " " + k.bench
				if k.layout == "nccl" {
					s.label += map[bool]string{false: " out-of-place", true: " in-place"}[k.inPlace]
				}
			}
			out = append(out, *s)
		}
	}
	return out
}

// points returns the (size, value) pairs a log-log plot can show.
func points(x, y []float64) plotter.XYs {
	var xy plotter.XYs
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return x[idx[a]] < x[idx[b]] })
	for _, i := range idx {
		if x[i] > 0 && y[i] > 0 && !math.IsInf(y[i], 0) && !math.IsNaN(y[i]) {
			xy = append(xy, plotter.XY{X: x[i], Y: y[i]})
		}
	}
	return xy
}

// sizeTicks labels powers of two of a byte axis (1, 4, 16, ... 1K, 4K ...).
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log2(max(lo, 1))); math.Pow(2, e) <= hi*1.0001; e++ {
		v := math.Pow(2, e)
		if v < lo*0.9999 {
			continue
		}
		label := ""
		if int(e)%2 == 0 {
			label = byteLabel(v)
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

func byteLabel(v float64) string {
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%gG", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%gM", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%gK", v/(1<<10))
	}
	return fmt.Sprintf("%g", v)
}

func newPlot(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "message size (bytes)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.Y.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Millimeter * 2
	p.Legend.YOffs = -vg.Millimeter * 2
	p.Add(plotter.NewGrid())
	return p
}

func addLine(p *plot.Plot, i int, label string, xy plotter.XYs) error {
	if len(xy) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Dashes = plotutil.Dashes(i / 7)
	s.Color = plotutil.Color(i)
	s.Shape = plotutil.Shape(i)
	p.Add(l, s)
	p.Legend.Add(label, l, s)
	return nil
}

// Draw writes a PNG with two panels, bus bandwidth and latency against
// size, one line per series of runs.
func Draw(w io.Writer, runs []Run, opt Options) error {
	ss := group(runs)
	if len(ss) == 0 {
		return errors.New("plot: no rows to draw")
	}
	if opt.Width == 0 {
		opt.Width = 12 * vg.Inch
	}
	if opt.Height == 0 {
		opt.Height = 5 * vg.Inch
	}
	title := opt.Title
	if title != "" {
		title += ": "
	}
	bw := newPlot(title+"bus bandwidth", "busbw (GB/s)")
	lat := newPlot(title+"latency", "time per call (us)")
	drawn := 0
	for i, s := range ss {
		b, l := points(s.size, s.busbw), points(s.size, s.latency)
		if err := addLine(bw, i, s.label, b); err != nil {
			return err
		}
		if err := addLine(lat, i, s.label, l); err != nil {
			return err
		}
		drawn += len(b) + len(l)
	}
	if drawn == 0 {
		return errors.New("plot: no positive values to draw on log scales")
	}
	img := vgimg.New(opt.Width, opt.Height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{{bw, lat}}, tiles, dc)
	bw.Draw(canvases[0][0])
	lat.Draw(canvases[0][1])
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// Label derives a run's label from its rows: transport, algorithm and
// ranks, as they differ between runs one compares.
func Label(name string, recs []osu.Record) string {
	if len(recs) == 0 {
		return name
	}
	r := recs[0]
	parts := []string{r.Transport}
	if alg := r.Algorithm; alg != "" {
		// "auto(ring|tree|...)": the candidates do not fit a legend.
		if i := strings.IndexByte(alg, '('); i > 0 {
			alg = alg[:i]
		}
		parts = append(parts, alg)
	}
	parts = append(parts, fmt.Sprintf("np=%d", r.Ranks))
	return name + " (" + strings.Join(parts, ", ") + ")"
}
