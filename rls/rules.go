package rls

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlproxy/rlproxy/limiter"
	"go.yaml.in/yaml/v3"
)

// Rules are the loaded rate limit configs, by domain. A Rules is never
// changed once loaded: a reload makes a new one.
type Rules struct {
	domains map[string]*node
	limits  []*Limit // every rate_limit, in file order
}

// Limit is one descriptor's rate_limit.
type Limit struct {
	RequestsPerUnit uint32
	Unit            pb.RateLimitResponse_RateLimit_Unit
	Unlimited       bool
	Name            string   // what other limits' replaces name
	Replaces        []string // limits this one switches off when both apply
	Shadow          bool     // shadow_mode: decide and count, but answer OK
	QuotaMode       bool     // quota_mode: over it fails the request only if every quota descriptor is over
	DetailedMetric  bool
	Algo            limiter.Algo // rlproxy's own: default fixed-window
	Burst           int64        // rlproxy's own: token/leaky bucket capacity
	Shards          int          // rlproxy's own: sub-limiters
	Where           string       // "file:line" of the rate_limit, for messages

	// Pattern is the policy pattern that governs this limit's names, when
	// their prefix is the same for every value ("" otherwise; see match.go).
	Pattern string
	// Exact is the limiter name when there is only one (every value on the
	// way exact; "" otherwise).
	Exact string
	// path is the rule's place: its entries with "*" for each value that
	// is not exact ("d:org=*:team=red"); a reload compares rules by it.
	path string

	current   *pb.RateLimitResponse_RateLimit // current_limit in replies
	limitText string                          // RequestsPerUnit in decimal, for the headers
}

// setCurrent fills what replies tell of l (once, not per request).
func (l *Limit) setCurrent() {
	l.current = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name}
	l.limitText = strconv.FormatUint(uint64(l.RequestsPerUnit), 10)
}

// Config is the limiter config a name under this limit has.
func (l *Limit) Config() limiter.Config {
	c := limiter.Config{Algo: l.Algo, Rate: int64(l.RequestsPerUnit), Interval: unitLength[l.Unit], Burst: l.Burst, Shards: l.Shards, Shadow: l.Shadow}
	if c.Burst == 0 {
		c.Burst = c.Rate
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	return c
}

// Limits lists every rate_limit of the rules, in file order.
func (r *Rules) Limits() []*Limit { return r.limits }

// Domains counts the domains.
func (r *Rules) Domains() int { return len(r.domains) }

// Has reports whether domain has rules.
func (r *Rules) Has(domain string) bool { return r.domains[domain] != nil }

// unitLength is each unit's window, as envoyproxy/ratelimit counts it (a
// year is 365 days), except a month: a calendar month in UTC (the
// reference's is 30 days).
var unitLength = map[pb.RateLimitResponse_RateLimit_Unit]time.Duration{
	pb.RateLimitResponse_RateLimit_SECOND: time.Second,
	pb.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	pb.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	pb.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	pb.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	pb.RateLimitResponse_RateLimit_MONTH:  limiter.Month,
	pb.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// Load reads a file, or every .yaml/.yml file of a folder (in name
// order). A bad file is an error that names the file, the line and the
// reason; nothing of it is kept. (An unreadable one is os's error, which
// names the file.)
func Load(path string) (*Rules, error) {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if st.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	r := &Rules{domains: map[string]*node{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if err := r.add(f, data); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Parse loads one file's content (name is used in messages).
func Parse(name string, data []byte) (*Rules, error) {
	r := &Rules{domains: map[string]*node{}}
	return r, r.add(name, data)
}

// loadError is a bad file's message: "file:line: reason".
type loadError struct {
	file string
	line int
	msg  string
}

func (e *loadError) Error() string { return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg) }

// loader reads one file.
type loader struct {
	file  string
	rules *Rules
}

func (ld *loader) fail(n *yaml.Node, format string, args ...any) error {
	return &loadError{file: ld.file, line: n.Line, msg: fmt.Sprintf(format, args...)}
}

func (r *Rules) add(file string, data []byte) error {
	ld := &loader{file: file, rules: r}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line := 0
		fmt.Sscanf(strings.TrimPrefix(err.Error(), "yaml: "), "line %d:", &line)
		return &loadError{file: file, line: line, msg: "bad YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(doc.Content) == 0 {
		return &loadError{file: file, line: 1, msg: "config file cannot have empty domain"}
	}
	root := doc.Content[0]
	fields, err := ld.fields(root, "domain", "descriptors")
	if err != nil {
		return err
	}
	domain, err := ld.str(fields, "domain")
	if err != nil {
		return err
	}
	if domain == "" {
		return ld.fail(root, "config file cannot have empty domain")
	}
	if r.domains[domain] != nil {
		return ld.fail(fields["domain"], "duplicate domain '%s' (another file has it)", domain)
	}
	n := newNode(domain, true)
	if err := ld.descriptors(n, fields["descriptors"]); err != nil {
		return err
	}
	r.domains[domain] = n
	return nil
}

// fields checks that n is a map of the allowed keys and returns the values by key.
func (ld *loader) fields(n *yaml.Node, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, ld.fail(n, "expected a map of keys, found %s", kindName(n))
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return nil, ld.fail(k, "key is not a string: %s", k.Value)
		}
		if !slices.Contains(allowed, k.Value) {
			if slices.Contains(unsupported, k.Value) {
				return nil, ld.fail(k, "'%s' is not supported by rlproxy", k.Value)
			}
			return nil, ld.fail(k, "unknown key '%s' (expected one of: %s)", k.Value, strings.Join(allowed, ", "))
		}
		if out[k.Value] != nil {
			return nil, ld.fail(k, "key '%s' given twice", k.Value)
		}
		out[k.Value] = v
	}
	return out, nil
}

// unsupported are envoyproxy/ratelimit's keys whose meaning rlproxy does
// not implement: refused rather than ignored, since each changes decisions.
var unsupported = []string{"share_threshold"}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("'%s'", n.Value)
	}
	return "something else"
}

