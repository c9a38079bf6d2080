package limiter_test

// Tests of fixed_window.lua, sliding_window.lua and leaky_bucket.lua
// against a real redis-server. Expected durations are derived from the
// server's own clock (TIME) read around a call, so they are exact ranges;
// waits between calls use short intervals and tolerances.

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// algoSlack bounds how far the machine may lag behind a computed
// duration between two calls of a test (generous for -race on 2 cores).
const algoSlack = 100 * time.Millisecond

// algoServer is one real redis-server and the scripts; tests keep apart by
// limiter name.
type algoServer struct {
	t       *testing.T
	rdb     *redis.Client
	scripts *limiter.Scripts
	keys    limiter.Keys
}

func newAlgoServer(t *testing.T) *algoServer {
	t.Helper()
	srv := redistest.StartServer(t)
	return &algoServer{t: t, rdb: srv.Client(t), scripts: limiter.NewScripts(), keys: limiter.Keys{Prefix: "a:"}}
}

// clock reads the server's TIME.
func (s *algoServer) clock(t *testing.T) time.Time {
	t.Helper()
	tm, err := s.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm
}

// intoWindow sleeps, when needed, until the server's clock is between
// from and to past the start of a window of the interval (aligned to the
// epoch), and returns that window's start.
func (s *algoServer) intoWindow(t *testing.T, interval, from, to time.Duration) time.Time {
	t.Helper()
	tm := s.clock(t)
	off := time.Duration(tm.UnixMicro()%interval.Microseconds()) * time.Microsecond
	start := tm.Add(-off)
	if off < from || off > to {
		if off > from {
			start = start.Add(interval)
		}
		time.Sleep(start.Add(from + 5*time.Millisecond).Sub(tm))
	}
	return start
}

// algoLimiter is shard 0 of one limiter, called the way sharding calls it.
type algoLimiter struct {
	s     *algoServer
	t     *testing.T
	conf  limiter.Config
	name  string
	epoch string
}

func (s *algoServer) create(t *testing.T, name string, c limiter.Config) *algoLimiter {
	t.Helper()
	if c.Shards == 0 {
		c.Shards, c.Mode = 1, limiter.Overall
	}
	if c.Burst == 0 {
		c.Burst = c.Rate
	}
	sub := limiter.Sub{Shard: 0, Rate: c.Rate, Burst: c.Burst}
	v, err := s.scripts.SetConf.Run(t.Context(), s.rdb, []string{s.keys.Config(name, 0)},
		limiter.SetConfArgs(c, sub, limiter.SetConfOptions{Epoch: "e1"})...).Result()
	if err != nil {
		t.Fatalf("setconf %s: %v", name, err)
	}
	if changed, epoch, _, err := limiter.DecodeSetConf(v); err != nil || !changed || epoch != "e1" {
		t.Fatalf("setconf %s = (%v, %q, %v), want a new limiter in epoch e1", name, changed, epoch, err)
	}
	return &algoLimiter{s: s, t: t, conf: c, name: name, epoch: "e1"}
}

// stateKey is the algorithm's one state key.
func (l *algoLimiter) stateKey() string {
	return l.s.keys.Script(l.conf.Algo, l.name, 0, l.epoch, "")[1]
}

func (l *algoLimiter) run(op limiter.Op, want int, args []any) limiter.Reply {
	l.t.Helper()
	keys := l.s.keys.Script(l.conf.Algo, l.name, 0, l.epoch, "")
	v, err := l.s.scripts.Limiter(l.conf.Algo).Run(l.t.Context(), l.s.rdb, keys, args...).Result()
	if err != nil {
		l.t.Fatalf("%s %s %v: %v", l.conf.Algo, op, args, err)
	}
	rep, err := limiter.DecodeReply(v, op, want)
	if err != nil || rep.Status != limiter.StatusOK {
		l.t.Fatalf("%s %s %v: %+v, %v", l.conf.Algo, op, args, rep, err)
	}
	return rep
}

