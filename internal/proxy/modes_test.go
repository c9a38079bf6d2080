package proxy

// End-to-end tests of a limiter's modes and lifecycle, as docs/commands.md
// documents them: MODE PER_CLIENT budgets, TTL,
// RL.RELEASE capped at capacity, and KEEPSTATE carrying used permits over
// to a new rate.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/limiter"
)

// named returns a dedicated connection named name (CLIENT SETNAME), or
// unnamed when name is "".
func (h *harness) named(t testing.TB, name string) conn {
	t.Helper()
	c := h.Conn(t, nil)
	if name != "" {
		c.Do(t, "CLIENT", "SETNAME", name).Equal("OK")
	} else {
		c.Do(t, "PING").Equal("PONG")
	}
	return c
}

// MODE PER_CLIENT: every connection name has its own budget of rate;
// connections without a name share one; RL.AVAILABLE and RL.RELEASE act
// on the caller's own budget.
func TestModePerClient(t *testing.T) {
	t.Parallel()
	h := start(t)

	for _, algo := range waitAlgos {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			key := "pc:" + algo
			h.Do(t, setRateArgs(key, 2, "1h", algo, "MODE", "PER_CLIENT")...).Equal(int64(1))
			alice, bob := h.named(t, "alice"), h.named(t, "bob")
			anon1, anon2 := h.named(t, ""), h.named(t, "")

			// leaky-bucket spaces grants: one per empty bucket.
			grants := int64(2)
			if algo == "leaky-bucket" {
				grants = 1
			}
			for range grants {
				alice.Do(t, "RL.ACQUIRE", key).Acquire()
			}
			alice.Do(t, "RL.ACQUIRE", key).Denied(0)
			alice.Do(t, "RL.AVAILABLE", key).Equal(int64(0))

			bob.Do(t, "RL.AVAILABLE", key).Equal(int64(2))
			if g := bob.Do(t, "RL.ACQUIRE", key).Acquire(); !g.Granted {
				t.Errorf("bob's first acquire after alice used her budget: %+v, want granted (own budget)", g)
			}

			// The unnamed connections share one budget.
			anon1.Do(t, "RL.AVAILABLE", key).Equal(int64(2))
			for range grants {
				anon1.Do(t, "RL.ACQUIRE", key).Acquire()
			}
			anon2.Do(t, "RL.AVAILABLE", key).Equal(int64(0))
			anon2.Do(t, "RL.ACQUIRE", key).Denied(0)

			// A new name starts with a full budget; a connection that
			// takes alice's name shares hers.
			h.named(t, "carol").Do(t, "RL.AVAILABLE", key).Equal(int64(2))
			h.named(t, "alice").Do(t, "RL.ACQUIRE", key).Denied(0)

			// RL.RELEASE gives back to the caller's budget only.
			alice.Do(t, "RL.RELEASE", key, 2).Equal(int64(2))
			alice.Do(t, "RL.AVAILABLE", key).Equal(int64(2))
			anon1.Do(t, "RL.AVAILABLE", key).Equal(int64(0))
		})
	}

	t.Run("OVERALL shares one budget", func(t *testing.T) {
		t.Parallel()
		const key = "pc:overall"
		h.Do(t, "RL.SETRATE", key, 2, "1h").Equal(int64(1))
		h.named(t, "alice").Do(t, "RL.ACQUIRE", key).Granted(1)
		h.named(t, "bob").Do(t, "RL.ACQUIRE", key).Granted(0)
		h.named(t, "carol").Do(t, "RL.ACQUIRE", key).Denied(0)
		h.named(t, "").Do(t, "RL.AVAILABLE", key).Equal(int64(0))
	})

	// Waiters queue per budget: alice waiting 5 s does not hold up bob,
	// whose own budget has a permit. (Were they queued together, bob
	// would wait behind her: her wait is within his timeout.)
	t.Run("waiting per budget", func(t *testing.T) {
		t.Parallel()
		const key = "pc:wait"
		h := h.alone(t) // its own proxy: the test counts waiting clients and decisions
		h.Do(t, "RL.SETRATE", key, 1, "5s", "ALGO", "sliding-log", "MODE", "PER_CLIENT").Equal(int64(1))
		h.named(t, "alice").Do(t, "RL.ACQUIRE", key).Granted(0)
		alice := h.raw(t)
		if got := alice.Call("CLIENT", "SETNAME", "alice"); got != "+OK" {
			t.Fatalf("CLIENT SETNAME: %q", got)
		}
		base := decisions(t, h.conn)
		alice.Send("RL.ACQUIRE", key, "1", "BLOCK") // waits about 5 s
		waitAsked(t, h.conn, 1, base+1)             // denied: she heads her budget's queue
		bob := h.named(t, "bob")
		sent := time.Now()
		bob.Do(t, "RL.ACQUIRE", key, 1, "TIMEOUT", "10s").Granted(0)
		if took := time.Since(sent); took > 1500*time.Millisecond {
			t.Errorf("bob's acquire took %v: held up behind alice's wait on another budget", took)
		}
	})
}