func (ld *loader) str(f map[string]*yaml.Node, key string) (string, error) {
	n := f[key]
	if n == nil || n.Tag == "!!null" {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", ld.fail(n, "'%s' must be a string, found %s", key, kindName(n))
	}
	return n.Value, nil
}

func (ld *loader) boolean(f map[string]*yaml.Node, key string) (bool, error) {
	n := f[key]
	if n == nil {
		return false, nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, ld.fail(n, "'%s' must be true or false, found %s", key, kindName(n))
	}
	return n.Value == "true", nil
}

func (ld *loader) integer(f map[string]*yaml.Node, key string, max int64) (int64, error) {
	n := f[key]
	if n == nil {
		return 0, nil
	}
	v, err := strconv.ParseInt(n.Value, 10, 64)
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || err != nil || v < 0 || v > max {
		return 0, ld.fail(n, "'%s' must be an integer from 0 to %d, found %s", key, max, kindName(n))
	}
	return v, nil
}

// descriptors loads a descriptors list under parent.
func (ld *loader) descriptors(parent *node, list *yaml.Node) error {
	if list == nil || list.Tag == "!!null" {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return ld.fail(list, "'descriptors' must be a list, found %s", kindName(list))
	}
	for _, d := range list.Content {
		f, err := ld.fields(d, "key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "metadata")
		if err != nil {
			return err
		}
		key, err := ld.str(f, "key")
		if err != nil {
			return err
		}
		if key == "" {
			return ld.fail(d, "descriptor has empty key")
		}
		value, err := ld.str(f, "value")
		if err != nil {
			return err
		}
		child, err := parent.add(key, value)
		if err != nil {
			return ld.fail(d, "%v", err)
		}
		if f["rate_limit"] != nil {
			if child.limit, err = ld.limit(f, child); err != nil {
				return err
			}
			ld.rules.limits = append(ld.rules.limits, child.limit)
		} else if err := ld.noLimitKeys(f); err != nil {
			return err
		}
		if err := ld.descriptors(child, f["descriptors"]); err != nil {
			return err
		}
	}
	return nil
}

// noLimitKeys refuses a descriptor's keys that mean something only with a rate_limit.
func (ld *loader) noLimitKeys(f map[string]*yaml.Node) error {
	for _, k := range []string{"shadow_mode", "quota_mode", "detailed_metric"} {
		if _, err := ld.boolean(f, k); err != nil {
			return err
		}
	}
	return nil
}

// limit loads a descriptor's rate_limit (f are the descriptor's fields).
func (ld *loader) limit(f map[string]*yaml.Node, at *node) (*Limit, error) {
	rn := f["rate_limit"]
	rf, err := ld.fields(rn, "unit", "requests_per_unit", "unlimited", "name", "replaces", "algo", "burst", "shards")
	if err != nil {
		return nil, err
	}
	l := &Limit{Where: fmt.Sprintf("%s:%d", ld.file, rn.Line), Algo: limiter.FixedWindow}
	if l.Shadow, err = ld.boolean(f, "shadow_mode"); err != nil {
		return nil, err
	}
	if l.QuotaMode, err = ld.boolean(f, "quota_mode"); err != nil {
		return nil, err
	}
	if l.DetailedMetric, err = ld.boolean(f, "detailed_metric"); err != nil {
		return nil, err
	}
	if l.Unlimited, err = ld.boolean(rf, "unlimited"); err != nil {
		return nil, err
	}
	unit, err := ld.str(rf, "unit")
	if err != nil {
		return nil, err
	}
	u, ok := pb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)]
	valid := ok && u != int32(pb.RateLimitResponse_RateLimit_UNKNOWN)
	switch {
	case l.Unlimited && valid:
		return nil, ld.fail(rf["unit"], "should not specify rate limit unit when unlimited")
	case !l.Unlimited && !valid:
		return nil, ld.fail(rn, "invalid rate limit unit '%s' (second, minute, hour, day, week, month or year)", unit)
	}
	l.Unit = pb.RateLimitResponse_RateLimit_Unit(u)
	rpu, err := ld.integer(rf, "requests_per_unit", 1<<32-1)
	if err != nil {
		return nil, err
	}
	l.RequestsPerUnit = uint32(rpu)
	if l.Name, err = ld.str(rf, "name"); err != nil {
		return nil, err
	}
	if err := ld.replaces(rf["replaces"], l); err != nil {
		return nil, err
	}
	if err := ld.own(rf, l); err != nil {
		return nil, err
	}
	l.setCurrent()
	at.name(l)
	return l, nil
}