// acquire decides asks in one script call (at one instant of the server).
func (l *algoLimiter) acquire(asks ...limiter.Ask) []limiter.Result {
	l.t.Helper()
	return l.run(limiter.OpAcquire, len(asks), limiter.AcquireArgs(l.epoch, asks)).Results
}

// take asks for n permits without waiting.
func (l *algoLimiter) take(n int64) limiter.Result {
	l.t.Helper()
	return l.acquire(limiter.Ask{Permits: n})[0]
}

// takes asks for 1 permit count times in one call.
func (l *algoLimiter) takes(count int) []limiter.Result {
	l.t.Helper()
	asks := make([]limiter.Ask, count)
	for i := range asks {
		asks[i] = limiter.Ask{Permits: 1}
	}
	return l.acquire(asks...)
}

func (l *algoLimiter) peek() int64 {
	l.t.Helper()
	return l.run(limiter.OpPeek, 0, limiter.Args(limiter.OpPeek, l.epoch)).Count
}

func (l *algoLimiter) release(n int64) int64 {
	l.t.Helper()
	return l.run(limiter.OpRelease, 0, limiter.Args(limiter.OpRelease, l.epoch, n)).Count
}

// pttl is the state key's PTTL (-2: no key, -1: no TTL).
func (l *algoLimiter) pttl() time.Duration {
	l.t.Helper()
	d, err := l.s.rdb.PTTL(l.t.Context(), l.stateKey()).Result()
	if err != nil {
		l.t.Fatalf("PTTL: %v", err)
	}
	return d
}

// setState writes the state key directly, as if a past call had.
func (l *algoLimiter) setState(v string) {
	l.t.Helper()
	if err := l.s.rdb.Set(l.t.Context(), l.stateKey(), v, time.Hour).Err(); err != nil {
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

// inMs checks that a duration reported in ms lies in [lo, hi].
func inMs(t *testing.T, what string, gotMs int64, lo, hi time.Duration) {
	t.Helper()
	if gotMs < lo.Milliseconds() || gotMs > hi.Milliseconds() {
		t.Errorf("%s = %d ms, want within [%d, %d]", what, gotMs, lo.Milliseconds(), hi.Milliseconds())
	}
}

// ceilMs is how the scripts report a duration: whole ms, rounded up.
func ceilMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// untilBoundary is the exact time from t to the end of its window.
func untilBoundary(t time.Time, interval time.Duration) time.Duration {
	us := t.UnixMicro()
	return time.Duration(interval.Microseconds()-us%interval.Microseconds()) * time.Microsecond
}

func fixedWindow(rate int64, interval time.Duration) limiter.Config {
	return limiter.Config{Algo: limiter.FixedWindow, Rate: rate, Interval: interval}
}

func slidingWindow(rate int64, interval time.Duration) limiter.Config {
	return limiter.Config{Algo: limiter.SlidingWindow, Rate: rate, Interval: interval}
}

func leakyBucket(rate int64, interval time.Duration, burst int64) limiter.Config {
	return limiter.Config{Algo: limiter.LeakyBucket, Rate: rate, Interval: interval, Burst: burst}
}

func TestFixedWindowNaturalAlignment(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	// reset_after and retry_after both run to the end of the window, whose
	// start is floor(now / interval) * interval from the epoch: a minute
	// window ends on the minute, a day window at 00:00 UTC.
	for _, interval := range []time.Duration{7 * time.Second, time.Minute, time.Hour, 24 * time.Hour, 366 * 24 * time.Hour} {
		t.Run(interval.String(), func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				l := s.create(t, "align-"+interval.String()+"-"+strconv.Itoa(attempt), fixedWindow(2, interval))
				before := s.clock(t)
				rs := l.takes(3)
				after := s.clock(t)
				if before.UnixMicro()/interval.Microseconds() != after.UnixMicro()/interval.Microseconds() {
					if attempt == 3 {
						t.Fatal("every attempt straddled a window boundary")
					}
					continue // the calls straddled a boundary: try again on a fresh limiter
				}
				lo, hi := ceilMs(untilBoundary(after, interval)), ceilMs(untilBoundary(before, interval))
				if !rs[0].Granted || !rs[1].Granted || rs[1].Remaining != 0 {
					t.Fatalf("two takes of 2 per window: %+v", rs[:2])
				}
				for i, r := range rs {
					inMs(t, "reset_after "+strconv.Itoa(i), r.ResetAfterMs, lo, hi)
				}
				if rs[2].Granted || rs[2].Remaining != 0 {
					t.Fatalf("third take: %+v, want denied", rs[2])
				}
				inMs(t, "retry_after", rs[2].RetryAfterMs, lo, hi)
				// The state lives until the window ends, no longer.
				inMs(t, "state PTTL", l.pttl().Milliseconds(), lo-algoSlack, hi)
				return
			}
		})
	}
	t.Run("day windows start at midnight UTC", func(t *testing.T) {
		before := s.clock(t).UTC()
		res := s.create(t, "midnight", fixedWindow(1, 24*time.Hour)).take(1)
		midnight := time.Date(before.Year(), before.Month(), before.Day()+1, 0, 0, 0, 0, time.UTC)
		if want := ceilMs(midnight.Sub(before)); res.ResetAfterMs > want.Milliseconds() || res.ResetAfterMs < (want-algoSlack).Milliseconds() {
			t.Errorf("reset_after = %d ms, want about %d (until 00:00 UTC)", res.ResetAfterMs, want.Milliseconds())
		}
	})
}

