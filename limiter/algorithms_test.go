package limiter_test

// Tests of fixed_window.lua, sliding_window.lua and leaky_bucket.lua
// against a real redis-server, on the rig of scripts_test.go. A duration is
// checked against the time that actually passed: it must lie between its
// value at a reading of the server's clock (TIME) before the call and its
// value at a reading after it, or between its ideal value and that value
// less the time since a moment before the calls. Where a check rests on a
// premise about time (the next call comes before a permit frees), the
// sequence is retried when the machine was too slow for it.

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

func fixedWindow(rate int64, interval time.Duration) limiter.Config {
	return limiter.Config{Algo: limiter.FixedWindow, Rate: rate, Interval: interval, Burst: rate, Shards: 1, Mode: limiter.Overall}
}

func slidingWindow(rate int64, interval time.Duration) limiter.Config {
	return limiter.Config{Algo: limiter.SlidingWindow, Rate: rate, Interval: interval, Burst: rate, Shards: 1, Mode: limiter.Overall}
}

func leakyBucket(rate int64, interval time.Duration, burst int64) limiter.Config {
	return limiter.Config{Algo: limiter.LeakyBucket, Rate: rate, Interval: interval, Burst: burst, Shards: 1, Mode: limiter.Overall}
}

// takes asks for 1 permit count times in one call (at one instant of the
// server).
func (l *lim) takes(count int) []limiter.Result {
	l.t.Helper()
	asks := make([]limiter.Ask, count)
	for i := range asks {
		asks[i] = ask(1)
	}
	return l.acquire(asks...)
}

// setState writes the algorithm's one state key directly, as if a past
// call had.
func (l *lim) setState(v string) {
	l.t.Helper()
	if err := l.r.rdb.Set(l.t.Context(), l.state()[0], v, time.Hour).Err(); err != nil {
		l.t.Fatalf("SET: %v", err)
	}
}

// granted counts the grants among results.
func granted(rs []limiter.Result) int {
	n := 0
	for _, r := range rs {
		if r.Granted {
			n++
		}
	}
	return n
}

// windowStart is the start of the window of interval that holds tm.
// Windows are aligned to the Unix epoch, as the scripts align them.
func windowStart(tm time.Time, interval time.Duration) time.Time {
	return tm.Add(-time.Duration(tm.UnixMicro()%interval.Microseconds()) * time.Microsecond)
}

func sameWindow(a, b time.Time, interval time.Duration) bool {
	return windowStart(a, interval).Equal(windowStart(b, interval))
}

// ceilMs is how the scripts report a duration: whole ms, rounded up.
func ceilMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// until is what a script reports for the time until end when it ran
// between the server clock readings before and after.
func until(end, before, after time.Time) span {
	return span{ceilMs(end.Sub(after)), ceilMs(end.Sub(before))}
}

// asTTL widens s for a PTTL, which Redis counts in whole ms of its own
// clock: it may read 1 ms under the duration the script computed.
func (s span) asTTL() span { return span{s.lo - 1, s.hi} }

// intoWindow sleeps, when needed, until the server's clock is between from
// and to past the start of a window of interval. A slow machine may
// overshoot: callers read the clock again.
func (r *rig) intoWindow(t *testing.T, interval, from, to time.Duration) {
	t.Helper()
	now := r.clock(t)
	start := windowStart(now, interval)
	if off := now.Sub(start); off >= from && off <= to {
		return
	} else if off > from {
		start = start.Add(interval)
	}
	time.Sleep(start.Add(from + 5*time.Millisecond).Sub(now))
}

