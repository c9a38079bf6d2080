package limiter_test

// RL.CHARGE (permits taken after the fact, debt past zero) and SHADOW
// (a dry run: decide and keep state as usual, grant anyway) at the script
// level, against a real redis-server.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// charge takes n permits after the fact.
func (l *lim) charge(n int64) limiter.Result {
	l.t.Helper()
	asks := []limiter.Ask{{Permits: n}}
	rep := l.call(limiter.OpCharge, asks, limiter.ChargeArgs(l.epoch, n))
	l.mustOK(rep)
	if len(rep.Results) != 1 {
		l.t.Fatalf("charge: %d results", len(rep.Results))
	}
	return rep.Results[0]
}

// TestChargeDebt charges 25 permits of a limiter of 10 per interval
// (15 past zero) and checks the next acquire of one waits the debt out:
// for a bucket, the debt plus the permit at the rate, (15+1)/rate; for
// the windows, until the window the debt leaves room in.
func TestChargeDebt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// Durations are exact up to the time the calls took (since): within
	// 10 ms on an idle machine.
	tests := []struct {
		c limiter.Config
		// retry is the next acquire's retry_after, from the charge's
		// time and the start of its window.
		retry func(charged, windowStart time.Time) time.Duration
		reset time.Duration // the charge's reset_after
	}{
		{tokenBucket(10, time.Second, 10), func(time.Time, time.Time) time.Duration { return 1600 * time.Millisecond }, 2500 * time.Millisecond},
		// A shaper grants only once its queue is empty: debt and burst leak first.
		{leakyBucket(10, time.Second, 10), func(time.Time, time.Time) time.Duration { return 2500 * time.Millisecond }, 2500 * time.Millisecond},
		// The log's debt lasts until the charge leaves the window.
		{slidingLog(10, time.Second), func(time.Time, time.Time) time.Duration { return time.Second }, time.Second},
		// 25 in this window: the next pays 10 of it back and opens with 5,
		// the one after with room: 2 windows on. Reset: 3 windows on.
		{fixedWindow(10, time.Hour), func(c, w time.Time) time.Duration { return w.Add(2 * time.Hour).Sub(c) }, 0},
		// Two windows on, the carried 5 + prev's weighted 10 fit 1 more
		// once prev weighs (10-1-5)/10: 60% into that window.
		{slidingWindow(10, time.Hour), func(c, w time.Time) time.Duration { return w.Add(2*time.Hour + 36*time.Minute).Sub(c) }, 0},
	}
	for _, tc := range tests {
		t.Run(string(tc.c.Algo), func(t *testing.T) {
			t.Parallel()
			l := r.create(t, "debt-"+string(tc.c.Algo), tc.c)
			start := time.Now()
			before := r.clock(t)
			res := l.charge(25)
			if !res.Granted || res.Remaining != -15 || res.RetryAfterMs != 0 {
				t.Errorf("charge 25 of 10 = %+v, want granted with remaining -15", res)
			}
			if tc.reset > 0 {
				within(t, "charge's reset_after", res.ResetAfterMs, since(tc.reset.Milliseconds(), start))
			}
			next := l.take(1)
			if next.Granted {
				t.Fatalf("acquire after the charge = %+v, want denied", next)
			}
			want := tc.retry(before, windowStart(before, tc.c.Interval)).Milliseconds()
			within(t, "next acquire's retry_after", next.RetryAfterMs, span{want - time.Since(start).Milliseconds() - 2, want + 2})
			if next.ResetAfterMs < next.RetryAfterMs {
				t.Errorf("reset_after %d < retry_after %d", next.ResetAfterMs, next.RetryAfterMs)
			}
			if n := l.peek(); n != 0 {
				t.Errorf("available in debt = %d, want 0", n)
			}
			// A release pays debt back first.
			if n := l.release(15); n != 0 && tc.c.Algo != limiter.LeakyBucket {
				t.Errorf("available after giving back the debt = %d, want 0", n)
			}
		})
	}

	t.Run("a charge within what is available is a plain grant", func(t *testing.T) {
		l := r.create(t, "small", tokenBucket(10, time.Hour, 10))
		if res := l.charge(4); !res.Granted || res.Remaining != 6 {
			t.Errorf("charge 4 of 10 = %+v, want remaining 6", res)
		}
		if res := l.take(6); !res.Granted || res.Remaining != 0 {
			t.Errorf("acquire 6 after = %+v, want granted, 0 left", res)
		}
	})

	t.Run("debt is capped at what is paid back in 200 years", func(t *testing.T) {
		c := tokenBucket(1, limiter.MaxInterval, 1)
		l := r.create(t, "cap", c)
		var res limiter.Result
		for range 3 {
			res = l.charge(limiter.MaxRate)
		}
		// 2 × 36500 days / 366 days = 199.45 permits in use: 198.45 past zero.
		want := int64(math.Floor(1 - float64(2*limiter.MaxRefill)/float64(c.Interval)))
		if !res.Granted || res.Remaining != want || res.ResetAfterMs != 2*limiter.MaxRefill.Milliseconds() {
			t.Errorf("charges of 3×10⁹ at 1 per 366d = %+v, want remaining %d, reset %d ms", res, want, 2*limiter.MaxRefill.Milliseconds())
		}
	})
}