func TestFixedWindowBoundary(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	const interval = 500 * time.Millisecond
	l := s.create(t, "boundary", fixedWindow(4, interval))

	// Late in a window: the whole rate, then a denial until the boundary.
	s.intoWindow(t, interval, 330*time.Millisecond, 380*time.Millisecond)
	before := s.clock(t)
	rs := l.takes(5)
	if granted(rs[:4]) != 4 || rs[3].Remaining != 0 {
		t.Fatalf("4 takes at the end of a window: %+v", rs)
	}
	denied := rs[4]
	if denied.Granted || denied.RetryAfterMs <= 0 {
		t.Fatalf("5th take: %+v, want denied with retry_after > 0", denied)
	}
	inMs(t, "retry_after", denied.RetryAfterMs, 1, ceilMs(untilBoundary(before, interval)))
	if denied.RetryAfterMs != denied.ResetAfterMs {
		t.Errorf("retry_after %d != reset_after %d: both run to the end of the window", denied.RetryAfterMs, denied.ResetAfterMs)
	}

	// Right after the boundary the whole rate is back at once: a fixed
	// window admits up to 2*rate around a boundary.
	time.Sleep(time.Duration(denied.RetryAfterMs)*time.Millisecond + 5*time.Millisecond)
	before = s.clock(t)
	rs = l.takes(5)
	for i, r := range rs[:4] {
		if !r.Granted || r.Remaining != int64(3-i) {
			t.Errorf("take %d after the boundary: %+v, want granted with %d left", i, r, 3-i)
		}
	}
	if rs[4].Granted {
		t.Errorf("5th take after the boundary: %+v, want denied", rs[4])
	}
	// The new window has most of its length left.
	inMs(t, "retry_after in the new window", rs[4].RetryAfterMs, interval-algoSlack-10*time.Millisecond, ceilMs(untilBoundary(before, interval)))
}

