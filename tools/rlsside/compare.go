package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// compareOptions are compare's flags.
type compareOptions struct {
	ref, refCheck, rlproxy string
	src                    string // envoyproxy/ratelimit's source tree: compare every config in it
	rev                    string // its revision, for the page
	out                    string // write the page there (else stdout)
	configs                []string
}

type yamlDescriptor struct {
	Key       string
	Value     string
	RateLimit *struct {
		Unit            string
		RequestsPerUnit uint32 `yaml:"requests_per_unit"`
		Unlimited       bool
	} `yaml:"rate_limit"`
	Descriptors []yamlDescriptor
}

// step is one request of a sequence.
type step struct {
	descs []string // each descriptor as "k=v,k2=v2"
	unit  string   // the shortest unit of its group, for aligning to windows
	first bool     // the first of a group that must fall in one window
}

// sequence makes a config's requests: each limited descriptor until past its limit,
// then pairs of neighbouring descriptors (values "v1", "v2"; a
// wildcard's '*' becomes "-x1", "-x2").
func sequence(file string) (domain string, steps []step, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", nil, err
	}
	var root struct {
		Domain      string
		Descriptors []yamlDescriptor
	}
	if err := yaml.Unmarshal(data, &root); err != nil {
		return "", nil, err
	}
	type path struct {
		entries string
		n       int
		unit    string
		fresh   string // the entries with values not used before ("" if all are exact)
	}
	var paths []path
	var walk func(prefix string, ds []yamlDescriptor)
	walk = func(prefix string, ds []yamlDescriptor) {
		for _, d := range ds {
			v := d.Value
			switch {
			case v == "":
				v = "v1"
			case strings.Contains(v, "*"):
				v = strings.ReplaceAll(v, "*", "-x1")
			}
			e := prefix + d.Key + "=" + v
			if rl := d.RateLimit; rl != nil {
				n := 2
				if !rl.Unlimited {
					n = int(min(rl.RequestsPerUnit, 4)) + 2
				}
				fresh := ""
				if strings.Contains(e, "=v1") || strings.Contains(e, "-x1") {
					fresh = strings.ReplaceAll(strings.ReplaceAll(e, "=v1", "=v2"), "-x1", "-x2")
				}
				paths = append(paths, path{e, n, strings.ToLower(rl.Unit), fresh})
			}
			walk(e+",", d.Descriptors)
		}
	}
	walk("", root.Descriptors)
	group := func(unit string, ds ...[]string) {
		for i, d := range ds {
			steps = append(steps, step{descs: d, unit: unit, first: i == 0})
		}
	}
	for _, p := range paths {
		group(p.unit, slices.Repeat([][]string{{p.entries}}, p.n)...)
	}
	// Pairs, in one window: a descriptor taken past its limit, then with
	// one of fresh values, twice, then the fresh one alone:
	// envoyproxy/ratelimit counts the fresh one although the request is
	// over the limit.
	for i := 0; i+1 < len(paths); i++ {
		a, b := paths[i], paths[i+1]
		if b.fresh == "" {
			continue
		}
		pair := []string{a.entries, b.fresh}
		group(shorter(a.unit, b.unit), append(slices.Repeat([][]string{{a.entries}}, a.n), pair, pair, []string{b.fresh})...)
	}
	return root.Domain, steps, nil
}

func shorter(a, b string) string {
	order := "second minute hour day week month year"
	if a == "" || (b != "" && strings.Index(order, b) < strings.Index(order, a)) {
		return b
	}
	return a
}

// descs parses descriptors written "k=v,k2=v2".
func descs(ds ...string) []*rlv3.RateLimitDescriptor {
	var out []*rlv3.RateLimitDescriptor
	for _, d := range ds {
		r := &rlv3.RateLimitDescriptor{}
		for _, e := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(e, "=")
			r.Entries = append(r.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		out = append(out, r)
	}
	return out
}

// alignWindow waits, before a sequence step, so that a short window does
// not end within a group of steps or between the two services' answers:
// a group of per-second steps starts in a fresh second, one of per-minute
// steps not in a minute's last 15 seconds, and no per-minute step in its
// last 2.
func alignWindow(s step) {
	now := time.Now()
	switch {
	case s.unit == "second" && s.first:
		time.Sleep(time.Second - time.Duration(now.Nanosecond()) + 20*time.Millisecond)
	case s.unit == "minute" && (now.Second() >= 58 || (s.first && now.Second() >= 45)):
		time.Sleep(time.Duration(60-now.Second())*time.Second + 20*time.Millisecond)
	}
}

// findConfigs lists every rate limit config in envoyproxy/ratelimit's
// source tree: the YAML files whose top level has a domain.
func findConfigs(src string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && (bytes.HasPrefix(data, []byte("domain:")) || bytes.Contains(data, []byte("\ndomain:"))) {
			out = append(out, path)
		}
		return err
	})
	slices.Sort(out)
	return out, err
}