// keysOf counts the backend keys of a limiter (all its shards).
func keysOf(t testing.TB, backend *redis.Client, h *harness, name string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	keys, err := backend.Keys(ctx, h.cfg.KeyPrefix+"{"+name+":*").Result()
	if err != nil {
		t.Fatalf("backend KEYS: %v", err)
	}
	return len(keys)
}

// A config set again replaces the old one whole: a TTL it no longer
// has is gone, and so are fields it no longer has (SHADOW, LIMIT).
func TestSetRateReplacesWhole(t *testing.T) {
	t.Parallel()
	h := start(t)
	backend := h.backend.Client(t)
	conf := limiter.Keys{Prefix: h.cfg.KeyPrefix}.Config("whole", 0)
	h.Do(t, "RL.SETRATE", "whole", 5, "1s", "TTL", "1h", "SHADOW", "LIMIT", 100, "1d").Equal(int64(1))
	if ttl := backend.PTTL(context.Background(), conf).Val(); ttl <= 0 {
		t.Fatalf("PTTL %v with TTL 1h", ttl)
	}
	h.Do(t, "RL.SETRATE", "whole", 6, "1s").Equal(int64(1))
	if ttl := backend.PTTL(context.Background(), conf).Val(); ttl != -1 {
		t.Errorf("PTTL %v after RL.SETRATE without TTL, want none (-1)", ttl)
	}
	h.Do(t, "RL.GETRATE", "whole").Equal(getRate3(6, 1000, "token-bucket", 6, "OVERALL", 0))
	for _, f := range []string{"shadow", "limits", "sub_limits", "ttl_ms"} {
		if v, err := backend.HGet(context.Background(), conf, f).Result(); err == nil && v != "0" {
			t.Errorf("field %s = %q is left from the old config", f, v)
		}
	}
}

