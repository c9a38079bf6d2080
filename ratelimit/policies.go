package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

// Policies: one rule over many names (RL.POLICY).
//
// A policy is stored once, in the backends: a hash of pattern -> config
// on one node (the one "{policies}" is placed on), beside a version that
// every change raises. Each proxy holds the table of policies in memory
// and reads it again when the change feed announces a change (policy.lua
// does), and reads the version every backstop in case it missed one: a
// change through any proxy applies there at once and on every other
// within a round trip (change.go).
//
// A name with no config of its own (RL.SETRATE) that a policy's prefix
// matches (the longest wins) is a limiter with the policy's config. Its
// entry is made for each request from the policy — nothing per name is
// kept in the proxy — and its script calls carry the policy's config in
// ARGV[2] instead of reading a config key (prelude.lua). The script
// checks that the name still has no config of its own, so an explicit
// limiter wins as soon as it exists. Its state keys are named as an
// explicit limiter's, with the policy's epoch: a changed policy gets a new
// epoch, so its names start fresh, unless KEEPSTATE keeps it (same
// algorithm, mode, shards and number of limits).
//
// On standalone backends a name's string state is not a key of its own
// but a field of one of the policy's generation hashes (prelude.lua,
// State storage): a key costs a name ~175 B and a SET PX, most of its
// decision's cost. The generations are as long as the longest a state
// lasts (genMs), fixed when the epoch is made: the epoch ends with it
// (".<ms>"), so KEEPSTATE keeps it too. A policy stored without it (by
// an older rlproxy) keeps keys, as do policies in a Redis Cluster: a
// generation hash would sit on one master while a resharding moves the
// names' slots (and their config keys) elsewhere.

// DefaultMaxPolicies bounds the policies when no bound is configured.
const DefaultMaxPolicies = 1000

// policy is one policy as this proxy knows it.
type policy struct {
	pattern string // "user:*"
	limiter.Stored
	counts *policyCounts
	hashes string // prefix of the generation hashes of its names' state ("": keys)
	genMs  int64  // their generations' length
	// batches are the names calls of this policy, by target (names.go).
	// A changed policy is a new *policy: its calls run its config.
	batches sync.Map
	args    []string // arg of each shard, made once the policy is complete (newPolicySet)
}

// policyCounts are a policy's decisions, kept across its changes.
type policyCounts struct{ granted, denied atomic.Int64 }

func (c *policyCounts) count(granted bool) {
	if granted {
		c.granted.Add(1)
	} else {
		c.denied.Add(1)
	}
}

// prefix is what a governed name starts with.
func (p *policy) prefix() string { return strings.TrimSuffix(p.pattern, "*") }

// arg is ARGV[2] of a script call on one shard of a name p governs:
// "=epoch sub_rate interval_ms sub_burst [sub_limits]", or with state in
// hashes "#hashes gen_ms epoch ..." (prelude.lua). Every request for a
// governed name sends it, so newPolicySet makes it once (makeArg): a
// policy governs names only from a set.
func (p *policy) arg(shard int) string { return p.args[shard] }

func (p *policy) makeArg(shard int) string {
	n := p.Shards
	b := make([]byte, 0, 128)
	if p.hashes != "" {
		b = append(b, '#')
		b = append(b, p.hashes...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, p.genMs, 10)
		b = append(b, ' ')
	} else {
		b = append(b, '=')
	}
	b = append(b, p.Epoch...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, share(p.Rate, n, shard), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, p.Interval.Milliseconds(), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, share(p.Burst, n, shard), 10)
	for i, l := range p.Limits.List() {
		if i == 0 {
			b = append(b, ' ')
		} else {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, share(l.Rate, n, shard), 10)
		b = append(b, ':')
		b = strconv.AppendInt(b, l.Interval.Milliseconds(), 10)
	}
	return string(b)
}

// policyEpoch is a new epoch for a policy of config c: random, then the
// length of its state's generations and "p": its hashes hold packed
// states (".<ms>p"; see epochGen).
func policyEpoch(c limiter.Config) string {
	return newEpoch() + "." + strconv.FormatInt(genMs(c), 10) + "p"
}

