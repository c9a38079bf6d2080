package proxy

// End-to-end tests: a real client talks to an in-process rlproxy, which
// runs its scripts on a real redis-server (or the embedded backend). The
// helpers are in helpers_test.go; tests through other clients (redis-cli,
// redis-benchmark, go-redis RESP2/RESP3) are in clients_test.go.
//
// These tests sleep through refills, TTLs and timeouts of a few hundred
// milliseconds, so they are not t.Parallel: Go runs them before (never
// alongside) the package's parallel load tests. Subtests sharing one
// proxy run in parallel with each other.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// Worked examples: Redisson's RRateLimiter, which rlproxy's token-bucket
// and sliding-log limiters answer the same way, and redis-cell's README.
func TestWorkedExamples(t *testing.T) {
	h := start(t)

	t.Run("token bucket 3 per second", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "tb", 3, "1s").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "tb").Granted(2)
		h.Do(t, "RL.ACQUIRE", "tb").Granted(1)
		full := h.Do(t, "RL.ACQUIRE", "tb").Granted(0)
		if full.ResetAfter <= 900*time.Millisecond || full.ResetAfter > time.Second {
			t.Errorf("reset_after of an empty 3/s bucket = %v, want about 1s", full.ResetAfter)
		}
		denied := h.Do(t, "RL.ACQUIRE", "tb").Denied(0)
		if denied.RetryAfter > time.Second {
			t.Errorf("retry_after = %v, want at most 1s", denied.RetryAfter)
		}
		time.Sleep(denied.RetryAfter)
		if g := h.Do(t, "RL.ACQUIRE", "tb").Acquire(); !g.Granted {
			t.Errorf("acquire after sleeping retry_after (%v) was denied: %+v", denied.RetryAfter, g)
		}
	})

	t.Run("sliding log 100 per 1000ms", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "sl", 100, 1000, "ALGO", "sliding-log").Equal(int64(1))
		before := time.Now()
		g := h.Do(t, "RL.ACQUIRE", "sl", 5).Granted(95)
		if g.ResetAfter <= 900*time.Millisecond || g.ResetAfter > time.Second {
			t.Errorf("reset_after = %v, want about 1s (until the grant leaves the window)", g.ResetAfter)
		}
		h.Do(t, "RL.ACQUIRE", "sl", 30).Granted(65)
		denied := h.Do(t, "RL.ACQUIRE", "sl", 100).Denied(65)
		deniedAt := time.Now()
		// 35 permits must leave the window: both grants, the last of
		// which was made after `before`.
		if lo := time.Second - deniedAt.Sub(before) - 2*time.Millisecond; denied.RetryAfter < lo || denied.RetryAfter > time.Second {
			t.Errorf("retry_after = %v, want between %v and 1s (when the earlier grants leave the window)", denied.RetryAfter, lo)
		}
		if denied.ResetAfter < denied.RetryAfter {
			t.Errorf("reset_after %v < retry_after %v", denied.ResetAfter, denied.RetryAfter)
		}

		time.Sleep(denied.RetryAfter / 2)
		h.Do(t, "RL.ACQUIRE", "sl", 100).Denied(65) // both grants are still in the window

		time.Sleep(time.Until(deniedAt.Add(denied.RetryAfter)))
		h.Do(t, "RL.ACQUIRE", "sl", 50).Granted(50)
	})

	t.Run("redis-cell CL.THROTTLE", func(t *testing.T) {
		t.Parallel()
		// 15 max burst, 30 per 60s: [limited, limit, remaining, retry_after_s, reset_after_s].
		h.Do(t, "CL.THROTTLE", "user123", 15, 30, 60, 1).Equal([]any{int64(0), int64(16), int64(15), int64(-1), int64(2)})
		h.Do(t, "CL.THROTTLE", "user123", 15, 30, 60).Equal([]any{int64(0), int64(16), int64(14), int64(-1), int64(4)})
		h.Do(t, "CL.THROTTLE", "user123", 15, 30, 60, 14).Equal([]any{int64(0), int64(16), int64(0), int64(-1), int64(32)})
		limited, ok := h.Do(t, "CL.THROTTLE", "user123", 15, 30, 60).OK().([]any)
		if !ok || len(limited) != 5 || limited[0] != int64(1) || limited[1] != int64(16) || limited[2] != int64(0) ||
			limited[3] != int64(2) || limited[4] != int64(32) {
			t.Errorf("CL.THROTTLE on a full bucket: got %v, want [1 16 0 2 32]", limited)
		}
	})
}

