package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// This file evaluates the few PromQL shapes the dashboard's queries use,
// over /metrics scrapes, so that the picture plots the dashboard's own
// queries rather than a copy of them: sums (optionally "by" labels) of
// counters' rates and of gauges, combined with + - * / and numbers.

// scrape is one read of /metrics: metric name -> label set -> value.
type scrape struct {
	at     time.Time
	series map[string]map[string]float64
}

// parseMetrics reads the Prometheus text format (comments skipped).
func parseMetrics(text string, at time.Time) scrape {
	s := scrape{at: at, series: map[string]map[string]float64{}}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:i], ""
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name, labels = name[:j], strings.TrimSuffix(name[j+1:], "}")
		}
		if s.series[name] == nil {
			s.series[name] = map[string]float64{}
		}
		s.series[name][labels] = v
	}
	return s
}

// vector is a query's value at one moment: label set -> value; the
// label set of a sum without "by" is "".
type vector map[string]float64

// node is a parsed query.
type node interface {
	// eval returns the value at scrapes[i]; rate looks back over window.
	eval(scrapes []scrape, i int, window int) vector
}

type (
	number   float64
	selector string // a metric's value (a gauge)
	rateOf   string // per-second rate of a counter over the window
	sum      struct {
		by  []string
		arg node
	}
	binary struct {
		op   byte
		l, r node
	}
)

func (n number) eval([]scrape, int, int) vector { return vector{"": float64(n)} }

func (n selector) eval(s []scrape, i, _ int) vector {
	out := vector{}
	for l, v := range s[i].series[string(n)] {
		out[l] = v
	}
	return out
}

func (n rateOf) eval(s []scrape, i, window int) vector {
	j := max(i-window, 0)
	dt := s[i].at.Sub(s[j].at).Seconds()
	out := vector{}
	if dt <= 0 {
		return out
	}
	for l, v := range s[i].series[string(n)] {
		if old, ok := s[j].series[string(n)][l]; ok {
			out[l] = (v - old) / dt
		}
	}
	return out
}

func (n sum) eval(s []scrape, i, window int) vector {
	out := vector{}
	for l, v := range n.arg.eval(s, i, window) {
		out[keep(l, n.by)] += v
	}
	return out
}

// keep returns the labels of set named in by, in set's order.
func keep(set string, by []string) string {
	var kept []string
	for _, kv := range splitLabels(set) {
		if name, _, _ := strings.Cut(kv, "="); slices.Contains(by, name) {
			kept = append(kept, kv)
		}
	}
	return strings.Join(kept, ",")
}

// splitLabels splits `a="x",b="y"` into its pairs.
func splitLabels(set string) []string {
	var out []string
	for set != "" {
		eq := strings.IndexByte(set, '=')
		if eq < 0 {
			break
		}
		end := eq + 2
		for end < len(set) && set[end] != '"' {
			if set[end] == '\\' {
				end++
			}
			end++
		}
		out = append(out, set[:min(end+1, len(set))])
		set = strings.TrimPrefix(set[min(end+1, len(set)):], ",")
	}
	return out
}

// eval of a binary operation matches equal label sets; a side that is
// one value without labels (a plain sum, a number) applies to every set
// of the other.
func (n binary) eval(s []scrape, i, window int) vector {
	l, r := n.l.eval(s, i, window), n.r.eval(s, i, window)
	lone := func(v vector) (float64, bool) {
		x, ok := v[""]
		return x, ok && len(v) == 1
	}
	out := vector{}
	apply := func(k string, a, b float64) {
		switch n.op {
		case '+':
			out[k] = a + b
		case '-':
			out[k] = a - b
		case '*':
			out[k] = a * b
		case '/':
			if b != 0 {
				out[k] = a / b
			}
		}
	}
	if b, ok := lone(r); ok {
		for k, a := range l {
			apply(k, a, b)
		}
	} else if a, ok := lone(l); ok {
		for k, b := range r {
			apply(k, a, b)
		}
	} else {
		for k, a := range l {
			if b, ok := r[k]; ok {
				apply(k, a, b)
			}
		}
	}
	return out
}

// parser reads a query: expr := term {(+|-) term}; term := factor
// {(*|/) factor}; factor := number | (expr) | sum [by (labels)] (expr) |
// rate(name[range]) | name.
type parser struct {
	toks []string
	pos  int
}

func parse(query string) (node, error) {
	p := &parser{toks: tokenize(query)}
	n, err := p.expr()
	if err == nil && p.pos != len(p.toks) {
		err = fmt.Errorf("unexpected %q", p.toks[p.pos])
	}
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", query, err)
	}
	return n, nil
}

func tokenize(q string) []string {
	var toks []string
	for i := 0; i < len(q); {
		c := rune(q[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case strings.ContainsRune("()[]+-*/,", c):
			toks = append(toks, string(c))
			i++
		default:
			j := i
			for j < len(q) && !unicode.IsSpace(rune(q[j])) && !strings.ContainsRune("()[]+-*/,", rune(q[j])) {
				j++
			}
			toks = append(toks, q[i:j])
			i = j
		}
	}
	return toks
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *parser) want(tok string) error {
	if p.peek() != tok {
		return fmt.Errorf("want %q, got %q", tok, p.peek())
	}
	p.pos++
	return nil
}

func (p *parser) expr() (node, error) { return p.binary("+-", p.term) }
func (p *parser) term() (node, error) { return p.binary("*/", p.factor) }

func (p *parser) binary(ops string, next func() (node, error)) (node, error) {
	l, err := next()
	for err == nil && len(p.peek()) == 1 && strings.Contains(ops, p.peek()) {
		op := p.toks[p.pos][0]
		p.pos++
		var r node
		if r, err = next(); err == nil {
			l = binary{op, l, r}
		}
	}
	return l, err
}

func (p *parser) factor() (node, error) {
	tok := p.peek()
	p.pos++
	if v, err := strconv.ParseFloat(tok, 64); err == nil {
		return number(v), nil
	}
	switch tok {
	case "(":
		n, err := p.expr()
		if err == nil {
			err = p.want(")")
		}
		return n, err
	case "sum":
		var by []string
		if p.peek() == "by" {
			p.pos++
			if err := p.want("("); err != nil {
				return nil, err
			}
			for p.peek() != ")" && p.peek() != "" {
				if p.peek() != "," {
					by = append(by, p.peek())
				}
				p.pos++
			}
			if err := p.want(")"); err != nil {
				return nil, err
			}
		}
		if err := p.want("("); err != nil {
			return nil, err
		}
		arg, err := p.expr()
		if err == nil {
			err = p.want(")")
		}
		return sum{by, arg}, err
	case "rate":
		if err := p.want("("); err != nil {
			return nil, err
		}
		name := p.peek()
		p.pos++
		for _, t := range []string{"[", "$__rate_interval", "]", ")"} {
			if err := p.want(t); err != nil {
				return nil, err
			}
		}
		return rateOf(name), nil
	case "", ")", "[", "]", "+", "-", "*", "/", ",":
		return nil, fmt.Errorf("unexpected %q", tok)
	}
	return selector(tok), nil
}