func TestFixedWindowNaturalAlignment(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	// reset_after and retry_after both run to the end of the window, whose
	// start is floor(now / interval) * interval from the epoch: a minute
	// window ends on the minute, a day window at 00:00 UTC.
	for _, interval := range []time.Duration{7 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 366 * 24 * time.Hour} {
		t.Run(interval.String(), func(t *testing.T) {
			retried(t, func(a *attempt) {
				l := r.create(t, fmt.Sprintf("align-%v-%d", interval, a.n), fixedWindow(2, interval))
				before := r.clock(t)
				rs := l.takes(3)
				after := r.clock(t)
				pttl := r.pttl(t, l.state()[0])
				last := r.clock(t)
				if !sameWindow(before, last, interval) {
					a.voidf("the calls straddled a window boundary")
					return
				}
				end := windowStart(before, interval).Add(interval)
				if !rs[0].Granted || !rs[1].Granted || rs[1].Remaining != 0 {
					a.Errorf("two takes of 2 per window: %+v", rs[:2])
					return
				}
				for i, res := range rs {
					within(a, "reset_after "+strconv.Itoa(i), res.ResetAfterMs, until(end, before, after))
				}
				if rs[2].Granted || rs[2].Remaining != 0 {
					a.Errorf("third take: %+v, want denied", rs[2])
					return
				}
				within(a, "retry_after", rs[2].RetryAfterMs, until(end, before, after))
				// The state lives until the window ends, no longer.
				within(a, "state PTTL", pttl, until(end, before, last).asTTL())
			})
		})
	}
	t.Run("day windows start at midnight UTC", func(t *testing.T) {
		retried(t, func(a *attempt) {
			before := r.clock(t).UTC()
			res := r.create(t, fmt.Sprintf("midnight-%d", a.n), fixedWindow(1, 24*time.Hour)).take(1)
			after := r.clock(t)
			midnight := time.Date(before.Year(), before.Month(), before.Day()+1, 0, 0, 0, 0, time.UTC)
			if !after.Before(midnight) {
				a.voidf("the call straddled midnight UTC")
				return
			}
			within(a, "reset_after (until 00:00 UTC)", res.ResetAfterMs, until(midnight, before, after))
		})
	})
}

func TestFixedWindowBoundary(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const interval = 500 * time.Millisecond
	retried(t, func(a *attempt) {
		l := r.create(t, fmt.Sprintf("boundary-%d", a.n), fixedWindow(4, interval))

		// Late in a window: the whole rate, then a denial until the boundary.
		r.intoWindow(t, interval, 330*time.Millisecond, 380*time.Millisecond)
		before := r.clock(t)
		rs := l.takes(5)
		after := r.clock(t)
		if !sameWindow(before, after, interval) {
			a.voidf("the first takes straddled a window boundary")
			return
		}
		end := windowStart(before, interval).Add(interval)
		if granted(rs[:4]) != 4 || rs[3].Remaining != 0 {
			a.Errorf("4 takes at the end of a window: %+v", rs)
			return
		}
		denied := rs[4]
		if denied.Granted {
			a.Errorf("5th take: %+v, want denied", denied)
			return
		}
		within(a, "retry_after", denied.RetryAfterMs, until(end, before, after))
		if denied.RetryAfterMs != denied.ResetAfterMs {
			a.Errorf("retry_after %d != reset_after %d: both run to the end of the window", denied.RetryAfterMs, denied.ResetAfterMs)
		}
		if a.failed() {
			return
		}

		// Right after the boundary the whole rate is back at once: a fixed
		// window admits up to 2*rate around a boundary.
		time.Sleep(time.Duration(denied.RetryAfterMs)*time.Millisecond + 5*time.Millisecond)
		before = r.clock(t)
		rs = l.takes(5)
		after = r.clock(t)
		if !sameWindow(end, before, interval) || !sameWindow(end, after, interval) {
			a.voidf("the takes after the boundary missed the window right after it (%v..%v past the boundary)", before.Sub(end), after.Sub(end))
			return
		}
		for i, res := range rs[:4] {
			if !res.Granted || res.Remaining != int64(3-i) {
				a.Errorf("take %d after the boundary: %+v, want granted with %d left", i, res, 3-i)
			}
		}
		if rs[4].Granted {
			a.Errorf("5th take after the boundary: %+v, want denied", rs[4])
		}
		within(a, "retry_after in the new window", rs[4].RetryAfterMs, until(end.Add(interval), before, after))
	})
}