// TTL: a limiter unused for its TTL is gone (config and state); use
// keeps it alive, on one shard and on several.
func TestTTL(t *testing.T) {
	t.Parallel()
	h := start(t)
	// Long enough that a busy machine's stall between two uses 100ms
	// apart does not let it expire.
	const ttl = time.Second
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprintf("SHARDS %d", shards), func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("ttl:%d", shards)
			backend := h.backend.Client(t)
			h.Do(t, "RL.SETRATE", key, 100, "1s", "SHARDS", shards, "TTL", ttl.Milliseconds()).Equal(int64(1))

			// Used every 100ms for twice the TTL: kept alive.
			var lastUse time.Time
			for i := range 21 {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				lastUse = time.Now()
				if g := h.Do(t, "RL.ACQUIRE", key).Acquire(); !g.Granted {
					t.Fatalf("acquire %d while in use: %+v, want granted", i, g)
				}
			}
			if h.Do(t, "RL.GETRATE", key).OK() == nil {
				t.Fatal("RL.GETRATE after twice its TTL of use: nil, want the config")
			}
			if n := keysOf(t, backend, h, key); n == 0 {
				t.Fatal("no backend keys after twice its TTL of use")
			}

			// Idle: gone once the TTL has passed since the last use, not
			// sooner (RL.GETRATE does not count as use).
			expectGoneAfter(t, h, key, lastUse, ttl-early)
			h.Do(t, "RL.GETRATE", key).Nil()
			h.Do(t, "RL.ACQUIRE", key).Err(fmt.Sprintf("ERR no such limiter '%s' (create it with RL.SETRATE or RL.POLICY SET)", key))
			h.Do(t, "RL.AVAILABLE", key).Err(fmt.Sprintf("ERR no such limiter '%s' (create it with RL.SETRATE or RL.POLICY SET)", key))
			// Nothing of it is left on the backend.
			if err := eventually(3*time.Second, func() error {
				if n := keysOf(t, backend, h, key); n > 0 {
					return fmt.Errorf("%d backend keys of %s are left", n, key)
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
	}

	// A sharded limiter used often (more than every TTL/4) and then left
	// idle: deleted no sooner than TTL after its last use (and up to a
	// quarter TTL later: shard 0 is kept alive for TTL+TTL/4 at a time).
	t.Run("SHARDS 4 used often", func(t *testing.T) {
		t.Parallel()
		const key = "ttl:often"
		h.Do(t, "RL.SETRATE", key, 1000, "1s", "SHARDS", 4, "TTL", ttl.Milliseconds()).Equal(int64(1))
		var lastUse time.Time
		for range 25 {
			lastUse = time.Now()
			h.Do(t, "RL.ACQUIRE", key).Acquire()
			time.Sleep(10 * time.Millisecond)
		}
		expectGoneAfter(t, h, key, lastUse, ttl-early)
	})
}

// expectGoneAfter waits until a limiter is gone (RL.GETRATE nil, which
// does not count as use) and checks it lived at least min after lastUse.
func expectGoneAfter(t *testing.T, h *harness, key string, lastUse time.Time, min time.Duration) {
	t.Helper()
	var goneAt time.Time
	if err := eventually(5*time.Second, func() error {
		now := time.Now()
		if err := h.d.Do(context.Background(), "RL.GETRATE", key).Err(); !errors.Is(err, redis.Nil) {
			return fmt.Errorf("RL.GETRATE %s: %v, want nil", key, err)
		}
		goneAt = now
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if idle := goneAt.Sub(lastUse); idle < min {
		t.Errorf("gone after %v idle, want no sooner than %v", idle, min)
	}
}

// RL.RELEASE never raises the permits above capacity.
func TestRelease(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, algo := range waitAlgos {
		for _, shards := range []int{1, 4} {
			t.Run(fmt.Sprintf("%s/SHARDS %d", algo, shards), func(t *testing.T) {
				t.Parallel()
				key := fmt.Sprintf("release:%s:%d", algo, shards)
				h.Do(t, setRateArgs(key, 8, "1h", algo, "SHARDS", shards)...).Equal(int64(1))
				h.Do(t, "RL.RELEASE", key, 3).Equal(int64(8)) // full already
				for range 3 {
					h.Do(t, "RL.ACQUIRE", key).Acquire()
				}
				if n := h.Do(t, "RL.AVAILABLE", key).Int(); n >= 8 {
					t.Fatalf("RL.AVAILABLE after acquiring: %d, want below 8", n)
				}
				h.Do(t, "RL.RELEASE", key, 100).Equal(int64(8))
				h.Do(t, "RL.AVAILABLE", key).Equal(int64(8))
				// Full again, and no fuller: 8 grants before a denial (the
				// shaper: one per empty sub-limiter). Several shards may
				// deny a little early (probing is bounded), never late.
				want := 8
				if algo == "leaky-bucket" {
					want = shards
				}
				got := 0
				for got <= want && h.Do(t, "RL.ACQUIRE", key).Acquire().Granted {
					got++
				}
				if got > want || (shards == 1 && got != want) {
					t.Errorf("after RL.RELEASE of 100: %d grants before a denial, want %d", got, want)
				}
			})
		}
	}
}

// KEEPSTATE carries the permits already used over to a new rate; without
// it a changed config starts full. A changed algorithm starts full either
// way.
func TestKeepState(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, tc := range []struct{ algo, interval string }{
		{"token-bucket", "1m"},
		{"sliding-log", "1m"},
		{"fixed-window", "1h"},
		{"sliding-window", "1h"},
	} {
		for _, keep := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/KEEPSTATE %v", tc.algo, keep), func(t *testing.T) {
				t.Parallel()
				key := fmt.Sprintf("keep:%s:%v", tc.algo, keep)
				h.Do(t, setRateArgs(key, 10, tc.interval, tc.algo)...).Equal(int64(1))
				h.Do(t, "RL.ACQUIRE", key, 6).Granted(4)
				args := setRateArgs(key, 20, tc.interval, tc.algo)
				want := int64(20)
				if keep {
					args, want = append(args, "KEEPSTATE"), 14
				}
				h.Do(t, args...).Equal(int64(1))
				h.Do(t, "RL.AVAILABLE", key).Equal(want)
				h.Do(t, "RL.ACQUIRE", key, want).Granted(0)
				h.Do(t, "RL.ACQUIRE", key).Denied(0)
			})
		}
	}

	// At a slower rate the permits carried over take longer to come back:
	// the state must outlive the TTL it was given under the old rate.
	t.Run("token-bucket/KEEPSTATE slower", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "keep:slower", 10, "1s").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "keep:slower", 10).Granted(0) // state TTL: 1 s
		h.Do(t, "RL.SETRATE", "keep:slower", 10, "10s", "KEEPSTATE").Equal(int64(1))
		time.Sleep(1200 * time.Millisecond)
		if got := h.Do(t, "RL.AVAILABLE", "keep:slower").Int(); got > 2 {
			t.Errorf("RL.AVAILABLE = %d 1.2 s after slowing to 1 permit/s, want 1 (the state expired at the old rate's TTL)", got)
		}
	})

	// A leaky bucket keeps the permits queued in it: still draining, at the
	// new rate (6 permits at 20 per minute: 18 s), or fresh and empty.
	for _, keep := range []bool{true, false} {
		t.Run(fmt.Sprintf("leaky-bucket/KEEPSTATE %v", keep), func(t *testing.T) {
			t.Parallel()
			key := fmt.Sprintf("keep:leaky:%v", keep)
			h.Do(t, "RL.SETRATE", key, 10, "1m", "ALGO", "leaky-bucket").Equal(int64(1))
			h.Do(t, "RL.ACQUIRE", key, 6).Granted(0)
			args := []any{"RL.SETRATE", key, 20, "1m", "ALGO", "leaky-bucket"}
			if !keep {
				h.Do(t, args...).Equal(int64(1))
				h.Do(t, "RL.AVAILABLE", key).Equal(int64(20))
				return
			}
			h.Do(t, append(args, "KEEPSTATE")...).Equal(int64(1))
			h.Do(t, "RL.AVAILABLE", key).Equal(int64(0))
			v, err := h.d.Do(context.Background(), "RL.ACQUIRE", key).Slice()
			if err != nil || len(v) != 4 || v[0] != int64(0) {
				t.Fatalf("RL.ACQUIRE after KEEPSTATE: %v %v, want a denial", v, err)
			}
			if retry := v[2].(int64); retry < 17_000 || retry > 18_000 {
				t.Errorf("retry_after %d ms, want about 18000 (6 queued permits at 20 per minute)", retry)
			}
		})
	}

	t.Run("other algorithm starts fresh", func(t *testing.T) {
		t.Parallel()
		const key = "keep:algo"
		h.Do(t, "RL.SETRATE", key, 10, "1m").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", key, 6).Granted(4)
		h.Do(t, "RL.SETRATE", key, 20, "1m", "ALGO", "sliding-log", "KEEPSTATE").Equal(int64(1))
		h.Do(t, "RL.AVAILABLE", key).Equal(int64(20))
	})

	t.Run("same config keeps state", func(t *testing.T) {
		t.Parallel()
		const key = "keep:same"
		h.Do(t, "RL.SETRATE", key, 10, "1m").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", key, 6).Granted(4)
		h.Do(t, "RL.SETRATE", key, 10, "1m").Equal(int64(0))
		h.Do(t, "RL.AVAILABLE", key).Equal(int64(4))
	})
}
