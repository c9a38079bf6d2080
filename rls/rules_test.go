package rls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlproxy/rlproxy/limiter"
)

const every = `domain: d
descriptors:
  - key: k1
    value: v1
    descriptors:
      - key: k2
        rate_limit:
          unit: minute
          requests_per_unit: 10
          name: inner
        detailed_metric: true
  - key: k1
    rate_limit: {unit: second, requests_per_unit: 5, algo: token-bucket, burst: 9, shards: 2}
    shadow_mode: true
  - key: w
    value: "ab*"
    rate_limit: {unit: hour, requests_per_unit: 1, replaces: [{name: inner}]}
  - key: w
    value: "a*"
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: w
    value: abx
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: m
    value: "x*y"
    rate_limit: {unit: week, requests_per_unit: 3}
  - key: u
    rate_limit: {unlimited: true}
  - key: any
    descriptors:
      - key: sub
        value: s
        rate_limit: {unit: year, requests_per_unit: 4}
  - key: mo
    value: m
    value_to_metric: true
    metadata: {a: {b: 1}}
    rate_limit: {unit: month, requests_per_unit: 6}
`

func entries(kv ...string) []*rlv3.RateLimitDescriptor_Entry {
	var out []*rlv3.RateLimitDescriptor_Entry
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		out = append(out, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return out
}

func TestLoadEveryKey(t *testing.T) {
	r, err := Parse("every.yaml", []byte(every))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		entries []string
		name    string // "" when no limit applies
		check   func(*Limit) bool
	}{
		{[]string{"k1=v1", "k2=z"}, "d:k1=v1:k2=z", func(l *Limit) bool {
			return l.RequestsPerUnit == 10 && l.Unit == pb.RateLimitResponse_RateLimit_MINUTE && l.Name == "inner" && l.DetailedMetric && l.Pattern == "d:k1=v1:k2=*"
		}},
		{[]string{"k1=v1"}, "", nil}, // k1=v1 has no limit of its own
		{[]string{"k1=other"}, "d:k1=other", func(l *Limit) bool {
			c := l.Config()
			return l.Shadow && c.Algo == limiter.TokenBucket && c.Burst == 9 && c.Shards == 2 && c.Rate == 5 && l.Pattern == "d:k1=*"
		}},
		{[]string{"w=abc"}, "d:w=abc", func(l *Limit) bool { // the longer wildcard first
			return l.Unit == pb.RateLimitResponse_RateLimit_HOUR && l.Replaces[0] == "inner" && l.Pattern == "d:w=ab*"
		}},
		{[]string{"w=abx"}, "d:w=abx", func(l *Limit) bool { return l.RequestsPerUnit == 7 && l.Exact == "d:w=abx" }}, // exact before wildcards
		{[]string{"w=ax"}, "d:w=ax", func(l *Limit) bool { return l.Unit == pb.RateLimitResponse_RateLimit_DAY }},
		{[]string{"w=b"}, "", nil},
		{[]string{"m=x-and-y"}, "d:m=x-and-y", func(l *Limit) bool { return l.Pattern == "" && l.Exact == "" }}, // made per name
		{[]string{"m=x-and-z"}, "", nil},
		{[]string{"u=1"}, "d:u=1", func(l *Limit) bool { return l.Unlimited && !l.limited() }},
		{[]string{"any=7", "sub=s"}, "d:any=7:sub=s", func(l *Limit) bool {
			return l.Unit == pb.RateLimitResponse_RateLimit_YEAR && l.Pattern == "" && l.Exact == ""
		}},
		{[]string{"mo=m"}, "d:mo=m", func(l *Limit) bool {
			return l.Exact == "d:mo=m" && l.Config().Interval == limiter.Month && l.Config().Algo == limiter.FixedWindow
		}},
		{[]string{"k1=v1", "k2=z", "k3=q"}, "", nil}, // longer than the config
	} {
		l, name := r.Match("d", entries(tc.entries...))
		if name != tc.name || (l == nil) != (tc.check == nil) || (l != nil && !tc.check(l)) {
			t.Errorf("%v: got %q %+v, want %q", tc.entries, name, l, tc.name)
		}
	}
	if l, _ := r.Match("other", entries("k1=x")); l != nil {
		t.Error("an unknown domain matched")
	}
}

