package limiter_test

// Tests of cell.lua, redis-cell's CL.THROTTLE, against a real redis-server.
// Expected replies come from redis-cell's README and its own unit test
// table (redis-cell-impl/src/lib.rs, it_rate_limits). Replies are in whole
// seconds rounded up, so the few milliseconds between calls do not change
// them; a sequence that took long enough to change them is retried.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// throttle runs CL.THROTTLE key maxBurst count period quantity.
func (r *rig) throttle(t *testing.T, key string, maxBurst, count, period, quantity int64) [5]int64 {
	t.Helper()
	v, err := r.scripts.Cell.Run(t.Context(), r.rdb, []string{r.keys.Cell(key)},
		r.keys.CellArgs(limiter.Throttle{MaxBurst: maxBurst, Count: count, Period: float64(period), Quantity: quantity})...).Result()
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
	r := newRig(t)
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
	// The replies hold while the steps run within 500 ms: the closest to
	// rounding over are the 7-per-minute ones (one every 8.571 s: 9 holds
	// for 570 ms, 26 for 713 ms), then the 1-per-second ones (999 ms).
	const slack = 500 * time.Millisecond
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			retried(t, func(a *attempt) {
				key := fmt.Sprintf("user%d-%d", i, a.n)
				start := time.Now()
				got := make([][5]int64, len(tc.steps))
				for j, st := range tc.steps {
					got[j] = r.throttle(t, key, st.maxBurst, st.count, st.period, st.quantity)
				}
				if !a.inTime("the steps", time.Since(start), slack) {
					return
				}
				for j, st := range tc.steps {
					if got[j] != st.want {
						a.Errorf("step %d: CL.THROTTLE %s %d %d %d %d = %v, want %v",
							j, key, st.maxBurst, st.count, st.period, st.quantity, got[j], st.want)
					}
				}
			})
		})
	}
}

func TestCellThrottleTiming(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	t.Run("faster than one per second", func(t *testing.T) {
		// 10 per second, no burst: one every 100 ms. Durations under a
		// second are reported as 1 (rounded up), as redis-cell does.
		retried(t, func(a *attempt) {
			key := fmt.Sprintf("fast-%d", a.n)
			start := time.Now()
			first := r.throttle(t, key, 0, 10, 1, 1)
			second := r.throttle(t, key, 0, 10, 1, 1)
			// The second is limited, with a retry rounded up to 1 s, only
			// while it comes less than 99 ms after the first.
			if !a.inTime("the first two calls", time.Since(start), 90*time.Millisecond) {
				return
			}
			if first != [5]int64{0, 1, 0, -1, 1} {
				a.Errorf("first = %v", first)
				return
			}
			if second != [5]int64{1, 1, 0, 1, 1} {
				a.Errorf("second at once = %v, want limited", second)
				return
			}
			time.Sleep(110 * time.Millisecond)
			if got := r.throttle(t, key, 0, 10, 1, 1); got[0] != 0 {
				a.Errorf("after one emission interval = %v, want allowed", got)
			}
		})
	})

	t.Run("state key holds the TAT in ns until reset", func(t *testing.T) {
		start := time.Now()
		before := r.clock(t)
		r.throttle(t, "tat", 4, 1, 1, 2) // TAT = now + 2 s
		after := r.clock(t)
		v, err := r.rdb.Get(t.Context(), r.keys.Cell("tat")).Result()
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		digits, tagged := strings.CutPrefix(v, "gcra:")
		tat, err := strconv.ParseInt(digits, 10, 64)
		if !tagged || err != nil {
			t.Fatalf("stored TAT %q is not gcra: and integer nanoseconds: %v", v, err)
		}
		if d, most := time.Duration(tat-before.UnixNano()), 2*time.Second+after.Sub(before); d < 2*time.Second || d > most {
			t.Errorf("stored TAT = %v after the clock read before the call, want 2s to %v", d, most)
		}
		ttl := r.pttl(t, r.keys.Cell("tat"))
		within(t, "PTTL (= reset_after)", ttl, since(2000, start))
		// A peek on a missing key stores nothing.
		r.throttle(t, "peek", 4, 1, 1, 0)
		if n, _ := r.rdb.Exists(t.Context(), r.keys.Cell("peek")).Result(); n != 0 {
			t.Errorf("peek on a fresh key stored state")
		}
	})

	t.Run("a TAT in the past counts as none", func(t *testing.T) {
		old := "gcra:" + strconv.FormatInt(r.clock(t).Add(-time.Hour).UnixNano(), 10)
		if err := r.rdb.Set(t.Context(), r.keys.Cell("old"), old, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got := r.throttle(t, "old", 15, 30, 60, 1); got != [5]int64{0, 16, 15, -1, 2} {
			t.Errorf("CL.THROTTLE over a stale TAT = %v, want a fresh key's reply", got)
		}
	})

	// A key named by the client (passthrough: strict) may hold an
	// application's string: refused, not read as none and overwritten.
	// rlproxy's own key (not strict) may hold an earlier build's untagged
	// state: counted as none.
	t.Run("a string that is not a GCRA state", func(t *testing.T) {
		th := limiter.Throttle{MaxBurst: 15, Count: 30, Period: 60, Quantity: 1}
		for _, native := range []bool{true, false} {
			keys := limiter.Keys{Prefix: "rl:", NativeCell: native}
			for _, v := range []string{"session-data", strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10)} {
				key := keys.Cell(fmt.Sprintf("app:%v:%s", native, v[:3]))
				if err := r.rdb.Set(t.Context(), key, v, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				_, err := r.scripts.Cell.Run(t.Context(), r.rdb, []string{key}, keys.CellArgs(th)...).Result()
				got := r.rdb.Get(t.Context(), key).Val()
				switch {
				case native && (err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE")):
					t.Errorf("strict, over %q: err = %v, want WRONGTYPE", v, err)
				case native && got != v:
					t.Errorf("strict: %q became %q", v, got)
				case !native && (err != nil || !strings.HasPrefix(got, "gcra:")):
					t.Errorf("rlproxy's own key over %q: err = %v, state %q, want a fresh state", v, err, got)
				}
			}
		}
	})

	t.Run("zero rate is an error", func(t *testing.T) {
		_, err := r.scripts.Cell.Run(t.Context(), r.rdb, []string{r.keys.Cell("zero")}, limiter.Throttle{MaxBurst: 1, Count: 0, Period: 60, Quantity: 1}.Args()...).Result()
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
