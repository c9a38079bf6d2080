package limiter_test

// Tests of cell.lua, redis-cell's CL.THROTTLE, against a real redis-server.
// Expected replies come from redis-cell's README and its own unit test
// table (redis-cell-impl/src/lib.rs, it_rate_limits). Replies are in whole
// seconds rounded up, so the few milliseconds between calls do not change
// them.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// throttle runs CL.THROTTLE key maxBurst count period quantity.
func (s *algoServer) throttle(t *testing.T, key string, maxBurst, count, period, quantity int64) [5]int64 {
	t.Helper()
	v, err := s.scripts.Cell.Run(t.Context(), s.rdb, []string{s.keys.Cell(key)},
		limiter.CellArgs(maxBurst, count, period, quantity)...).Result()
	if err != nil {
		t.Fatalf("CL.THROTTLE %s %d %d %d %d: %v", key, maxBurst, count, period, quantity, err)
	}
	got, err := limiter.DecodeCell(v)
	if err != nil {
		t.Fatalf("CL.THROTTLE %s: %v", key, err)
	}
	return got
}

type cellStep struct {
	maxBurst, count, period, quantity int64
	want                              [5]int64 // limited, limit, remaining, retry_after_s, reset_after_s
}

func TestCellThrottle(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	tests := []struct {
		name  string
		steps []cellStep
	}{
		{"README example", []cellStep{
			{15, 30, 60, 1, [5]int64{0, 16, 15, -1, 2}},
		}},
		{"redis-cell's own table (limit 5, 1 per second)", []cellStep{
			{4, 1, 1, 6, [5]int64{1, 5, 5, -1, 0}}, // more than the limit: never, so no retry
			{4, 1, 1, 1, [5]int64{0, 5, 4, -1, 1}},
			{4, 1, 1, 1, [5]int64{0, 5, 3, -1, 2}},
			{4, 1, 1, 1, [5]int64{0, 5, 2, -1, 3}},
			{4, 1, 1, 1, [5]int64{0, 5, 1, -1, 4}},
			{4, 1, 1, 1, [5]int64{0, 5, 0, -1, 5}},
			{4, 1, 1, 1, [5]int64{1, 5, 0, 1, 5}},
			{4, 1, 1, 0, [5]int64{0, 5, 0, -1, 5}}, // quantity 0 peeks
			{4, 1, 1, 5, [5]int64{1, 5, 0, 5, 5}},  // the whole limit: after the TAT drains
		}},
		{"quantity up to the limit at once", []cellStep{
			{2, 1, 60, 3, [5]int64{0, 3, 0, -1, 180}},
			{2, 1, 60, 1, [5]int64{1, 3, 0, 60, 180}},
		}},
		{"quantity above max_burst+1 is always limited", []cellStep{
			{2, 1, 60, 4, [5]int64{1, 3, 3, -1, 0}},
			{2, 1, 60, 1, [5]int64{0, 3, 2, -1, 60}},
			{2, 1, 60, 4, [5]int64{1, 3, 2, -1, 60}},
		}},
		{"emission interval of a fraction of a second", []cellStep{
			// 7 per minute: one every 8.571428571 s, rounded up to 9.
			{2, 7, 60, 1, [5]int64{0, 3, 2, -1, 9}},
			{2, 7, 60, 2, [5]int64{0, 3, 0, -1, 26}},
			{2, 7, 60, 1, [5]int64{1, 3, 0, 9, 26}},
		}},
		{"max_burst 0", []cellStep{
			{0, 1, 10, 1, [5]int64{0, 1, 0, -1, 10}},
			{0, 1, 10, 1, [5]int64{1, 1, 0, 10, 10}},
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "user" + strconv.Itoa(i)
			for j, st := range tc.steps {
				got := s.throttle(t, key, st.maxBurst, st.count, st.period, st.quantity)
				if got != st.want {
					t.Errorf("step %d: CL.THROTTLE %s %d %d %d %d = %v, want %v",
						j, key, st.maxBurst, st.count, st.period, st.quantity, got, st.want)
				}
			}
		})
	}
}

