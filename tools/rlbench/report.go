package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Summary is a suite run boiled down: the median of each scenario's rounds
// per mode, and every target checked against them. tools/bench/chart.go draws
// its chart from it.
type Summary struct {
	CPUs      int        `json:"cpus"`
	Scenarios []Scenario `json:"scenarios"`
	Targets   []Target   `json:"targets"`
}

// Scenario is the median of one scenario's rounds in one mode.
type Scenario struct {
	Name     string `json:"name"`
	Mode     string `json:"mode"`
	Rounds   int    `json:"rounds"`
	Conns    int    `json:"conns"`
	Pipeline int    `json:"pipeline"`
	Keys     int    `json:"keys"`
	Shards   int    `json:"shards,omitempty"`
	Rate     int64  `json:"rate"`
	// RatePerSec is the limiter's rate in permits per second.
	RatePerSec float64 `json:"rate_per_sec"`

	OpsPerSec            float64   `json:"ops_per_sec"`
	GrantsPerSec         float64   `json:"grants_per_sec"`
	DeniedFraction       float64   `json:"denied_fraction"`
	Errors               int64     `json:"errors"` // summed over rounds
	P50Us                float64   `json:"p50_us"`
	P99Us                float64   `json:"p99_us"`
	P999Us               float64   `json:"p999_us"`
	RedisCPUPerRequestUs float64   `json:"redis_cpu_per_request_us"`
	RedisCPUPerGrantUs   float64   `json:"redis_cpu_per_grant_us"`
	ProxyCPUPerRequestUs float64   `json:"proxy_cpu_per_request_us"`
	SelfCPUPerRequestUs  float64   `json:"self_cpu_per_request_us"`
	CallsPerRequest      float64   `json:"backend_calls_per_request"`
	CallsPerDenied       float64   `json:"backend_calls_per_denied"`
	DeniedFromCache      float64   `json:"denied_from_cache_fraction"`
	NodeShares           []float64 `json:"node_shares,omitempty"` // of backend calls, per node
	FirstError           string    `json:"first_error,omitempty"`
}

// Target is one goal of the performance issue and how the run did.
type Target struct {
	ID       string `json:"id"`
	What     string `json:"what"`
	Measured string `json:"measured"`
	Goal     string `json:"goal"`
	// Verdict is PASS, FAIL, INFO (reported, no goal) or N/A (not run).
	Verdict string `json:"verdict"`
}

func reportMain(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("rlbench report", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: rlbench report DIR\n\nReads the JSON results of a suite run in DIR, prints the medians and targets, writes DIR/summary.json.")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("report needs one directory")
	}
	dir := fs.Arg(0)
	results, err := readResults(dir)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("no results in %s", dir)
	}
	sum := summarize(results)
	printSummary(w, sum)
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n'), 0o644)
}

func readResults(dir string) ([]Result, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, f := range files {
		if filepath.Base(f) == "summary.json" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if r.Scenario != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

// summarize takes the median of every scenario's rounds per mode and
// checks the targets.
func summarize(results []Result) Summary {
	type key struct{ scenario, mode string }
	groups := map[key][]Result{}
	var order []key
	var sum Summary
	for _, r := range results {
		k := key{r.Scenario, r.Mode}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
		sum.CPUs = r.CPUs
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if c := compareScenarios(a.scenario, b.scenario); c != 0 {
			return c
		}
		return strings.Compare(a.mode, b.mode)
	})
	for _, k := range order {
		sum.Scenarios = append(sum.Scenarios, medianOf(k.scenario, k.mode, groups[k]))
	}
	sum.Targets = targets(sum)
	return sum
}

// scenarioOrder is the order the report lists scenarios in; others follow.
var scenarioOrder = []string{scenHotPipelined, scenHotPlain, scenPing, scenDenyP16, scenDenyP1, scenLight,
	scenCappedP1, scenCappedP16, scenPolicyP1, scenPolicyP16, scenPolicy1M, scenCappedPolicyP1, scenCappedPolicyP16,
	scenClusterPolicyP1, scenClusterPolicyP16, scenProbeDeny, "clients-", "scale-"}

// compareScenarios orders scenarios as scenarioOrder does, then by name
// with numbers compared as numbers (clients-10 before clients-100).
func compareScenarios(a, b string) int {
	rank := func(s string) int {
		for i, p := range scenarioOrder {
			if s == p || (strings.HasSuffix(p, "-") && strings.HasPrefix(s, p)) {
				return i
			}
		}
		return len(scenarioOrder)
	}
	if c := rank(a) - rank(b); c != 0 {
		return c
	}
	split := func(s string) (string, int) {
		i := strings.LastIndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) + 1
		n, _ := strconv.Atoi(s[i:])
		return s[:i], n
	}
	pa, na := split(a)
	pb, nb := split(b)
	if c := strings.Compare(pa, pb); c != 0 {
		return c
	}
	return na - nb
}