// Every RL.* command, as the command contract in DESIGN.md describes it.
func TestCommands(t *testing.T) {
	h := start(t)
	if h.proxy.Embedded() {
		t.Fatal("Embedded() = true with a backend configured")
	}

	t.Run("SETRATE replies", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "sr", 10, "1h").Equal(int64(1)) // created
		h.Do(t, "RL.ACQUIRE", "sr", 4).Granted(6)
		// Identical, however it is spelled: a no-op that keeps state.
		h.Do(t, "RL.SETRATE", "sr", 10, "1h").Equal(int64(0))
		h.Do(t, "RL.SETRATE", "sr", 10, 3600000, "ALGO", "TOKEN-BUCKET", "BURST", 10, "MODE", "overall").Equal(int64(0))
		h.Do(t, "RL.AVAILABLE", "sr").Equal(int64(6))
		h.Do(t, "RL.ACQUIRE", "sr").Granted(5)

		// Changed: state is reset.
		h.Do(t, "RL.SETRATE", "sr", 20, "1h").Equal(int64(1))
		h.Do(t, "RL.AVAILABLE", "sr").Equal(int64(20))
		h.Do(t, "RL.ACQUIRE", "sr", 5).Granted(15)

		// NX never changes an existing limiter, and keeps its state.
		h.Do(t, "RL.SETRATE", "sr", 50, "1h", "NX").Equal(int64(0))
		h.Do(t, "RL.GETRATE", "sr").Equal(getRate3(20, 3600000, "token-bucket", 20, "OVERALL", 0))
		h.Do(t, "RL.AVAILABLE", "sr").Equal(int64(15))
		h.Do(t, "RL.SETRATE", "sr-nx", 7, "1h", "NX").Equal(int64(1))
		h.Do(t, "RL.GETRATE", "sr-nx").Equal(getRate3(7, 3600000, "token-bucket", 7, "OVERALL", 0))

		// KEEPSTATE carries the permits already used over to the new rate.
		h.Do(t, "RL.SETRATE", "sr-keep", 10, "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "sr-keep", 4).Granted(6)
		h.Do(t, "RL.SETRATE", "sr-keep", 20, "1h", "KEEPSTATE").Equal(int64(1))
		h.Do(t, "RL.AVAILABLE", "sr-keep").Equal(int64(16))
		h.Do(t, "RL.GETRATE", "sr-keep").Equal(getRate3(20, 3600000, "token-bucket", 20, "OVERALL", 0))
	})

	t.Run("GETRATE", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "gr", 100, "10m", "ALGO", "sliding-log", "MODE", "per_client", "TTL", "1h").Equal(int64(1))
		want3 := getRate3(100, 600000, "sliding-log", 100, "PER_CLIENT", 3600000)
		h.Do(t, "RL.GETRATE", "gr").Equal(want3) // RESP3: a map

		resp2 := h.Conn(t, func(o *redis.Options) { o.Protocol = 2 })
		resp2.Do(t, "RL.GETRATE", "gr").Equal([]any{ // RESP2: flat pairs, in contract order
			"rate", int64(100), "interval_ms", int64(600000), "algo", "sliding-log", "burst", int64(100),
			"shards", int64(1), "mode", "PER_CLIENT", "ttl_ms", int64(3600000),
		})

		h.Do(t, "RL.SETRATE", "gr-burst", 5, "2s", "BURST", 8).Equal(int64(1))
		h.Do(t, "RL.GETRATE", "gr-burst").Equal(getRate3(5, 2000, "token-bucket", 8, "OVERALL", 0))
		h.Do(t, "RL.AVAILABLE", "gr-burst").Equal(int64(8))

		h.Do(t, "RL.GETRATE", "gr-none").Nil()
		resp2.Do(t, "RL.GETRATE", "gr-none").Nil()
	})

	t.Run("AVAILABLE and RELEASE", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "rel", 5, "1h").Equal(int64(1))
		h.Do(t, "RL.AVAILABLE", "rel").Equal(int64(5))
		h.Do(t, "RL.ACQUIRE", "rel", 3).Granted(2)
		h.Do(t, "RL.AVAILABLE", "rel").Equal(int64(2))
		h.Do(t, "RL.RELEASE", "rel", 1).Equal(int64(3))
		h.Do(t, "RL.AVAILABLE", "rel").Equal(int64(3))
		h.Do(t, "RL.RELEASE", "rel", 100).Equal(int64(5)) // never above capacity
		h.Do(t, "RL.ACQUIRE", "rel", 5).Granted(0)

		h.Do(t, "RL.SETRATE", "rel-log", 5, "1h", "ALGO", "sliding-log").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "rel-log", 4).Granted(1)
		h.Do(t, "RL.RELEASE", "rel-log", 2).Equal(int64(3))
		h.Do(t, "RL.RELEASE", "rel-log", 9).Equal(int64(5))
		h.Do(t, "RL.AVAILABLE", "rel-log").Equal(int64(5))
	})

	t.Run("RESET", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "rs", 5, "1h", "TTL", "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "rs", 5).Granted(0)
		h.Do(t, "RL.ACQUIRE", "rs").Denied(0)
		h.Do(t, "RL.RESET", "rs").Equal(int64(1))
		h.Do(t, "RL.AVAILABLE", "rs").Equal(int64(5)) // full again
		h.Do(t, "RL.ACQUIRE", "rs").Granted(4)
		h.Do(t, "RL.GETRATE", "rs").Equal(getRate3(5, 3600000, "token-bucket", 5, "OVERALL", 3600000)) // config kept
		h.Do(t, "RL.RESET", "rs-none").Equal(int64(0))
		h.Do(t, "RL.GETRATE", "rs-none").Nil() // RESET creates nothing
	})

	t.Run("DEL", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "del", 5, "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "del").Granted(4) // cached by the proxy, with state on the backend
		h.Do(t, "RL.DEL", "del").Equal(int64(1))
		h.Do(t, "RL.DEL", "del").Equal(int64(0))
		h.Do(t, "RL.ACQUIRE", "del").Err("ERR no such limiter 'del' (create it with RL.SETRATE or RL.POLICY SET)")
		h.Do(t, "RL.AVAILABLE", "del").Err("ERR no such limiter 'del' (create it with RL.SETRATE or RL.POLICY SET)")
		h.Do(t, "RL.GETRATE", "del").Nil()
		// Created again, it starts full.
		h.Do(t, "RL.SETRATE", "del", 5, "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "del").Granted(4)
	})

	t.Run("TTL", func(t *testing.T) {
		t.Parallel()
		const ttl = 300 * time.Millisecond
		h.Do(t, "RL.SETRATE", "ttl", 1000, "1h", "TTL", "300ms").Equal(int64(1))
		// Used every 100ms for three TTLs: kept alive.
		for i := range 9 {
			h.Do(t, "RL.ACQUIRE", "ttl").Granted(int64(999 - i))
			time.Sleep(ttl / 3)
		}
		h.Do(t, "RL.GETRATE", "ttl").OK()
		lastUse := time.Now()
		h.Do(t, "RL.ACQUIRE", "ttl").Granted(990)
		// Then idle: gone after the TTL (GETRATE only reads; it does not
		// count as use).
		err := eventually(10*ttl, func() error {
			if r := h.Do(t, "RL.GETRATE", "ttl"); r.err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("limiter with TTL %v still exists %v after its last use", ttl, time.Since(lastUse))
		}
		if idle := time.Since(lastUse); idle < ttl {
			t.Errorf("limiter with TTL %v was gone after %v idle", ttl, idle)
		}
		h.Do(t, "RL.GETRATE", "ttl").Nil()
		h.Do(t, "RL.ACQUIRE", "ttl").Err("ERR no such limiter 'ttl' (create it with RL.SETRATE or RL.POLICY SET)")
	})

	t.Run("MODE PER_CLIENT", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "RL.SETRATE", "pc", 2, "1h", "MODE", "PER_CLIENT").Equal(int64(1))
		alice, bob := h.Conn(t, nil), h.Conn(t, nil)
		alice.Do(t, "CLIENT", "SETNAME", "alice").Equal("OK")
		bob.Do(t, "CLIENT", "SETNAME", "bob").Equal("OK")
		alice.Do(t, "RL.ACQUIRE", "pc", 2).Granted(0)
		alice.Do(t, "RL.ACQUIRE", "pc").Denied(0)
		bob.Do(t, "RL.AVAILABLE", "pc").Equal(int64(2))
		bob.Do(t, "RL.ACQUIRE", "pc").Granted(1)
		alice.Do(t, "RL.AVAILABLE", "pc").Equal(int64(0))

		// A new connection with the same name has the same budget.
		alice2 := h.Conn(t, nil)
		alice2.Do(t, "CLIENT", "SETNAME", "alice").Equal("OK")
		alice2.Do(t, "RL.ACQUIRE", "pc").Denied(0)

		// Unnamed connections share one budget.
		anon1, anon2 := h.Conn(t, nil), h.Conn(t, nil)
		anon1.Do(t, "RL.ACQUIRE", "pc").Granted(1)
		anon2.Do(t, "RL.ACQUIRE", "pc").Granted(0)
		anon1.Do(t, "RL.ACQUIRE", "pc").Denied(0)
		bob.Do(t, "RL.AVAILABLE", "pc").Equal(int64(1))

		// OVERALL (the default) shares one budget whatever the names.
		h.Do(t, "RL.SETRATE", "pc-all", 2, "1h").Equal(int64(1))
		alice.Do(t, "RL.ACQUIRE", "pc-all").Granted(1)
		bob.Do(t, "RL.ACQUIRE", "pc-all").Granted(0)
		anon1.Do(t, "RL.ACQUIRE", "pc-all").Denied(0)
	})
}