// genMs is the longest any shard's state of c lasts when nothing waits
// or owes (ms, rounded up, plus one: a state is kept in the generation
// ending at or after its end, so a generation this long has it in one of
// the two alive). Longer states (booked ahead, debt) are keys.
func genMs(c limiter.Config) int64 {
	n := c.Shards
	longest := 0.0
	add := func(rate, burst int64, iv time.Duration) {
		ms := float64(iv.Milliseconds())
		span := ms // fixed-window: to the window's end
		switch {
		case c.Algo == limiter.SlidingWindow:
			span = 2 * ms
		case c.Algo.HasBurst():
			span = float64(share(burst, n, 0)) * ms / float64(max(1, share(rate, n, n-1)))
		}
		longest = max(longest, span)
	}
	add(c.Rate, c.Burst, c.Interval)
	for _, l := range c.Limits.List() {
		add(l.Rate, l.Rate, l.Interval)
	}
	return int64(min(math.Ceil(longest), 1<<50)) + 1
}

// epochGen is the generation length an epoch ends with, or 0 for an
// epoch that does not end ".<ms>p": one made by an earlier build of this
// (unreleased) version, whose hashes held decimal states. Such a policy
// keeps its names' states in keys, the way every policy does on a Redis
// Cluster, so no state is misread; its names start fresh once.
func epochGen(epoch string) int64 {
	_, g, ok := strings.Cut(epoch, ".")
	g, packed := strings.CutSuffix(g, "p")
	n, err := strconv.ParseInt(g, 10, 64)
	if !ok || !packed || err != nil || n < 1 {
		return 0
	}
	return n
}

// share is one shard's part of total split over n (sharding.Split).
func share(total int64, n, shard int) int64 {
	s := total / int64(n)
	if int64(shard) < total%int64(n) {
		s++
	}
	return s
}

// policySet is the table of policies at one version: immutable.
type policySet struct {
	version string
	byPat   map[string]*policy
	lens    []int                      // the prefix lengths, longest first
	byLen   map[int]map[string]*policy // by prefix length, by prefix
}

// newPolicySet indexes ps by prefix and makes each one's script
// arguments (arg).
func newPolicySet(version string, ps []*policy) *policySet {
	s := &policySet{version: version, byPat: map[string]*policy{}, byLen: map[int]map[string]*policy{}}
	for _, p := range ps {
		p.args = make([]string, p.Shards)
		for shard := range p.args {
			p.args[shard] = p.makeArg(shard)
		}
		s.byPat[p.pattern] = p
		n := len(p.prefix())
		if s.byLen[n] == nil {
			s.byLen[n] = map[string]*policy{}
			s.lens = append(s.lens, n)
		}
		s.byLen[n][p.prefix()] = p
	}
	slices.SortFunc(s.lens, func(a, b int) int { return b - a })
	return s
}

// match returns the policy with the longest prefix of name, or nil.
func (s *policySet) match(name string) *policy {
	if s == nil {
		return nil
	}
	for _, n := range s.lens {
		if n <= len(name) {
			if p := s.byLen[n][name[:n]]; p != nil {
				return p
			}
		}
	}
	return nil
}

// policies is what Limiters keeps of the policies.
type policies struct {
	set     atomic.Pointer[policySet]
	mu      sync.Mutex // one refresh at a time
	countMu sync.Mutex
	counts  map[string]*policyCounts // by pattern, for the policies there are
	lost    atomic.Pointer[func()]   // OnPoliciesLost
}

// OnPoliciesLost sets f to run (on a goroutine of its own) when the
// policies' version, read before, is gone from the backend: its node
// restarted empty, failed over to a replica without it, or was flushed.
// The proxy then applies its config file's policies again.
func (l *Limiters) OnPoliciesLost(f func()) { l.policies.lost.Store(&f) }

// governed returns the entry of a name a policy governs (ignoring any
// config of its own: callers that need to know read it first), or nil.
func (l *Limiters) governed(name string) *entry {
	p := l.policies.set.Load().match(name)
	if p == nil {
		return nil
	}
	return l.newEntry(name, &p.Stored, p)
}

// errPolicyPattern: a pattern that is not a prefix followed by '*'.
var errPolicyPattern = errors.New("policy pattern must be a prefix followed by '*' (like user:*)")

// CheckPolicyPattern reports a pattern of the wrong shape.
func CheckPolicyPattern(pattern string) error {
	if !strings.HasSuffix(pattern, "*") || strings.Count(pattern, "*") != 1 {
		return errPolicyPattern
	}
	return nil
}

// TooManyPoliciesError: max_policies policies exist already.
type TooManyPoliciesError struct{ Max int }

func (e *TooManyPoliciesError) Error() string {
	return fmt.Sprintf("too many policies (max_policies is %d)", e.Max)
}

