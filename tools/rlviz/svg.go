package main

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"
)

// Layout, in pixels: a row per series, time on x.
const (
	width        = 900
	left, right  = 170, 90 // row labels; totals
	top, rowH    = 96, 112
	plotW        = width - left - right
	lineTop      = 12 // within a row: the grants-so-far line ...
	lineBottom   = 78
	grantedLane  = 82 // ... then a lane of granted ticks
	deniedLane   = 96 // ... and one of denied ticks
	laneH        = 11
	bottomMargin = 56
)

// render draws the rows over a shared time axis.
func render(all []*series, phases []phase, requests int, backend string) string {
	xmax := 6.0
	maxGrants := 0
	for _, s := range all {
		slices.SortFunc(s.events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
		n := 0
		for _, e := range s.events {
			xmax = max(xmax, math.Ceil(e.at.Seconds()*2)/2)
			if e.granted {
				n++
			}
		}
		maxGrants = max(maxGrants, n)
	}
	ymax := math.Ceil(float64(max(maxGrants, rate*int(xmax)))/10) * 10
	height := top + rowH*len(all) + bottomMargin
	x := func(t float64) float64 { return left + plotW*t/xmax }

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`, width, height, width, height)
	p(`<rect width="%d" height="%d" fill="white"/>`, width, height)
	p(`<text x="12" y="26" font-size="18" font-weight="bold">Five algorithms and two limits, one bursty load: every limiter allows 10 permits per second</text>`)
	p(`<text x="12" y="46" font-size="12" fill="#495057">Each limiter got the same %d requests at the same moments (real time, %s, through rlproxy).</text>`, requests, html.EscapeString(backend))
	legend(p)

	bottom := float64(top + rowH*len(all))
	for _, ph := range phases {
		x1, x2 := x(ph.from.Seconds()), x(ph.to.Seconds())
		if x2-x1 < 4 {
			x1, x2 = x1-2, x1+2
		}
		p(`<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#fff3bf" opacity="0.7"/>`, x1, top-8, x2-x1, bottom-float64(top)+8)
		p(`<text x="%.1f" y="%d" text-anchor="middle" font-size="12" fill="#7a5b00">%s</text>`, (x1+x2)/2, top-12, html.EscapeString(ph.label))
	}
	for s := 0.0; s <= xmax; s += 0.5 {
		stroke := "#f1f3f5"
		if s == math.Trunc(s) {
			stroke = "#dee2e6"
			p(`<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`, x(s), bottom+18, s)
		}
		p(`<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="%s"/>`, x(s), x(s), top-8, bottom, stroke)
	}
	p(`<text x="%.1f" y="%.1f" text-anchor="middle" fill="#495057">time (s) — fixed windows turn over on each whole second</text>`, x(xmax/2), bottom+40)

	for i, s := range all {
		row(p, s, float64(top+rowH*i), x, xmax, ymax)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// legend explains the marks, in one line under the title.
func legend(p func(string, ...any)) {
	const y = 66
	p(`<g font-size="12" fill="#495057">`)
	p(`<line x1="12" x2="12" y1="%d" y2="%d" stroke="#343a40" stroke-width="2"/><text x="20" y="%d">granted request</text>`, y-10, y+1, y)
	p(`<line x1="130" x2="130" y1="%d" y2="%d" stroke="#adb5bd" stroke-width="2"/><text x="138" y="%d">denied request</text>`, y-10, y+1, y)
	p(`<line x1="246" x2="276" y1="%d" y2="%d" stroke="#343a40" stroke-width="2"/><text x="282" y="%d">permits granted so far</text>`, y-4, y-4, y)
	p(`<line x1="440" x2="470" y1="%d" y2="%d" stroke="#868e96" stroke-width="1.5" stroke-dasharray="5 4"/><text x="476" y="%d">10 per second since t = 0</text>`, y-4, y-4, y)
	p(`</g>`)
}

// row draws one series: its name, the grants-so-far line against the
// rate, and a tick per request in the granted or the denied lane.
func row(p func(string, ...any), s *series, y0 float64, x func(float64) float64, xmax, ymax float64) {
	y := func(n float64) float64 { return y0 + lineBottom - (lineBottom-lineTop)*n/ymax }
	p(`<line x1="0" x2="%d" y1="%.1f" y2="%.1f" stroke="#ced4da"/>`, width, y0, y0)
	p(`<text x="12" y="%.1f" font-size="15" font-weight="bold" fill="%s">%s</text>`, y0+34, s.color, html.EscapeString(s.label))
	for i, line := range strings.Split(s.note, "\n") {
		p(`<text x="12" y="%.1f" font-size="12" fill="#495057">%s</text>`, y0+52+16*float64(i), html.EscapeString(line))
	}
	p(`<text x="%d" y="%.1f" text-anchor="end" font-size="10" fill="#868e96">%g</text>`, left-4, y(ymax)+4, ymax)
	p(`<text x="%d" y="%.1f" text-anchor="end" font-size="10" fill="#868e96">0</text>`, left-4, y(0)+3)
	p(`<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#adb5bd"/>`, left, left, y(ymax), y(0))

	tEnd := min(xmax, ymax/rate)
	p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#868e96" stroke-width="1.5" stroke-dasharray="5 4"/>`, x(0), x(tEnd), y(0), y(rate*tEnd))

	granted, denied := 0, 0
	pts := []string{fmt.Sprintf("%.1f,%.1f", x(0), y(0))}
	var ticks [2]strings.Builder // denied, granted
	for _, e := range s.events {
		t := e.at.Seconds()
		if e.granted {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(t), y(float64(granted)), x(t), y(float64(granted+1))))
			granted++
			fmt.Fprintf(&ticks[1], "M%.1f %.1fv%d", x(t), y0+grantedLane, laneH)
		} else {
			denied++
			fmt.Fprintf(&ticks[0], "M%.1f %.1fv%d", x(t), y0+deniedLane, laneH)
		}
	}
	pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(xmax), y(float64(granted))))
	counts(p, s, y0, x)
	p(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), s.color)
	p(`<path d="%s" stroke="%s" stroke-width="1.2"/>`, ticks[1].String(), s.color)
	p(`<path d="%s" stroke="#adb5bd" stroke-width="1" opacity="0.6"/>`, ticks[0].String())
	p(`<text x="%d" y="%.1f" font-size="12" fill="%s">%d granted</text>`, width-right+8, y0+grantedLane+10, s.color, granted)
	p(`<text x="%d" y="%.1f" font-size="12" fill="#868e96">%d denied</text>`, width-right+8, y0+deniedLane+10, denied)
}

// counts labels ticks that stand for several requests: requests answered
// within a few ms of each other draw one tick, so say how many (once for
// groups that stand close together).
func counts(p func(string, ...any), s *series, y0 float64, x func(float64) float64) {
	for _, granted := range []bool{false, true} {
		lane, fill := deniedLane, "#868e96"
		if granted {
			lane, fill = grantedLane, s.color
		}
		type label struct {
			x float64
			n int
		}
		var labels []label
		for i := 0; i < len(s.events); {
			first, n := s.events[i], 0
			for ; i < len(s.events) && s.events[i].at-first.at < 5*time.Millisecond; i++ {
				if s.events[i].granted == granted {
					n++
				}
			}
			if n < 5 {
				continue
			}
			if k := len(labels) - 1; k >= 0 && x(first.at.Seconds())-labels[k].x < 30 {
				labels[k] = label{x(first.at.Seconds()), labels[k].n + n}
			} else {
				labels = append(labels, label{x(first.at.Seconds()), n})
			}
		}
		for _, l := range labels {
			p(`<text x="%.1f" y="%.1f" font-size="10" fill="%s">×%d</text>`, l.x+4, y0+float64(lane)+9, fill, l.n)
		}
	}
}