// getRate3 is RL.GETRATE's reply as go-redis decodes a RESP3 map.
func getRate3(rate, intervalMs int64, algo string, burst int64, mode string, ttlMs int64) map[any]any {
	return map[any]any{
		"rate": rate, "interval_ms": intervalMs, "algo": algo, "burst": burst,
		"shards": int64(1), "mode": mode, "ttl_ms": ttlMs,
	}
}

// A malformed call gets exactly one error line starting with ERR, the
// connection stays usable, and nothing reaches a backend.
func TestBadInput(t *testing.T) {
	h := start(t)
	h.Do(t, "RL.SETRATE", "cap", 10, "1h").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "cap-log", 10, "1h", "ALGO", "sliding-log").Equal(int64(1))
	backend := h.backend.Client(t)

	// check sends one call on c and wants one line "-ERR ..." containing want.
	check := func(t *testing.T, c *raw, want string, args ...string) {
		t.Helper()
		line := c.Call(args...)
		if !strings.HasPrefix(line, "-ERR ") || !strings.Contains(line, want) {
			t.Errorf("%q: got %q, want one line starting with -ERR and containing %q", args, line, want)
		}
		for _, leak := range []string{"stack traceback", "user_script", "script:", "@"} {
			if strings.Contains(line, leak) {
				t.Errorf("%q: error %q leaks a backend or script error (%q)", args, line, leak)
			}
		}
		// If the call had answered more than one line, PING would read it.
		if pong := c.Call("PING"); pong != "+PONG" {
			t.Fatalf("after %q: PING on the same connection got %q, want +PONG", args, pong)
		}
	}

	t.Run("syntax", func(t *testing.T) {
		c := h.raw(t)
		resetBackendStats(t, backend)
		arity := func(cmd string) string { return "wrong number of arguments for '" + strings.ToLower(cmd) + "' command" }
		for _, tc := range []struct {
			want string
			args []string
		}{
			// Wrong arity, for every command.
			{arity("RL.SETRATE"), []string{"RL.SETRATE"}},
			{arity("RL.SETRATE"), []string{"RL.SETRATE", "k"}},
			{arity("RL.SETRATE"), []string{"RL.SETRATE", "k", "10"}},
			{arity("RL.ACQUIRE"), []string{"RL.ACQUIRE"}},
			{arity("RL.AVAILABLE"), []string{"RL.AVAILABLE"}},
			{arity("RL.AVAILABLE"), []string{"RL.AVAILABLE", "k", "extra"}},
			{arity("RL.GETRATE"), []string{"RL.GETRATE"}},
			{arity("RL.GETRATE"), []string{"RL.GETRATE", "k", "extra"}},
			{arity("RL.RELEASE"), []string{"RL.RELEASE", "k"}},
			{arity("RL.RELEASE"), []string{"RL.RELEASE", "k", "1", "extra"}},
			{arity("RL.RESET"), []string{"RL.RESET"}},
			{arity("RL.RESET"), []string{"RL.RESET", "k", "extra"}},
			{arity("RL.DEL"), []string{"RL.DEL"}},
			{arity("RL.DEL"), []string{"RL.DEL", "k", "extra"}},
			{arity("CL.THROTTLE"), []string{"CL.THROTTLE", "k", "15", "30"}},
			{arity("CL.THROTTLE"), []string{"CL.THROTTLE", "k", "15", "30", "60", "1", "extra"}},
			{"ERR wrong number of arguments for 'rl.acquire' command", []string{"rl.acquire"}},
			{"unknown command 'RL.NOPE'", []string{"RL.NOPE", "k"}},

			// Not an integer.
			{"rate must be a positive integer, got 'abc'", []string{"RL.SETRATE", "k", "abc", "1s"}},
			{"rate must be a positive integer, got '1.5'", []string{"RL.SETRATE", "k", "1.5", "1s"}},
			{"rate must be a positive integer", []string{"RL.SETRATE", "k", "", "1s"}},
			{"permits must be a positive integer, got 'abc'", []string{"RL.ACQUIRE", "k", "abc"}},
			{"permits must be a positive integer, got 'abc'", []string{"RL.RELEASE", "k", "abc"}},
			{"BURST must be a positive integer, got 'x'", []string{"RL.SETRATE", "k", "10", "1s", "BURST", "x"}},
			{"SHARDS must be a positive integer, got 'x'", []string{"RL.SETRATE", "k", "10", "1s", "SHARDS", "x"}},
			{"max_burst must be an integer", []string{"CL.THROTTLE", "k", "x", "30", "60"}},
			{"count must be an integer", []string{"CL.THROTTLE", "k", "15", "0", "60"}},
			{"period must be an integer", []string{"CL.THROTTLE", "k", "15", "30", "-60"}},
			{"quantity must be an integer", []string{"CL.THROTTLE", "k", "15", "30", "60", "99999999999999999999"}},

			// Zero or negative.
			{"rate must be a positive integer, got '0'", []string{"RL.SETRATE", "k", "0", "1s"}},
			{"rate must be a positive integer, got '-5'", []string{"RL.SETRATE", "k", "-5", "1s"}},
			{"permits must be a positive integer, got '0'", []string{"RL.ACQUIRE", "k", "0"}},
			{"permits must be a positive integer, got '-1'", []string{"RL.ACQUIRE", "k", "-1"}},
			{"permits must be a positive integer, got '0'", []string{"RL.RELEASE", "k", "0"}},
			{"permits must be a positive integer, got '-3'", []string{"RL.RELEASE", "k", "-3"}},
			{"BURST must be a positive integer, got '0'", []string{"RL.SETRATE", "k", "10", "1s", "BURST", "0"}},
			{"SHARDS must be a positive integer, got '0'", []string{"RL.SETRATE", "k", "10", "1s", "SHARDS", "0"}},

			// Overflow.
			{"rate is out of range", []string{"RL.SETRATE", "k", "99999999999999999999", "1s"}},
			{"rate is out of range", []string{"RL.SETRATE", "k", "1000000001", "1s"}},
			{"permits is out of range", []string{"RL.ACQUIRE", "k", "99999999999999999999"}},
			{"permits is out of range", []string{"RL.RELEASE", "k", "99999999999999999999"}},
			{"interval '400d' is out of range", []string{"RL.SETRATE", "k", "10", "400d"}},
			{"interval '99999999999999999999' is out of range", []string{"RL.SETRATE", "k", "10", "99999999999999999999"}},
			{"TTL '99999d' is out of range", []string{"RL.SETRATE", "k", "10", "1s", "TTL", "99999d"}},
			{"SHARDS is out of range", []string{"RL.SETRATE", "k", "10", "1s", "SHARDS", "100000"}},
			{"SHARDS 20 is more than the limiter's 10 permits", []string{"RL.SETRATE", "k", "10", "1s", "SHARDS", "20"}},

			// Unknown or malformed options.
			{"unknown option 'FOO'", []string{"RL.SETRATE", "k", "10", "1s", "FOO"}},
			{"unknown option 'FOO'", []string{"RL.SETRATE", "k", "10", "1s", "FOO", "bar"}},
			{"option ALGO needs a value", []string{"RL.SETRATE", "k", "10", "1s", "ALGO"}},
			{"option TTL needs a value", []string{"RL.SETRATE", "k", "10", "1s", "TTL"}},
			{"option NX given twice", []string{"RL.SETRATE", "k", "10", "1s", "NX", "nx"}},
			{"NX and KEEPSTATE cannot be combined", []string{"RL.SETRATE", "k", "10", "1s", "NX", "KEEPSTATE"}},
			{"MODE must be OVERALL or PER_CLIENT, got 'sometimes'", []string{"RL.SETRATE", "k", "10", "1s", "MODE", "sometimes"}},
			{"BURST applies to token-bucket and leaky-bucket only", []string{"RL.SETRATE", "k", "10", "1s", "ALGO", "sliding-log", "BURST", "20"}},
			{"syntax error near 'FOO'", []string{"RL.ACQUIRE", "k", "1", "FOO"}},
			{"syntax error", []string{"RL.ACQUIRE", "k", "1", "BLOCK", "BLOCK"}},
			{"option TIMEOUT needs a value", []string{"RL.ACQUIRE", "k", "TIMEOUT"}},
			{"syntax error near 'extra'", []string{"RL.ACQUIRE", "k", "1", "TIMEOUT", "1s", "extra"}},
			// RL.ACQUIRE and RL.LEASE share one parser, and its errors.
			{"ERR syntax error: option TIMEOUT given twice", []string{"RL.ACQUIRE", "k", "TIMEOUT", "1s", "TIMEOUT", "2s"}},
			{"ERR syntax error: option TIMEOUT given twice", []string{"RL.LEASE", "k", "TIMEOUT", "1s", "TIMEOUT", "2s"}},
			{"ERR syntax error: TIMEOUT and BLOCK cannot be combined", []string{"RL.ACQUIRE", "k", "1", "TIMEOUT", "1s", "BLOCK"}},
			{"ERR syntax error: TIMEOUT and BLOCK cannot be combined", []string{"RL.LEASE", "k", "1", "TIMEOUT", "1s", "BLOCK"}},

			// Unknown algorithm.
			{"unknown algorithm 'gcra'", []string{"RL.SETRATE", "k", "10", "1s", "ALGO", "gcra"}},
			{"unknown algorithm ''", []string{"RL.SETRATE", "k", "10", "1s", "ALGO", ""}},

			// Bad durations.
			{"invalid interval '1x'", []string{"RL.SETRATE", "k", "10", "1x"}},
			{"invalid interval '-1s'", []string{"RL.SETRATE", "k", "10", "-1s"}},
			{"invalid interval ''", []string{"RL.SETRATE", "k", "10", ""}},
			{"invalid interval '1e3'", []string{"RL.SETRATE", "k", "10", "1e3"}},
			{"invalid interval '1 s'", []string{"RL.SETRATE", "k", "10", "1 s"}},
			{"interval '0' must be a whole number of milliseconds, at least 1", []string{"RL.SETRATE", "k", "10", "0"}},
			{"interval '0.5ms' must be a whole number of milliseconds", []string{"RL.SETRATE", "k", "10", "0.5ms"}},
			{"invalid TTL 'forever'", []string{"RL.SETRATE", "k", "10", "1s", "TTL", "forever"}},
			{"invalid TIMEOUT 'soon'", []string{"RL.ACQUIRE", "k", "1", "TIMEOUT", "soon"}},
			// Line breaks in an argument never break the one-line error.
			{`invalid interval '1  s'`, []string{"RL.SETRATE", "k", "10", "1\r\ns"}},
			{`unknown option ' FOO'`, []string{"RL.SETRATE", "k", "10", "1s", "\nFOO"}},
		} {
			check(t, c, tc.want, tc.args...)
		}
		for name, calls := range backendCalls(t, backend) {
			if name != "config|resetstat" && name != "get" { // get: the proxy's poll of the policies' version
				t.Errorf("malformed calls reached the backend: %s was called %d times", name, calls)
			}
		}
	})

	t.Run("semantic", func(t *testing.T) {
		// These need the limiter's config (a read), never a script.
		c := h.raw(t)
		resetBackendStats(t, backend)
		for _, tc := range []struct {
			want string
			args []string
		}{
			{"ERR no such limiter 'x' (create it with RL.SETRATE or RL.POLICY SET)", []string{"RL.ACQUIRE", "x"}},
			{"ERR no such limiter 'x' (create it with RL.SETRATE or RL.POLICY SET)", []string{"RL.ACQUIRE", "x", "5"}},
			{"ERR no such limiter 'x' (create it with RL.SETRATE or RL.POLICY SET)", []string{"RL.AVAILABLE", "x"}},
			{"ERR no such limiter 'x' (create it with RL.SETRATE or RL.POLICY SET)", []string{"RL.RELEASE", "x", "1"}},
			{"at most 10", []string{"RL.ACQUIRE", "cap", "11"}},
			{"at most 10", []string{"RL.ACQUIRE", "cap-log", "1000"}},
		} {
			check(t, c, tc.want, tc.args...)
		}
		if line := c.Call("RL.ACQUIRE", "x"); line != "-ERR no such limiter 'x' (create it with RL.SETRATE or RL.POLICY SET)" {
			t.Errorf("unknown limiter: got %q", line)
		}
		c.Call("PING")
		for name, calls := range backendCalls(t, backend) {
			if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
				t.Errorf("calls that cannot succeed ran scripts on the backend: %s was called %d times", name, calls)
			}
		}
		// The limiters are untouched.
		h.Do(t, "RL.AVAILABLE", "cap").Equal(int64(10))
		h.Do(t, "RL.AVAILABLE", "cap-log").Equal(int64(10))
	})

	// Features that may not be built yet must answer a clear error, or
	// work.
	t.Run("unsupported or new features", func(t *testing.T) {
		for _, algo := range []string{"sliding-window", "fixed-window", "leaky-bucket"} {
			name := "new-" + algo
			r := h.Do(t, "RL.SETRATE", name, 10, "1h", "ALGO", algo)
			if r.err != nil {
				r.ErrContains("ERR ", algo, "not supported")
				h.Do(t, "RL.GETRATE", name).Nil()
				continue
			}
			r.Equal(int64(1))
			if g := h.Do(t, "RL.ACQUIRE", name, 3).Acquire(); !g.Granted {
				t.Errorf("RL.ACQUIRE %s 3 on a fresh limiter of 10: denied %+v", name, g)
			}
		}

		if r := h.Do(t, "RL.SETRATE", "new-shards", 100, "1h", "SHARDS", 2); r.err != nil {
			r.ErrContains("ERR ", "SHARDS", "not supported")
			h.Do(t, "RL.GETRATE", "new-shards").Nil()
		} else {
			r.Equal(int64(1))
			h.Do(t, "RL.AVAILABLE", "new-shards").Equal(int64(100))
		}

		h.Do(t, "RL.SETRATE", "new-wait", 1, "100ms").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "new-wait").Granted(0)
		for _, args := range [][]any{{"TIMEOUT", "2s"}, {"BLOCK"}} {
			r := h.Do(t, append([]any{"RL.ACQUIRE", "new-wait", 1}, args...)...)
			if r.err != nil {
				r.ErrContains("ERR ", "not supported")
				continue
			}
			if g := r.Acquire(); !g.Granted {
				t.Errorf("%s: want granted after waiting", r)
			}
		}
		if pong := h.raw(t).Call("PING"); pong != "+PONG" {
			t.Fatalf("PING got %q", pong)
		}
	})
}

