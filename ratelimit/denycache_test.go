package ratelimit

import (
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func us(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// denied is a denial as DecodeReply gives it: retry_after in µs, and in
// ms rounded up.
func denied(remaining, retryUs, resetMs int64) limiter.Result {
	return limiter.Result{Remaining: remaining, RetryAfterMs: (retryUs + 999) / 1000, RetryAfterUs: retryUs, ResetAfterMs: resetMs}
}

func TestDenyCacheAnswersOnlySureDenials(t *testing.T) {
	var c denyCache
	k := subKey{shard: 2, epoch: "e1"}
	// 5 permits were denied at t0: they could come in 100ms.
	c.add("k", k, 5, t0, denied(3, 100_000, 400))

	for _, tc := range []struct {
		name    string
		key     subKey
		permits int64
		at      time.Duration
		hit     bool
		want    limiter.Result
	}{
		{"same request", k, 5, ms(10), true, limiter.Result{Remaining: 3, RetryAfterMs: 90, RetryAfterUs: 90_000, ResetAfterMs: 390}},
		// Only requests for the same permits: fewer might fit in what is
		// left, more would wait longer than the cached retry_after.
		{"more permits", k, 8, ms(50), false, limiter.Result{}},
		{"fewer permits", k, 4, ms(10), false, limiter.Result{}},
		{"one permit", k, 1, 0, false, limiter.Result{}},
		{"other shard", subKey{shard: 3, epoch: "e1"}, 5, ms(10), false, limiter.Result{}},
		{"other epoch", subKey{shard: 2, epoch: "e2"}, 5, ms(10), false, limiter.Result{}},
		{"other client", subKey{shard: 2, epoch: "e1", client: "n=a"}, 5, ms(10), false, limiter.Result{}},
		// Asks for other permits leave the entry in place.
		{"same request again", k, 5, ms(60) + us(250), true, limiter.Result{Remaining: 3, RetryAfterMs: 40, RetryAfterUs: 39_750, ResetAfterMs: 340}},
		// The entry lives until retry_after less 1µs (the script rounds up).
		{"just before expiry", k, 5, us(99_998), true, limiter.Result{Remaining: 3, RetryAfterMs: 1, RetryAfterUs: 2, ResetAfterMs: 301}},
		{"expired", k, 5, us(99_999), false, limiter.Result{}},
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

// A denial is kept to the µs: one with retry_after 400µs (1 ms once
// rounded up) answers for 399µs, not for the whole ms.
func TestDenyCacheMicroseconds(t *testing.T) {
	var c denyCache
	k := subKey{epoch: "e"}
	c.add("k", k, 1, t0, denied(0, 400, 1))
	for _, tc := range []struct {
		at  time.Duration
		hit bool
	}{{0, true}, {us(1), true}, {us(398), true}, {us(399), false}, {us(400), false}, {ms(1) - 1, false}} {
		if _, hit := c.check("k", k, 1, t0.Add(tc.at)); hit != tc.hit {
			t.Errorf("check at +%v after a denial with retry_after 400µs: hit %v, want %v", tc.at, hit, tc.hit)
		}
	}

	c.add("k", k, 1, t0, denied(0, 2, 1))
	if res, hit := c.check("k", k, 1, t0); !hit || res.RetryAfterMs != 1 || res.RetryAfterUs != 2 {
		t.Errorf("check right after a denial with retry_after 2µs = %+v, %v; want a hit with 1 ms, 2 µs", res, hit)
	}
	if _, hit := c.check("k", k, 1, t0.Add(us(1))); hit {
		t.Error("a denial with retry_after 2µs answered 1µs later")
	}
}

// Denials whose retry_after is too short to be worth it are not kept:
// rounded up to the µs, 1µs may be none at all.
func TestDenyCacheSkipsShortDenials(t *testing.T) {
	var c denyCache
	k := subKey{epoch: "e"}
	for _, res := range []limiter.Result{
		denied(0, 0, 0),
		denied(0, 1, 1),
		// The µs decide, not the ms (a result without them is not kept).
		{RetryAfterMs: 1000, ResetAfterMs: 1000},
	} {
		c.add("k", k, 1, t0, res)
		if _, ok := c.check("k", k, 1, t0); ok {
			t.Errorf("a denial %+v was cached", res)
		}
	}
	if c.size != 0 {
		t.Errorf("size = %d, want 0", c.size)
	}
}

// A cached answer never says retry_after 0, which would read as granted,
// nor less than is left of the denial's retry_after (to the µs), and its
// reset_after is never under its retry_after.
func TestDenyCacheRetryAfterStaysPositive(t *testing.T) {
	k := subKey{epoch: "e"}
	for _, retry := range []int64{2, 400, 999, 1000, 1001, 2500, 30_000} {
		var c denyCache
		res := denied(0, retry, (retry+999)/1000)
		c.add("k", k, 1, t0, res)
		hits := int64(0)
		for at := int64(0); at <= retry; at++ {
			got, ok := c.check("k", k, 1, t0.Add(us(int(at))))
			if !ok {
				continue
			}
			hits++
			left := retry - at
			if got.RetryAfterMs < 1 || got.RetryAfterMs*1000 < left || got.RetryAfterUs != left || got.ResetAfterMs < got.RetryAfterMs {
				t.Errorf("retry_after %dµs, checked %dµs later: %+v; want retry_after >= %dµs (>= 1 ms) and reset_after >= retry_after",
					retry, at, got, left)
				break
			}
		}
		if hits != retry-1 {
			t.Errorf("retry_after %dµs: answered at %d µs of it, want %d (all but the last)", retry, hits, retry-1)
		}
	}
}

func TestDenyCacheForget(t *testing.T) {
	var c denyCache
	res := denied(0, 1_000_000, 1000)
	for shard := range 4 {
		c.add("a", subKey{shard: shard, epoch: "e"}, 1, t0, res)
		c.add("b", subKey{shard: shard, epoch: "e"}, 1, t0, res)
	}
	// A newer denial of the same sub-limiter replaces the older one.
	c.add("a", subKey{shard: 0, epoch: "e"}, 2, t0, res)
	if c.size != 8 {
		t.Fatalf("size = %d, want 8", c.size)
	}
	if _, ok := c.check("a", subKey{shard: 0, epoch: "e"}, 1, t0); ok {
		t.Error("the replaced denial (1 permit) still answered")
	}
	if _, ok := c.check("a", subKey{shard: 0, epoch: "e"}, 2, t0); !ok {
		t.Error("the newer denial (2 permits) did not answer")
	}
	c.forget("a")
	for shard := range 4 {
		permits := int64(1)
		if shard == 0 {
			permits = 2
		}
		if _, ok := c.check("a", subKey{shard: shard, epoch: "e"}, permits, t0); ok {
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

// Past its bound the cache still remembers new denials: it makes room by
// clearing expired ones first and, when they are too few, live ones.
func TestDenyCacheSizeBound(t *testing.T) {
	const bound = 1000
	c := denyCache{max: bound}
	res := denied(0, 1_000_000_000, 1000) // live for 1000 s
	for i := range 3 * bound {
		c.add("k", subKey{shard: i, epoch: "e"}, 1, t0, res)
		if c.size > bound {
			t.Fatalf("size = %d after %d denials, over the bound %d", c.size, i+1, bound)
		}
		// The denial just made is always remembered.
		if _, ok := c.check("k", subKey{shard: i, epoch: "e"}, 1, t0); !ok {
			t.Fatalf("denial %d (past the bound) was not cached", i)
		}
	}
	c.add("other", subKey{epoch: "e"}, 1, t0, res)
	if _, ok := c.check("other", subKey{epoch: "e"}, 1, t0); !ok {
		t.Error("a new limiter's denial was not cached at the bound")
	}
	// Existing entries can still be refreshed at the bound.
	before := c.size
	c.add("other", subKey{epoch: "e"}, 3, t0, res)
	if c.size != before {
		t.Errorf("size = %d after refreshing an entry, want %d", c.size, before)
	}
	if _, ok := c.check("other", subKey{epoch: "e"}, 2, t0); ok {
		t.Error("refreshed entry (3 permits) answered a request for 2")
	}
	if _, ok := c.check("other", subKey{epoch: "e"}, 3, t0); !ok {
		t.Error("refreshed entry (3 permits) did not answer a request for 3")
	}
}

// A denial is answered from memory for at most maxDenialAge, however
// long its retry_after: a change made through another proxy (which this
// one cannot see) is seen within it.
func TestDenyCacheMaxAge(t *testing.T) {
	var c denyCache
	k := subKey{epoch: "e"}
	c.add("k", k, 1, t0, denied(0, 3600_000_000, 3600_000)) // an hour
	if res, ok := c.check("k", k, 1, t0.Add(maxDenialAge-time.Microsecond)); !ok || res.RetryAfterUs != 3600_000_000-(maxDenialAge-time.Microsecond).Microseconds() {
		t.Errorf("just before maxDenialAge: %+v, %v; want the denial, its retry_after brought up to now", res, ok)
	}
	if _, ok := c.check("k", k, 1, t0.Add(maxDenialAge)); ok {
		t.Errorf("a denial of an hour answered from memory after %v", maxDenialAge)
	}
}

// Expired denials are forgotten when room is needed: after they expire,
// a full cache of them gives way to new ones, and live ones stay.
func TestDenyCacheForgetsExpired(t *testing.T) {
	const bound = 100
	c := denyCache{max: bound}
	short := denied(0, 500_000, 1000)      // live for 0.5 s
	long := denied(0, 1_000_000_000, 1000) // for maxDenialAge (of 1000 s)
	c.add("live", subKey{epoch: "e"}, 1, t0, long)
	for i := range bound - 1 {
		c.add("k", subKey{shard: i, epoch: "e"}, 1, t0, short)
	}
	later := t0.Add(700 * time.Millisecond) // every short denial has expired
	c.add("new", subKey{epoch: "e"}, 1, later, long)
	if c.size != 2 {
		t.Errorf("size = %d after the expired denials made room, want 2 (live and new)", c.size)
	}
	for _, name := range []string{"live", "new"} {
		if _, ok := c.check(name, subKey{epoch: "e"}, 1, later); !ok {
			t.Errorf("the %s denial was not kept", name)
		}
	}
	if c.len() != 2 {
		t.Errorf("len() = %d, want 2", c.len())
	}
}
