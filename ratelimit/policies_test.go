package ratelimit

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/sharding"
)

// A stored policy reads back as the config written, and the config each
// script call carries is the shard's share, as sharding.Subs splits it.
func TestPolicyStoredRoundTrip(t *testing.T) {
	for _, c := range []limiter.Config{
		{Algo: limiter.TokenBucket, Rate: 100, Interval: time.Minute, Burst: 150, Shards: 1, Mode: limiter.Overall},
		{Algo: limiter.SlidingLog, Rate: 10, Interval: time.Second, Burst: 10, Shards: 3, Mode: limiter.PerClient, Shadow: true,
			Limits: limiter.Limits{{Rate: 1000, Interval: 24 * time.Hour}, {Rate: 50, Interval: time.Minute}}},
		{Algo: limiter.Concurrency, Rate: 5, Interval: 10 * time.Second, Burst: 5, Shards: 2, Mode: limiter.Overall},
	} {
		p, err := parsePolicy("user:*", "e1\n"+policyShape(c)+"\n"+policySpec(c))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if p.Config != c || p.Epoch != "e1" || p.prefix() != "user:" {
			t.Errorf("stored %+v, read back %+v (epoch %q)", c, p.Config, p.Epoch)
		}
		for _, sub := range sharding.Subs(c) {
			want := fmt.Sprintf("=e1 %d %d %d", sub.Rate, c.Interval.Milliseconds(), sub.Burst)
			for i, l := range c.Limits.List() {
				sep := ","
				if i == 0 {
					sep = " "
				}
				want += fmt.Sprintf("%s%d:%d", sep, sub.Limits[i], l.Interval.Milliseconds())
			}
			if got := p.makeArg(sub.Shard); got != want {
				t.Errorf("shard %d: arg %q, want %q", sub.Shard, got, want)
			}
		}
	}
	for _, bad := range []string{"", "e1", "e1\nshape", "\nshape\nalgo=token-bucket", "e1\ns\nalgo=x rate=0 interval_ms=1 burst=1 shards=1 mode=OVERALL"} {
		if _, err := parsePolicy("user:*", bad); err == nil {
			t.Errorf("stored policy %q accepted", bad)
		}
	}
}

// The longest matching prefix governs a name.
func TestPolicyMatch(t *testing.T) {
	var ps []*policy
	for _, pat := range []string{"*", "user:*", "user:vip:*", "u*"} {
		ps = append(ps, &policy{pattern: pat})
	}
	s := newPolicySet("1", ps)
	for name, want := range map[string]string{
		"user:1": "user:*", "user:vip:1": "user:vip:*", "user:vip:": "user:vip:*", "user:vip": "user:*",
		"us": "u*", "x": "*", "": "*",
	} {
		if p := s.match(name); p == nil || p.pattern != want {
			t.Errorf("match(%q) = %v, want %s", name, p, want)
		}
	}
	if p := newPolicySet("1", ps[1:2]).match("other"); p != nil {
		t.Errorf("match(other) = %s, want none", p.pattern)
	}
}

// A policy's state generations are as long as its longest state without
// waiting or debt, on every shard, and the epoch carries that length.
func TestPolicyGenerations(t *testing.T) {
	tb := func(rate, burst int64, iv time.Duration, shards int) limiter.Config {
		return limiter.Config{Algo: limiter.TokenBucket, Rate: rate, Interval: iv, Burst: burst, Shards: shards, Mode: limiter.Overall}
	}
	sw := tb(10, 10, time.Second, 1)
	sw.Algo = limiter.SlidingWindow
	fw := tb(10, 10, time.Second, 1)
	fw.Algo = limiter.FixedWindow
	multi := tb(10, 10, time.Second, 1)
	multi.Limits = limiter.Limits{{Rate: 1000, Interval: 24 * time.Hour}}
	for _, c := range []struct {
		c    limiter.Config
		want int64
	}{
		{tb(100, 100, time.Hour, 1), 3600001},
		{tb(100, 200, time.Hour, 1), 7200001}, // a full burst refills in two intervals
		{tb(100, 50, time.Hour, 1), 1800001},  // a full burst refills in half an interval
		{tb(10, 10, time.Second, 3), 1335},    // shard 0 holds 4 permits, the last refills 3 per second: 1333.3 ms
		{sw, 2001},
		{fw, 1001},
		{multi, 86400001},
	} {
		if got := genMs(c.c); got != c.want {
			t.Errorf("genMs(%+v) = %d, want %d", c.c, got, c.want)
		}
		if got := epochGen(policyEpoch(c.c)); got != c.want {
			t.Errorf("the epoch of %+v carries %d, want %d", c.c, got, c.want)
		}
	}
	// An epoch made before packed hash states (an earlier build's, no
	// "p"), before generations, or not by rlproxy keeps keys.
	for _, e := range []string{"e0471843.1001", "e0471843", "e1.", "e1.x", "e1.0", "e1.-5", "e1.p", "e1.0p", "e1.5pp", "e1.p5"} {
		if got := epochGen(e); got != 0 {
			t.Errorf("epochGen(%q) = %d, want 0 (state in keys)", e, got)
		}
	}
	// The script argument says so.
	c := limiter.Config{Algo: limiter.TokenBucket, Rate: 100, Interval: time.Hour, Burst: 100, Shards: 1, Mode: limiter.Overall}
	p := &policy{Stored: limiter.Stored{Config: c, Epoch: "e1.3600001p"}, hashes: "h", genMs: 3600001}
	if got, want := p.makeArg(0), "#h 3600001 e1.3600001p 100 3600000 100"; got != want {
		t.Errorf("arg %q, want %q", got, want)
	}
}

// replyErr is an error reply as go-redis returns it (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// A Redis 6 cluster's answer to the flagged names script is recognised,
// also as the backend wraps it; other errors are not.
func TestFlagsUnsupported(t *testing.T) {
	redis6 := replyErr("ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{redis6, true},
		{fmt.Errorf("backend cluster 127.0.0.1:7000: %w", redis6), true},
		{replyErr("ERR user_script:12: Script attempted to access a non local key"), false},
		{replyErr("MOVED 3999 127.0.0.1:6381"), false},
		{errors.New("Error compiling script (a network error's text)"), false},
	} {
		if got := flagsUnsupported(tc.err); got != tc.want {
			t.Errorf("flagsUnsupported(%q) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
