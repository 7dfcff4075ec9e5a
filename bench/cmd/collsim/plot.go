package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// drawCollective writes a PNG for one collective: a panel per rank count,
// time against size on log scales, a line per algorithm and a dashed black
// line for the selector's pick.
func drawCollective(w io.Writer, coll string, points []*point) error {
	var ranks []int
	byRanks := map[int][]*point{}
	for _, pt := range points {
		if pt.Coll != coll {
			continue
		}
		if _, ok := byRanks[pt.Ranks]; !ok {
			ranks = append(ranks, pt.Ranks)
		}
		byRanks[pt.Ranks] = append(byRanks[pt.Ranks], pt)
	}
	if len(ranks) == 0 {
		return fmt.Errorf("no points of %s", coll)
	}
	var plots []*plot.Plot
	for _, p := range ranks {
		pts := byRanks[p]
		pl := plot.New()
		hosts := "1 host"
		if pts[0].Hosts > 1 {
			hosts = fmt.Sprintf("%d hosts", pts[0].Hosts)
		}
		pl.Title.Text = fmt.Sprintf("%s, %d ranks (%s)", coll, p, hosts)
		pl.X.Label.Text = "buffer (bytes)"
		if pts[0].Block > 0 {
			pl.X.Label.Text = "block (bytes)"
		}
		pl.Y.Label.Text = "time (s)"
		pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
		pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		pl.Legend.Top, pl.Legend.Left = true, true
		pl.Add(plotter.NewGrid())
		x := func(pt *point) float64 {
			if pt.Block > 0 {
				return float64(pt.Block)
			}
			return float64(pt.Bytes)
		}
		for i, a := range pts[0].Algos {
			var xy plotter.XYs
			for _, pt := range pts {
				r := pt.find(a.Algo)
				if r != nil && r.Err == "" && r.Seconds > 0 && !math.IsInf(r.Seconds, 0) {
					xy = append(xy, plotter.XY{X: x(pt), Y: r.Seconds})
				}
			}
			if len(xy) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(xy)
			if err != nil {
				return err
			}
			l.Color, s.Color, s.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
			pl.Add(l, s)
			pl.Legend.Add(a.Algo, l, s)
		}
		var sel plotter.XYs
		for _, pt := range pts {
			if r := pt.find(pt.Selector); r != nil && r.Err == "" && r.Seconds > 0 {
				sel = append(sel, plotter.XY{X: x(pt), Y: r.Seconds})
			}
		}
		if len(sel) > 0 {
			l, err := plotter.NewLine(sel)
			if err != nil {
				return err
			}
			l.Color = color.Black
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			l.Width = vg.Points(1.5)
			pl.Add(l)
			pl.Legend.Add("selector's pick", l)
		}
		plots = append(plots, pl)
	}
	cols := min(len(plots), 3)
	rows := (len(plots) + cols - 1) / cols
	img := vgimg.New(vg.Length(cols)*5*vg.Inch, vg.Length(rows)*4*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range grid[i] {
			grid[i][j] = plot.New() // an empty tile where the last row is short
			grid[i][j].HideAxes()
		}
	}
	for i, pl := range plots {
		grid[i/cols][i%cols] = pl
	}
	canvases := plot.Align(grid, tiles, dc)
	for i, pl := range plots {
		pl.Draw(canvases[i/cols][i%cols])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// drawValidation writes a PNG of predicted against measured time, log-log,
// a colour per collective, with the diagonal and the tolerance band.
func drawValidation(w io.Writer, pts []vpoint, tol float64) error {
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("simulated vs measured (%d points; dashed: +-%.0f%%)", len(pts), tol*100)
	pl.X.Label.Text = "measured time per call (s)"
	pl.Y.Label.Text = "predicted (s)"
	pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
	pl.X.Tick.Marker, pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Add(plotter.NewGrid())
	var colls []string
	lo, hi := math.Inf(1), 0.0
	for _, p := range pts {
		if !slices.Contains(colls, p.coll) {
			colls = append(colls, p.coll)
		}
		lo, hi = min(lo, p.measured, p.predicted), max(hi, p.measured, p.predicted)
	}
	for i, c := range colls {
		var xy plotter.XYs
		for _, p := range pts {
			if p.coll == c && p.measured > 0 && p.predicted > 0 {
				xy = append(xy, plotter.XY{X: p.measured, Y: p.predicted})
			}
		}
		s, err := plotter.NewScatter(xy)
		if err != nil {
			return err
		}
		s.Color, s.Shape = plotutil.Color(i), plotutil.Shape(i)
		pl.Add(s)
		pl.Legend.Add(c, s)
	}
	for _, f := range []float64{1, 1 - tol, 1 + tol} {
		l, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo * f}, {X: hi, Y: hi * f}})
		if err != nil {
			return err
		}
		l.Color = color.Gray{Y: 80}
		if f != 1 {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		}
		pl.Add(l)
	}
	wt, err := pl.WriterTo(7*vg.Inch, 7*vg.Inch, "png")
	if err != nil {
		return err
	}
	_, err = wt.WriteTo(w)
	return err
}
