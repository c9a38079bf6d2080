package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// limiterStats reads the Limiters section of INFO.
func limiterStats(t *testing.T, h *harness) map[string]int64 {
	t.Helper()
	info, _ := h.Do(t, "INFO", "limiters").OK().(string)
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO limiters: %q", line)
			}
			out[k] = n
		}
	}
	return out
}

// A SHADOW limiter decides as an enforcing one does and keeps the same
// state, but grants: a shadow denial is [1, remaining, retry_after_ms > 0,
// reset_after_ms] with the real denial's figures, counted as shadow_denied.
func TestShadowMatchesEnforcing(t *testing.T) {
	nodes := shardNodes(t, 2)
	a, b := shardProxy(t, nodes), shardProxy(t, nodes)
	asks := []int64{2, 1, 2, 1, 1, 3, 1} // some fit, some do not
	for _, algo := range []string{"token-bucket", "leaky-bucket", "sliding-log", "fixed-window", "sliding-window"} {
		for _, opts := range [][]any{nil, {"SHARDS", 2}, {"MODE", "PER_CLIENT"}, {"LIMIT", 3, "2h"}} {
			if algo == "leaky-bucket" && len(opts) > 0 && opts[0] == "LIMIT" {
				continue
			}
			name := algo + "/" + strings.Trim(strings.ReplaceAll(strings.Trim(show(opts), "[]"), " ", "_"), "_")
			t.Run(name, func(t *testing.T) {
				enf, sh := "enf-"+name, "sh-"+name
				sharded := len(opts) > 0 && opts[0] == "SHARDS"
				asks := asks
				if sharded {
					// Which shard a request lands on is random: with one
					// permit per ask the decision is not (some shard has room).
					asks = []int64{1, 1, 1, 1, 1, 1, 1}
				}
				// One hour: nothing refills during the test.
				set := func(key string, more ...any) {
					args := append([]any{"RL.SETRATE", key, 4, "1h", "ALGO", algo}, opts...)
					a.Do(t, append(args, more...)...).Equal(int64(1))
				}
				set(enf)
				set(sh, "SHADOW")
				before := limiterStats(t, a)["shadow_denied"] + limiterStats(t, b)["shadow_denied"]
				wantShadow := int64(0)
				for i, n := range asks {
					p := []*harness{a, b}[i%2]
					e := p.Do(t, "RL.ACQUIRE", enf, n).Acquire()
					s := p.Do(t, "RL.ACQUIRE", sh, n).Acquire()
					if !s.Granted {
						t.Fatalf("ask %d: a SHADOW limiter denied: %+v", i, s)
					}
					if e.Granted != (s.RetryAfter == 0) || (!sharded && e.Remaining != s.Remaining) {
						t.Fatalf("ask %d of %d: enforcing %+v, shadow %+v: want the same decision's figures", i, n, e, s)
					}
					if !e.Granted {
						wantShadow++
					}
				}
				if wantShadow == 0 {
					t.Fatal("the sequence never denied: the test checks nothing")
				}
				ea, sa := a.Do(t, "RL.AVAILABLE", enf).Int(), a.Do(t, "RL.AVAILABLE", sh).Int()
				if ea != sa {
					t.Errorf("RL.AVAILABLE: enforcing %d, shadow %d: want the same state", ea, sa)
				}
				after := limiterStats(t, a)["shadow_denied"] + limiterStats(t, b)["shadow_denied"]
				if after-before != wantShadow {
					t.Errorf("shadow_denied counted %d, want %d", after-before, wantShadow)
				}
			})
		}
	}

	t.Run("GETRATE, TIMEOUT, deny cache, KEEPSTATE", func(t *testing.T) {
		a.Do(t, "RL.SETRATE", "s", 1, "1h", "SHADOW").Equal(int64(1))
		a.Do(t, "RL.SETRATE", "s", 1, "1h", "SHADOW").Equal(int64(0))
		b.Do(t, "RL.GETRATE", "s").Equal(map[any]any{
			"rate": int64(1), "interval_ms": int64(3600000), "algo": "token-bucket", "burst": int64(1),
			"shards": int64(1), "mode": "OVERALL", "ttl_ms": int64(0), "shadow": int64(1),
		})
		a.Do(t, "RL.ACQUIRE", "s").Granted(0)
		// Denied for real now: every answer after is a shadow grant, the
		// deny cache's included; a wait never waits.
		for i := 0; i < 3; i++ {
			if g := a.Do(t, "RL.ACQUIRE", "s").Acquire(); !g.Granted || g.RetryAfter <= 0 {
				t.Fatalf("want a shadow denial, got %+v", g)
			}
		}
		began := time.Now()
		if g := a.Do(t, "RL.ACQUIRE", "s", 1, "TIMEOUT", "5s").Acquire(); !g.Granted || g.RetryAfter <= 0 {
			t.Fatalf("TIMEOUT on a SHADOW limiter: want a shadow denial at once, got %+v", g)
		}
		if g := a.Do(t, "RL.ACQUIRE", "s", 1, "BLOCK").Acquire(); !g.Granted || g.RetryAfter <= 0 {
			t.Fatalf("BLOCK on a SHADOW limiter: want a shadow denial at once, got %+v", g)
		}
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("a SHADOW limiter kept a waiter %v", d)
		}
		// Enforcing from here, with the state the dry run left: denied.
		a.Do(t, "RL.SETRATE", "s", 1, "1h", "KEEPSTATE").Equal(int64(1))
		a.Do(t, "RL.ACQUIRE", "s").Denied(0)
		if _, ok := b.Do(t, "RL.GETRATE", "s").OK().(map[any]any)["shadow"]; ok {
			t.Error("RL.GETRATE shows shadow after it was turned off")
		}
		// And back to a dry run: the cached denial is answered as a grant.
		a.Do(t, "RL.SETRATE", "s", 1, "1h", "SHADOW", "KEEPSTATE").Equal(int64(1))
		if g := a.Do(t, "RL.ACQUIRE", "s").Acquire(); !g.Granted || g.RetryAfter <= 0 {
			t.Fatalf("want a shadow denial, got %+v", g)
		}
		a.Do(t, "RL.SETRATE", "x", 1, "1h", "SHADOW", "SHADOW").ErrContains("SHADOW given twice")
	})
}