// policyNode is the node that holds the policies.
func (l *Limiters) policyNode() *backend.Node { return l.nodes("{policies}", 1)[0] }

func (o *Options) maxPolicies() int {
	if o.MaxPolicies > 0 {
		return o.MaxPolicies
	}
	return DefaultMaxPolicies
}

// PolicySet creates or replaces the policy of pattern and reports whether
// the stored policy changed (NX: only create). The change applies on this
// proxy before it returns.
func (l *Limiters) PolicySet(ctx context.Context, pattern string, c limiter.Config, o SetRateOptions) (bool, error) {
	if err := CheckPolicyPattern(pattern); err != nil {
		return false, err
	}
	hash, version := l.keys.Policies()
	max := l.opt().maxPolicies()
	v, err := l.policyNode().Eval(ctx, l.scripts.Policy, []string{hash, version},
		"set", pattern, policySpec(c), policyShape(c), policyEpoch(c), flag(o.NX), flag(o.KeepState), max, l.keys.Changes())
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	if n < 0 {
		return false, &TooManyPoliciesError{Max: max}
	}
	if n == 1 {
		err = l.RefreshPolicies(ctx)
	}
	return n == 1, err
}

// PolicyDel deletes the policy of pattern and reports whether it existed.
// Its names answer no such limiter (unless another policy governs them),
// their waiters on this proxy at once.
func (l *Limiters) PolicyDel(ctx context.Context, pattern string) (bool, error) {
	hash, version := l.keys.Policies()
	v, err := l.policyNode().Eval(ctx, l.scripts.Policy, []string{hash, version}, "del", pattern, l.keys.Changes())
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	if n == 1 {
		err = l.RefreshPolicies(ctx)
	}
	return n == 1, err
}

// PolicyGet returns the config of the policy of pattern, read from the
// backend (nil when there is none).
func (l *Limiters) PolicyGet(ctx context.Context, pattern string) (*limiter.Config, error) {
	hash, _ := l.keys.Policies()
	h, err := l.policyNode().HGetAll(ctx, hash)
	if err != nil || h[pattern] == "" {
		return nil, err
	}
	p, err := parsePolicy(pattern, h[pattern])
	if err != nil {
		return nil, err
	}
	return &p.Config, nil
}

// PolicyList returns the patterns of every policy, sorted bytewise.
func (l *Limiters) PolicyList(ctx context.Context) ([]string, error) {
	hash, _ := l.keys.Policies()
	h, err := l.policyNode().HGetAll(ctx, hash)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(h))
	for pat := range h {
		out = append(out, pat)
	}
	slices.Sort(out)
	return out, nil
}

// PolicyMatch returns the pattern of the policy that governs name, or ""
// when none does or the name is a limiter of its own.
func (l *Limiters) PolicyMatch(ctx context.Context, name string) (string, error) {
	e, err := l.load(ctx, name)
	if err != nil || e == nil || e.policy == nil {
		return "", err
	}
	return e.policy.pattern, nil
}

// PolicyStats is one policy's decisions since this proxy started.
type PolicyStats struct {
	Pattern         string
	Granted, Denied int64
}

// Policies returns each policy's decisions, sorted by pattern, and so how
// many policies there are.
func (l *Limiters) Policies() []PolicyStats {
	set := l.policies.set.Load()
	if set == nil {
		return nil
	}
	out := make([]PolicyStats, 0, len(set.byPat))
	for pat, p := range set.byPat {
		out = append(out, PolicyStats{Pattern: pat, Granted: p.counts.granted.Load(), Denied: p.counts.denied.Load()})
	}
	slices.SortFunc(out, func(a, b PolicyStats) int { return strings.Compare(a.Pattern, b.Pattern) })
	return out
}

