package limiter_test

// Tests of GCRA (Redis 8.8's proposed command) and its sameness with
// CL.THROTTLE: both run cell.lua, GCRA with a period in (fractional)
// seconds.

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// gcra runs GCRA key with th.
func (r *rig) gcra(t *testing.T, key string, th limiter.Throttle) [5]int64 {
	t.Helper()
	v, err := r.scripts.Cell.Run(t.Context(), r.rdb, []string{r.keys.Cell(key)}, th.Args()...).Result()
	if err != nil {
		t.Fatalf("GCRA %s %+v: %v", key, th, err)
	}
	got, err := limiter.DecodeCell(v)
	if err != nil {
		t.Fatalf("GCRA %s: %v", key, err)
	}
	return got
}

// TestGCRAEqualsThrottle runs one random sequence of calls through GCRA
// (a double period) on one key and through CL.THROTTLE (an integer
// period) on another, step by step, and compares every reply. The two
// calls of a step are a few hundred µs apart, so a figure may round over
// between them: one such step voids the attempt, two are an error.
func TestGCRAEqualsThrottle(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	rates := []struct{ maxBurst, count, period int64 }{
		{4, 1, 1}, {15, 30, 60}, {2, 7, 60}, {9, 3, 10}, {0, 1, 2}, {100, 1, 3600},
	}
	for i, rate := range rates {
		t.Run(fmt.Sprintf("%d_%d_%d", rate.maxBurst, rate.count, rate.period), func(t *testing.T) {
			t.Parallel()
			retried(t, func(a *attempt) {
				rnd := rand.New(rand.NewPCG(uint64(i), uint64(a.n)))
				g, c := fmt.Sprintf("g%d-%d", i, a.n), fmt.Sprintf("c%d-%d", i, a.n)
				off := 0
				for step := range 60 {
					q := rnd.Int64N(rate.maxBurst + 3) // 0 looks; above the limit is always limited
					if rnd.IntN(3) > 0 {
						q = min(q, 1)
					}
					got := r.gcra(t, g, limiter.Throttle{MaxBurst: rate.maxBurst, Count: rate.count, Period: float64(rate.period), Quantity: q})
					want := r.throttle(t, c, rate.maxBurst, rate.count, rate.period, q)
					if got == want {
						continue
					}
					if off++; off > 1 {
						a.Errorf("step %d (quantity %d): GCRA = %v, CL.THROTTLE = %v", step, q, got, want)
						return
					}
					a.voidf("step %d (quantity %d): GCRA = %v, CL.THROTTLE = %v (a figure rounding over between the calls?)", step, q, got, want)
				}
			})
		})
	}
}

func TestGCRAFractionalPeriod(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	half := limiter.Throttle{MaxBurst: 4, Count: 1, Period: 0.5, Quantity: 1}
	tests := []struct {
		name  string
		th    limiter.Throttle
		steps [][5]int64
	}{
		{"one per 0.5 s, limit 5", half, [][5]int64{
			{0, 5, 4, -1, 1}, {0, 5, 3, -1, 1}, {0, 5, 2, -1, 2}, {0, 5, 1, -1, 2}, {0, 5, 0, -1, 3},
			{1, 5, 0, 1, 3},
		}},
		{"3 per 1.5 s is one per 0.5 s", limiter.Throttle{MaxBurst: 4, Count: 3, Period: 1.5, Quantity: 1}, [][5]int64{
			{0, 5, 4, -1, 1}, {0, 5, 3, -1, 1}, {0, 5, 2, -1, 2},
		}},
		{"period 2.75 s, TOKENS 2", limiter.Throttle{MaxBurst: 3, Count: 1, Period: 2.75, Quantity: 2}, [][5]int64{
			{0, 4, 2, -1, 6}, {0, 4, 0, -1, 11}, {1, 4, 0, 6, 11},
		}},
	}
	const slack = 400 * time.Millisecond // the closest to rounding over: 0.5 s steps
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			retried(t, func(a *attempt) {
				key := fmt.Sprintf("frac%d-%d", i, a.n)
				start := time.Now()
				got := make([][5]int64, len(tc.steps))
				for j := range tc.steps {
					got[j] = r.gcra(t, key, tc.th)
				}
				if !a.inTime("the steps", time.Since(start), slack) {
					return
				}
				for j, want := range tc.steps {
					if got[j] != want {
						a.Errorf("step %d: GCRA %+v = %v, want %v", j, tc.th, got[j], want)
					}
				}
			})
		})
	}

	t.Run("0.1 s: ten per second, granted again after 100 ms", func(t *testing.T) {
		th := limiter.Throttle{MaxBurst: 0, Count: 1, Period: 0.1, Quantity: 1}
		retried(t, func(a *attempt) {
			key := fmt.Sprintf("tenth-%d", a.n)
			start := time.Now()
			first := r.gcra(t, key, th)
			second := r.gcra(t, key, th)
			// The second is limited only while it comes less than 100 ms
			// after the first: the premise is the time taken, never the
			// answer under test.
			if !a.inTime("the first two calls", time.Since(start), 90*time.Millisecond) {
				return
			}
			if first[limiter.CellLimited] != 0 {
				a.Errorf("first = %v, want allowed", first)
				return
			}
			if second[limiter.CellLimited] != 1 {
				a.Errorf("second at once = %v, want limited", second)
				return
			}
			time.Sleep(110 * time.Millisecond) // one emission interval passes
			if got := r.gcra(t, key, th); got[limiter.CellLimited] != 0 {
				a.Errorf("after 110 ms = %v, want allowed", got)
			}
		})
	})

	t.Run("an interval under a nanosecond counts as one", func(t *testing.T) {
		th := limiter.Throttle{MaxBurst: 0, Count: 1_000_000_000, Period: 1e-3, Quantity: 1}
		if e := th.Emission(); e != 1 {
			t.Errorf("emission of 1e-3 s / 1e9 = %v ns, want 1", e)
		}
		if got := r.gcra(t, "subns", th); got != [5]int64{0, 1, 0, -1, 0} {
			t.Errorf("GCRA = %v, want allowed", got)
		}
	})
}

// CL.THROTTLE's quantity 0 looks without taking (GCRA's TOKENS 0 is out of
// range, as in Redis).
func TestThrottleQuantityZeroLooks(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	th := limiter.Throttle{MaxBurst: 9, Count: 1, Period: 60, Quantity: 3}
	look := th
	look.Quantity = 0

	if got := r.gcra(t, "fresh", look); got != [5]int64{0, 10, 10, -1, 0} {
		t.Errorf("quantity 0 on a fresh key = %v, want all 10 available", got)
	}
	if n, _ := r.rdb.Exists(t.Context(), r.keys.Cell("fresh")).Result(); n != 0 {
		t.Errorf("quantity 0 on a fresh key stored state")
	}

	took := r.gcra(t, "k", th)
	before, err := r.rdb.Get(t.Context(), r.keys.Cell("k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		got := r.gcra(t, "k", look)
		if got[limiter.CellLimited] != 0 || got[limiter.CellRemaining] != took[limiter.CellRemaining] || got[limiter.CellRetryAfter] != -1 {
			t.Errorf("quantity 0 after taking 3 = %v, want allowed with %d remaining (as after the take: %v)", got, took[limiter.CellRemaining], took)
		}
	}
	after, err := r.rdb.Get(t.Context(), r.keys.Cell("k")).Result()
	if err != nil || after != before {
		t.Errorf("state after quantity 0 = %q (%v), want unchanged %q", after, err, before)
	}
}