func TestFixedWindowPermits(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.create(t, "permits", fixedWindow(10, 24*time.Hour))

	steps := []struct {
		n         int64
		granted   int // 1, 0, -1 (more than capacity)
		remaining int64
	}{
		{7, 1, 3},
		{4, 0, 3}, // denials take nothing
		{11, -1, 3},
		{3, 1, 0},
		{1, 0, 0},
	}
	for i, st := range steps {
		res := l.take(st.n)
		g := grantState(res)
		if g != st.granted || res.Remaining != st.remaining {
			t.Errorf("step %d: take %d = %+v, want granted %d remaining %d", i, st.n, res, st.granted, st.remaining)
		}
		if g == 0 && (res.RetryAfterMs <= 0 || res.RetryAfterMs != res.ResetAfterMs) {
			t.Errorf("step %d: denial %+v, want retry_after = reset_after > 0", i, res)
		}
	}
	if got := l.peek(); got != 0 {
		t.Errorf("peek = %d, want 0", got)
	}
	r.releaseToFull(t, l)
}

func TestFixedWindowWaitIsNoReservation(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const interval = 24 * time.Hour
	l := r.create(t, "nowait", fixedWindow(2, interval))
	before := r.clock(t)
	rs := l.acquire(ask(1), ask(1), askWait(1, 2*interval))
	after := r.clock(t)
	if granted(rs) != 2 || rs[2].Granted {
		t.Fatalf("take, take, wait: %+v, want the wait denied", rs)
	}
	// Denied until the window ends, whatever the wait: nothing is booked.
	within(t, "retry_after", rs[2].RetryAfterMs, until(windowStart(before, interval).Add(interval), before, after))
	if got := l.release(1); got != 1 {
		t.Errorf("release 1 = %d, want 1: only the window's own grants count", got)
	}
}

func TestFixedWindowClockStepsBack(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const interval = time.Hour
	l := r.create(t, "stepback", fixedWindow(5, interval))
	// A state written in the next window, as if this server's clock had
	// stepped back since: the window it counted is not reopened, and the
	// current one counts as used.
	before := r.clock(t)
	next := windowStart(before, interval).Add(interval)
	l.setState(strconv.FormatInt(next.UnixMicro(), 10) + ":5")
	if got := l.peek(); got != 0 {
		t.Errorf("available = %d, want 0", got)
	}
	res := l.take(1)
	after := r.clock(t)
	if res.Granted {
		t.Fatalf("take: %+v, want denied", res)
	}
	within(t, "retry_after (until the end of the stored window)", res.RetryAfterMs, until(next.Add(interval), before, after))
}