// RefreshPolicies reads the policies from the backend when their version
// changed since the last read. Waiters on the names of a policy changed
// or deleted are woken (decided again under what is in force, or told
// there is no such limiter), and cached denials are forgotten.
func (l *Limiters) RefreshPolicies(ctx context.Context) error {
	l.policies.mu.Lock()
	defer l.policies.mu.Unlock()
	hash, version := l.keys.Policies()
	node := l.policyNode()
	ver, err := node.Get(ctx, version)
	if err != nil {
		return err
	}
	old := l.policies.set.Load()
	if old != nil && old.version == ver {
		return nil
	}
	if f := l.policies.lost.Load(); ver == "" && old != nil && old.version != "" && f != nil {
		go (*f)()
	}
	h, err := node.HGetAll(ctx, hash)
	if err != nil {
		return err
	}
	ps := make([]*policy, 0, len(h))
	for pat, s := range h {
		p, err := parsePolicy(pat, s)
		if err != nil {
			continue // not one rlproxy wrote: it governs nothing
		}
		if g := epochGen(p.Epoch); g > 0 && !l.cluster && p.Algo.StringState() {
			p.hashes, p.genMs = l.keys.PolicyState(p.Epoch), g
		}
		ps = append(ps, p)
	}
	l.policies.countMu.Lock()
	counts := map[string]*policyCounts{}
	for _, p := range ps {
		if p.counts = l.policies.counts[p.pattern]; p.counts == nil {
			p.counts = &policyCounts{}
		}
		counts[p.pattern] = p.counts
	}
	l.policies.counts = counts
	l.policies.countMu.Unlock()
	set := newPolicySet(ver, ps)
	l.policies.set.Store(set)
	var changed []string
	if old != nil {
		for pat, p := range old.byPat {
			if q := set.byPat[pat]; q == nil || q.Stored != p.Stored {
				changed = append(changed, strings.TrimSuffix(pat, "*"))
			}
		}
		for pat := range set.byPat {
			if old.byPat[pat] == nil {
				changed = append(changed, strings.TrimSuffix(pat, "*"))
			}
		}
	}
	if len(changed) > 0 {
		l.denials.resize(l.opt().DenyCacheSize, true)
		l.sleepers.wakeUnder(changed)
	}
	return nil
}

// followPolicies reads the policies' version when the change feed says
// they changed (refreshPoliciesSoon), and every backstop, until Close.
func (l *Limiters) followPolicies() {
	every := l.opt().backstop()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		l.RefreshPolicies(ctx) //nolint:errcheck // the next tick tries again
		cancel()
		select {
		case <-t.C:
		case <-l.policyKick:
		case <-l.closing:
			return
		}
	}
}

// wakeAll wakes every sleeper.
func (s *sleepers) wakeAll() { s.wakeUnder([]string{""}) }

// wakeUnder wakes the sleepers of every name that starts with one of
// prefixes.
func (s *sleepers) wakeUnder(prefixes []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ws := range s.m {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				for w := range ws {
					close(w)
				}
				delete(s.m, name)
				break
			}
		}
	}
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// policySpec writes a policy's config the same way for the same config
// (policy.lua compares it), as field=value words.
func policySpec(c limiter.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "algo=%s rate=%d interval_ms=%d burst=%d shards=%d mode=%s shadow=%s",
		c.Algo, c.Rate, c.Interval.Milliseconds(), c.Burst, c.Shards, c.Mode, flag(c.Shadow))
	for i, l := range c.Limits.List() {
		sep := ","
		if i == 0 {
			sep = " limits="
		}
		fmt.Fprintf(&b, "%s%d:%d", sep, l.Rate, l.Interval.Milliseconds())
	}
	return b.String()
}

// policyShape is what a policy's names' state keys depend on: KEEPSTATE
// keeps their state only while it is the same.
func policyShape(c limiter.Config) string {
	return fmt.Sprintf("%s %s %d %d", c.Algo, c.Mode, c.Shards, len(c.LimitList()))
}

// parsePolicy reads a stored policy: "epoch\nshape\nspec".
func parsePolicy(pattern, s string) (*policy, error) {
	epoch, rest, ok1 := strings.Cut(s, "\n")
	_, spec, ok2 := strings.Cut(rest, "\n")
	bad := fmt.Errorf("stored policy '%s' is not one rlproxy wrote", pattern)
	if !ok1 || !ok2 || epoch == "" || CheckPolicyPattern(pattern) != nil {
		return nil, bad
	}
	h := map[string]string{"epoch": epoch, "gen": spec, "ttl_ms": "0"}
	for _, f := range strings.Fields(spec) {
		k, v, _ := strings.Cut(f, "=")
		h[k] = v
	}
	if h["shadow"] == "0" {
		delete(h, "shadow")
	}
	st, err := limiter.ParseStored(h)
	if err != nil || st.Shards < 1 || st.Rate < 1 || st.Interval <= 0 || st.Burst < 1 {
		return nil, bad
	}
	if st.Shards > limiter.MaxShards || st.Rate < int64(st.Shards) {
		return nil, bad
	}
	return &policy{pattern: pattern, Stored: st}, nil
}
