package main

import (
	"encoding/json"
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotRuns draws the training loss (top) and the test accuracy (bottom) of
// the runs in the JSON files, each run on the same axes, into a PNG.
func plotRuns(out string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("%w: -plot %s needs one or more JSON files of runs (-json)", errUsage, out)
	}
	loss := plot.New()
	loss.Title.Text = "MNIST on GoMLX (simplego), data-parallel over goccl"
	loss.X.Label.Text = "epoch"
	loss.Y.Label.Text = "training loss"
	acc := plot.New()
	acc.X.Label.Text = "epoch"
	acc.Y.Label.Text = "test accuracy (%)"
	var lossLines, accLines []any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if len(r.Points) == 0 || len(r.Epochs) == 0 {
			return fmt.Errorf("%s: no loss points or epochs", f)
		}
		name := fmt.Sprintf("%s/%s, %d ranks, global batch %d", r.Model, r.Optimizer, r.Ranks, r.Batch)
		if r.Ranks == 1 {
			name = fmt.Sprintf("%s/%s, 1 rank, global batch %d", r.Model, r.Optimizer, r.Batch)
		}
		lp := make(plotter.XYs, len(r.Points))
		for i, p := range r.Points {
			lp[i] = plotter.XY{X: p.Epoch, Y: p.Loss}
		}
		ap := make(plotter.XYs, len(r.Epochs))
		for i, e := range r.Epochs {
			ap[i] = plotter.XY{X: float64(e.Epoch), Y: 100 * e.TestAccuracy}
		}
		lossLines = append(lossLines, name, lp)
		accLines = append(accLines, name, ap)
	}
	if err := plotutil.AddLinePoints(loss, lossLines...); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(acc, accLines...); err != nil {
		return err
	}
	loss.Legend.Top = true
	acc.Legend.Top = false
	acc.Legend.Left = false
	img := vgimg.New(6*vg.Inch, 6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{loss}, {acc}}, tiles, dc)
	loss.Draw(canvases[0][0])
	acc.Draw(canvases[1][0])
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", out, err)
	}
	return f.Close()
}