func TestSlidingWindowWeighting(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const interval = 500 * time.Millisecond
	const rate = 10
	retried(t, func(a *attempt) {
		l := r.create(t, fmt.Sprintf("weights-%d", a.n), slidingWindow(rate, interval))

		r.intoWindow(t, interval, 0, 50*time.Millisecond)
		before := r.clock(t)
		rs := l.takes(rate + 1)
		after := r.clock(t)
		if !sameWindow(before, after, interval) {
			a.voidf("the first takes straddled a window boundary")
			return
		}
		start := windowStart(before, interval)
		if granted(rs) != rate || rs[rate].Granted {
			a.Errorf("fill: %d of %d granted, want %d", granted(rs), rate+1, rate)
			return
		}
		if res := rs[rate]; res.RetryAfterMs <= 0 || res.Remaining != 0 {
			a.Errorf("denial in a full window: %+v, want retry_after > 0 and 0 left", res)
		}
		// What this window counted weighs until the end of the next one.
		within(a, "reset_after", rs[rate-1].ResetAfterMs, until(start.Add(2*interval), before, after))
		if a.failed() {
			return
		}

		// 40% into the next window the previous one weighs 60%: 4 permits free.
		time.Sleep(start.Add(interval + 2*interval/5).Sub(r.clock(t)))
		before = r.clock(t)
		rs = l.takes(rate)
		after = r.clock(t)
		fraction := func(tm time.Time) float64 {
			return float64(tm.Sub(start.Add(interval))) / float64(interval)
		}
		if fraction(before) < 0 || fraction(after) >= 1 {
			a.voidf("the second takes ran at %.2f..%.2f of the next window, not within it", fraction(before), fraction(after))
			return
		}
		lo, hi := int(rate*fraction(before)), int(rate*fraction(after))
		if got := granted(rs); got < lo || got > hi {
			a.Errorf("granted %d at %.2f..%.2f of the next window, want %d..%d (rate * elapsed fraction)",
				got, fraction(before), fraction(after), lo, hi)
		}
		if got := granted(rs); got < rate && rs[got].RetryAfterMs <= 0 {
			a.Errorf("denial after the weighted grants: %+v, want retry_after > 0", rs[got])
		}
	})
}

func TestSlidingWindowRetry(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	t.Run("retry_after follows the weight", func(t *testing.T) {
		// The take right after must come within interval/5 of the wait.
		const interval = 800 * time.Millisecond
		retried(t, func(a *attempt) {
			l := r.create(t, fmt.Sprintf("retry-%d", a.n), slidingWindow(5, interval))
			before := r.clock(t)
			rs := l.takes(6)
			after := r.clock(t)
			if !sameWindow(before, after, interval) {
				a.voidf("the first takes straddled a window boundary")
				return
			}
			start := windowStart(before, interval)
			if granted(rs[:5]) != 5 || rs[5].Granted {
				a.Errorf("fill: %+v, want 5 granted and the 6th denied", rs)
				return
			}
			// 5 counted now; one more fits once they weigh 4 or less: at 1/5
			// of the next window (1.2 intervals from this window's start).
			denied := rs[5]
			within(a, "retry_after", denied.RetryAfterMs, until(start.Add(interval*6/5), before, after))
			if a.failed() {
				return
			}

			time.Sleep(time.Duration(denied.RetryAfterMs) * time.Millisecond)
			before = r.clock(t)
			if res := l.take(1); !res.Granted {
				a.Errorf("take after sleeping retry_after (%d ms): %+v, want granted", denied.RetryAfterMs, res)
				return
			}
			// Now the previous window's 5 weigh at most 4 and this window
			// holds 1: the next permit frees once they weigh 3, at 2/5 of
			// this window, if the take comes before that.
			res := l.take(1)
			after = r.clock(t)
			frees := start.Add(interval * 7 / 5)
			if !a.inTime("the takes after the wait", after.Sub(start.Add(interval*6/5)), interval/5-time.Millisecond) {
				return
			}
			if res.Granted {
				a.Errorf("take right after: %+v, want denied", res)
				return
			}
			within(a, "retry_after of the take right after", res.RetryAfterMs, until(frees, before, after))
			time.Sleep(time.Duration(res.RetryAfterMs) * time.Millisecond)
			if res := l.take(1); !res.Granted {
				a.Errorf("take after the weighted retry_after: %+v, want granted", res)
			}
		})
	})

	t.Run("the whole rate waits until nothing counted weighs", func(t *testing.T) {
		l := r.create(t, "whole", slidingWindow(5, time.Hour))
		before := r.clock(t)
		l.take(1)
		res := l.take(5)
		after := r.clock(t)
		within(t, "retry_after for the whole rate", res.RetryAfterMs, until(windowStart(before, time.Hour).Add(2*time.Hour), before, after))
		if res.ResetAfterMs != res.RetryAfterMs {
			t.Errorf("reset_after %d != retry_after %d", res.ResetAfterMs, res.RetryAfterMs)
		}
	})
}