func TestFixedWindowPermits(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	l := s.create(t, "permits", fixedWindow(10, 24*time.Hour))

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
		r := l.take(st.n)
		g := 0
		if r.Granted {
			g = 1
		} else if r.OverCapacity {
			g = -1
		}
		if g != st.granted || r.Remaining != st.remaining {
			t.Errorf("step %d: take %d = %+v, want granted %d remaining %d", i, st.n, r, st.granted, st.remaining)
		}
		if g == 0 && (r.RetryAfterMs <= 0 || r.RetryAfterMs != r.ResetAfterMs) {
			t.Errorf("step %d: denial %+v, want retry_after = reset_after > 0", i, r)
		}
	}
	if got := l.peek(); got != 0 {
		t.Errorf("peek = %d, want 0", got)
	}
	if got := l.release(4); got != 4 {
		t.Errorf("release 4 = %d, want 4", got)
	}
	if got := l.release(100); got != 10 {
		t.Errorf("release 100 = %d, want 10 (never above the rate)", got)
	}
	if d := l.pttl(); d != -2 {
		t.Errorf("state PTTL after everything was given back = %v, want -2 (deleted)", d)
	}
}

func TestFixedWindowWaitIsNoReservation(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	const interval = 24 * time.Hour
	l := s.create(t, "nowait", fixedWindow(2, interval))
	before := s.clock(t)
	rs := l.acquire(
		limiter.Ask{Permits: 1},
		limiter.Ask{Permits: 1},
		limiter.Ask{Permits: 1, MaxWait: 2 * interval},
	)
	if granted(rs) != 2 || rs[2].Granted {
		t.Fatalf("take, take, wait: %+v, want the wait denied", rs)
	}
	// Denied until the window ends, whatever the wait: nothing is booked.
	end := ceilMs(untilBoundary(before, interval))
	inMs(t, "retry_after", rs[2].RetryAfterMs, end-algoSlack, end)
	if got := l.release(1); got != 1 {
		t.Errorf("release 1 = %d, want 1: only the window's own grants count", got)
	}
}

func TestFixedWindowClockStepsBack(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	const interval = time.Hour
	l := s.create(t, "stepback", fixedWindow(5, interval))
	// A state written in the next window, as if this server's clock had
	// stepped back since: the window it counted is not reopened, and the
	// current one counts as used.
	now := s.clock(t)
	next := now.UnixMicro() - now.UnixMicro()%interval.Microseconds() + interval.Microseconds()
	l.setState(strconv.FormatInt(next, 10) + ":5")
	if got := l.peek(); got != 0 {
		t.Errorf("available = %d, want 0", got)
	}
	r := l.take(1)
	if r.Granted {
		t.Fatalf("take: %+v, want denied", r)
	}
	until := ceilMs(untilBoundary(now, interval))
	inMs(t, "retry_after (until the end of the stored window)", r.RetryAfterMs, until+interval-algoSlack, until+interval)
}

func TestSlidingWindowWeighting(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	const interval = 500 * time.Millisecond
	const rate = 10
	l := s.create(t, "weights", slidingWindow(rate, interval))

	start := s.intoWindow(t, interval, 0, 50*time.Millisecond)
	rs := l.takes(rate + 1)
	if granted(rs) != rate || rs[rate].Granted {
		t.Fatalf("fill: %d of %d granted, want %d", granted(rs), rate+1, rate)
	}
	if r := rs[rate]; r.RetryAfterMs <= 0 || r.Remaining != 0 {
		t.Errorf("denial in a full window: %+v, want retry_after > 0 and 0 left", r)
	}
	// What this window counted weighs until the end of the next one.
	inMs(t, "reset_after", rs[rate-1].ResetAfterMs, 2*interval-50*time.Millisecond-algoSlack, 2*interval)

	// 40% into the next window the previous one weighs 60%: 4 permits free.
	time.Sleep(start.Add(interval + 2*interval/5).Sub(s.clock(t)))
	before := s.clock(t)
	rs = l.takes(rate)
	after := s.clock(t)
	fraction := func(tm time.Time) float64 {
		return float64(tm.Sub(start.Add(interval))) / float64(interval)
	}
	lo, hi := int(rate*fraction(before)), int(rate*fraction(after))
	if got := granted(rs); got < lo || got > hi || fraction(after) >= 1 {
		t.Errorf("granted %d at %.2f..%.2f of the next window, want %d..%d (rate * elapsed fraction)",
			got, fraction(before), fraction(after), lo, hi)
	}
	if got := granted(rs); got < rate && rs[got].RetryAfterMs <= 0 {
		t.Errorf("denial after the weighted grants: %+v, want retry_after > 0", rs[got])
	}
}