func medianOf(name, mode string, rs []Result) Scenario {
	first := rs[0]
	s := Scenario{
		Name: name, Mode: mode, Rounds: len(rs),
		Conns: first.Conns, Pipeline: first.Pipeline, Keys: first.Keys, Shards: first.Shards, Rate: first.Rate,
	}
	if first.IntervalMs > 0 {
		s.RatePerSec = float64(first.Rate) * 1000 / float64(first.IntervalMs)
	}
	m := func(f func(Result) float64) float64 { return median(rs, f) }
	s.OpsPerSec = m(func(r Result) float64 { return r.OpsPerSec })
	s.GrantsPerSec = m(func(r Result) float64 { return perSec(r.Granted, r.Seconds) })
	s.DeniedFraction = m(func(r Result) float64 { return ratio(float64(r.Denied), float64(r.Requests)) })
	s.P50Us = m(func(r Result) float64 { return r.LatencyUs.P50 })
	s.P99Us = m(func(r Result) float64 { return r.LatencyUs.P99 })
	s.P999Us = m(func(r Result) float64 { return r.LatencyUs.P999 })
	s.RedisCPUPerRequestUs = m(func(r Result) float64 { return r.RedisCPUPerRequestUs })
	s.RedisCPUPerGrantUs = m(func(r Result) float64 { return r.RedisCPUPerGrantUs })
	s.ProxyCPUPerRequestUs = m(func(r Result) float64 { return r.ProxyCPUPerRequestUs })
	s.SelfCPUPerRequestUs = m(func(r Result) float64 { return ratio(r.SelfCPUSeconds*1e6, float64(r.Requests)) })
	s.CallsPerRequest = m(func(r Result) float64 { return r.CallsPerRequest })
	s.CallsPerDenied = m(func(r Result) float64 { return r.CallsPerDenied })
	s.DeniedFromCache = m(func(r Result) float64 { return ratio(float64(r.ProxyDeniedFromCache), float64(r.ProxyDenied)) })
	for _, r := range rs {
		s.Errors += r.Errors
		if s.FirstError == "" {
			s.FirstError = r.FirstError
		}
	}
	if n := len(first.Redis); n > 1 {
		s.NodeShares = make([]float64, n)
		for i := range s.NodeShares {
			s.NodeShares[i] = m(func(r Result) float64 {
				var total int64
				for _, node := range r.Redis {
					total += node.Calls
				}
				if i >= len(r.Redis) {
					return 0
				}
				return ratio(float64(r.Redis[i].Calls), float64(total))
			})
		}
	}
	return s
}