// The backend may lose its scripts, restart empty or stall; rlproxy
// recovers without a restart and never hangs.
func TestBackendFailures(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := start(t, func(c *config.Config) { c.BackendTimeout = timeout })
	backend := h.backend.Client(t)
	ctx := context.Background()

	t.Run("SCRIPT FLUSH", func(t *testing.T) {
		h.Do(t, "RL.SETRATE", "flush", 10, "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "flush").Granted(9)
		if err := backend.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		h.Do(t, "RL.ACQUIRE", "flush").Granted(8) // NOSCRIPT is recovered
		if err := backend.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		h.Do(t, "RL.SETRATE", "flush", 20, "1h").Equal(int64(1))
		h.Do(t, "RL.AVAILABLE", "flush").Equal(int64(20))
	})

	t.Run("restart empty", func(t *testing.T) {
		h.Do(t, "RL.SETRATE", "restart", 10, "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "restart").Granted(9) // the proxy caches the config
		h.backend.Restart(t)
		h.Do(t, "RL.ACQUIRE", "restart").Err("ERR no such limiter 'restart' (create it with RL.SETRATE or RL.POLICY SET)")
		h.Do(t, "RL.GETRATE", "restart").Nil()
		h.Do(t, "RL.SETRATE", "restart", 10, "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "restart").Granted(9)
	})

	t.Run("paused", func(t *testing.T) {
		h.Do(t, "RL.SETRATE", "pause", 100, "1h").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "pause", 10).Granted(90)
		// Fill the proxy's connection pool, so that a retry inside the
		// proxy would find an idle connection to send the script on again.
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() { defer wg.Done(); _ = h.conn.d.Do(context.Background(), "RL.GETRATE", "pause").Err() }()
		}
		wg.Wait()
		other := h.Conn(t, nil)
		other.Do(t, "PING").Equal("PONG")

		h.backend.Pause(t)
		resumed := false
		defer func() {
			if !resumed {
				h.backend.Resume(t)
			}
		}()
		began := time.Now()
		done := make(chan *reply, 1)
		go func() { done <- h.Do(t, "RL.ACQUIRE", "pause") }()

		time.Sleep(timeout / 6)
		pingAt := time.Now()
		other.Do(t, "PING").Equal("PONG")
		if took := time.Since(pingAt); took > timeout/2 {
			t.Errorf("PING took %v while a backend call was stalled, want an immediate answer", took)
		}

		r := <-done
		took := time.Since(began)
		r.ErrContains("ERR ", "unavailable")
		// One backend_timeout, with room for a loaded machine; go-redis'
		// own retries would make it four.
		if limit := 3 * timeout; took > limit {
			t.Errorf("RL.ACQUIRE on a paused backend answered after %v, want about backend_timeout (%v; at most %v)", took, timeout, limit)
		}
		other.Do(t, "PING").Equal("PONG")

		h.backend.Resume(t)
		resumed = true
		failed := 1 // acquires sent that failed: each may have run once the backend woke up
		err := eventually(h.cfg.BreakerCooldown+2*time.Second, func() error {
			err := h.Do(t, "RL.ACQUIRE", "pause").err
			if err != nil && !strings.Contains(err.Error(), "circuit open") { // refused calls were not sent
				failed++
			}
			return err
		})
		if err != nil {
			t.Fatalf("RL.ACQUIRE after the backend resumed: %v", err)
		}
		// A failed acquire may have run once the backend woke up (its
		// script had been sent), but never more than once.
		if n := h.Do(t, "RL.AVAILABLE", "pause").Int(); n < int64(90-failed-1) {
			t.Errorf("RL.AVAILABLE = %d after %d failed and one granted acquire, want at least %d: a failed call spent its permit more than once", n, failed, 90-failed-1)
		}
	})
}

// With no backend configured the proxy runs on the embedded in-memory
// backend, whose keys expire with wall time.
func TestEmbeddedBackend(t *testing.T) {
	h := startProxy(t, nil)
	if !h.proxy.Embedded() {
		t.Fatal("Embedded() = false with no backend configured")
	}
	store := h.proxy.pool.Nodes()[0].Client()
	dbsize := func() int64 {
		t.Helper()
		n, err := store.DBSize(context.Background()).Result()
		if err != nil {
			t.Fatalf("embedded DBSIZE: %v", err)
		}
		return n
	}

	h.Do(t, "RL.SETRATE", "emb", 2, "200ms").Equal(int64(1))
	configKeys := dbsize()
	h.Do(t, "RL.ACQUIRE", "emb").Granted(1)
	h.Do(t, "RL.ACQUIRE", "emb").Granted(0)
	denied := h.Do(t, "RL.ACQUIRE", "emb").Denied(0)
	if denied.RetryAfter > 200*time.Millisecond {
		t.Errorf("retry_after = %v, want at most 100ms", denied.RetryAfter)
	}
	if n := dbsize(); n <= configKeys {
		t.Fatalf("keys after acquiring: %d, want more than the %d config key(s)", n, configKeys)
	}
	time.Sleep(denied.RetryAfter)
	if g := h.Do(t, "RL.ACQUIRE", "emb").Acquire(); !g.Granted {
		t.Fatalf("acquire after retry_after was denied: %+v", g)
	}
	// Once the bucket is full again its state key expires.
	err := eventually(2*time.Second, func() error {
		if n := dbsize(); n != configKeys {
			return fmt.Errorf("%d keys, want %d", n, configKeys)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("state keys did not expire in the embedded backend: %v", err)
	}
	h.Do(t, "RL.AVAILABLE", "emb").Equal(int64(2))

	// A limiter TTL expires too.
	h.Do(t, "RL.SETRATE", "emb-ttl", 2, "1h", "TTL", "100ms").Equal(int64(1))
	err = eventually(2*time.Second, func() error {
		if r := h.Do(t, "RL.GETRATE", "emb-ttl"); r.err == nil {
			return fmt.Errorf("limiter still exists")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("limiter TTL did not expire in the embedded backend: %v", err)
	}
}

// docs/policies.md's per-user example on the embedded backend, for every
// algorithm and the usual intervals: a policy's names are decided there
// as on Redis (its Lua is another interpreter: generation numbers as table
// keys once made each call fill an array of millions).
func TestEmbeddedPolicies(t *testing.T) {
	h := startProxy(t, nil)
	for _, algo := range []string{"token-bucket", "leaky-bucket", "fixed-window", "sliding-window", "sliding-log"} {
		for _, interval := range []string{"1s", "1m", "1h", "1d"} {
			p := algo + ":" + interval + ":"
			h.Do(t, "RL.POLICY", "SET", p+"*", 3, interval, "ALGO", algo).Equal(int64(1))
			h.Do(t, "RL.ACQUIRE", p+"42", 3).Granted(0)
			h.Do(t, "RL.ACQUIRE", p+"42").Denied(0)
			if g := h.Do(t, "RL.ACQUIRE", p+"7").Acquire(); !g.Granted {
				t.Errorf("%s7 denied, want a name of its own", p)
			}
			h.Do(t, "RL.AVAILABLE", p+"42").Equal(int64(0))
			h.Do(t, "RL.RESET", p+"42").Equal(int64(1))
			h.Do(t, "RL.AVAILABLE", p+"42").Equal(int64(3))
			h.Do(t, "RL.DEL", p+"7").Equal(int64(1))
			h.Do(t, "RL.AVAILABLE", p+"7").Equal(int64(3))
		}
	}
}

// A backend URL carries the password and the database.
func TestBackendURLWithPasswordAndDB(t *testing.T) {
	srv := redistest.StartServer(t, redistest.WithPassword("pw"))
	url := "redis://:pw@" + srv.Addr() + "/2"
	h := startProxy(t, srv, func(c *config.Config) { c.Backends = []string{url} })
	h.Do(t, "RL.SETRATE", "db", 3, "1h").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "db").Granted(2)
	h.Do(t, "RL.GETRATE", "db").Equal(getRate3(3, 3600000, "token-bucket", 3, "OVERALL", 0))

	ctx := context.Background()
	for db, wantKeys := range map[int]bool{0: false, 2: true} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "pw", DB: db})
		keys, err := c.Keys(ctx, "rlproxy:*").Result()
		_ = c.Close()
		if err != nil {
			t.Fatalf("KEYS in db %d: %v", db, err)
		}
		if (len(keys) > 0) != wantKeys {
			t.Errorf("db %d holds keys %q; want keys only in db 2", db, keys)
		}
	}
}

// With require_pass set, clients must AUTH first.
func TestRequirePass(t *testing.T) {
	h := start(t, func(c *config.Config) { c.RequirePass = "s3cret" })
	// h's own client authenticates with the Password option (in HELLO).
	h.Do(t, "RL.SETRATE", "auth", 5, "1h").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "auth").Granted(4)
	resp2 := h.Conn(t, func(o *redis.Options) { o.Protocol = 2 })
	resp2.Do(t, "RL.ACQUIRE", "auth").Granted(3)

	c := h.raw(t)
	for _, args := range [][]string{{"RL.ACQUIRE", "auth"}, {"RL.SETRATE", "auth", "1", "1s"}, {"PING"}, {"CLIENT", "SETNAME", "x"}} {
		if line := c.Call(args...); line != "-NOAUTH Authentication required." {
			t.Errorf("%q before AUTH: got %q, want -NOAUTH Authentication required.", args, line)
		}
	}
	if line := c.Call("AUTH", "wrong"); !strings.HasPrefix(line, "-WRONGPASS ") {
		t.Errorf("AUTH with a wrong password: got %q, want -WRONGPASS ...", line)
	}
	if line := c.Call("RL.ACQUIRE", "auth"); line != "-NOAUTH Authentication required." {
		t.Errorf("after a failed AUTH: got %q", line)
	}
	if line := c.Call("AUTH", "s3cret"); line != "+OK" {
		t.Fatalf("AUTH s3cret: got %q", line)
	}
	if line := c.Call("RL.AVAILABLE", "auth"); line != ":3" {
		t.Errorf("RL.AVAILABLE after AUTH: got %q, want :3", line)
	}
	if line := c.Call("AUTH", "default", "s3cret"); line != "+OK" {
		t.Errorf("AUTH default s3cret: got %q", line)
	}

	noPass := h.Conn(t, func(o *redis.Options) { o.Password = "" })
	noPass.Do(t, "RL.ACQUIRE", "auth").ErrContains("NOAUTH")
	wrong := h.client(t, func(o *redis.Options) { o.Password = "nope" })
	conn{wrong}.Do(t, "RL.ACQUIRE", "auth").ErrContains("WRONGPASS")
	h.Do(t, "RL.AVAILABLE", "auth").Equal(int64(3))
}