func TestSlidingWindowPermits(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const day = 24 * time.Hour
	l := r.create(t, "permits", slidingWindow(10, day))
	if res := l.take(7); !res.Granted || res.Remaining != 3 {
		t.Errorf("take 7: %+v", res)
	}
	if res := l.take(4); res.Granted || res.Remaining != 3 || res.RetryAfterMs <= 0 {
		t.Errorf("take 4: %+v, want denied with 3 left", res)
	}
	if res := l.take(11); !res.OverCapacity || res.Remaining != 3 {
		t.Errorf("take 11: %+v, want more than capacity", res)
	}
	before := r.clock(t)
	res := l.take(3)
	pttl := r.pttl(t, l.state()[0])
	after := r.clock(t)
	if !res.Granted || res.Remaining != 0 {
		t.Errorf("take 3: %+v", res)
	}
	// This window's permits weigh until the end of the next one.
	end := windowStart(before, day).Add(2 * day)
	within(t, "reset_after", res.ResetAfterMs, until(end, before, after))
	within(t, "state PTTL", pttl, until(end, before, after).asTTL())
	r.releaseToFull(t, l)
}

func TestSlidingWindowClockStepsBack(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const interval = time.Hour
	l := r.create(t, "stepback", slidingWindow(10, interval))
	// A full window counted in the next hour, as if the clock had stepped
	// back since: time stands at that window's start until the clock
	// catches up, so the wait is exact.
	next := windowStart(r.clock(t), interval).Add(interval)
	l.setState(strconv.FormatInt(next.UnixMicro(), 10) + ":0:10")
	res := l.take(1)
	if res.Granted || res.RetryAfterMs != (interval*11/10).Milliseconds() || res.ResetAfterMs != (2*interval).Milliseconds() {
		t.Errorf("take: %+v, want denied, retry_after %d, reset_after %d", res, (interval * 11 / 10).Milliseconds(), (2 * interval).Milliseconds())
	}
}

func TestLeakyBucketSpacing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const interval, rate = 500 * time.Millisecond, 10 // T = 50 ms
	const T = interval / rate

	// Without a wait only an empty bucket grants, even with burst room:
	// one grant per T.
	l := r.create(t, "nowait", leakyBucket(rate, interval, 4))
	if got := l.peek(); got != 4 {
		t.Errorf("available at rest = %d, want burst 4", got)
	}
	rs := l.takes(3)
	if !rs[0].Granted || rs[0].Remaining != 0 || rs[0].RetryAfterMs != 0 || rs[0].ResetAfterMs != T.Milliseconds() {
		t.Errorf("first take: %+v, want granted, 0 left, reset_after %v", rs[0], T)
	}
	for _, res := range rs[1:] {
		if res.Granted || res.RetryAfterMs != T.Milliseconds() {
			t.Errorf("take in the same instant: %+v, want denied for %v", res, T)
		}
	}
	time.Sleep(T)
	if res := l.take(1); !res.Granted {
		t.Errorf("take one slot later: %+v, want granted", res)
	}

	// Polling for a while: each grant comes at least T after the one
	// before, and each denial less than T after it, as far as the times
	// taken around the polls tell (give or take a microsecond, the grain
	// of the server's clock).
	l2 := r.create(t, "poll", leakyBucket(rate, interval, 4))
	var last struct{ start, end time.Time } // around the last granted poll
	grants := 0
	for i, begin := 0, time.Now(); time.Since(begin) < 6*T; i++ {
		start := time.Now()
		res := l2.take(1)
		end := time.Now()
		switch {
		case res.Granted:
			if grants > 0 && end.Sub(last.start) < T-time.Microsecond {
				t.Errorf("poll %d granted at most %v after the last grant, want at least %v", i, end.Sub(last.start), T)
			}
			grants++
			last.start, last.end = start, end
		case grants == 0:
			t.Errorf("poll %d of an empty bucket denied: %+v", i, res)
		case start.Sub(last.end) >= T+time.Microsecond:
			t.Errorf("poll %d denied at least %v after the last grant, want granted once %v has passed", i, start.Sub(last.end), T)
		}
		time.Sleep(3 * time.Millisecond)
	}

	// A multi-permit grant holds the bucket for n slots.
	l3 := r.create(t, "multi", leakyBucket(rate, interval, 4))
	rs = l3.acquire(ask(3), ask(1), ask(5))
	if !rs[0].Granted || rs[0].ResetAfterMs != (3*T).Milliseconds() {
		t.Errorf("take 3: %+v, want granted, reset_after %v", rs[0], 3*T)
	}
	if rs[1].Granted || rs[1].RetryAfterMs != (3*T).Milliseconds() {
		t.Errorf("take 1 after: %+v, want denied for %v", rs[1], 3*T)
	}
	if !rs[2].OverCapacity {
		t.Errorf("take 5 > burst: %+v, want more than capacity", rs[2])
	}
}

