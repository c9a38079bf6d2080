package ratelimit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// twoProxies returns the limiters of two proxies over one redis-server,
// with a backstop too long to matter in a test: whatever reaches one
// from the other comes by the change feed.
func twoProxies(t *testing.T) (a, b *Limiters) {
	t.Helper()
	srv := redistest.StartServer(t)
	open := func() *Limiters {
		pool, err := backend.Open(context.Background(), backend.Options{Backends: []string{srv.URL()}, Timeout: time.Second}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		l := New(pool, limiter.NewScripts(), Options{KeyPrefix: "rl:", Backstop: time.Hour})
		t.Cleanup(func() { l.Close(); _ = pool.Close() })
		redistest.WaitFor(t, func() bool { up, _ := l.Feed().Up(); return up == 1 })
		return l
	}
	return open(), open()
}

// RL.SETRATE, RL.RESET and RL.DEL through one proxy drop the config the
// other has cached (a cached config has no expiry of its own).
func TestChangesReachOtherProxysCache(t *testing.T) {
	t.Parallel()
	a, b := twoProxies(t)
	ctx := context.Background()
	rate := func(n int64) limiter.Config {
		return limiter.Config{Algo: limiter.TokenBucket, Rate: n, Interval: time.Hour, Burst: n, Shards: 1, Mode: limiter.Overall}
	}
	cached := func() {
		t.Helper()
		if _, err := b.config(ctx, "k", false); err != nil {
			t.Fatal(err)
		}
		if b.configs.get("k") == nil {
			t.Fatal("proxy B did not cache k's config")
		}
	}
	dropped := func(what string) {
		t.Helper()
		start := time.Now()
		redistest.WaitFor(t, func() bool { return b.configs.get("k") == nil })
		t.Logf("%s through A dropped B's cached config after %v", what, time.Since(start).Round(10*time.Microsecond))
	}
	if _, err := a.SetRate(ctx, "k", rate(10), SetRateOptions{}); err != nil {
		t.Fatal(err)
	}
	cached()
	if _, err := a.SetRate(ctx, "k", rate(20), SetRateOptions{}); err != nil {
		t.Fatal(err)
	}
	dropped("RL.SETRATE")
	cached()
	if ok, err := a.Reset(ctx, "k"); !ok || err != nil {
		t.Fatalf("Reset: %v %v", ok, err)
	}
	dropped("RL.RESET")
	cached()
	if ok, err := a.Del(ctx, "k"); !ok || err != nil {
		t.Fatalf("Del: %v %v", ok, err)
	}
	dropped("RL.DEL")
	if _, err := b.config(ctx, "k", false); err == nil {
		t.Fatal("proxy B still finds k after RL.DEL")
	}
}

// An unchanged RL.SETRATE announces nothing: the other proxy keeps its
// cache.
func TestUnchangedSetRateKeepsOtherCaches(t *testing.T) {
	t.Parallel()
	a, b := twoProxies(t)
	ctx := context.Background()
	c := limiter.Config{Algo: limiter.TokenBucket, Rate: 5, Interval: time.Hour, Burst: 5, Shards: 1, Mode: limiter.Overall}
	if _, err := a.SetRate(ctx, "same", c, SetRateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.config(ctx, "same", false); err != nil {
		t.Fatal(err)
	}
	if changed, err := a.SetRate(ctx, "same", c, SetRateOptions{}); changed || err != nil {
		t.Fatalf("SetRate again: %v %v", changed, err)
	}
	// A change to another limiter, announced after: once B has it, it
	// would have had the first one too.
	if _, err := a.SetRate(ctx, "other", c, SetRateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.config(ctx, "other", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetRate(ctx, "other", limiter.Config{Algo: limiter.TokenBucket, Rate: 6, Interval: time.Hour, Burst: 6, Shards: 1, Mode: limiter.Overall}, SetRateOptions{}); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, func() bool { return b.configs.get("other") == nil })
	if b.configs.get("same") == nil {
		t.Error("an unchanged RL.SETRATE dropped the other proxy's cached config")
	}
}
