// Command bench draws the chart of `make bench`: throughput against the
// number of client connections, direct-to-Redis against rlproxy, from the
// summary.json that `rlbench report` writes. The SVG is written by hand, so
// drawing it needs nothing but Go.
//
//	cd tools && go run ./bench -in ../bench-results/<time>/summary.json -out ../docs/bench-throughput.svg
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"strings"
)

// The part of rlbench's summary.json the chart reads.
type summary struct {
	CPUs      int `json:"cpus"`
	Scenarios []struct {
		Name      string  `json:"name"`
		Mode      string  `json:"mode"`
		Conns     int     `json:"conns"`
		Pipeline  int     `json:"pipeline"`
		OpsPerSec float64 `json:"ops_per_sec"`
	} `json:"scenarios"`
}

// series is one line of the chart: requests per second by connections.
type series struct {
	label, color string
	ops          map[int]float64
}

func main() {
	in := flag.String("in", "", "summary.json written by rlbench report")
	out := flag.String("out", "docs/bench-throughput.svg", "SVG file to write")
	flag.Parse()
	if err := draw(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func draw(in, out string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var sum summary
	if err := json.Unmarshal(b, &sum); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	lines := []*series{
		{label: "direct EVALSHA (minimal GCRA script)", color: "#888888", ops: map[int]float64{}},
		{label: "RL.ACQUIRE through rlproxy", color: "#d9480f", ops: map[int]float64{}},
	}
	var conns []int
	pipeline := 0
	for _, s := range sum.Scenarios {
		if !strings.HasPrefix(s.Name, "clients-") {
			continue
		}
		l := lines[0]
		if s.Mode == "rlproxy" {
			l = lines[1]
		}
		l.ops[s.Conns] = s.OpsPerSec
		if !slices.Contains(conns, s.Conns) {
			conns = append(conns, s.Conns)
		}
		pipeline = s.Pipeline
	}
	if len(conns) == 0 {
		return fmt.Errorf("%s has no clients-N scenarios", in)
	}
	slices.Sort(conns)
	svg := render(lines, conns, pipeline, sum.CPUs)
	return os.WriteFile(out, []byte(svg), 0o644)
}

// render lays the chart out: connections on x (evenly spaced), requests
// per second on y from 0.
func render(lines []*series, conns []int, pipeline, cpus int) string {
	const (
		width, height = 720, 440
		left, right   = 90, 45
		top, bottom   = 60, 110
	)
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	top0 := 0.0
	for _, l := range lines {
		for _, v := range l.ops {
			top0 = max(top0, v)
		}
	}
	step := niceStep(top0 / 5)
	ymax := step * math.Ceil(top0/step)
	if ymax == 0 {
		ymax, step = 1, 1
	}
	x := func(i int) float64 {
		if len(conns) == 1 {
			return left + plotW/2
		}
		const pad = 30 // keeps the end points' labels off the axes
		return left + pad + (plotW-2*pad)*float64(i)/float64(len(conns)-1)
	}
	y := func(v float64) float64 { return top + plotH*(1-v/ymax) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="17" font-weight="bold">Throughput vs clients (pipeline %d, one hot limiter)</text>`+"\n", left, pipeline)
	for v := 0.0; v <= ymax+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, left+plotW, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y(v)+4, human(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(22 %.1f) rotate(-90)" text-anchor="middle">requests per second</text>`+"\n", top+plotH/2)
	for i, c := range conns {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x(i), top+plotH+20, c)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">client connections</text>`+"\n", left+plotW/2, top+plotH+40)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%.1f" stroke="black"/>`+"\n", left, left, top, top+plotH)
	fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, left+plotW, top+plotH, top+plotH)
	for n, l := range lines {
		var pts []string
		for i, c := range conns {
			if v, ok := l.ops[c]; ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
			}
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", strings.Join(pts, " "), l.color)
		for i, c := range conns {
			if v, ok := l.ops[c]; ok {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", x(i), y(v), l.color)
				dy := -9.0
				if n == 0 {
					dy = 18
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s" font-size="11">%s</text>`+"\n", x(i), y(v)+dy, l.color, human(v))
			}
		}
		ly := float64(height - 48 + 18*n)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5"/>`+"\n", left, left+24, ly-4, ly-4, l.color)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", left+32, ly, html.EscapeString(l.label))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="11" fill="#555">%d CPUs shared by the load generator, redis-server and rlproxy</text>`+"\n", width-right, height-12, cpus)
	b.WriteString("</svg>\n")
	return b.String()
}

// niceStep rounds a raw axis step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// human writes 250000 as 250k.
func human(v float64) string {
	switch {
	case v >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.2f", v/1e6), ".00") + "M"
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
