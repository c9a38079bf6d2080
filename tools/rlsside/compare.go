package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

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
	unit  string   // the shortest unit among them, for aligning to windows
	pair  bool     // part of a pair's steps: where all or nothing differs
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
	for _, p := range paths {
		for range p.n {
			steps = append(steps, step{descs: []string{p.entries}, unit: p.unit})
		}
	}
	// Pairs: a descriptor past its limit (from above) with one of fresh
	// values, twice, then the fresh one alone: envoyproxy/ratelimit
	// counts the fresh one although the request is over the limit.
	for i := 0; i+1 < len(paths); i++ {
		a, b := paths[i], paths[i+1]
		if b.fresh == "" {
			continue
		}
		unit := shorter(a.unit, b.unit)
		steps = append(steps,
			step{descs: []string{a.entries, b.fresh}, unit: unit, pair: true},
			step{descs: []string{a.entries, b.fresh}, unit: unit, pair: true},
			step{descs: []string{b.fresh}, unit: unit, pair: true})
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
// not end between the two services' answers: into a fresh second for a
// per-second limit, out of a minute's last seconds for a per-minute one.
func alignWindow(unit string, first bool) {
	now := time.Now()
	switch {
	case unit == "second" && first:
		time.Sleep(time.Second - time.Duration(now.Nanosecond()) + 20*time.Millisecond)
	case unit == "minute" && now.Second() >= 58:
		time.Sleep(time.Duration(60-now.Second())*time.Second + 20*time.Millisecond)
	}
}

// compare runs each config's sequence against both services, each config
// on fresh processes and an empty Redis, and prints the table.
func compare(refBin, rlpBin string, configs []string) error {
	red, rc, err := startRedis()
	if err != nil {
		return err
	}
	defer red.stop()
	fmt.Println("| config | # | request (descriptors) | envoyproxy/ratelimit | rlproxy | same |")
	fmt.Println("|---|---|---|---|---|---|")
	var summary []string
	for _, file := range configs {
		domain, steps, err := sequence(file)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		rc.FlushAll(context.Background())
		ref, err := startRef(refBin, red.addr, []string{file})
		if err != nil {
			return err
		}
		rlp, err := startRlproxy(rlpBin, red.addr, []string{file})
		if err != nil {
			ref.stop()
			return err
		}
		same, n, err := compareSteps(filepath.Base(file), domain, steps, ref.addr, rlp.addr)
		ref.stop()
		rlp.stop()
		if err != nil {
			return err
		}
		summary = append(summary, fmt.Sprintf("%s: %d of %d answers the same", filepath.Base(file), same, n))
	}
	fmt.Println()
	for _, s := range summary {
		fmt.Println("- " + s)
	}
	return nil
}

func compareSteps(name, domain string, steps []step, refAddr, rlpAddr string) (same, n int, err error) {
	refc, refcc, err := dial(refAddr)
	if err != nil {
		return 0, 0, err
	}
	defer refcc.Close()
	rlpc, rlpcc, err := dial(rlpAddr)
	if err != nil {
		return 0, 0, err
	}
	defer rlpcc.Close()
	for i, s := range steps {
		alignWindow(s.unit, i == 0 || (!s.pair && strings.Join(steps[i-1].descs, "|") != strings.Join(s.descs, "|")) || (s.pair && len(s.descs) == 2 && !steps[i-1].pair) || (s.pair && len(steps[i-1].descs) == 1))
		req := &pb.RateLimitRequest{Domain: domain, Descriptors: descs(s.descs...)}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a := answer(refc.ShouldRateLimit(ctx, req))
		b := answer(rlpc.ShouldRateLimit(ctx, req))
		cancel()
		mark := "yes"
		switch {
		case a == b:
			same++
		case s.pair:
			mark = "no: all or nothing"
		default:
			mark = "**no**"
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", name, i+1, strings.Join(s.descs, " + "), a, b, mark)
	}
	return same, len(steps), nil
}