// checkBoth reports whether each service accepts configs (one folder of
// them), and the first line of its reason when it does not:
// envoyproxy/ratelimit's config checker (src/config_check_cmd) and
// rlproxy --check-config.
func checkBoth(o compareOptions, files []string) (refWhy, rlpWhy string, err error) {
	tmp, err := os.MkdirTemp("", "rlsside")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "rules")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", "", err
	}
	if err := copyConfigs(dir, files); err != nil {
		return "", "", err
	}
	out, _ := exec.Command(o.refCheck, "-config_dir", dir).CombinedOutput()
	if !bytes.Contains(out, []byte("all rate limit configs ok")) {
		// Its message, or the panic of a file it cannot parse (the
		// checker recovers only from some).
		for _, mark := range []string{"error loading rate limit configs: ", "panic: "} {
			if i := bytes.Index(out, []byte(mark)); i >= 0 && refWhy == "" {
				refWhy = firstLine(string(out[i+len(mark):]))
			}
		}
		if refWhy == "" {
			return "", "", fmt.Errorf("%s: the reference's config checker said: %s", files, out)
		}
	}
	main := filepath.Join(tmp, "rlproxy.yaml")
	if err := os.WriteFile(main, []byte("rls_listen: 127.0.0.1:0\nrls_config: "+dir+"\n"), 0o644); err != nil {
		return "", "", err
	}
	out, _ = exec.Command(o.rlproxy, "--check-config", main).CombinedOutput()
	if s := strings.TrimSpace(string(out)); s != "ok" {
		rlpWhy = firstLine(s)
	}
	// Paths of the temporary folder say nothing.
	return strings.ReplaceAll(refWhy, dir+"/", ""), strings.ReplaceAll(rlpWhy, dir+"/", ""), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.ReplaceAll(s, "|", "/")
}

// compare runs each config's sequence against both services, each config
// on fresh processes and an empty Redis, and writes the page.
func compare(o compareOptions) error {
	if o.src != "" {
		found, err := findConfigs(o.src)
		if err != nil {
			return err
		}
		o.configs = append(o.configs, found...)
	}
	red, rc, err := startRedis()
	if err != nil {
		return err
	}
	defer red.stop()
	var pg page
	// Configs that load alone, by folder and domain: a domain in several
	// files of one folder is checked as that folder too.
	shared := struct {
		keys  []string
		files map[string][]string
	}{files: map[string][]string{}}
	for _, file := range o.configs {
		label := filepath.Base(file)
		if o.src != "" {
			label, _ = filepath.Rel(o.src, file)
		}
		refWhy, rlpWhy, err := checkBoth(o, []string{file})
		if err != nil {
			return err
		}
		if refWhy != "" || rlpWhy != "" {
			pg.refused = append(pg.refused, refusal{label, refWhy, rlpWhy})
			continue
		}
		domain, steps, err := sequence(file)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		key := filepath.Dir(label) + " (domain " + domain + ")"
		if !slices.Contains(shared.keys, key) {
			shared.keys = append(shared.keys, key)
		}
		shared.files[key] = append(shared.files[key], file)
		rc.FlushAll(context.Background())
		ref, err := startRef(o.ref, red.addr, []string{file})
		if err != nil {
			return err
		}
		rlp, err := startRlproxy(o.rlproxy, red.addr, []string{file})
		if err != nil {
			ref.stop()
			return err
		}
		t, err := compareSteps(label, domain, steps, ref.addr, rlp.addr)
		ref.stop()
		rlp.stop()
		if err != nil {
			return err
		}
		pg.tables = append(pg.tables, t)
	}
	for _, key := range shared.keys {
		if files := shared.files[key]; len(files) > 1 {
			refWhy, rlpWhy, err := checkBoth(o, files)
			if err != nil {
				return err
			}
			pg.refused = append(pg.refused, refusal{fmt.Sprintf("%s: its %d files in one folder", key, len(files)), refWhy, rlpWhy})
		}
	}
	w := io.Writer(os.Stdout)
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	pg.write(w, o.rev)
	if bad := pg.differs(); bad > 0 {
		return fmt.Errorf("%d answers differ where the contract does not say why", bad)
	}
	return nil
}