// TestShadowStateEqualsEnforcing runs one random sequence of acquires
// through a SHADOW limiter and an enforcing one of the same config: every
// decision and figure agrees (a shadow denial is granted, marked, with the
// denial's figures), and the state ends the same.
func TestShadowStateEqualsEnforcing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, c := range []limiter.Config{
		tokenBucket(10, time.Hour, 15), leakyBucket(10, time.Hour, 15), slidingLog(10, time.Hour),
		fixedWindow(10, time.Hour), slidingWindow(10, time.Hour),
	} {
		t.Run(string(c.Algo), func(t *testing.T) {
			t.Parallel()
			shadowCfg := c
			shadowCfg.Shadow = true
			enforcing, shadow := r.create(t, "enforcing-"+string(c.Algo), c), r.create(t, "shadow-"+string(c.Algo), shadowCfg)
			rnd := rand.New(rand.NewPCG(1, 2))
			denials := 0
			for step := range 40 {
				n := 1 + rnd.Int64N(4)
				e := enforcing.take(n)
				s := shadow.take(n).Shadowed()
				if !s.Granted || s.ShadowDenied != !e.Granted || s.Remaining != e.Remaining ||
					(s.RetryAfterMs == 0) != (e.RetryAfterMs == 0) {
					t.Fatalf("step %d (%d permits): shadow %+v, enforcing %+v", step, n, s, e)
				}
				if s.ShadowDenied {
					denials++
				}
				if n := rnd.IntN(8); n == 0 {
					enforcing.release(2)
					shadow.release(2)
				}
			}
			if denials == 0 {
				t.Fatal("no denial in the sequence: nothing was shadowed")
			}
			if a, b := enforcing.peek(), shadow.peek(); a != b {
				t.Errorf("available: enforcing %d, shadow %d", a, b)
			}
			// The window algorithms' state has no clock in it: compare it whole.
			if c.Algo == limiter.FixedWindow || c.Algo == limiter.SlidingWindow {
				a, _ := r.rdb.Get(t.Context(), enforcing.state()[0]).Result()
				b, _ := r.rdb.Get(t.Context(), shadow.state()[0]).Result()
				if a != b || a == "" {
					t.Errorf("state: enforcing %q, shadow %q", a, b)
				}
			}
			if c.Algo == limiter.SlidingLog {
				a, _ := r.rdb.Get(t.Context(), enforcing.state()[1]).Result()
				b, _ := r.rdb.Get(t.Context(), shadow.state()[1]).Result()
				if a != b || a == "" {
					t.Errorf("permits in the log: enforcing %q, shadow %q", a, b)
				}
			}
		})
	}
}

// SHADOW is stored in the config hash (for RL.GETRATE) and only when
// set, so a config stored before it existed still compares equal.
func TestShadowStored(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c := tokenBucket(10, time.Second, 10)
	shadow := c
	shadow.Shadow = true
	read := func(name string) limiter.Stored {
		t.Helper()
		h, err := r.rdb.HGetAll(t.Context(), r.keys.Config(name, 0)).Result()
		if err != nil {
			t.Fatal(err)
		}
		s, err := limiter.ParseStored(h)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	steps := []struct {
		c       limiter.Config
		changed bool
	}{{c, true}, {c, false}, {shadow, true}, {shadow, false}, {c, true}}
	for i, st := range steps {
		changed, _, _ := r.setConf(t, "sh", st.c, limiter.SetConfOptions{Epoch: fmt.Sprintf("e%d", i)})
		if changed != st.changed {
			t.Errorf("step %d (shadow %v): changed = %v, want %v", i, st.c.Shadow, changed, st.changed)
		}
		if got := read("sh"); got.Shadow != st.c.Shadow {
			t.Errorf("step %d: stored shadow = %v, want %v", i, got.Shadow, st.c.Shadow)
		}
	}
	if n, _ := r.rdb.HExists(t.Context(), r.keys.Config("sh", 0), "shadow").Result(); n {
		t.Error("an enforcing config stores a shadow field")
	}
	// KEEPSTATE carries state over a switch to and from SHADOW.
	l := r.open(t, "sh", c.Algo, read("sh").Epoch)
	l.take(4)
	if _, epoch, _ := r.setConf(t, "sh", shadow, limiter.SetConfOptions{Epoch: "new", KeepState: true}); epoch == "new" {
		t.Error("KEEPSTATE to SHADOW: state was reset")
	}
	if n := l.peek(); n != 6 {
		t.Errorf("available after KEEPSTATE to SHADOW = %d, want 6", n)
	}
}