// replaces loads a rate_limit's replaces list: [{name: ...}, ...].
func (ld *loader) replaces(list *yaml.Node, l *Limit) error {
	if list == nil {
		return nil
	}
	if list.Kind != yaml.SequenceNode {
		return ld.fail(list, "'replaces' must be a list of {name: ...}, found %s", kindName(list))
	}
	for _, e := range list.Content {
		f, err := ld.fields(e, "name")
		if err != nil {
			return err
		}
		name, err := ld.str(f, "name")
		if err != nil {
			return err
		}
		switch {
		case name == "":
			return ld.fail(e, "should not have an empty replaces entry")
		case name == l.Name:
			return ld.fail(e, "replaces should not contain name of same descriptor")
		}
		l.Replaces = append(l.Replaces, name)
	}
	return nil
}

// own loads rlproxy's own keys of a rate_limit: algo, burst, shards.
func (ld *loader) own(rf map[string]*yaml.Node, l *Limit) error {
	if algo, err := ld.str(rf, "algo"); err != nil {
		return err
	} else if algo != "" {
		l.Algo = limiter.Algo(algo)
		if !slices.Contains(limiter.Algos, l.Algo) || l.Algo == limiter.Concurrency {
			return ld.fail(rf["algo"], "unknown algo '%s' (token-bucket, sliding-log, sliding-window, fixed-window or leaky-bucket)", algo)
		}
		// Only the fixed window counts calendar months (calendar.lua);
		// any other algorithm would take a month as 30.44 days, silently.
		if l.Unit == pb.RateLimitResponse_RateLimit_MONTH && l.Algo != limiter.FixedWindow {
			return ld.fail(rf["algo"], "unit 'month' is a calendar month, which only algo fixed-window counts (%s would count 30.44-day spans): use fixed-window, or unit day or week", algo)
		}
	}
	burst, err := ld.integer(rf, "burst", 1<<40)
	if err != nil {
		return err
	}
	if burst > 0 && l.Algo != limiter.TokenBucket && l.Algo != limiter.LeakyBucket {
		return ld.fail(rf["burst"], "'burst' applies to token-bucket and leaky-bucket only")
	}
	l.Burst = burst
	shards, err := ld.integer(rf, "shards", 1024)
	l.Shards = int(shards)
	return err
}