func TestSlidingWindowRetry(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	const interval = 400 * time.Millisecond
	l := s.create(t, "retry", slidingWindow(5, interval))

	start := s.intoWindow(t, interval, 0, 50*time.Millisecond)
	rs := l.takes(6)
	before := s.clock(t)
	if granted(rs) != 5 {
		t.Fatalf("fill: %+v", rs)
	}
	// 5 counted now; one more fits once they weigh 4 or less: at 1/5 of the
	// next window (1.2 intervals from this window's start).
	denied := rs[5]
	want := ceilMs(start.Add(interval * 6 / 5).Sub(before))
	inMs(t, "retry_after", denied.RetryAfterMs, want-algoSlack, want+algoSlack)

	time.Sleep(time.Duration(denied.RetryAfterMs) * time.Millisecond)
	if r := l.take(1); !r.Granted {
		t.Fatalf("take after sleeping retry_after (%d ms): %+v, want granted", denied.RetryAfterMs, r)
	}
	// Now the previous window's 5 weigh about 4 and this window holds 1:
	// the next permit frees as the weight falls, within this window.
	r := l.take(1)
	if r.Granted || r.RetryAfterMs <= 0 || r.RetryAfterMs > (interval/5+algoSlack).Milliseconds() {
		t.Errorf("take right after: %+v, want denied for about %v", r, interval/5)
	}
	time.Sleep(time.Duration(r.RetryAfterMs) * time.Millisecond)
	if r := l.take(1); !r.Granted {
		t.Errorf("take after the weighted retry_after: %+v, want granted", r)
	}

	// A request for the whole rate waits until nothing counted weighs.
	l2 := s.create(t, "whole", slidingWindow(5, time.Hour))
	before = s.clock(t)
	l2.take(1)
	r = l2.take(5)
	want = ceilMs(2*time.Hour - time.Duration(before.UnixMicro()%time.Hour.Microseconds())*time.Microsecond)
	inMs(t, "retry_after for the whole rate", r.RetryAfterMs, want-algoSlack, want)
	if r.ResetAfterMs != r.RetryAfterMs {
		t.Errorf("reset_after %d != retry_after %d", r.ResetAfterMs, r.RetryAfterMs)
	}
}

func TestSlidingWindowPermits(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	l := s.create(t, "permits", slidingWindow(10, 24*time.Hour))
	if r := l.take(7); !r.Granted || r.Remaining != 3 {
		t.Errorf("take 7: %+v", r)
	}
	if r := l.take(4); r.Granted || r.Remaining != 3 || r.RetryAfterMs <= 0 {
		t.Errorf("take 4: %+v, want denied with 3 left", r)
	}
	if r := l.take(11); !r.OverCapacity || r.Remaining != 3 {
		t.Errorf("take 11: %+v, want more than capacity", r)
	}
	before := s.clock(t)
	r := l.take(3)
	if !r.Granted || r.Remaining != 0 {
		t.Errorf("take 3: %+v", r)
	}
	want := ceilMs(2*24*time.Hour - time.Duration(before.UnixMicro()%(24*time.Hour).Microseconds())*time.Microsecond)
	inMs(t, "reset_after", r.ResetAfterMs, want-algoSlack, want)
	inMs(t, "state PTTL", l.pttl().Milliseconds(), want-algoSlack, want)
	if got := l.release(4); got != 4 {
		t.Errorf("release 4 = %d", got)
	}
	if got := l.release(100); got != 10 {
		t.Errorf("release 100 = %d, want 10", got)
	}
	if d := l.pttl(); d != -2 {
		t.Errorf("state PTTL when empty = %v, want -2 (deleted)", d)
	}
}

