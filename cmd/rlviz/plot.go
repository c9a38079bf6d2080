package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// This file draws the dashboard's panels as one PNG-ready image, laid
// out by the panels' own Grafana grid positions.

const (
	unitW = 48 // pixels per Grafana grid column (24 across)
	unitH = 30 // pixels per Grafana grid row
)

var (
	white   = color.RGBA{255, 255, 255, 255}
	ink     = color.RGBA{36, 41, 46, 255}
	faint   = color.RGBA{110, 118, 129, 255}
	grid    = color.RGBA{225, 228, 232, 255}
	band    = color.RGBA{246, 247, 249, 255}
	palette = []color.RGBA{
		{115, 191, 105, 255}, {242, 73, 92, 255}, {87, 148, 242, 255},
		{255, 152, 48, 255}, {184, 119, 217, 255}, {250, 222, 42, 255},
		{31, 120, 193, 255}, {150, 45, 62, 255}, {55, 135, 45, 255}, {120, 120, 120, 255},
	}
)

// line is one plotted series.
type line struct {
	label  string
	points []float64 // one per sample time; NaN: no value
}

// plotted is a panel ready to draw.
type plotted struct {
	panel
	lines []line
}

// mark is a moment named on every panel (a phase of the load).
type mark struct {
	at    time.Duration
	label string
}

// drawDashboard draws the panels over times (from the load's start).
func drawDashboard(title string, panels []plotted, times []time.Duration, marks []mark) *image.RGBA {
	bottom := 0
	for _, p := range panels {
		bottom = max(bottom, p.GridPos.Y+p.GridPos.H)
	}
	const top = 40
	img := image.NewRGBA(image.Rect(0, 0, 24*unitW, top+bottom*unitH+4))
	draw.Draw(img, img.Bounds(), &image.Uniform{band}, image.Point{}, draw.Src)
	text(img, 8, 18, ink, title)
	var legend []string
	for _, m := range marks {
		legend = append(legend, fmt.Sprintf("%ds: %s", int(m.at.Seconds()), m.label))
	}
	text(img, 8, 34, faint, "dotted lines: "+strings.Join(legend, " | ")+" (rates over 5 s windows)")
	for _, p := range panels {
		r := image.Rect(p.GridPos.X*unitW+3, top+p.GridPos.Y*unitH+2,
			(p.GridPos.X+p.GridPos.W)*unitW-3, top+(p.GridPos.Y+p.GridPos.H)*unitH-2)
		if p.Type == "row" {
			text(img, r.Min.X+2, r.Min.Y+15, ink, p.Title)
			continue
		}
		drawPanel(img, r, p, times, marks)
	}
	return img
}

func drawPanel(img *image.RGBA, r image.Rectangle, p plotted, times []time.Duration, marks []mark) {
	draw.Draw(img, r, &image.Uniform{white}, image.Point{}, draw.Src)
	outline(img, r, grid)
	text(img, r.Min.X+8, r.Min.Y+16, ink, p.Title)
	legendRows := legendLines(p.lines, r.Dx()-16)
	area := image.Rect(r.Min.X+64, r.Min.Y+26, r.Max.X-10, r.Max.Y-22-14*len(legendRows))
	hi := 0.0
	for _, l := range p.lines {
		for _, v := range l.points {
			if !math.IsNaN(v) {
				hi = max(hi, v)
			}
		}
	}
	if len(p.lines) == 0 {
		text(img, area.Min.X+10, area.Min.Y+area.Dy()/2, faint, "no data: not exported by this build")
		return
	}
	if hi == 0 {
		hi = 1
	}
	hi = niceCeil(hi * 1.05)
	span := times[len(times)-1]
	x := func(t time.Duration) int { return area.Min.X + int(float64(area.Dx())*t.Seconds()/span.Seconds()) }
	y := func(v float64) int { return area.Max.Y - int(float64(area.Dy())*v/hi) }
	for i := 0; i <= 4; i++ {
		v := hi * float64(i) / 4
		hline(img, area.Min.X, area.Max.X, y(v), grid)
		label := format(v, p.FieldConfig.Defaults.Unit)
		text(img, area.Min.X-6-7*len(label), y(v)+4, faint, label)
	}
	for s := time.Duration(0); s <= span; s += 10 * time.Second {
		label := fmt.Sprintf("%ds", int(s.Seconds()))
		text(img, x(s)-7*len(label)/2, area.Max.Y+14, faint, label)
	}
	for _, m := range marks {
		for yy := area.Min.Y; yy < area.Max.Y; yy += 4 {
			img.Set(x(m.at), yy, faint)
		}
	}
	for i, l := range p.lines {
		c := palette[i%len(palette)]
		for k := 1; k < len(l.points); k++ {
			a, b := l.points[k-1], l.points[k]
			if math.IsNaN(a) || math.IsNaN(b) {
				continue
			}
			segment(img, x(times[k-1]), y(a), x(times[k]), y(b), c)
		}
	}
	ly := area.Max.Y + 30
	for _, row := range legendRows {
		lx := r.Min.X + 10
		for _, i := range row {
			c := palette[i%len(palette)]
			draw.Draw(img, image.Rect(lx, ly-8, lx+10, ly), &image.Uniform{c}, image.Point{}, draw.Src)
			text(img, lx+14, ly, ink, p.lines[i].label)
			lx += 14 + 7*len(p.lines[i].label) + 14
		}
		ly += 14
	}
}

// legendLines splits the lines' legend entries into rows that fit width.
func legendLines(lines []line, width int) [][]int {
	var rows [][]int
	used := width
	for i, l := range lines {
		w := 14 + 7*len(l.label) + 14
		if used+w > width {
			rows = append(rows, nil)
			used = 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], i)
		used += w
	}
	return rows
}

// niceCeil rounds v up to 1, 2, 2.5 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// format writes an axis value in the panel's Grafana unit.
func format(v float64, unit string) string {
	switch {
	case unit == "s" && v > 0 && v < 1e-3:
		return trim(v*1e6) + "us"
	case unit == "s" && v > 0 && v < 1:
		return trim(v*1e3) + "ms"
	case unit == "s":
		return trim(v) + "s"
	case unit == "bytes":
		return trim(v/1e6) + " MB"
	case v >= 1e6:
		return trim(v/1e6) + "M"
	case v >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" {
		return "0"
	}
	return s
}

func text(img *image.RGBA, x, y int, c color.Color, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func outline(img *image.RGBA, r image.Rectangle, c color.Color) {
	hline(img, r.Min.X, r.Max.X, r.Min.Y, c)
	hline(img, r.Min.X, r.Max.X, r.Max.Y-1, c)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		img.Set(r.Min.X, y, c)
		img.Set(r.Max.X-1, y, c)
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x < x1; x++ {
		img.Set(x, y, c)
	}
}

// segment draws a line two pixels thick (Bresenham).
func segment(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		img.Set(x0, y0-1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int { return max(v, -v) }

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// sortedKeys returns a vector's label sets in order, for stable colours.
func sortedKeys(v vector) []string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