func TestCellThrottleTiming(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)

	t.Run("faster than one per second", func(t *testing.T) {
		// 10 per second, no burst: one every 100 ms. Durations under a
		// second are reported as 1 (rounded up), as redis-cell does.
		if got := s.throttle(t, "fast", 0, 10, 1, 1); got != [5]int64{0, 1, 0, -1, 1} {
			t.Fatalf("first = %v", got)
		}
		if got := s.throttle(t, "fast", 0, 10, 1, 1); got != [5]int64{1, 1, 0, 1, 1} {
			t.Fatalf("second at once = %v, want limited", got)
		}
		time.Sleep(110 * time.Millisecond)
		if got := s.throttle(t, "fast", 0, 10, 1, 1); got[0] != 0 {
			t.Errorf("after one emission interval = %v, want allowed", got)
		}
	})

	t.Run("state key holds the TAT in ns until reset", func(t *testing.T) {
		before := s.clock(t)
		s.throttle(t, "tat", 4, 1, 1, 2) // TAT = now + 2 s
		v, err := s.rdb.Get(t.Context(), s.keys.Cell("tat")).Result()
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		tat, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("stored TAT %q is not integer nanoseconds: %v", v, err)
		}
		if d := time.Duration(tat - before.UnixNano()); d < 2*time.Second || d > 2*time.Second+algoSlack {
			t.Errorf("stored TAT = now + %v, want now + 2s", d)
		}
		ttl, err := s.rdb.PTTL(t.Context(), s.keys.Cell("tat")).Result()
		if err != nil || ttl < 2*time.Second-algoSlack || ttl > 2*time.Second {
			t.Errorf("PTTL = %v (%v), want about 2s (= reset_after)", ttl, err)
		}
		// A peek on a missing key stores nothing.
		s.throttle(t, "peek", 4, 1, 1, 0)
		if n, _ := s.rdb.Exists(t.Context(), s.keys.Cell("peek")).Result(); n != 0 {
			t.Errorf("peek on a fresh key stored state")
		}
	})

	t.Run("a TAT in the past counts as none", func(t *testing.T) {
		old := strconv.FormatInt(s.clock(t).Add(-time.Hour).UnixNano(), 10)
		if err := s.rdb.Set(t.Context(), s.keys.Cell("old"), old, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got := s.throttle(t, "old", 15, 30, 60, 1); got != [5]int64{0, 16, 15, -1, 2} {
			t.Errorf("CL.THROTTLE over a stale TAT = %v, want a fresh key's reply", got)
		}
	})

	t.Run("zero rate is an error", func(t *testing.T) {
		_, err := s.scripts.Cell.Run(t.Context(), s.rdb, []string{s.keys.Cell("zero")}, limiter.CellArgs(1, 0, 60, 1)...).Result()
		if err == nil || !strings.Contains(err.Error(), "Zero rates are not supported") {
			t.Errorf("count 0: err = %v, want redis-cell's zero rate error", err)
		}
	})
}

func TestDecodeCell(t *testing.T) {
	got, err := limiter.DecodeCell([]any{int64(0), int64(16), int64(15), int64(-1), "2"})
	if err != nil || got != [5]int64{0, 16, 15, -1, 2} {
		t.Errorf("DecodeCell = %v, %v", got, err)
	}
	for _, bad := range []any{
		nil, "OK", int64(1), []any{}, []any{int64(0), int64(1), int64(2), int64(3)},
		[]any{int64(0), int64(1), int64(2), int64(3), int64(4), int64(5)},
		[]any{int64(0), int64(1), "x", int64(3), int64(4)},
		[]any{int64(0), int64(1), nil, int64(3), int64(4)},
		[]any{int64(0), int64(1), 2.5, int64(3), int64(4)},
	} {
		if got, err := limiter.DecodeCell(bad); err == nil {
			t.Errorf("DecodeCell(%#v) = %v, want an error", bad, got)
		}
	}
}

func TestCellKey(t *testing.T) {
	k := limiter.Keys{Prefix: "rl:"}
	if got := k.Cell("user123"); got != "rl:cl{user123}" {
		t.Errorf("Cell(user123) = %q", got)
	}
	// A '}' in the key would end the hash tag early.
	if a, b := k.Cell("a}b"), k.Cell("a%7Db"); a == b || strings.Count(a, "}") != 1 {
		t.Errorf("Cell keys %q and %q: want distinct, with one '}'", a, b)
	}
}
