package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Several limits in one limiter through two proxies on shared backends:
// under 32 concurrent clients no single limit ever admits more than it
// allows (the sub-rates of every limit are split exactly over shards).
func TestMultiLimitUnderLoad(t *testing.T) {
	nodes := shardNodes(t, 2)
	a, b := shardProxy(t, nodes), shardProxy(t, nodes)

	t.Run("GETRATE and the all-or-nothing reply", func(t *testing.T) {
		a.Do(t, "RL.SETRATE", "api", 10, "1s", "LIMIT", 3, "1d").Equal(int64(1))
		b.Do(t, "RL.SETRATE", "api", 10, "1s", "LIMIT", 3, "1d").Equal(int64(0))
		b.Do(t, "RL.GETRATE", "api").Equal(map[any]any{
			"rate": int64(10), "interval_ms": int64(1000), "algo": "token-bucket", "burst": int64(10),
			"shards": int64(1), "mode": "OVERALL", "ttl_ms": int64(0),
			"limits": []any{[]any{int64(3), int64(86400000)}},
		})
		a.Do(t, "RL.ACQUIRE", "api", 2).Granted(1) // remaining: the least left, 3 - 2
		g := b.Do(t, "RL.ACQUIRE", "api", 2).Denied(1)
		if g.RetryAfter < 7*time.Hour || g.RetryAfter > 8*time.Hour {
			t.Errorf("retry_after = %v, want the daily limit's 8h for one more (less a moment)", g.RetryAfter)
		}
		a.Do(t, "RL.ACQUIRE", "api", 4).ErrContains("at most 3 per request") // the daily limit bounds a request
		a.Do(t, "RL.SETRATE", "lb", 10, "1s", "LIMIT", 3, "1d", "ALGO", "leaky-bucket").ErrContains("not leaky-bucket")
	})

	for _, algo := range []string{"token-bucket", "sliding-log", "fixed-window", "sliding-window"} {
		t.Run(algo, func(t *testing.T) {
			key := "load-" + algo
			// 400/s alone would admit hundreds; 60 per 3 s is the tighter.
			a.Do(t, "RL.SETRATE", key, 400, "1s", "LIMIT", 60, "3s", "ALGO", algo, "SHARDS", 2).Equal(int64(1))
			start := serverTime(t, nodes[0].Client(t))
			r := shardLoad(t, []*harness{a, b}, key, shardLoadOptions{clients: 32, duration: 1500 * time.Millisecond})
			end := serverTime(t, nodes[0].Client(t))
			if r.errors > 0 {
				t.Fatalf("%v, first error %v", r, r.firstErr)
			}
			// Each limit's own bound: a bucket's burst plus its refill, a
			// window algorithm's rate per window the run touched (a sliding
			// window of 3 s touches at most 2 of them within 1.5 s).
			windows := end.UnixMilli()/3000 - start.UnixMilli()/3000 + 1
			bound := float64(60 * windows)
			if algo == "token-bucket" {
				bound = r.bound(60, 60, 3*time.Second)
			}
			if algo == "sliding-log" || algo == "sliding-window" {
				bound = 60 * 2
			}
			t.Logf("%s: %v; second limit's bound %.0f", algo, r, bound)
			if float64(r.granted) > bound {
				t.Errorf("granted %d, over the second limit's bound %.0f", r.granted, bound)
			}
			if r.granted < 30 {
				t.Errorf("granted %d: under-admits by more than half of the tighter limit", r.granted)
			}
		})
	}
}

func serverTime(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
