package limiter_test

// Several limits in one limiter (RL.SETRATE key rate interval [LIMIT rate
// interval]...), decided together in one script call, against a real
// redis-server.

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// multi returns c with further limits (rate, interval pairs).
func multi(c limiter.Config, limits ...limiter.Limit) limiter.Config {
	copy(c.Limits[:], limits)
	return c
}

// createMulti writes a one-shard multi-limit limiter and returns a caller.
func (r *rig) createMulti(t *testing.T, name string, c limiter.Config) *lim {
	t.Helper()
	sub := limiter.Sub{Rate: c.Rate, Burst: c.Burst}
	for i, l := range c.Limits.List() {
		sub.Limits[i] = l.Rate
	}
	v, err := r.scripts.SetConf.Run(t.Context(), r.rdb, []string{r.keys.Config(name, 0)},
		limiter.SetConfArgs(c, sub, limiter.SetConfOptions{Epoch: "e1"})...).Result()
	if err != nil {
		t.Fatalf("setconf %s: %v", name, err)
	}
	if changed, _, _, err := limiter.DecodeSetConf(v); err != nil || !changed {
		t.Fatalf("setconf %s: %v %v", name, changed, err)
	}
	l := r.open(t, name, c.Algo, "e1")
	l.limits = len(c.LimitList())
	l.script = r.scripts.For(c)
	return l
}

// level reads the permits in use of a token bucket's state key.
func (r *rig) level(t *testing.T, key string) float64 {
	t.Helper()
	v, err := r.rdb.Get(t.Context(), key).Result()
	if err != nil {
		return 0
	}
	lvl, _, _ := strings.Cut(v, ":")
	f, err := strconv.ParseFloat(lvl, 64)
	if err != nil {
		t.Fatalf("state %q: %v", v, err)
	}
	return f
}

func TestMultiLimitAllOrNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// Durations are exact up to the time the calls took (since).

	t.Run("granted only when every limit has room, taken from each", func(t *testing.T) {
		c := multi(tokenBucket(10, time.Hour, 10), limiter.Limit{Rate: 4, Interval: time.Hour})
		l := r.createMulti(t, "both", c)
		start := time.Now()
		if res := l.take(3); !res.Granted || res.Remaining != 1 {
			t.Errorf("take 3 = %+v, want granted with min(7, 1) = 1 left", res)
		}
		res := l.take(2)
		if res.Granted || res.Remaining != 1 {
			t.Errorf("take 2 with 1 left in the second limit = %+v, want denied", res)
		}
		// 2 permits of 4 per hour: 1 more refills in 15 min.
		within(t, "retry_after (the second limit's)", res.RetryAfterMs, since(15*60000, start))
		within(t, "reset_after (the latest)", res.ResetAfterMs, since(45*60000, start))
		st := l.state()
		if a, b := r.level(t, st[0]), r.level(t, st[1]); a < 3-1e-3 || a > 3 || b < 3-1e-3 || b > 3 {
			t.Errorf("levels after a denial = %v, %v; want 3 and 3 (the denial took nothing from either)", a, b)
		}
		if n := l.peek(); n != 1 {
			t.Errorf("available = %d, want 1", n)
		}
		if res := l.take(11); !res.OverCapacity {
			t.Errorf("11 permits = %+v, want over capacity", res)
		}
	})

	t.Run("retry_after is when every limit has room", func(t *testing.T) {
		c := multi(tokenBucket(10, time.Second, 10), limiter.Limit{Rate: 20, Interval: time.Hour})
		l := r.createMulti(t, "retry", c)
		start := time.Now()
		l.take(10)
		res := l.take(1)
		if res.Granted {
			t.Fatalf("take 1 of an empty first limit = %+v", res)
		}
		within(t, "retry_after (the first limit's 100 ms)", res.RetryAfterMs, since(100, start))
		within(t, "reset_after (the hour's 10 of 20)", res.ResetAfterMs, since(1800000, start))
	})

	t.Run("a reservation waits for the latest limit, or books nothing", func(t *testing.T) {
		c := multi(tokenBucket(10, time.Second, 1), limiter.Limit{Rate: 2, Interval: time.Hour})
		l := r.createMulti(t, "book", c)
		start := time.Now()
		l.take(1)
		res := l.acquire(askWait(1, time.Second))[0]
		if !res.Granted {
			t.Fatalf("a wait of 1s for the first limit's 100 ms = %+v, want booked", res)
		}
		within(t, "the booking's wait", res.RetryAfterMs, since(100, start))
		// The hour's 2 are used: a wait of 1s cannot book the third.
		before := r.level(t, l.state()[0])
		res = l.acquire(askWait(1, time.Second))[0]
		if res.Granted {
			t.Fatalf("third = %+v, want denied (the second limit refills in 30 min)", res)
		}
		within(t, "retry_after", res.RetryAfterMs, since(1800000, start))
		if after := r.level(t, l.state()[0]); after > before+1e-6 {
			t.Errorf("first limit's level %v after the denial, %v before: a booking was left behind", after, before)
		}
	})

	t.Run("the window algorithms", func(t *testing.T) {
		for _, c := range []limiter.Config{slidingLog(5, time.Hour), fixedWindow(5, time.Hour), slidingWindow(5, time.Hour)} {
			l := r.createMulti(t, "win-"+string(c.Algo), multi(c, limiter.Limit{Rate: 2, Interval: 24 * time.Hour}))
			start := time.Now()
			now := r.clock(t)
			l.take(1)
			if res := l.take(1); !res.Granted || res.Remaining != 0 {
				t.Errorf("%s: second = %+v, want granted, 0 left", c.Algo, res)
			}
			res := l.take(1)
			if res.Granted {
				t.Fatalf("%s: third = %+v, want denied by the daily limit", c.Algo, res)
			}
			// The hourly limit has room; the daily one decides.
			var want int64
			switch c.Algo {
			case limiter.SlidingLog:
				want = 24 * 3600000
			case limiter.FixedWindow:
				want = windowStart(now, 24*time.Hour).Add(24 * time.Hour).Sub(now).Milliseconds()
			case limiter.SlidingWindow:
				// 2 in this day window; the next day's estimate is 2 × weight,
				// which falls to 1 (room for one) halfway through it.
				want = windowStart(now, 24*time.Hour).Add(36 * time.Hour).Sub(now).Milliseconds()
			}
			within(t, string(c.Algo)+" retry_after", res.RetryAfterMs, span{want - time.Since(start).Milliseconds() - 2, want + 2})
			if n := l.peek(); n != 0 {
				t.Errorf("%s: available = %d, want 0", c.Algo, n)
			}
			if n := l.release(1); n != 1 {
				t.Errorf("%s: available after releasing 1 = %d, want 1", c.Algo, n)
			}
		}
	})

	t.Run("a caller naming another number of limits is told to refresh", func(t *testing.T) {
		c := multi(tokenBucket(10, time.Hour, 10), limiter.Limit{Rate: 4, Interval: time.Hour})
		l := r.createMulti(t, "stale", c)
		l.limits = 1
		rep := l.call(limiter.OpAcquire, []limiter.Ask{ask(1)}, limiter.AcquireArgs(l.epoch, []limiter.Ask{ask(1)}))
		if rep.Status != limiter.StatusEpochChange {
			t.Errorf("status = %d, want %d (epoch change: read the config again)", rep.Status, limiter.StatusEpochChange)
		}
	})

	t.Run("the one-limit script refuses a limiter of several limits", func(t *testing.T) {
		c := multi(tokenBucket(10, time.Hour, 10), limiter.Limit{Rate: 4, Interval: time.Hour})
		l := r.createMulti(t, "one", c)
		_, err := r.scripts.Limiter(c.Algo).Run(t.Context(), r.rdb, l.keys(), limiter.AcquireArgs(l.epoch, []limiter.Ask{ask(1)})...).Result()
		if err == nil || !strings.Contains(err.Error(), "several limits") {
			t.Errorf("err = %v, want the one-limit script's refusal", err)
		}
		if r.scripts.For(tokenBucket(10, time.Hour, 10)) != r.scripts.Limiter(limiter.TokenBucket) || r.scripts.For(c) == r.scripts.Limiter(limiter.TokenBucket) {
			t.Error("For picks the wrong script")
		}
	})

	t.Run("charge takes from every limit", func(t *testing.T) {
		c := multi(tokenBucket(10, time.Hour, 10), limiter.Limit{Rate: 4, Interval: time.Hour})
		l := r.createMulti(t, "charge", c)
		if res := l.charge(6); !res.Granted || res.Remaining != -2 {
			t.Errorf("charge 6 = %+v, want remaining min(4, -2) = -2", res)
		}
	})
}