func TestLoadBadFiles(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"descriptors: []\n", "f.yaml:1: config file cannot have empty domain"},
		{"domain: d\ndescriptors:\n  - value: x\n", "f.yaml:3: descriptor has empty key"},
		{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n", "f.yaml:4: duplicate descriptor composite key 'd:a=*'"},
		{"domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n", "f.yaml:5: duplicate descriptor composite key 'd:a=b'"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", "f.yaml:5: invalid rate limit unit 'fortnight'"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "f.yaml:4: should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", "f.yaml:4: replaces should not contain name of same descriptor"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: \"\"}]}\n", "f.yaml:4: should not have an empty replaces entry"},
		{"domain: d\ndescriptors:\n  - key: a\n    ratelimit: {unit: second}\n", "f.yaml:4: unknown key 'ratelimit'"},
		{"domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n", "f.yaml:4: 'share_threshold' is not supported by rlproxy"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "f.yaml:4: 'requests_per_unit' must be an integer from 0 to 4294967295"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algo: concurrency}\n", "f.yaml:4: unknown algo 'concurrency'"},
		{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n", "f.yaml:4: 'burst' applies to token-bucket and leaky-bucket only"},
		{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes please\n", "f.yaml:4: 'shadow_mode' must be true or false"},
		{"domain: d\ndescriptors:\n  - a\n", "f.yaml:3: expected a map of keys, found 'a'"},
		{"domain: d\ndescriptors:\n  1: a\n", "f.yaml:3: 'descriptors' must be a list"},
		{"domain: d\ndescriptors:\n  - key: a\n   value: b\n", "f.yaml:2: bad YAML"},
	} {
		_, err := Parse("f.yaml", []byte(tc.yaml))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q:\n got %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
}

// unit: month is a calendar month, which only the fixed window counts:
// a rate_limit pairing it with another algo is refused at its algo line.
func TestMonthOnlyFixedWindow(t *testing.T) {
	for _, algo := range limiter.Algos {
		if algo == limiter.Concurrency {
			continue
		}
		yaml := "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: month\n      requests_per_unit: 1\n      algo: " + string(algo) + "\n"
		r, err := Parse("f.yaml", []byte(yaml))
		if algo == limiter.FixedWindow {
			if err != nil || r.Limits()[0].Config().Interval != limiter.Month {
				t.Errorf("fixed-window by the month: %v", err)
			}
			continue
		}
		want := "f.yaml:7: unit 'month' is a calendar month, which only algo fixed-window counts (" + string(algo)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s by the month:\n got %v\nwant %s", algo, err, want)
		}
		// The same algo by the week is fine.
		if _, err := Parse("f.yaml", []byte(strings.Replace(yaml, "month", "week", 1))); err != nil {
			t.Errorf("%s by the week: %v", algo, err)
		}
	}
}

// A folder loads each .yaml file; one domain in two files is refused.
func TestLoadFolder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("b.yml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("notes.txt", "not yaml: [")
	r, err := Load(dir)
	if err != nil || r.Domains() != 2 {
		t.Fatalf("got %v, %v", r, err)
	}
	write("c.yaml", "domain: a\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "c.yaml:1: duplicate domain 'a'") {
		t.Fatalf("duplicate domain: %v", err)
	}
}

// Every example config of envoyproxy/ratelimit loads (testdata holds copies).
func TestLoadReferenceExamples(t *testing.T) {
	files, _ := filepath.Glob("testdata/envoy/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example configs in testdata/envoy")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%v", err)
		}
	}
}