func TestLeakyBucketReservations(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const interval, rate = 500 * time.Millisecond, 10
	const T = interval / rate

	t.Run("one call: slots T apart, queue capped at burst", func(t *testing.T) {
		l := r.create(t, "batch", leakyBucket(rate, interval, 4))
		rs := l.acquire(askWait(1, time.Second), askWait(1, time.Second), askWait(1, time.Second),
			askWait(1, time.Second), askWait(1, time.Second), askWait(1, time.Second))
		for i, res := range rs[:4] {
			if !res.Granted || res.Remaining != 0 || res.RetryAfterMs != int64(i)*T.Milliseconds() || res.ResetAfterMs != int64(i+1)*T.Milliseconds() {
				t.Errorf("ask %d: %+v, want granted at %v, reset_after %v", i, res, time.Duration(i)*T, time.Duration(i+1)*T)
			}
		}
		for i, res := range rs[4:] {
			if res.Granted || res.RetryAfterMs != (4*T).Milliseconds() {
				t.Errorf("ask %d beyond burst: %+v, want denied until the bucket drains (%v)", i+4, res, 4*T)
			}
		}
	})

	t.Run("separate calls", func(t *testing.T) {
		l := r.create(t, "separate", leakyBucket(rate, interval, 4))
		start := time.Now()
		for i := range 4 {
			res := l.acquire(askWait(1, time.Second))[0]
			if !res.Granted {
				t.Fatalf("ask %d: %+v, want granted", i, res)
			}
			// Slot i is i*T after the first call, which was some time ago.
			within(t, "retry_after of ask "+strconv.Itoa(i), res.RetryAfterMs, since(int64(i)*T.Milliseconds(), start))
		}
	})

	t.Run("multi-permit asks and short waits", func(t *testing.T) {
		l := r.create(t, "mixed", leakyBucket(rate, interval, 4))
		rs := l.acquire(
			askWait(3, time.Second),          // empty bucket: now, holds 3 slots
			askWait(2, time.Second),          // 3+2 > burst: denied
			askWait(1, 100*time.Millisecond), // slot at 3T = 150 ms > wait: denied
			askWait(1, time.Second),          // fits: slot at 3T
		)
		want := []struct {
			granted bool
			retry   time.Duration
		}{{true, 0}, {false, 3 * T}, {false, 3 * T}, {true, 3 * T}}
		for i, w := range want {
			if rs[i].Granted != w.granted || rs[i].RetryAfterMs != w.retry.Milliseconds() {
				t.Errorf("ask %d: %+v, want granted %v retry_after %v", i, rs[i], w.granted, w.retry)
			}
		}
	})

	t.Run("reservations take effect at their slot", func(t *testing.T) {
		const slot = 4 * T // 200 ms: room for a slow machine before the bucket drains
		retried(t, func(a *attempt) {
			l := r.create(t, fmt.Sprintf("effect-%d", a.n), leakyBucket(rate, 4*interval, 2))
			start := time.Now()
			rs := l.acquire(askWait(1, time.Second), askWait(1, time.Second))
			if !rs[1].Granted || rs[1].RetryAfterMs != slot.Milliseconds() {
				a.Errorf("reservation: %+v, want granted at %v", rs[1], slot)
				return
			}
			time.Sleep(time.Duration(rs[1].RetryAfterMs) * time.Millisecond)
			// The reserved permit is leaving now; the next free slot is at
			// most one slot away, once the bucket drains 2 slots after the
			// first call. The take must come before that.
			res := l.take(1)
			if !a.inTime("the take at the reserved slot", time.Since(start), 2*slot-time.Millisecond) {
				return
			}
			if res.Granted {
				a.Errorf("take at the reserved slot: %+v, want denied", res)
				return
			}
			within(a, "retry_after at the reserved slot", res.RetryAfterMs, span{since(2*slot.Milliseconds(), start).lo, slot.Milliseconds()})
		})
	})
}