func median(rs []Result, f func(Result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func perSec(n int64, s float64) float64 { return ratio(float64(n), s) }

// The scenarios tools/bench/bench.sh runs, by name.
const (
	scenHotPipelined = "hot-p16"    // 50 conns x 16, one limiter that grants everything
	scenHotPlain     = "hot-p1"     // 50 conns x 1, the same limiter
	scenPing         = "ping-p1"    // 50 conns x 1, PING: what connection handling alone allows
	scenDenyP16      = "deny-p16"   // 50 conns x 16, a limiter that denies ~99%
	scenDenyP1       = "deny-p1"    // 50 conns x 1, the same
	scenLight        = "light"      // 1 conn x 1
	scenScaleHot     = "scale-hot"  // one limiter, N shards over N nodes
	scenScaleKeys    = "scale-keys" // many limiters, N shards each, over N nodes
	// The Redis-bound regime: redis-server capped at 10% of one core (a
	// cgroup), rlbench and rlproxy outside it; one hot limiter.
	scenCappedP1  = "capped-p1"  // 50 conns x 1
	scenCappedP16 = "capped-p16" // 50 conns x 16
	// One policy (RL.POLICY) over many names, each request a random name,
	// against direct GCRA on per-name keys (issue 20).
	scenPolicyP1        = "policy-p1"         // 50 conns x 1, 10,000 names
	scenPolicyP16       = "policy-p16"        // 50 conns x 16, 10,000 names
	scenPolicy1M        = "policy-1m-p16"     // 50 conns x 16, 1,000,000 names
	scenCappedPolicyP1  = "capped-policy-p1"  // Redis-bound, 50 conns x 1
	scenCappedPolicyP16 = "capped-policy-p16" // Redis-bound, 50 conns x 16
	// The same on a Redis Cluster of 3 masters (direct: rlbench --cluster).
	scenClusterPolicyP1  = "cluster-policy-p1"  // 50 conns x 1, 10,000 names
	scenClusterPolicyP16 = "cluster-policy-p16" // 50 conns x 16, 10,000 names
	// 1 conn x 1 on a SHARDS 4 limiter that denies everything, max_probes
	// 2, deny cache off: script calls per denied acquire.
	scenProbeDeny = "probe-deny"
)

// probeBound is 1 + max_probes of the probe-deny scenario.
const probeBound = 3

// targets checks the goals of the performance issue against the medians.
func targets(sum Summary) []Target {
	get := func(name, mode string) *Scenario {
		for i := range sum.Scenarios {
			if s := &sum.Scenarios[i]; s.Name == name && s.Mode == mode {
				return s
			}
		}
		return nil
	}
	pair := func(name string) (d, p *Scenario) { return get(name, "direct"), get(name, "rlproxy") }
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	na := func(id, what, goal string) Target { return Target{id, what, "not run", goal, "N/A"} }
	// throughput compares rlproxy's requests per second with direct's.
	throughput := func(id, what string, d, p *Scenario, goal float64) Target {
		r := ratio(p.OpsPerSec, d.OpsPerSec)
		return Target{id, what, fmt.Sprintf("%.2fx (%.0f vs %.0f req/s)", r, p.OpsPerSec, d.OpsPerSec),
			fmt.Sprintf(">= %.2fx", goal), verdict(r >= goal)}
	}
	// proxyCPU checks rlproxy's CPU per request against the 3 us goal.
	proxyCPU := func(id, what string, p *Scenario) Target {
		us := p.ProxyCPUPerRequestUs
		return Target{id, what, fmt.Sprintf("%.2f us", us), "<= 3 us", verdict(us > 0 && us <= 3)}
	}
	var out []Target

	if d, p := pair(scenHotPipelined); d != nil && p != nil {
		out = append(out, throughput("1", "hot limiter, 50 conns x pipeline 16: rlproxy / direct throughput", d, p, 3))
		out = append(out, Target{"2", "Redis CPU per granted permit (hot, pipelined)",
			fmt.Sprintf("%.3f us (direct %.3f us)", p.RedisCPUPerGrantUs, d.RedisCPUPerGrantUs), "<= 0.5 us",
			verdict(p.RedisCPUPerGrantUs > 0 && p.RedisCPUPerGrantUs <= 0.5)})
		out = append(out, proxyCPU("4b", "rlproxy CPU per RL.ACQUIRE (hot, pipelined)", p))
	} else {
		out = append(out, na("1", "hot limiter, pipelined: rlproxy / direct throughput", ">= 3.00x"))
	}
	if d, p := pair(scenHotPlain); d != nil && p != nil {
		out = append(out, throughput("3a", "hot limiter, 50 conns, no pipelining: rlproxy / direct throughput", d, p, 1))
		out = append(out, Target{"3b", "Redis CPU per request, no pipelining",
			fmt.Sprintf("%.3f us (direct %.3f us)", p.RedisCPUPerRequestUs, d.RedisCPUPerRequestUs), "< direct",
			verdict(p.RedisCPUPerRequestUs < d.RedisCPUPerRequestUs)})
		out = append(out, proxyCPU("4", "rlproxy CPU per RL.ACQUIRE (hot, no pipelining)", p))
		// What bounds 3a: rlproxy answering PING does no backend work at
		// all, so no RL.ACQUIRE through it can go faster.
		if rd, rp := pair(scenPing); rd != nil && rp != nil {
			out = append(out, Target{"3c", "no pipelining, the front end's ceiling: rlproxy answering PING (no backend work) / direct EVALSHA",
				fmt.Sprintf("%.2fx (%.0f vs %.0f req/s; Redis answering PING: %.0f req/s; rlproxy CPU per PING %.2f us)",
					ratio(rp.OpsPerSec, d.OpsPerSec), rp.OpsPerSec, d.OpsPerSec, rd.OpsPerSec, rp.ProxyCPUPerRequestUs),
				"(reported: 3a cannot exceed it)", "INFO"})
		}
	} else {
		out = append(out, na("3a", "hot limiter, no pipelining: rlproxy / direct throughput", ">= 1.00x"))
	}
	for _, deny := range []struct{ id, name, what string }{
		{"5", scenDenyP16, "50 conns x pipeline 16"},
		{"5b", scenDenyP1, "50 conns, no pipelining"},
	} {
		d, p := pair(deny.name)
		if d == nil || p == nil {
			out = append(out, na(deny.id, "over-limit traffic, "+deny.what+": backend calls per denied request", "<= 0.05"))
			continue
		}
		out = append(out, Target{deny.id, "over-limit traffic, " + deny.what + ": backend calls per denied request",
			fmt.Sprintf("%.4f (direct %.4f; %.1f%% denied; %.1f%% of denials from the deny cache)",
				p.CallsPerDenied, d.CallsPerDenied, 100*p.DeniedFraction, 100*p.DeniedFromCache),
			"<= 0.05", verdict(p.CallsPerDenied > 0 && p.CallsPerDenied <= 0.05)})
		// No false denial: rlproxy grants what the limiter allows, as the
		// direct script does (the measured window is well past the burst).
		g := ratio(p.GrantsPerSec, p.RatePerSec)
		out = append(out, Target{deny.id + "/grants", "over-limit traffic, " + deny.what + ": grants per second / limiter rate (no false denial)",
			fmt.Sprintf("%.3f (%.0f/s; direct %.0f/s; rate %.0f/s; %d errors)", g, p.GrantsPerSec, d.GrantsPerSec, p.RatePerSec, p.Errors),
			">= 0.95 and no errors", verdict(g >= 0.95 && p.Errors == 0)})
	}
	if d, p := pair(scenLight); d != nil && p != nil {
		r50, r99 := ratio(p.P50Us, d.P50Us), ratio(p.P99Us, d.P99Us)
		out = append(out, Target{"6", "light load (1 conn, no pipelining): p50 rlproxy / direct",
			fmt.Sprintf("%.2fx (%.1f vs %.1f us)", r50, p.P50Us, d.P50Us), "<= 2.00x", verdict(r50 <= 2)})
		out = append(out, Target{"6b", "light load: p99 rlproxy / direct",
			fmt.Sprintf("%.2fx (%.1f vs %.1f us)", r99, p.P99Us, d.P99Us), "<= 2.00x", verdict(r99 <= 2)})
	} else {
		out = append(out, na("6", "light load: p50 and p99 rlproxy / direct", "<= 2.00x"))
	}
	for _, sc := range []struct{ id, name, what string }{
		{"7", scenScaleKeys, "many limiters"},
		{"7b", scenScaleHot, "one hot limiter"},
	} {
		p := get(sc.name, "rlproxy")
		if p == nil || len(p.NodeShares) == 0 {
			out = append(out, na(sc.id, "N sub-limiters over N nodes, "+sc.what+": each node's share of calls", "within 10% of 1/N"))
			continue
		}
		n := float64(len(p.NodeShares))
		worst := 0.0
		shares := make([]string, len(p.NodeShares))
		for i, s := range p.NodeShares {
			worst = max(worst, math.Abs(s*n-1))
			shares[i] = fmt.Sprintf("%.3f", s)
		}
		out = append(out, Target{sc.id, fmt.Sprintf("%d shards over %d nodes, %s: each node's share of calls", p.Shards, len(p.NodeShares), sc.what),
			fmt.Sprintf("[%s], worst %.1f%% off 1/N (%.0f req/s)", strings.Join(shares, " "), 100*worst, p.OpsPerSec),
			"within 10% of 1/N", verdict(worst <= 0.10)})
	}
	for _, c := range []struct {
		id, name, what string
		goal           float64
		calls          bool // also the script calls per request (policy rows)
	}{
		{"8", scenCappedP1, "Redis-bound (redis-server at 10% of a core), hot limiter, 50 conns, no pipelining", 6, false},
		{"8b", scenCappedP16, "Redis-bound (redis-server at 10% of a core), hot limiter, 50 conns x pipeline 16", 30, false},
		{"10", scenCappedPolicyP1, "Redis-bound, one policy over 10,000 names, 50 conns, no pipelining", 3, true},
		{"10b", scenCappedPolicyP16, "Redis-bound, one policy over 10,000 names, 50 conns x pipeline 16", 10, true},
	} {
		d, p := pair(c.name)
		if d == nil || p == nil {
			out = append(out, na(c.id, c.what+": rlproxy / direct throughput", fmt.Sprintf(">= %.2fx", c.goal)))
			continue
		}
		t := throughput(c.id, c.what+": rlproxy / direct throughput", d, p, c.goal)
		t.Measured += fmt.Sprintf("; Redis CPU per request %.2f us (direct %.2f us)", p.RedisCPUPerRequestUs, d.RedisCPUPerRequestUs)
		if c.calls {
			t.Measured += fmt.Sprintf("; %.4f script calls per request", p.CallsPerRequest)
		}
		out = append(out, t)
	}
	for _, c := range []struct{ id, name, what string }{
		{"10c", scenPolicyP1, "one policy over 10,000 names, 50 conns, no pipelining"},
		{"10d", scenPolicyP16, "one policy over 10,000 names, 50 conns x pipeline 16"},
		{"10e", scenPolicy1M, "one policy over 1,000,000 names, 50 conns x pipeline 16"},
	} {
		d, p := pair(c.name)
		if d == nil || p == nil {
			out = append(out, na(c.id, c.what+": Redis CPU per decision", "<= 4 us"))
			continue
		}
		us := p.RedisCPUPerRequestUs
		out = append(out, Target{c.id, c.what + ": Redis CPU per decision",
			fmt.Sprintf("%.2f us (direct %.2f us; %.2fx the throughput, %.0f vs %.0f req/s)",
				us, d.RedisCPUPerRequestUs, ratio(p.OpsPerSec, d.OpsPerSec), p.OpsPerSec, d.OpsPerSec),
			"<= 4 us", verdict(us > 0 && us <= 4)})
	}
	for _, c := range []struct{ id, name, what string }{
		{"10f", scenClusterPolicyP1, "one policy over 10,000 names on a 3-master Redis Cluster, 50 conns, no pipelining"},
		{"10g", scenClusterPolicyP16, "one policy over 10,000 names on a 3-master Redis Cluster, 50 conns x pipeline 16"},
	} {
		d, p := pair(c.name)
		if d == nil || p == nil {
			out = append(out, na(c.id, c.what, "(reported)"))
			continue
		}
		out = append(out, Target{c.id, c.what,
			fmt.Sprintf("%.2fx the throughput (%.0f vs %.0f req/s); Redis CPU per decision %.2f us (direct %.2f us); %.4f script calls per request",
				ratio(p.OpsPerSec, d.OpsPerSec), p.OpsPerSec, d.OpsPerSec, p.RedisCPUPerRequestUs, d.RedisCPUPerRequestUs, p.CallsPerRequest),
			"(reported)", "INFO"})
	}
	if p := get(scenProbeDeny, "rlproxy"); p != nil {
		out = append(out, Target{"9", "denied acquire on SHARDS 4, max_probes 2, deny cache off: script calls per denial",
			fmt.Sprintf("%.3f (%.1f%% denied)", p.CallsPerDenied, 100*p.DeniedFraction),
			fmt.Sprintf("<= %d (1 + max_probes)", probeBound), verdict(p.CallsPerDenied > 0 && p.CallsPerDenied <= probeBound+0.01)})
	} else {
		out = append(out, na("9", "denied acquire on SHARDS 4, max_probes 2, deny cache off: script calls per denial", fmt.Sprintf("<= %d", probeBound)))
	}
	if d, p := pair(scenHotPipelined); d != nil && p != nil {
		// A node's ceiling is one Redis core's worth of its CPU per grant.
		ceiling := func(us float64) float64 { return ratio(1e6, us) }
		out = append(out, Target{"model", "throughput model: N nodes give about N x the per-node ceiling",
			fmt.Sprintf("per node, Redis-bound (1 s / Redis CPU per grant): %.0f grants/s through rlproxy, %.0f/s direct; "+
				"measured on one backend: %.0f req/s through rlproxy, %.0f/s direct",
				ceiling(p.RedisCPUPerGrantUs), ceiling(d.RedisCPUPerGrantUs), p.OpsPerSec, d.OpsPerSec),
			"(reported)", "INFO"})
	}
	return out
}

func printSummary(w io.Writer, sum Summary) {
	fmt.Fprintf(w, "\nMedians per scenario (%d CPUs: rlbench, redis-server and rlproxy all share them,\n", sum.CPUs)
	fmt.Fprintf(w, "so absolute numbers are lower than on separate machines; ratios are side by side).\n\n")
	fmt.Fprintf(w, "%-17s %-7s %7s %4s %7s %10s %9s %9s %9s %8s %8s %8s %8s %9s %7s\n",
		"scenario", "mode", "conns", "pipe", "keys", "req/s", "p50 us", "p99 us", "p999 us",
		"redis/rq", "redis/gr", "proxy/rq", "bench/rq", "calls/den", "denied")
	for _, s := range sum.Scenarios {
		fmt.Fprintf(w, "%-17s %-7s %7d %4d %7d %10.0f %9.1f %9.1f %9.1f %8.3f %8.3f %8.3f %8.3f %9.4f %6.1f%%\n",
			s.Name, s.Mode, s.Conns, s.Pipeline, s.Keys, s.OpsPerSec, s.P50Us, s.P99Us, s.P999Us,
			s.RedisCPUPerRequestUs, s.RedisCPUPerGrantUs, s.ProxyCPUPerRequestUs, s.SelfCPUPerRequestUs,
			s.CallsPerDenied, 100*s.DeniedFraction)
		if s.Errors > 0 {
			fmt.Fprintf(w, "                  %d errors, first: %s\n", s.Errors, s.FirstError)
		}
	}
	fmt.Fprintf(w, "\n(CPU columns are microseconds per request: redis/rq Redis, redis/gr Redis per grant,\n")
	fmt.Fprintf(w, " proxy/rq rlproxy, bench/rq the load generator itself.)\n\nTargets:\n\n")
	for _, t := range sum.Targets {
		fmt.Fprintf(w, "  %-5s %-4s %s\n        measured %s; goal %s\n", t.Verdict, t.ID, t.What, t.Measured, t.Goal)
	}
	pass, fail := 0, 0
	for _, t := range sum.Targets {
		switch t.Verdict {
		case "PASS":
			pass++
		case "FAIL":
			fail++
		}
	}
	fmt.Fprintf(w, "\ntargets: %d PASS, %d FAIL\n", pass, fail)
}