// A client that leaves while its RL.ACQUIRE waits in a batch spends
// nothing: its connection reads on meanwhile, so the proxy notices and
// gives the permit granted to nobody back. The control stays and keeps
// its permit.
func TestGoneClientSpendsNothing(t *testing.T) {
	h := start(t)
	admin := h.backend.Client(t)
	ctx := context.Background()
	for _, stay := range []bool{false, true} {
		key := fmt.Sprintf("gone:stay=%v", stay)
		h.Do(t, "RL.SETRATE", key, 5, "1h").Equal(int64(1))
		// Redis holds script calls (writes) for a while: the first
		// request's call is in flight, the second waits for the next batch.
		if err := admin.Do(ctx, "CLIENT", "PAUSE", 2000, "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		granted := h.proxy.limiters.Stats().Granted
		first, w := h.raw(t), h.raw(t)
		first.Send("RL.ACQUIRE", key)
		redistest.WaitFor(t, func() bool { // the first call is held by the paused backend
			return strings.Contains(admin.Info(ctx, "clients").Val(), "blocked_clients:1\r\n")
		})
		commands := h.proxy.server.Stats().Commands
		w.Send("RL.ACQUIRE", key)
		redistest.WaitFor(t, func() bool { // the proxy took the second RL.ACQUIRE up
			return h.proxy.server.Stats().Commands > commands
		})
		want := int64(3)
		if !stay {
			_ = w.c.Close()
			want = 4
		}
		if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Fatal(err)
		}
		if got := first.Line(); got != "*4" {
			t.Fatalf("first client's reply: %q", got)
		}
		if stay {
			if got := w.Line(); got != "*4" {
				t.Fatalf("second client's reply: %q", got)
			}
		}
		// The second batch granted the second request (to nobody, when
		// its client left); only then can a give-back be told from a
		// call never made.
		redistest.WaitFor(t, func() bool { return h.proxy.limiters.Stats().Granted == granted+2 })
		if err := eventually(3*time.Second, func() error {
			if got := h.Do(t, "RL.AVAILABLE", key).Int(); got != want {
				return fmt.Errorf("stay=%v: RL.AVAILABLE %d, want %d", stay, got, want)
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
	}
}