func TestLeakyBucketRelease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const T = 6 * time.Minute
	l := r.create(t, "release", leakyBucket(10, time.Hour, 4))
	start := time.Now()
	rs := l.acquire(askWait(4, time.Hour), ask(1))
	if !rs[0].Granted || rs[1].Granted {
		t.Fatalf("take 4, take 1: %+v", rs)
	}
	// The 4 permits leave the bucket 4 slots after the acquire.
	within(t, "state PTTL", r.pttl(t, l.state()[0]), since((4*T).Milliseconds(), start))
	if got := l.release(2); got != 0 {
		t.Errorf("release 2 of 4 queued: available %d, want 0", got)
	}
	// The 2 left leave 2 slots after the acquire.
	res := l.take(1)
	if res.Granted {
		t.Errorf("take with 2 queued: %+v, want denied", res)
	}
	within(t, "retry_after with 2 queued", res.RetryAfterMs, since((2*T).Milliseconds(), start))
	if got := l.release(100); got != 4 {
		t.Errorf("release of everything: available %d, want burst 4", got)
	}
	if got := r.pttl(t, l.state()[0]); got != -2 {
		t.Errorf("state PTTL when drained = %d, want -2 (deleted)", got)
	}
	if res := l.take(1); !res.Granted {
		t.Errorf("take after release: %+v, want granted", res)
	}
}

func TestLeakyBucketClockStepsBack(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.create(t, "stepback", leakyBucket(10, time.Hour, 4)) // T = 6 minutes
	// Two permits queued as of a time ahead of this server's clock: nothing
	// leaks until the clock catches up.
	ahead := r.clock(t).Add(time.Minute).UnixMicro()
	l.setState("2:" + strconv.FormatInt(ahead, 10))
	res := l.take(1)
	if res.Granted || res.RetryAfterMs != (12*time.Minute).Milliseconds() || res.ResetAfterMs != (12*time.Minute).Milliseconds() {
		t.Errorf("take: %+v, want denied for exactly 12m", res)
	}
}

// releaseToFull checks RL.RELEASE on a window limiter of rate 10 with
// nothing available: 4 back gives 4, 100 more stops at the rate, and the
// state key, with nothing left to remember, is gone.
func (r *rig) releaseToFull(t *testing.T, l *lim) {
	t.Helper()
	if got := l.release(4); got != 4 {
		t.Errorf("release 4 = %d, want 4", got)
	}
	if got := l.release(100); got != 10 {
		t.Errorf("release 100 = %d, want 10 (never above the rate)", got)
	}
	if got := r.pttl(t, l.state()[0]); got != -2 {
		t.Errorf("state PTTL after everything was given back = %d, want -2 (deleted)", got)
	}
}
