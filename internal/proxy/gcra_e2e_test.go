package proxy

import (
	"testing"
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
		h.Do(t, "GCRA", "user123", 15, 30, "60.0", "TOKENS", 0).Equal(ints(0, 16, 12, -1, 8))
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
		h.Do(t, "GCRA", "k", 1, 0, 1).Err("ERR value is out of range, value must between 1 and 1000000000")
		h.Do(t, "GCRA", "k", 1, 1, "x").Err("ERR value is not a valid float")
		h.Do(t, "GCRA", "k", 1, 1, 0).Err("ERR period must be > 0 and < 1e12")
		h.Do(t, "GCRA", "k", 1, 1, 1, "TOKENS").Err("ERR Missing TOKENS value")
		h.Do(t, "GCRA", "k", 1, 1, 1, "COUNT", 1).Err("ERR syntax error")
		// Issue 12: a Lua error before; now a clear line before any backend.
		h.Do(t, "CL.THROTTLE", "cx", 1000000000, 1, 1000000000, 1000000000).ErrContains("36500 days")
		h.Do(t, "GCRA", "k", 1, 1, 1).Equal(ints(0, 2, 1, -1, 1))
	})
}