func TestSlidingWindowClockStepsBack(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	const interval = time.Hour
	l := s.create(t, "stepback", slidingWindow(10, interval))
	// A full window counted in the next hour, as if the clock had stepped
	// back since: time stands at that window's start until the clock
	// catches up, so the wait is exact.
	now := s.clock(t)
	next := now.UnixMicro() - now.UnixMicro()%interval.Microseconds() + interval.Microseconds()
	l.setState(strconv.FormatInt(next, 10) + ":0:10")
	r := l.take(1)
	if r.Granted || r.RetryAfterMs != (interval*11/10).Milliseconds() || r.ResetAfterMs != (2*interval).Milliseconds() {
		t.Errorf("take: %+v, want denied, retry_after %d, reset_after %d", r, (interval * 11 / 10).Milliseconds(), (2 * interval).Milliseconds())
	}
}

func TestLeakyBucketSpacing(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	const interval, rate = 500 * time.Millisecond, 10 // T = 50 ms
	const T = interval / rate

	// Without a wait only an empty bucket grants, even with burst room:
	// one grant per T.
	l := s.create(t, "nowait", leakyBucket(rate, interval, 4))
	if got := l.peek(); got != 4 {
		t.Errorf("available at rest = %d, want burst 4", got)
	}
	rs := l.takes(3)
	if !rs[0].Granted || rs[0].Remaining != 0 || rs[0].RetryAfterMs != 0 || rs[0].ResetAfterMs != T.Milliseconds() {
		t.Errorf("first take: %+v, want granted, 0 left, reset_after %v", rs[0], T)
	}
	for _, r := range rs[1:] {
		if r.Granted || r.RetryAfterMs != T.Milliseconds() {
			t.Errorf("take in the same instant: %+v, want denied for %v", r, T)
		}
	}
	time.Sleep(T)
	if r := l.take(1); !r.Granted {
		t.Errorf("take one slot later: %+v, want granted", r)
	}

	// Polling for a while: never more than one grant per T.
	l2 := s.create(t, "poll", leakyBucket(rate, interval, 4))
	first := s.clock(t)
	grants := 0
	for s.clock(t).Sub(first) < 6*T {
		if l2.take(1).Granted {
			grants++
		}
		time.Sleep(3 * time.Millisecond)
	}
	elapsed := s.clock(t).Sub(first)
	if most := int(elapsed/T) + 1; grants > most || grants < 3 {
		t.Errorf("%d grants in %v polling, want at most %d (one per %v) and some", grants, elapsed, most, T)
	}

	// A multi-permit grant holds the bucket for n slots.
	l3 := s.create(t, "multi", leakyBucket(rate, interval, 4))
	rs = l3.acquire(limiter.Ask{Permits: 3}, limiter.Ask{Permits: 1}, limiter.Ask{Permits: 5})
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
	s := newAlgoServer(t)
	const interval, rate = 500 * time.Millisecond, 10
	const T = interval / rate
	wait := func(n int64, d time.Duration) limiter.Ask { return limiter.Ask{Permits: n, MaxWait: d} }

	t.Run("one call: slots T apart, queue capped at burst", func(t *testing.T) {
		l := s.create(t, "batch", leakyBucket(rate, interval, 4))
		rs := l.acquire(wait(1, time.Second), wait(1, time.Second), wait(1, time.Second),
			wait(1, time.Second), wait(1, time.Second), wait(1, time.Second))
		for i, r := range rs[:4] {
			if !r.Granted || r.Remaining != 0 || r.RetryAfterMs != int64(i)*T.Milliseconds() || r.ResetAfterMs != int64(i+1)*T.Milliseconds() {
				t.Errorf("ask %d: %+v, want granted at %v, reset_after %v", i, r, time.Duration(i)*T, time.Duration(i+1)*T)
			}
		}
		for i, r := range rs[4:] {
			if r.Granted || r.RetryAfterMs != (4*T).Milliseconds() {
				t.Errorf("ask %d beyond burst: %+v, want denied until the bucket drains (%v)", i+4, r, 4*T)
			}
		}
	})

	t.Run("separate calls", func(t *testing.T) {
		l := s.create(t, "separate", leakyBucket(rate, interval, 4))
		for i := range 4 {
			r := l.acquire(wait(1, time.Second))[0]
			want := time.Duration(i) * T
			if !r.Granted {
				t.Fatalf("ask %d: %+v, want granted", i, r)
			}
			inMs(t, "retry_after of ask "+strconv.Itoa(i), r.RetryAfterMs, max(0, want-algoSlack), want)
		}
	})

	t.Run("multi-permit asks and short waits", func(t *testing.T) {
		l := s.create(t, "mixed", leakyBucket(rate, interval, 4))
		rs := l.acquire(
			wait(3, time.Second),          // empty bucket: now, holds 3 slots
			wait(2, time.Second),          // 3+2 > burst: denied
			wait(1, 100*time.Millisecond), // slot at 3T = 150 ms > wait: denied
			wait(1, time.Second),          // fits: slot at 3T
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
		l := s.create(t, "effect", leakyBucket(rate, interval, 2))
		rs := l.acquire(wait(1, time.Second), wait(1, time.Second))
		if !rs[1].Granted {
			t.Fatalf("reservation: %+v", rs[1])
		}
		time.Sleep(time.Duration(rs[1].RetryAfterMs) * time.Millisecond)
		// The reserved permit is leaving now; the next free slot is T away.
		r := l.take(1)
		if r.Granted || r.RetryAfterMs <= 0 || r.RetryAfterMs > T.Milliseconds() {
			t.Errorf("take at the reserved slot: %+v, want denied for at most %v", r, T)
		}
	})
}

func TestLeakyBucketRelease(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	l := s.create(t, "release", leakyBucket(10, time.Hour, 4)) // T = 6 minutes
	rs := l.acquire(limiter.Ask{Permits: 4, MaxWait: time.Hour}, limiter.Ask{Permits: 1})
	if !rs[0].Granted || rs[1].Granted {
		t.Fatalf("take 4, take 1: %+v", rs)
	}
	inMs(t, "state PTTL", l.pttl().Milliseconds(), 24*time.Minute-algoSlack, 24*time.Minute)
	if got := l.release(2); got != 0 {
		t.Errorf("release 2 of 4 queued: available %d, want 0", got)
	}
	if r := l.take(1); r.Granted || r.RetryAfterMs > (12*time.Minute).Milliseconds() || r.RetryAfterMs < (12*time.Minute-algoSlack).Milliseconds() {
		t.Errorf("take with 2 queued: %+v, want denied for about 12m", r)
	}
	if got := l.release(100); got != 4 {
		t.Errorf("release of everything: available %d, want burst 4", got)
	}
	if d := l.pttl(); d != -2 {
		t.Errorf("state PTTL when drained = %v, want -2 (deleted)", d)
	}
	if r := l.take(1); !r.Granted {
		t.Errorf("take after release: %+v, want granted", r)
	}
}

func TestLeakyBucketClockStepsBack(t *testing.T) {
	t.Parallel()
	s := newAlgoServer(t)
	l := s.create(t, "stepback", leakyBucket(10, time.Hour, 4)) // T = 6 minutes
	// Two permits queued as of a time ahead of this server's clock: nothing
	// leaks until the clock catches up.
	ahead := s.clock(t).Add(time.Minute).UnixMicro()
	l.setState("2:" + strconv.FormatInt(ahead, 10))
	r := l.take(1)
	if r.Granted || r.RetryAfterMs != (12*time.Minute).Milliseconds() || r.ResetAfterMs != (12*time.Minute).Milliseconds() {
		t.Errorf("take: %+v, want denied for exactly 12m", r)
	}
}
