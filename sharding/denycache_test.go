package sharding

import (
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestDenyCacheAnswersOnlySureDenials(t *testing.T) {
	var c denyCache
	k := subKey{shard: 2, epoch: "e1"}
	// 5 permits were denied at t0: they could come in 100ms.
	c.add("k", k, 5, t0, limiter.Result{Remaining: 3, RetryAfterMs: 100, ResetAfterMs: 400})

	for _, tc := range []struct {
		name    string
		key     subKey
		permits int64
		at      time.Duration
		hit     bool
		want    limiter.Result
	}{
		{"same request", k, 5, ms(10), true, limiter.Result{Remaining: 3, RetryAfterMs: 90, ResetAfterMs: 390}},
		{"more permits", k, 8, ms(50), true, limiter.Result{Remaining: 3, RetryAfterMs: 50, ResetAfterMs: 350}},
		// Fewer permits might fit in what is left: ask the backend.
		{"fewer permits", k, 4, ms(10), false, limiter.Result{}},
		{"one permit", k, 1, 0, false, limiter.Result{}},
		{"other shard", subKey{shard: 3, epoch: "e1"}, 5, ms(10), false, limiter.Result{}},
		{"other epoch", subKey{shard: 2, epoch: "e2"}, 5, ms(10), false, limiter.Result{}},
		{"other client", subKey{shard: 2, epoch: "e1", client: "n=a"}, 5, ms(10), false, limiter.Result{}},
		// The entry lives until retry_after less 1ms (the script rounds up).
		{"just before expiry", k, 5, ms(98), true, limiter.Result{Remaining: 3, RetryAfterMs: 2, ResetAfterMs: 302}},
		{"expired", k, 5, ms(99), false, limiter.Result{}},
		{"gone once expired", k, 5, ms(10), false, limiter.Result{}},
	} {
		got, hit := c.check("k", tc.key, tc.permits, t0.Add(tc.at))
		if hit != tc.hit || got != tc.want {
			t.Errorf("%s: check(%d permits at +%v) = %+v, %v; want %+v, %v", tc.name, tc.permits, tc.at, got, hit, tc.want, tc.hit)
		}
		if got.Granted {
			t.Errorf("%s: a cached answer is a grant", tc.name)
		}
	}
	if c.size != 0 || len(c.byName) != 0 {
		t.Errorf("after expiry: size %d, %d names; want empty", c.size, len(c.byName))
	}
}

// A cached answer never says retry_after 0, which would read as granted.
func TestDenyCacheRetryAfterStaysPositive(t *testing.T) {
	var c denyCache
	k := subKey{epoch: "e"}
	c.add("k", k, 1, t0, limiter.Result{RetryAfterMs: 3, ResetAfterMs: 3})
	res, ok := c.check("k", k, 1, t0.Add(1999*time.Microsecond))
	if !ok || res.RetryAfterMs < 1 || res.ResetAfterMs < res.RetryAfterMs {
		t.Errorf("check = %+v, %v; want a hit with retry_after >= 1 and reset_after >= retry_after", res, ok)
	}
}

// Denials whose retry_after is too short to be worth it are not kept.
func TestDenyCacheSkipsShortDenials(t *testing.T) {
	var c denyCache
	k := subKey{epoch: "e"}
	for _, retry := range []int64{0, 1} {
		c.add("k", k, 1, t0, limiter.Result{RetryAfterMs: retry})
		if _, ok := c.check("k", k, 1, t0); ok {
			t.Errorf("a denial with retry_after %dms was cached", retry)
		}
	}
	if c.size != 0 {
		t.Errorf("size = %d, want 0", c.size)
	}
}

func TestDenyCacheForget(t *testing.T) {
	var c denyCache
	res := limiter.Result{RetryAfterMs: 1000, ResetAfterMs: 1000}
	for shard := range 4 {
		c.add("a", subKey{shard: shard, epoch: "e"}, 1, t0, res)
		c.add("b", subKey{shard: shard, epoch: "e"}, 1, t0, res)
	}
	// A newer denial of the same sub-limiter replaces the older one.
	c.add("a", subKey{shard: 0, epoch: "e"}, 2, t0, res)
	if c.size != 8 {
		t.Fatalf("size = %d, want 8", c.size)
	}
	c.forget("a")
	for shard := range 4 {
		if _, ok := c.check("a", subKey{shard: shard, epoch: "e"}, 9, t0); ok {
			t.Errorf("shard %d of a forgotten limiter still answered from the cache", shard)
		}
		if _, ok := c.check("b", subKey{shard: shard, epoch: "e"}, 1, t0); !ok {
			t.Errorf("shard %d of another limiter was forgotten too", shard)
		}
	}
	if c.size != 4 {
		t.Errorf("size = %d after forgetting one of two limiters, want 4", c.size)
	}
	c.forget("nope") // forgetting an unknown limiter is harmless
	if c.size != 4 {
		t.Errorf("size = %d, want 4", c.size)
	}
}

func TestDenyCacheSizeBound(t *testing.T) {
	var c denyCache
	res := limiter.Result{RetryAfterMs: 1000, ResetAfterMs: 1000}
	for i := range maxDenials + 10 {
		c.add("k", subKey{shard: i, epoch: "e"}, 1, t0, res)
	}
	c.add("other", subKey{epoch: "e"}, 1, t0, res)
	if c.size != maxDenials {
		t.Errorf("size = %d after %d denials, want the bound %d", c.size, maxDenials+11, maxDenials)
	}
	if _, ok := c.check("other", subKey{epoch: "e"}, 1, t0); ok {
		t.Error("a denial was remembered past the bound")
	}
	// Existing entries can still be refreshed at the bound.
	c.add("k", subKey{shard: 0, epoch: "e"}, 3, t0, res)
	if c.size != maxDenials {
		t.Errorf("size = %d after refreshing an entry, want %d", c.size, maxDenials)
	}
	if _, ok := c.check("k", subKey{shard: 0, epoch: "e"}, 2, t0); ok {
		t.Error("refreshed entry (3 permits) answered a request for 2")
	}
	// Once entries go, there is room again.
	c.forget("k")
	c.add("other", subKey{epoch: "e"}, 1, t0, res)
	if _, ok := c.check("other", subKey{epoch: "e"}, 1, t0); !ok {
		t.Error("no room after the cache was emptied")
	}
}
