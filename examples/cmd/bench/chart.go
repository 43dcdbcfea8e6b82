package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// drawChart draws throughput and p99 latency against concurrency, one line
// per implementation, side by side, into a PNG file.
func drawChart(path string, results []result, impls []string) error {
	tp := plot.New()
	tp.Title.Text = "Throughput"
	tp.X.Label.Text = "transfers in flight (workers)"
	tp.Y.Label.Text = "transfers / s"
	lp := plot.New()
	lp.Title.Text = "p99 latency"
	lp.X.Label.Text = "transfers in flight (workers)"
	lp.Y.Label.Text = "seconds"

	var levels []float64
	seen := map[int]bool{}
	for _, r := range results {
		if !seen[r.workers] {
			seen[r.workers] = true
			levels = append(levels, float64(r.workers))
		}
	}
	var tArgs, lArgs []any
	for _, impl := range impls {
		var tXY, lXY plotter.XYs
		for _, r := range results {
			if r.impl != impl {
				continue
			}
			tXY = append(tXY, plotter.XY{X: float64(r.workers), Y: r.throughput()})
			lXY = append(lXY, plotter.XY{X: float64(r.workers), Y: r.pct(99).Seconds()})
		}
		tArgs = append(tArgs, impl, tXY)
		lArgs = append(lArgs, impl, lXY)
	}
	if err := plotutil.AddLinePoints(tp, tArgs...); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(lp, lArgs...); err != nil {
		return err
	}
	for _, p := range []*plot.Plot{tp, lp} {
		p.Y.Min = 0
		// Bottom right: the axes start at zero, so the lines run above it.
		p.Legend.Top = false
		p.Legend.Left = false
		if len(levels) > 1 && levels[len(levels)-1]/levels[0] > 4 {
			p.X.Scale = plot.LogScale{}
		}
		var ticks []plot.Tick
		for _, l := range levels {
			ticks = append(ticks, plot.Tick{Value: l, Label: strconv.Itoa(int(l))})
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Padding = vg.Points(8)
		p.Add(plotter.NewGrid())
	}

	img := vgimg.NewWith(vgimg.UseWH(10*vg.Inch, 4*vg.Inch), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 8, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	plots := [][]*plot.Plot{{tp, lp}}
	canvases := plot.Align(plots, tiles, dc)
	tp.Draw(canvases[0][0])
	lp.Draw(canvases[0][1])

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
