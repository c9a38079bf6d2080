package proxy

import (
	"testing"
	"time"
)

// GCRA (Redis 8.8's proposed command) and RL.THROTTLE (Valkey's proposed
// name for CL.THROTTLE) through the proxy: one algorithm, one state per key.
func TestGCRACommands(t *testing.T) {
	h := start(t)
	ints := func(v ...int64) []any {
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = x
		}
		return out
	}

	t.Run("GCRA, CL.THROTTLE and RL.THROTTLE share one key's state", func(t *testing.T) {
		t.Parallel()
		// 15 max burst, 30 per 60 s (one every 2 s), as in redis-cell's README.
		h.Do(t, "GCRA", "user123", 15, 30, 60).Equal(ints(0, 16, 15, -1, 2))
		h.Do(t, "CL.THROTTLE", "user123", 15, 30, 60).Equal(ints(0, 16, 14, -1, 4))
		h.Do(t, "RL.THROTTLE", "user123", 15, 30, 60, 2).Equal(ints(0, 16, 12, -1, 8))
		h.Do(t, "CL.THROTTLE", "user123", 15, 30, 60, 0).Equal(ints(0, 16, 12, -1, 8)) // quantity 0 looks
		h.Do(t, "gcra", "user123", 15, 30, 60, "tokens", 12).Equal(ints(0, 16, 0, -1, 32))
		h.Do(t, "GCRA", "user123", 15, 30, 60).Equal(ints(1, 16, 0, 2, 32))
	})

	t.Run("a fractional period", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "GCRA", "half", 1, 1, 0.5).Equal(ints(0, 2, 1, -1, 1))
		h.Do(t, "GCRA", "half", 1, 1, 0.5).Equal(ints(0, 2, 0, -1, 1))
		h.Do(t, "GCRA", "half", 1, 1, 0.5).Equal(ints(1, 2, 0, 1, 1))
	})

	t.Run("bad arguments answer Redis 8.8's errors", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "GCRA", "k", 1, 1).Err("ERR wrong number of arguments for 'gcra' command")
		h.Do(t, "GCRA", "k", -1, 1, 1).Err("ERR value is out of range, must be positive")
		h.Do(t, "GCRA", "k", 1, 0, 1).Err("ERR value is out of range, value must between 1 and 9223372036854775807")
		h.Do(t, "GCRA", "k", 1, 1, 1, "TOKENS", 0).Err("ERR value is out of range, value must between 1 and 9223372036854775807")
		h.Do(t, "GCRA", "k", 1, 2e9, 1).Err("ERR value is out of range, value must between 1 and 1000000000") // rlproxy's limit
		h.Do(t, "GCRA", "k", 1, 1, "x").Err("ERR value is not a valid float")
		h.Do(t, "GCRA", "k", 1, 1, 0).Err("ERR period must be > 0 and < 1e12")
		h.Do(t, "GCRA", "k", 1, 1, 1, "TOKENS").Err("ERR Missing TOKENS value")
		h.Do(t, "GCRA", "k", 1, 1, 1, "COUNT", 1).Err("ERR syntax error")
		// Issue 12: a Lua error before; now a clear line before any backend.
		h.Do(t, "CL.THROTTLE", "cx", 1000000000, 1, 1000000000, 1000000000).ErrContains("36500 days")
		h.Do(t, "GCRA", "k", 1, 1, 1).Equal(ints(0, 2, 1, -1, 1))
	})

	// tests/unit/gcra.tcl of redis/redis, through the proxy. Each case
	// uses its own keys where the Tcl test deletes mykey. ("GCRA - wrong
	// type error" needs GCRA's state in the key as named: passthrough.)
	t.Run("gcra.tcl: argument validation", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]any{{}, {"mykey"}, {"mykey", 10}, {"mykey", 10, 5}} {
			h.Do(t, append([]any{"GCRA"}, args...)...).ErrContains("wrong number of arguments")
		}
		for _, tc := range []struct {
			args []any
			want string
		}{
			{[]any{-1, 5, 10}, "out of range"},
			{[]any{"notanumber", 5, 10}, "out of range"},
			{[]any{10, 0, 10}, "out of range"},
			{[]any{10, -1, 10}, "out of range"},
			{[]any{10, "notanumber", 10}, "not an integer"},
			{[]any{10, 5, 0}, "period must be > 0"},
			{[]any{10, 5, -1}, "period must be > 0"},
			{[]any{10, 5, "notanumber"}, "not a valid float"},
			{[]any{10, 5, 10, "TOKENS"}, "Missing TOKENS value"},
			{[]any{10, 5, 10, "TOKENS", 0}, "out of range"},
			{[]any{10, 5, 10, "TOKENS", -1}, "out of range"},
			{[]any{10, 5, 10, "TOKENS", "notanumber"}, "not an integer"},
		} {
			h.Do(t, append([]any{"GCRA", "mykey"}, tc.args...)...).ErrContains(tc.want)
		}
		r := h.Do(t, "GCRA", "valid1", 10, 5, 60).OK().([]any)
		if len(r) != 5 || r[0] != int64(0) || r[1] != int64(11) {
			t.Errorf("GCRA valid1 10 5 60 = %v, want 5 items, not limited, max 11", r)
		}
		if r := h.Do(t, "GCRA", "valid2", 10, 5, 60, "TOKENS", 2).OK().([]any); len(r) != 5 || r[1] != int64(11) {
			t.Errorf("GCRA valid2 10 5 60 TOKENS 2 = %v, want 5 items, max 11", r)
		}
		if r := h.Do(t, "GCRA", "valid3", 10, 5, 0.5).OK().([]any); len(r) != 5 {
			t.Errorf("GCRA valid3 10 5 0.5 = %v, want 5 items", r)
		}
	})

	t.Run("gcra.tcl: overflow", func(t *testing.T) {
		t.Parallel()
		h.Do(t, "GCRA", "mykey", 1, 1, 86400, "TOKENS", 200000000).ErrContains("would cause an overflow")
		h.Do(t, "GCRA", "mykey", 200000000, 1, 86400).ErrContains("would cause an overflow")
		h.Do(t, "GCRA", "mykey", 1, 1, 2147483647, "TOKENS", 2147483647).ErrContains("would cause an overflow")
	})

	gcra := func(t *testing.T, args ...any) []int64 {
		t.Helper()
		r := h.Do(t, append([]any{"GCRA"}, args...)...).OK().([]any)
		out := make([]int64, len(r))
		for i, v := range r {
			out[i] = v.(int64)
		}
		return out
	}
	t.Run("gcra.tcl: first request, burst, retry_after, available", func(t *testing.T) {
		t.Parallel()
		if r := gcra(t, "first", 5, 10, 60); r[0] != 0 {
			t.Errorf("first request limited: %v", r)
		}
		for i := range 6 {
			if r := gcra(t, "burst", 5, 1, 60); r[0] != 0 {
				t.Fatalf("request %d of a burst of 6 limited: %v", i, r)
			}
		}
		if r := gcra(t, "burst", 5, 1, 60); r[0] != 1 {
			t.Errorf("request 7 of a burst of 6 allowed: %v", r)
		}
		for range 3 {
			gcra(t, "retry", 2, 1, 60)
		}
		if r := gcra(t, "retry", 2, 1, 60); r[0] != 1 || r[3] <= 0 {
			t.Errorf("limited call: %v, want limited with retry_after > 0", r)
		}
		if r := gcra(t, "allowed", 5, 1, 60); r[0] != 0 || r[3] >= 0 {
			t.Errorf("allowed call: %v, want retry_after < 0", r)
		}
		a1, a2 := gcra(t, "avail", 5, 1, 60)[2], gcra(t, "avail", 5, 1, 60)[2]
		if a2 >= a1 {
			t.Errorf("available %d then %d: want it to decrease", a1, a2)
		}
		if r := gcra(t, "tokens1", 5, 1, 60); r[2] != 5 {
			t.Errorf("one token of 6: %v, want 5 available", r)
		}
		if r := gcra(t, "tokens3", 5, 1, 60, "TOKENS", 3); r[2] != 3 {
			t.Errorf("three tokens of 6: %v, want 3 available", r)
		}
	})

	t.Run("gcra.tcl: full_burst_after, independent keys, max_burst 0", func(t *testing.T) {
		t.Parallel()
		gcra(t, "full", 5, 1, 60)
		gcra(t, "full", 5, 1, 60)
		if r := gcra(t, "full", 5, 1, 60); r[4] < 179 {
			t.Errorf("full_burst_after after 3 tokens of 1/60s: %v, want >= 179", r)
		}
		gcra(t, "full4", 5, 1, 60)
		if r := gcra(t, "full4", 5, 1, 60, "TOKENS", 4); r[4] < 299 {
			t.Errorf("full_burst_after after 5 tokens of 1/60s: %v, want >= 299", r)
		}
		for range 3 {
			gcra(t, "key1", 2, 1, 60)
		}
		if r := gcra(t, "key1", 2, 1, 60); r[0] != 1 {
			t.Errorf("key1: %v, want limited", r)
		}
		if r := gcra(t, "key2", 2, 1, 60); r[0] != 0 {
			t.Errorf("key2: %v, want allowed", r)
		}
		if r := gcra(t, "zero", 0, 1, 1); r[0] != 0 || r[1] != 1 {
			t.Errorf("max_burst 0, first: %v, want allowed, max 1", r)
		}
		if r := gcra(t, "zero", 0, 1, 1); r[0] != 1 {
			t.Errorf("max_burst 0, second: %v, want limited", r)
		}
	})

	t.Run("gcra.tcl: rate recovery over time", func(t *testing.T) {
		t.Parallel()
		gcra(t, "recover", 1, 1, 1)
		gcra(t, "recover", 1, 1, 1)
		if r := gcra(t, "recover", 1, 1, 1); r[0] != 1 {
			t.Fatalf("third of a burst of 2: %v, want limited", r)
		}
		time.Sleep(1100 * time.Millisecond) // one token a second, as the Tcl test waits
		if r := gcra(t, "recover", 1, 1, 1); r[0] != 0 {
			t.Errorf("after 1.1 s: %v, want allowed", r)
		}
	})
}
