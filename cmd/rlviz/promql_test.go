package main

import (
	"math"
	"testing"
	"time"
)

// Every query of the dashboard parses: the picture plots them all.
func TestDashboardQueriesParse(t *testing.T) {
	_, panels, err := readDashboard("../../docs/grafana/rlproxy.json")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range panels {
		for _, tg := range p.Targets {
			if _, err := parse(tg.Expr); err != nil {
				t.Errorf("panel %q: %v", p.Title, err)
			}
			n++
		}
	}
	if n < 20 {
		t.Errorf("%d queries, want the dashboard's 20 or more", n)
	}
}

// The evaluator's arithmetic, checked by hand: rates over the window,
// sums with and without "by", a ratio matched by labels, a number.
func TestEval(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := []scrape{
		parseMetrics("# HELP x\nc{node=\"a\"} 10\nc{node=\"b\"} 0\nd{node=\"a\"} 1\nd{node=\"b\"} 1\ng 7\n", t0),
		parseMetrics("c{node=\"a\"} 20\nc{node=\"b\"} 40\nd{node=\"a\"} 6\nd{node=\"b\"} 21\ng 9\n", t0.Add(2*time.Second)),
	}
	for _, tc := range []struct {
		q    string
		want vector
	}{
		{"sum(rate(c[$__rate_interval]))", vector{"": 25}},
		{"sum by (node) (rate(c[$__rate_interval]))", vector{`node="a"`: 5, `node="b"`: 20}},
		{"sum by (node) (rate(c[$__rate_interval])) / sum by (node) (rate(d[$__rate_interval]))", vector{`node="a"`: 2, `node="b"`: 2}},
		{"sum(g) / 1000 + sum(rate(d[$__rate_interval]))", vector{"": 0.009 + 12.5}},
		{"(sum(g) - 1) * 2", vector{"": 16}},
	} {
		n, err := parse(tc.q)
		if err != nil {
			t.Fatal(err)
		}
		got := n.eval(s, 1, 1)
		if len(got) != len(tc.want) {
			t.Errorf("%s = %v, want %v", tc.q, got, tc.want)
			continue
		}
		for k, v := range tc.want {
			if math.Abs(got[k]-v) > 1e-9 {
				t.Errorf("%s = %v, want %v", tc.q, got, tc.want)
			}
		}
	}
	for _, bad := range []string{"sum(", "rate(c[5m])", "sum(g))", "a +"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}