// TestMultiLimitConcurrent: 32 clients race for a limiter whose second
// limit is the tighter one; neither limit ever admits more than its rate.
func TestMultiLimitConcurrent(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, c := range []limiter.Config{tokenBucket(1000, time.Hour, 1000), slidingLog(1000, time.Hour),
		fixedWindow(1000, time.Hour), slidingWindow(1000, time.Hour)} {
		t.Run(string(c.Algo), func(t *testing.T) {
			l := r.createMulti(t, "race-"+string(c.Algo), multi(c, limiter.Limit{Rate: 300, Interval: 24 * time.Hour},
				limiter.Limit{Rate: 900, Interval: 2 * time.Hour}))
			var mu sync.Mutex
			granted := 0
			var wg sync.WaitGroup
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						asks := []limiter.Ask{ask(1), ask(2)}
						v, err := l.run().Run(t.Context(), r.rdb, l.keys(), limiter.AcquireArgs(l.epoch, asks)...).Result()
						if err != nil {
							t.Error(err)
							return
						}
						rep, err := limiter.DecodeReply(v, limiter.OpAcquire, asks)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						for i, res := range rep.Results {
							if res.Granted {
								granted += int(asks[i].Permits)
							}
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			// 1920 permits asked for; the daily 300 decides (a window
			// boundary during the test could open a new day: never more).
			if granted != 300 && !(c.Algo == limiter.FixedWindow || c.Algo == limiter.SlidingWindow) {
				t.Errorf("granted %d permits, want exactly the daily limit of 300", granted)
			}
			if granted > 300 || granted < 299 {
				t.Errorf("granted %d permits, want 300 (the daily limit)", granted)
			}
		})
	}
}

// KEEPSTATE keeps a multi-limit limiter's state while the number of its
// limits stays the same (the state keys are named by it), and starts
// fresh state when it changes.
func TestMultiLimitKeepState(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	c := multi(tokenBucket(10, time.Hour, 10), limiter.Limit{Rate: 4, Interval: time.Hour})
	l := r.createMulti(t, "keep", c)
	l.take(3)
	setconf := func(c limiter.Config, epoch string) string {
		t.Helper()
		sub := limiter.Sub{Rate: c.Rate, Burst: c.Burst}
		for i, x := range c.Limits.List() {
			sub.Limits[i] = x.Rate
		}
		v, err := r.scripts.SetConf.Run(t.Context(), r.rdb, []string{r.keys.Config("keep", 0)},
			limiter.SetConfArgs(c, sub, limiter.SetConfOptions{Epoch: epoch, KeepState: true})...).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, e, _, err := limiter.DecodeSetConf(v)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// Same number of limits, another daily rate: state kept, new limit read.
	if e := setconf(multi(tokenBucket(10, time.Hour, 10), limiter.Limit{Rate: 5, Interval: time.Hour}), "e2"); e != "e1" {
		t.Fatalf("KEEPSTATE with as many limits: epoch %q, want e1 kept", e)
	}
	if n := l.peek(); n != 2 {
		t.Errorf("available = %d, want 5-3 = 2 (the new second limit, the used permits kept)", n)
	}
	// One limit more: fresh state under a new epoch.
	if e := setconf(multi(tokenBucket(10, time.Hour, 10), limiter.Limit{Rate: 5, Interval: time.Hour}, limiter.Limit{Rate: 6, Interval: time.Hour}), "e3"); e != "e3" {
		t.Fatalf("KEEPSTATE with another number of limits: epoch %q, want e3 (fresh)", e)
	}
	// Back to one limit: no limits field left behind.
	if e := setconf(tokenBucket(10, time.Hour, 10), "e4"); e != "e4" {
		t.Fatalf("to one limit: epoch %q, want e4", e)
	}
	if ok, _ := r.rdb.HExists(t.Context(), r.keys.Config("keep", 0), "limits").Result(); ok {
		t.Error("a one-limit config keeps a limits field")
	}
}