func compareSteps(label, domain string, steps []step, refAddr, rlpAddr string) (table, error) {
	t := table{config: label}
	refc, refcc, err := dial(refAddr)
	if err != nil {
		return t, err
	}
	defer refcc.Close()
	rlpc, rlpcc, err := dial(rlpAddr)
	if err != nil {
		return t, err
	}
	defer rlpcc.Close()
	uncounted := map[string]bool{}
	for _, s := range steps {
		alignWindow(s)
		req := &pb.RateLimitRequest{Domain: domain, Descriptors: descs(s.descs...)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a := reply(refc.ShouldRateLimit(ctx, req))
		b := reply(rlpc.ShouldRateLimit(ctx, req))
		cancel()
		t.rows = append(t.rows, row{descs: s.descs, ref: a, rlp: b, verdict: judge(s.descs, a, b, uncounted)})
	}
	return t, nil
}

// answer is one service's reply: the overall code and each descriptor's
// status, or an error.
type answer struct {
	err      string
	overall  string
	statuses []descStatus
}

type descStatus struct {
	code      string
	limit     string // "10/minute"; "" without a current limit
	remaining uint32
}

func reply(r *pb.RateLimitResponse, err error) answer {
	if err != nil {
		return answer{err: strings.ReplaceAll(err.Error(), "|", "/")}
	}
	a := answer{overall: short(r.OverallCode)}
	for _, s := range r.Statuses {
		st := descStatus{code: short(s.Code), remaining: s.LimitRemaining}
		if s.CurrentLimit != nil {
			st.limit = fmt.Sprintf("%d/%s", s.CurrentLimit.RequestsPerUnit, strings.ToLower(s.CurrentLimit.Unit.String()))
		}
		a.statuses = append(a.statuses, st)
	}
	return a
}

func short(c pb.RateLimitResponse_Code) string {
	if c == pb.RateLimitResponse_OVER_LIMIT {
		return "OVER"
	}
	return c.String()
}

// String is the answer in one cell: overall; each descriptor's code,
// limit and remaining.
func (a answer) String() string {
	if a.err != "" {
		return "error: " + a.err
	}
	out := []string{a.overall}
	for _, s := range a.statuses {
		switch {
		case s.limit != "":
			out = append(out, fmt.Sprintf("%s %s %d", s.code, s.limit, s.remaining))
		case s.remaining != 0:
			out = append(out, fmt.Sprintf("%s %d", s.code, s.remaining))
		default:
			out = append(out, s.code)
		}
	}
	return strings.Join(out, "; ")
}

// Verdicts.
const (
	same        = "same"
	allOrNone   = "all or nothing"
	unexplained = "**differs**"
)

// judge compares two answers to a request of descs. A difference is
// "all or nothing" only when the contract explains each differing
// descriptor: the reference counted it in a request it refused (this one,
// or an earlier one: uncounted), and rlproxy did not, so rlproxy has
// more left — never less, and the same limit. uncounted learns which
// descriptors the reference counted in a refused request.
func judge(descs []string, ref, rlp answer, uncounted map[string]bool) string {
	verdict := same
	switch {
	case ref.String() == rlp.String():
	case ref.err != "" || rlp.err != "" || len(ref.statuses) != len(rlp.statuses):
		verdict = unexplained
	default:
		verdict = allOrNone
		for i, a := range ref.statuses {
			b := rlp.statuses[i]
			if a == b {
				continue
			}
			countedHere := ref.overall == "OVER" && a.code == "OK"
			if a.limit != b.limit || b.remaining < a.remaining || (!countedHere && !uncounted[descs[i]]) ||
				(a.code == "OK" && b.code == "OVER") {
				verdict = unexplained
			}
		}
		if ref.overall == "OK" && rlp.overall == "OVER" {
			verdict = unexplained
		}
	}
	if ref.overall == "OVER" {
		for i, a := range ref.statuses {
			if a.code == "OK" && a.limit != "" {
				uncounted[descs[i]] = true
			}
		}
	}
	return verdict
}

type row struct {
	descs    []string
	ref, rlp answer
	verdict  string
}

type table struct {
	config string
	rows   []row
}

type refusal struct{ config, ref, rlp string }

// page is the comparison as docs/envoy-compare.md.
type page struct {
	tables  []table
	refused []refusal
}

func (p *page) differs() int {
	n := 0
	for _, t := range p.tables {
		for _, r := range t.rows {
			if r.verdict == unexplained {
				n++
			}
		}
	}
	for _, r := range p.refused {
		if (r.ref == "") != (r.rlp == "") && !refusedByContract(r.rlp) {
			n++
		}
	}
	return n
}

// refusedByContract reports whether rlproxy's refusal is one the contract
// makes (docs/envoy.md, "Not supported").
func refusedByContract(why string) bool {
	return strings.Contains(why, "is not supported by rlproxy")
}

func (p *page) write(w io.Writer, rev string) {
	fmt.Fprintf(w, `# envoyproxy/ratelimit and rlproxy, answer by answer

Made by `+"`make envoy-compare`"+` (`+"`tools/rlsside compare`"+`) on %s; this page
is its output, not edited by hand. envoyproxy/ratelimit built from its repository%s and
rlproxy run side by side on one redis-server, a fresh Redis and fresh
processes per config, over every rate limit config in envoyproxy/ratelimit's
repository. Each config is first checked by both (envoyproxy/ratelimit's
`+"`config_check_cmd`"+`, `+"`rlproxy --check-config`"+`); the configs both load
get a request sequence made from their rules: each limited descriptor
until past its limit; then, for each two neighbouring rules, within one
window: the first taken past its limit, then with the second (fresh
values) twice, then the second alone. Every request goes to both
services back to back.

An answer is the overall code; then per descriptor its code, its limit
(requests/unit) and its remaining (`+"`limit_remaining`"+`).
`+"`duration_until_reset`"+` is not compared (it depends on the moment).
Verdicts: **same**; **all or nothing** — the contract's difference
([envoy.md](envoy.md#what-differs-from-envoyproxyratelimit-and-why)):
envoyproxy/ratelimit counts a descriptor in a request it refuses, rlproxy
does not, so rlproxy has more left (the tool checks exactly that: same
limit, never less remaining, and only descriptors the reference counted in
a refused request); **differs** — anything else (a bug to fix; the tool
exits 1).

## Summary

| config | requests | same | all or nothing | differs |
|---|---|---|---|---|
`, time.Now().UTC().Format("2006-01-02"), map[bool]string{true: " at " + rev, false: ""}[rev != ""])
	for _, t := range p.tables {
		n := map[string]int{}
		for _, r := range t.rows {
			n[r.verdict]++
		}
		fmt.Fprintf(w, "| [%s](#%s) | %d | %d | %d | %d |\n", t.config, anchor(t.config), len(t.rows), n[same], n[allOrNone], n[unexplained])
	}
	if len(p.refused) > 0 {
		fmt.Fprintf(w, "\n## Configs refused\n\nNo request is sent: the first line of each one's reason. Last, the configs\nof one domain in one folder, each of which loads alone (the reference's\n`MERGE_DOMAIN_CONFIG` is off by default).\n\n")
		fmt.Fprintln(w, "| config | envoyproxy/ratelimit | rlproxy | verdict |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, r := range p.refused {
			verdict := "both refuse"
			switch {
			case r.ref == "" && r.rlp == "":
				verdict = "both load"
			case r.ref == "" && refusedByContract(r.rlp):
				verdict = "rlproxy refuses: not supported (contract)"
			case (r.ref == "") != (r.rlp == ""):
				verdict = unexplained
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.config, orLoads(r.ref), orLoads(r.rlp), verdict)
		}
	}
	for _, t := range p.tables {
		fmt.Fprintf(w, "\n## %s\n\n| # | request (descriptors) | envoyproxy/ratelimit | rlproxy | verdict |\n|---|---|---|---|---|\n", t.config)
		for i, r := range t.rows {
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", i+1, strings.Join(r.descs, " + "), r.ref, r.rlp, r.verdict)
		}
	}
}

func orLoads(why string) string {
	if why == "" {
		return "loads"
	}
	return "`" + why + "`"
}

// anchor is the GitHub anchor of a "## " heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
