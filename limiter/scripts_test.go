package limiter_test

// Tests of the Lua scripts themselves, run against a real redis-server:
// setconf.lua, reset.lua and each algorithm between prelude and epilogue.
// Durations are checked as ranges: a script computes them at call time, so
// by the time a later call (or the test) looks, they can only have shrunk.

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// rig is one real redis-server and the scripts. Subtests share it and keep
// apart by using their own limiter names.
type rig struct {
	rdb     *redis.Client
	scripts *limiter.Scripts
	keys    limiter.Keys
}

func newRig(t *testing.T) *rig {
	t.Helper()
	srv := redistest.StartServer(t)
	return &rig{rdb: srv.Client(t), scripts: limiter.NewScripts(), keys: limiter.Keys{Prefix: "t:"}}
}

// tokenBucket and slidingLog build configs of one sub-limiter.
func tokenBucket(rate int64, interval time.Duration, burst int64) limiter.Config {
	return limiter.Config{Algo: limiter.TokenBucket, Rate: rate, Interval: interval, Burst: burst, Shards: 1, Mode: limiter.Overall}
}

func slidingLog(rate int64, interval time.Duration) limiter.Config {
	return limiter.Config{Algo: limiter.SlidingLog, Rate: rate, Interval: interval, Burst: rate, Shards: 1, Mode: limiter.Overall}
}

// shard0 is the share of shard 0 of c.
func shard0(c limiter.Config) limiter.Sub {
	n := int64(c.Shards)
	return limiter.Sub{Shard: 0, Rate: c.Rate / n, Burst: c.Burst / n}
}

// setConf runs setconf.lua for shard 0 of name.
func (r *rig) setConf(t *testing.T, name string, c limiter.Config, o limiter.SetConfOptions) (changed bool, epoch string, oldShards int) {
	t.Helper()
	v, err := r.scripts.SetConf.Run(t.Context(), r.rdb, []string{r.keys.Config(name, 0)}, limiter.SetConfArgs(c, shard0(c), o)...).Result()
	if err != nil {
		t.Fatalf("setconf %s: %v", name, err)
	}
	changed, epoch, oldShards, err = limiter.DecodeSetConf(v)
	if err != nil {
		t.Fatalf("setconf %s: %v", name, err)
	}
	return changed, epoch, oldShards
}

// create writes a new limiter in epoch "e1" and returns a caller of it.
func (r *rig) create(t *testing.T, name string, c limiter.Config) *lim {
	t.Helper()
	changed, epoch, old := r.setConf(t, name, c, limiter.SetConfOptions{Epoch: "e1"})
	if !changed || epoch != "e1" || old != 0 {
		t.Fatalf("setconf of new limiter %s = (%v, %q, %d), want (true, \"e1\", 0)", name, changed, epoch, old)
	}
	return r.open(t, name, c.Algo, epoch)
}

// open returns a caller of shard 0 of name that believes epoch is in force.
func (r *rig) open(t *testing.T, name string, algo limiter.Algo, epoch string) *lim {
	return &lim{t: t, r: r, name: name, algo: algo, epoch: epoch}
}

// lim calls the script of shard 0 of one limiter the way sharding does.
type lim struct {
	t      *testing.T
	r      *rig
	name   string
	algo   limiter.Algo
	epoch  string
	limits int           // of a multi-limit limiter; 0 is 1
	script *redis.Script // nil: the algorithm's one-limit script
}

func (l *lim) run() *redis.Script {
	if l.script != nil {
		return l.script
	}
	return l.r.scripts.Limiter(l.algo)
}

func (l *lim) keys() []string {
	return l.r.keys.ScriptLimits(l.algo, l.name, 0, l.epoch, "", l.limits)
}

// state returns the names of the state keys (all KEYS but the config).
func (l *lim) state() []string { return l.keys()[1:] }

// call runs the limiter script and decodes its reply, whatever its status.
// asks are the acquire requests args carry (nil for peek and release).
func (l *lim) call(op limiter.Op, asks []limiter.Ask, args []any) limiter.Reply {
	l.t.Helper()
	v, err := l.run().Run(l.t.Context(), l.r.rdb, l.keys(), args...).Result()
	if err != nil {
		l.t.Fatalf("%s %s %v: %v", l.algo, op, args, err)
	}
	rep, err := limiter.DecodeReply(v, op, asks)
	if err != nil {
		l.t.Fatalf("%s %s %v: %v", l.algo, op, args, err)
	}
	return rep
}

func (l *lim) mustOK(rep limiter.Reply) {
	l.t.Helper()
	if rep.Status != limiter.StatusOK {
		l.t.Fatalf("%s: status %d (epoch %q), want OK", l.name, rep.Status, rep.Epoch)
	}
	if rep.Epoch != l.epoch {
		l.t.Fatalf("%s: reply epoch %q, want %q", l.name, rep.Epoch, l.epoch)
	}
}

// acquire decides asks in one script call.
func (l *lim) acquire(asks ...limiter.Ask) []limiter.Result {
	l.t.Helper()
	rep := l.call(limiter.OpAcquire, asks, limiter.AcquireArgs(l.epoch, asks))
	l.mustOK(rep)
	return rep.Results
}

// take asks for n permits now.
func (l *lim) take(n int64) limiter.Result {
	l.t.Helper()
	return l.acquire(ask(n))[0]
}

func (l *lim) peek() int64 {
	l.t.Helper()
	rep := l.call(limiter.OpPeek, nil, limiter.Args(limiter.OpPeek, l.epoch))
	l.mustOK(rep)
	return rep.Count
}

func (l *lim) release(n int64) int64 {
	l.t.Helper()
	rep := l.call(limiter.OpRelease, nil, limiter.Args(limiter.OpRelease, l.epoch, n))
	l.mustOK(rep)
	return rep.Count
}

// pttl returns the PTTL of key in ms (-1: no TTL, -2: no key).
func (r *rig) pttl(t *testing.T, key string) int64 {
	t.Helper()
	d, err := r.rdb.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	if d < 0 {
		return int64(d) // go-redis passes -1 and -2 through as raw durations
	}
	return d.Milliseconds()
}

// clock reads the server's clock (TIME), to the microsecond.
func (r *rig) clock(t *testing.T) time.Time {
	t.Helper()
	tm, err := r.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return tm
}

// redisMs reads the server's clock (TIME) in milliseconds.
func (r *rig) redisMs(t *testing.T) int64 {
	t.Helper()
	return r.clock(t).UnixMilli()
}

// ask asks for n permits now; askWait for n permits within d.
func ask(n int64) limiter.Ask { return limiter.Ask{Permits: n} }

func askWait(n int64, d time.Duration) limiter.Ask { return limiter.Ask{Permits: n, MaxWait: d} }

// span is a range of milliseconds, both ends included.
type span struct{ lo, hi int64 }

// since is a duration that was ideal ms at start and may have run down
// since (by at most the time elapsed, and the rounding up to whole ms).
// Call it after reading the value.
func since(ideal int64, start time.Time) span {
	return span{ideal - time.Since(start).Milliseconds() - 2, ideal}
}

// reporter is where a check reports: a test, or one attempt of a retried
// sequence.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

func within(t reporter, what string, got int64, s span) {
	t.Helper()
	if got < s.lo || got > s.hi {
		t.Errorf("%s = %d ms, want within [%d, %d]", what, got, s.lo, s.hi)
	}
}

// step is one ask of a scenario and the result it must get. Durations are
// in ms as of the start of the scenario.
type step struct {
	ask       limiter.Ask
	granted   int // 1 granted, 0 denied, -1 more than capacity
	remaining int64
	retry     int64
	reset     int64
}

func grantState(r limiter.Result) int {
	switch {
	case r.Granted:
		return 1
	case r.OverCapacity:
		return -1
	}
	return 0
}

// mismatch describes how got differs from step s, or returns "".
func (s step) mismatch(got limiter.Result, start time.Time) string {
	var diffs []string
	if g := grantState(got); g != s.granted || got.Remaining != s.remaining {
		diffs = append(diffs, fmt.Sprintf("granted %d remaining %d, want granted %d remaining %d", g, got.Remaining, s.granted, s.remaining))
	}
	for _, d := range []struct {
		name      string
		got, want int64
	}{{"retry_after", got.RetryAfterMs, s.retry}, {"reset_after", got.ResetAfterMs, s.reset}} {
		if in := since(d.want, start); d.got < in.lo || d.got > in.hi {
			diffs = append(diffs, fmt.Sprintf("%s %d ms, want within [%d, %d]", d.name, d.got, in.lo, in.hi))
		}
	}
	return strings.Join(diffs, "; ")
}

// runSteps runs a scenario on fresh limiters twice: one call per step, and
// all steps coalesced into one call. Both must give the step's results.
//
// A scenario assumes that no permit comes back while it runs (it takes
// milliseconds; a permit, hundreds). When a run took longer than half the
// time one permit takes to come back, as on an overloaded machine, its
// counts are void and it runs again.
func runSteps(t *testing.T, r *rig, c limiter.Config, steps []step) {
	t.Helper()
	premise := c.Interval / time.Duration(c.Rate) / 2 // a bucket refills continuously
	if c.Algo == limiter.SlidingLog {
		premise = c.Interval / 2 // a grant comes back after the whole interval
	}
	asks := make([]limiter.Ask, len(steps))
	for i, s := range steps {
		asks[i] = s.ask
	}
	retried(t, func(a *attempt) {
		begin := time.Now()
		start := begin
		one := r.create(t, fmt.Sprintf("%s/%d/separate", t.Name(), a.n), c)
		for i, s := range steps {
			if diff := s.mismatch(one.acquire(s.ask)[0], start); diff != "" {
				a.Errorf("separate calls, step %d (%d permits): %s", i, s.ask.Permits, diff)
			}
		}
		start = time.Now()
		batch := r.create(t, fmt.Sprintf("%s/%d/batch", t.Name(), a.n), c).acquire(asks...)
		for i, s := range steps {
			if diff := s.mismatch(batch[i], start); diff != "" {
				a.Errorf("one coalesced call, step %d (%d permits): %s", i, s.ask.Permits, diff)
			}
		}
		a.inTime("the scenario", time.Since(begin), premise)
	})
}

// attempt is one run of a sequence whose checks rest on a premise about
// time, such as "no permit comes back while the scenario runs". Its checks
// report here rather than to the test, so that a run the machine was too
// slow for can be thrown away.
type attempt struct {
	n    int // 0, 1 or 2: names each run's fresh limiters
	errs []string
	void string // the premise that broke, if one did
}

func (a *attempt) Helper() {}

func (a *attempt) Errorf(format string, args ...any) {
	a.errs = append(a.errs, fmt.Sprintf(format, args...))
}

// failed reports whether a check failed. A sequence stops there before a
// wait it took from a reply: a wrong reply could make the next phase late
// and void, hiding the failure.
func (a *attempt) failed() bool { return len(a.errs) > 0 }

// voidf throws the attempt away: the machine broke its premise.
func (a *attempt) voidf(format string, args ...any) {
	if a.void == "" {
		a.void = fmt.Sprintf(format, args...)
	}
}

// inTime voids the attempt when a part of it that may take at most slack
// took longer, and reports whether the premise held.
func (a *attempt) inTime(what string, took, slack time.Duration) bool {
	if took > slack {
		a.voidf("%s took %v, over its slack of %v", what, took, slack)
	}
	return a.void == ""
}

// retried runs a sequence whose checks rest on a premise about time up to
// 3 times, each on fresh limiters. A run whose premise broke (the machine
// was too slow for it) is thrown away and the sequence runs again; after 3
// such runs the test is skipped as overloaded. A sound run's failures are
// the test's.
func retried(t *testing.T, run func(a *attempt)) {
	t.Helper()
	var voids []string
	for n := range 3 {
		a := &attempt{n: n}
		run(a)
		if a.void == "" {
			for _, e := range a.errs {
				t.Error(e)
			}
			return
		}
		t.Logf("attempt %d thrown away: %s", n+1, a.void)
		voids = append(voids, a.void)
	}
	t.Skipf("machine overloaded: %s", strings.Join(voids, "; "))
}

func TestTokenBucketScenarios(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	burstSteps := []step{}
	for i := int64(1); i <= 10; i++ {
		burstSteps = append(burstSteps, step{ask: ask(1), granted: 1, remaining: 10 - i, reset: 1000 * i})
	}
	burstSteps = append(burstSteps, step{ask: ask(1), granted: 0, remaining: 0, retry: 1000, reset: 10000})

	// 71 per day: a permit refills in 86400000/71 ms, not a whole number of
	// µs, so the durations carry floating-point noise (71 of them make
	// 86400000000.00002 µs). Each is reported as its exact value rounded
	// up to whole ms: a whole day stays a whole day.
	const day = 86_400_000 // ms
	daySteps := []step{}
	for i := int64(1); i <= 71; i++ {
		daySteps = append(daySteps, step{ask: ask(1), granted: 1, remaining: 71 - i, reset: (i*day + 70) / 71})
	}
	daySteps = append(daySteps, step{ask: ask(1), granted: 0, remaining: 0, retry: (day + 70) / 71, reset: day})

	tests := []struct {
		name  string
		conf  limiter.Config
		steps []step
	}{
		{"rate 3 per second", tokenBucket(3, time.Second, 3), []step{
			{ask: ask(1), granted: 1, remaining: 2, reset: 334},
			{ask: ask(1), granted: 1, remaining: 1, reset: 667},
			{ask: ask(1), granted: 1, remaining: 0, reset: 1000},
			{ask: ask(1), granted: 0, remaining: 0, retry: 334, reset: 1000},
		}},
		{"burst above rate", tokenBucket(1, time.Second, 10), burstSteps},
		{"whole days stay whole", tokenBucket(71, 24*time.Hour, 71), daySteps},
		{"one request for a whole day", tokenBucket(71, 24*time.Hour, 71), []step{
			{ask: ask(71), granted: 1, remaining: 0, reset: day},
			{ask: ask(1), granted: 0, remaining: 0, retry: (day + 70) / 71, reset: day},
		}},
		{"several permits per request", tokenBucket(10, 10*time.Second, 10), []step{
			{ask: ask(4), granted: 1, remaining: 6, reset: 4000},
			{ask: ask(6), granted: 1, remaining: 0, reset: 10000},
			{ask: ask(3), granted: 0, remaining: 0, retry: 3000, reset: 10000},
		}},
		{"more than capacity is not a crash", tokenBucket(5, time.Hour, 5), []step{
			{ask: ask(6), granted: -1, remaining: 5},
			{ask: askWait(6, time.Hour), granted: -1, remaining: 5},
			{ask: ask(2), granted: 1, remaining: 3, reset: 2 * 720_000},
			{ask: ask(6), granted: -1, remaining: 3},
			{ask: ask(3), granted: 1, remaining: 0, reset: 5 * 720_000},
		}},
		{"denials take nothing", tokenBucket(5, time.Hour, 5), []step{
			{ask: ask(3), granted: 1, remaining: 2, reset: 3 * 720_000},
			{ask: ask(3), granted: 0, remaining: 2, retry: 720_000, reset: 3 * 720_000},
			{ask: ask(2), granted: 1, remaining: 0, reset: 5 * 720_000},
			{ask: ask(1), granted: 0, remaining: 0, retry: 720_000, reset: 5 * 720_000},
		}},
		// Neighbouring identical asks travel as runs: a run's denials leave
		// the next run (smaller asks, or one that may wait) to be decided
		// on what is left.
		{"runs", tokenBucket(10, 10*time.Second, 10), []step{
			{ask: ask(4), granted: 1, remaining: 6, reset: 4000},
			{ask: ask(4), granted: 1, remaining: 2, reset: 8000},
			{ask: ask(4), granted: 0, remaining: 2, retry: 2000, reset: 8000},
			{ask: ask(4), granted: 0, remaining: 2, retry: 2000, reset: 8000},
			{ask: ask(1), granted: 1, remaining: 1, reset: 9000},
			{ask: ask(1), granted: 1, remaining: 0, reset: 10000},
			{ask: ask(1), granted: 0, remaining: 0, retry: 1000, reset: 10000},
			{ask: askWait(1, time.Second), granted: 1, remaining: 0, retry: 1000, reset: 11000},
			{ask: askWait(1, time.Second), granted: 0, remaining: 0, retry: 2000, reset: 11000},
			{ask: ask(1), granted: 0, remaining: 0, retry: 2000, reset: 11000},
		}},
		{"reservations queue in order", tokenBucket(10, 10*time.Second, 10), []step{
			{ask: askWait(4, 10*time.Second), granted: 1, remaining: 6, reset: 4000}, // fits now: no wait
			{ask: ask(6), granted: 1, remaining: 0, reset: 10000},
			{ask: askWait(3, 10*time.Second), granted: 1, remaining: 0, retry: 3000, reset: 13000},
			{ask: askWait(2, 10*time.Second), granted: 1, remaining: 0, retry: 5000, reset: 15000}, // behind the 3
			{ask: askWait(5, time.Second), granted: 0, remaining: 0, retry: 10000, reset: 15000},
			{ask: ask(1), granted: 0, remaining: 0, retry: 6000, reset: 15000},
			{ask: askWait(1, 6*time.Second), granted: 1, remaining: 0, retry: 6000, reset: 16000},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, r, tc.conf, tc.steps)
		})
	}
}

func TestTokenBucketRefill(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	t.Run("granted again after retry_after", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "retry", tokenBucket(3, time.Second, 3))
		for range 3 {
			if res := l.take(1); !res.Granted {
				t.Fatalf("take: %+v, want granted", res)
			}
		}
		denied := l.take(1)
		if denied.Granted || denied.RetryAfterMs <= 0 || denied.RetryAfterMs > 1000 {
			t.Fatalf("4th take: %+v, want denied with 0 < retry_after_ms <= 1000", denied)
		}
		time.Sleep(time.Duration(denied.RetryAfterMs) * time.Millisecond)
		if res := l.take(1); !res.Granted {
			t.Errorf("take after sleeping retry_after (%d ms): %+v, want granted", denied.RetryAfterMs, res)
		}
	})

	t.Run("refill is lazy and continuous", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "lazy", tokenBucket(10, time.Second, 10))
		start := time.Now()
		if res := l.take(10); !res.Granted || res.Remaining != 0 {
			t.Fatalf("take 10: %+v", res)
		}
		time.Sleep(500 * time.Millisecond)
		// Half the interval refills half the bucket: 5 permits, or a few
		// more when the machine let more time pass.
		got := l.peek()
		if most := time.Since(start).Milliseconds() / 100; got < 5 || got > most {
			t.Errorf("available after half the interval = %d, want 5 to %d", got, most)
		}
		res := l.take(5)
		if !res.Granted || res.Remaining != got-5 {
			t.Errorf("take 5 of %d available: %+v, want granted with %d left", got, res, got-5)
		}
		within(t, "reset_after", res.ResetAfterMs, since(1500, start))
		if res.ResetAfterMs > 1000 {
			t.Errorf("reset_after = %d ms, want at most 1000 with half the bucket refilled", res.ResetAfterMs)
		}
	})
}

func TestTokenBucketReleaseAndPeek(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	l := r.create(t, "rel", tokenBucket(5, time.Hour, 5))
	state := l.state()[0]

	if got := l.peek(); got != 5 {
		t.Errorf("peek of a fresh bucket = %d, want 5", got)
	}
	l.take(3)
	for range 2 { // peeking takes nothing
		if got := l.peek(); got != 2 {
			t.Errorf("peek after taking 3 = %d, want 2", got)
		}
	}
	if got := l.release(1); got != 3 {
		t.Errorf("release 1 = %d, want 3 available", got)
	}
	if got := l.release(10); got != 5 {
		t.Errorf("release 10 = %d, want 5 (never above burst)", got)
	}
	if got := l.peek(); got != 5 {
		t.Errorf("peek after releasing too much = %d, want 5", got)
	}
	if n := r.rdb.Exists(t.Context(), state).Val(); n != 0 {
		t.Errorf("state key of a full bucket exists, want deleted")
	}
	if res := l.take(5); !res.Granted || res.Remaining != 0 {
		t.Errorf("take 5 after release: %+v, want granted with 0 left", res)
	}
}

func TestTokenBucketTTL(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	t.Run("state lives until full", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "state", tokenBucket(10, time.Second, 10))
		state := l.state()[0]
		if got := r.pttl(t, state); got != -2 {
			t.Fatalf("state key before any grant: PTTL %d, want -2 (no key)", got)
		}
		start := time.Now()
		l.take(4)
		within(t, "state PTTL after 4 of 10 per second", r.pttl(t, state), since(400, start))
		l.acquire(ask(6), askWait(2, time.Second)) // a reservation: 12 permits in use
		within(t, "state PTTL with a reservation", r.pttl(t, state), since(1200, start))
		l.release(12)
		if got := r.pttl(t, state); got != -2 {
			t.Errorf("state key after releasing everything: PTTL %d, want -2 (deleted)", got)
		}
		if got := r.pttl(t, r.keys.Config("state", 0)); got != -1 {
			t.Errorf("config key without TTL: PTTL %d, want -1", got)
		}
	})

	t.Run("config TTL is refreshed by each call", func(t *testing.T) {
		t.Parallel()
		c := tokenBucket(10, time.Second, 10)
		c.TTL = 5 * time.Second
		start := time.Now()
		l := r.create(t, "conf", c)
		conf := l.keys()[0]
		within(t, "config PTTL", r.pttl(t, conf), since(5000, start))
		for _, call := range []struct {
			name string
			do   func()
		}{
			{"acquire", func() { l.take(1) }},
			{"peek", func() { l.peek() }},
			{"release", func() { l.release(1) }},
		} {
			time.Sleep(300 * time.Millisecond)
			if got := r.pttl(t, conf); got > 4800 {
				t.Fatalf("config PTTL = %d after 300ms, want it to run down", got)
			}
			start := time.Now()
			call.do()
			within(t, "config PTTL after "+call.name, r.pttl(t, conf), since(5000, start))
		}
	})
}

func TestSlidingLogScenarios(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	tests := []struct {
		name  string
		conf  limiter.Config
		steps []step
	}{
		{"rate 100 per second", slidingLog(100, time.Second), []step{
			{ask: ask(5), granted: 1, remaining: 95, reset: 1000},
			{ask: ask(30), granted: 1, remaining: 65, reset: 1000},
			{ask: ask(100), granted: 0, remaining: 65, retry: 1000, reset: 1000},
			{ask: ask(101), granted: -1, remaining: 65},
			{ask: ask(65), granted: 1, remaining: 0, reset: 1000},
			{ask: ask(1), granted: 0, remaining: 0, retry: 1000, reset: 1000},
		}},
		{"no reservations", slidingLog(2, time.Second), []step{
			{ask: askWait(2, time.Hour), granted: 1, remaining: 0, reset: 1000},
			{ask: askWait(1, time.Hour), granted: 0, remaining: 0, retry: 1000, reset: 1000},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, r, tc.conf, tc.steps)
		})
	}
}

// grants reads a sliding log: the permits of each entry by its score (ms;
// its member says the microsecond of its latest grant, in that ms).
func (r *rig) grants(t *testing.T, key string) (scores []int64, permits []int64) {
	t.Helper()
	zs, err := r.rdb.ZRangeWithScores(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	for _, z := range zs {
		m := z.Member.(string)
		us, p, ok := strings.Cut(m, ":")
		n, err := strconv.ParseInt(p, 10, 64)
		at, err2 := strconv.ParseInt(us, 10, 64)
		if !ok || err != nil || err2 != nil || at/1000 != int64(z.Score) {
			t.Fatalf("sliding log entry %q (score %v): want \"<us>:<permits>\", us in the score's ms", m, z.Score)
		}
		scores = append(scores, int64(z.Score))
		permits = append(permits, n)
	}
	return scores, permits
}

func TestSlidingLog(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	// Redisson RRateLimiter: a denial waits until enough earlier grants have
	// left the window, not just the oldest.
	t.Run("retry waits for every grant it needs", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "redisson", slidingLog(100, time.Second))
		if res := l.take(5); !res.Granted || res.Remaining != 95 {
			t.Fatalf("take 5: %+v, want 95 left", res)
		}
		time.Sleep(100 * time.Millisecond)
		if res := l.take(30); !res.Granted || res.Remaining != 65 {
			t.Fatalf("take 30: %+v, want 65 left", res)
		}
		scores, _ := r.grants(t, l.state()[0])
		if len(scores) != 2 || scores[1]-scores[0] < 100 {
			t.Fatalf("log scores %v, want two grants 100ms apart", scores)
		}
		before := r.redisMs(t)
		denied := l.take(100)
		after := r.redisMs(t)
		if denied.Granted {
			t.Fatalf("take 100 with 65 left: %+v, want denied", denied)
		}
		// The 30-permit grant leaves the window: one interval after it, some
		// time in the ms after its score (rounded up to whole ms).
		leaves := scores[1] + 1000
		within(t, "retry_after", denied.RetryAfterMs, span{leaves - after, leaves - before + 1})
		within(t, "reset_after", denied.ResetAfterMs, span{leaves - after, leaves - before + 1})
		time.Sleep(time.Duration(denied.RetryAfterMs) * time.Millisecond)
		if res := l.take(50); !res.Granted || res.Remaining != 50 {
			t.Errorf("take 50 after the window: %+v, want granted with 50 left", res)
		}
	})

	t.Run("expired grants give permits back", func(t *testing.T) {
		t.Parallel()
		const window = 1200
		l := r.create(t, "expiry", slidingLog(10, window*time.Millisecond))
		l.take(4)
		time.Sleep(window / 2 * time.Millisecond)
		l.take(6)
		scores, _ := r.grants(t, l.state()[0])
		if len(scores) != 2 {
			t.Fatalf("log holds %d entries, want 2", len(scores))
		}
		before := r.redisMs(t)
		denied := l.take(1)
		after := r.redisMs(t)
		if denied.Granted {
			t.Fatalf("take 1 of a full log: %+v, want denied", denied)
		}
		// The 4-permit grant leaves the window first, the 6-permit one later.
		// (Each one interval after its grant, in the ms after its score.)
		within(t, "retry_after", denied.RetryAfterMs, span{scores[0] + window - after, scores[0] + window - before + 1})
		within(t, "reset_after", denied.ResetAfterMs, span{scores[1] + window - after, scores[1] + window - before + 1})
		time.Sleep(time.Duration(denied.RetryAfterMs) * time.Millisecond)
		got := l.peek()
		if r.redisMs(t) >= scores[1]+window {
			t.Skip("machine overloaded: the second grant left the window too before the test could look")
		}
		if got != 4 {
			t.Errorf("available once the first grant expired = %d, want 4", got)
		}
		if _, permits := r.grants(t, l.state()[0]); len(permits) != 1 || permits[0] != 6 {
			t.Errorf("log after expiry holds %v, want only the 6-permit grant", permits)
		}
	})

	// A log written by an older rlproxy ("<ms>:<permits>" members) goes on
	// working: an entry counts until one interval after the end of its
	// millisecond, an expired one gives its permits back.
	t.Run("entries of an older rlproxy", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "older", slidingLog(3, time.Second))
		now := r.redisMs(t)
		log, counter := l.state()[0], l.state()[1]
		if err := r.rdb.ZAdd(t.Context(), log,
			redis.Z{Score: float64(now - 5000), Member: fmt.Sprintf("%d:1", now-5000)},
			redis.Z{Score: float64(now - 100), Member: fmt.Sprintf("%d:2", now-100)}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.Set(t.Context(), counter, 3, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if res := l.take(1); !res.Granted || res.Remaining != 0 {
			t.Fatalf("take 1 with 2 of 3 used (1 expired): %+v, want granted with 0 left", res)
		}
		denied := l.take(1)
		after := r.redisMs(t)
		if denied.Granted {
			t.Fatalf("take 1 of a full log: %+v, want denied", denied)
		}
		// The 2 old permits leave 1 s after the end of their ms.
		leaves := now - 100 + 1 + 1000
		within(t, "retry_after", denied.RetryAfterMs, span{leaves - after, leaves - now + 1})
		if zs, err := r.rdb.ZRangeWithScores(t.Context(), log, 0, -1).Result(); err != nil || len(zs) != 2 || zs[0].Score != float64(now-100) {
			t.Errorf("log %v (%v), want the old entry of %d and the new grant", zs, err, now-100)
		}
	})

	t.Run("one entry per millisecond", func(t *testing.T) {
		t.Parallel()
		const calls = 200
		l := r.create(t, "burst", slidingLog(1000, time.Minute))
		script := r.scripts.Limiter(limiter.SlidingLog)
		if err := script.Load(t.Context(), r.rdb).Err(); err != nil {
			t.Fatal(err)
		}
		before := r.redisMs(t)
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.Cmd, calls)
		for i := range cmds {
			cmds[i] = script.EvalSha(t.Context(), pipe, l.keys(), limiter.AcquireArgs(l.epoch, []limiter.Ask{ask(1)})...)
		}
		if _, err := pipe.Exec(t.Context()); err != nil {
			t.Fatal(err)
		}
		after := r.redisMs(t)
		for i, c := range cmds {
			rep, err := limiter.DecodeReply(c.Val(), limiter.OpAcquire, []limiter.Ask{ask(1)})
			if err != nil || !rep.Results[0].Granted || rep.Results[0].Remaining != int64(999-i) {
				t.Fatalf("call %d: %+v %v, want granted with %d left", i, rep, err, 999-i)
			}
		}
		scores, permits := r.grants(t, l.state()[0])
		var sum int64
		for i, p := range permits {
			sum += p
			if i > 0 && scores[i] == scores[i-1] {
				t.Errorf("two entries for ms %d", scores[i])
			}
		}
		if sum != calls {
			t.Errorf("log entries hold %d permits, want %d", sum, calls)
		}
		if distinct := after - before + 1; int64(len(scores)) > distinct || len(scores) >= calls/2 {
			t.Errorf("%d log entries for %d grants within %d distinct ms, want one per ms", len(scores), calls, distinct)
		}
		if used, err := r.rdb.Get(t.Context(), l.state()[1]).Int64(); err != nil || used != calls {
			t.Errorf("used counter = %d (%v), want %d", used, err, calls)
		}
	})

	t.Run("both keys have TTLs", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "ttl", slidingLog(100, time.Second))
		start := time.Now()
		l.take(5)
		for _, k := range l.state() {
			within(t, k+" PTTL", r.pttl(t, k), since(1000, start))
		}
		time.Sleep(200 * time.Millisecond)
		start = time.Now()
		l.take(1) // the newest grant sets the TTL
		for _, k := range l.state() {
			within(t, k+" PTTL after a newer grant", r.pttl(t, k), since(1000, start))
		}
		l.release(6)
		for _, k := range l.state() {
			if got := r.pttl(t, k); got != -2 {
				t.Errorf("%s after releasing every permit: PTTL %d, want -2 (deleted)", k, got)
			}
		}
	})

	t.Run("release shrinks the newest grants", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "release", slidingLog(100, time.Minute))
		l.take(5)
		time.Sleep(5 * time.Millisecond)
		l.take(30)
		if got := l.release(10); got != 75 {
			t.Errorf("release 10 = %d, want 75 available", got)
		}
		if _, permits := r.grants(t, l.state()[0]); len(permits) != 2 || permits[0] != 5 || permits[1] != 20 {
			t.Errorf("log after release 10 = %v, want [5 20]", permits)
		}
		if got := l.release(22); got != 97 {
			t.Errorf("release 22 = %d, want 97 available", got)
		}
		if _, permits := r.grants(t, l.state()[0]); len(permits) != 1 || permits[0] != 3 {
			t.Errorf("log after release 22 more = %v, want [3]", permits)
		}
		if got := l.release(1000); got != 100 {
			t.Errorf("release 1000 = %d, want 100 (never below 0 used)", got)
		}
		if got := l.release(1); got != 100 {
			t.Errorf("release on an empty log = %d, want 100", got)
		}
		if res := l.take(100); !res.Granted || res.Remaining != 0 {
			t.Errorf("take 100 after releasing everything: %+v", res)
		}
	})

	t.Run("lost counter is recounted from the log", func(t *testing.T) {
		t.Parallel()
		l := r.create(t, "recount", slidingLog(100, time.Minute))
		l.take(5)
		l.take(30)
		r.rdb.Del(t.Context(), l.state()[1])
		if got := l.peek(); got != 65 {
			t.Errorf("available after losing the counter = %d, want 65", got)
		}
	})
}

func TestStatus(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, algo := range []limiter.Algo{limiter.TokenBucket, limiter.SlidingLog} {
		conf := slidingLog(3, time.Hour)
		if algo == limiter.TokenBucket {
			conf = tokenBucket(3, time.Hour, 3)
		}
		t.Run(string(algo), func(t *testing.T) {
			t.Parallel()
			name := "status-" + string(algo)
			calls := []struct {
				op   limiter.Op
				asks []limiter.Ask
				args func(epoch string) []any
			}{
				{limiter.OpAcquire, []limiter.Ask{ask(1)}, func(e string) []any { return limiter.AcquireArgs(e, []limiter.Ask{ask(1)}) }},
				{limiter.OpPeek, nil, func(e string) []any { return limiter.Args(limiter.OpPeek, e) }},
				{limiter.OpRelease, nil, func(e string) []any { return limiter.Args(limiter.OpRelease, e, 1) }},
			}

			missing := r.open(t, name, algo, "e1")
			for _, c := range calls {
				if rep := missing.call(c.op, c.asks, c.args("e1")); rep.Status != limiter.StatusNoLimiter || rep.Epoch != "" {
					t.Errorf("%s on a missing limiter: %+v, want StatusNoLimiter", c.op, rep)
				}
			}

			l := r.create(t, name, conf)
			for _, c := range calls {
				rep := l.call(c.op, c.asks, c.args("stale"))
				if rep.Status != limiter.StatusEpochChange || rep.Epoch != "e1" {
					t.Errorf("%s with a wrong epoch: %+v, want StatusEpochChange with epoch e1", c.op, rep)
				}
				if rep := l.call(c.op, c.asks, c.args("")); rep.Status != limiter.StatusOK || rep.Epoch != "e1" {
					t.Errorf("%s with no epoch (no check): %+v, want OK in epoch e1", c.op, rep)
				}
			}
			// The stale calls took nothing; the unchecked acquire and release cancel out.
			if got := l.peek(); got != 3 {
				t.Fatalf("available = %d, want 3", got)
			}

			// reset.lua moves to a new epoch: the old state is no longer read.
			old, err := r.scripts.Reset.Run(t.Context(), r.rdb, []string{r.keys.Config(name, 0)}, "e2").Text()
			if err != nil || old != "e1" {
				t.Fatalf("reset = %q, %v; want the old epoch e1", old, err)
			}
			if rep := l.call(limiter.OpPeek, nil, limiter.Args(limiter.OpPeek, "e1")); rep.Status != limiter.StatusEpochChange || rep.Epoch != "e2" {
				t.Errorf("peek in the old epoch after reset: %+v, want StatusEpochChange with epoch e2", rep)
			}
			if got := r.open(t, name, algo, "e2").peek(); got != 3 {
				t.Errorf("available in the new epoch = %d, want 3 (fresh state)", got)
			}
			err = r.scripts.Reset.Run(t.Context(), r.rdb, []string{r.keys.Config(name+"-missing", 0)}, "e2").Err()
			if !errors.Is(err, redis.Nil) {
				t.Errorf("reset of a missing limiter: %v, want nil reply", err)
			}
		})
	}
}

func TestSetConf(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	tb10, tb20 := tokenBucket(10, time.Hour, 10), tokenBucket(20, time.Hour, 20)
	sl100, sl200 := slidingLog(100, time.Hour), slidingLog(200, time.Hour)
	withTTL := func(c limiter.Config, d time.Duration) limiter.Config { c.TTL = d; return c }
	withMode := func(c limiter.Config, m limiter.Mode) limiter.Config { c.Mode = m; return c }
	sharded := tb20
	sharded.Shards = 2 // shard 0 gets 10 of 20

	tests := []struct {
		name   string
		first  limiter.Config
		used   int64 // permits taken under the first config
		second limiter.Config
		opts   limiter.SetConfOptions // Epoch is always "e2"
		// changed reports a written config; newEpoch that state was reset.
		changed, newEpoch bool
		available         int64 // afterwards, in the epoch in force
	}{
		{"identical config keeps state", tb10, 4, tb10, limiter.SetConfOptions{}, false, false, 6},
		{"identical config with KEEPSTATE", tb10, 4, tb10, limiter.SetConfOptions{KeepState: true}, false, false, 6},
		{"NX never changes an existing config", tb10, 4, tb20, limiter.SetConfOptions{NX: true}, false, false, 6},
		{"NX with KEEPSTATE changes nothing either", tb10, 4, sl100, limiter.SetConfOptions{NX: true, KeepState: true}, false, false, 6},
		{"changed rate resets state", tb10, 4, tb20, limiter.SetConfOptions{}, true, true, 20},
		{"changed TTL resets state", tb10, 4, withTTL(tb10, time.Hour), limiter.SetConfOptions{}, true, true, 10},
		{"KEEPSTATE carries used tokens over", tb10, 4, tb20, limiter.SetConfOptions{KeepState: true}, true, false, 16},
		{"KEEPSTATE with a lower rate", tb20, 15, tb10, limiter.SetConfOptions{KeepState: true}, true, false, 0},
		{"KEEPSTATE carries the sliding log over", sl100, 35, sl200, limiter.SetConfOptions{KeepState: true}, true, false, 165},
		{"KEEPSTATE with only the TTL changed", tb10, 4, withTTL(tb10, time.Hour), limiter.SetConfOptions{KeepState: true}, true, false, 6},
		{"KEEPSTATE with another algorithm", tb10, 4, slidingLog(10, time.Hour), limiter.SetConfOptions{KeepState: true}, true, true, 10},
		{"KEEPSTATE with another mode", tb10, 4, withMode(tb10, limiter.PerClient), limiter.SetConfOptions{KeepState: true}, true, true, 10},
		{"KEEPSTATE with other shards", tb10, 4, sharded, limiter.SetConfOptions{KeepState: true}, true, true, 10},
		{"fewer shards report the old count", sharded, 4, tb10, limiter.SetConfOptions{}, true, true, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			name := t.Name()
			l := r.create(t, name, tc.first)
			if tc.used > 0 {
				if res := l.take(tc.used); !res.Granted {
					t.Fatalf("take %d: %+v", tc.used, res)
				}
			}
			opts := tc.opts
			opts.Epoch = "e2"
			changed, epoch, oldShards := r.setConf(t, name, tc.second, opts)
			wantEpoch := "e1"
			if tc.newEpoch {
				wantEpoch = "e2"
			}
			if changed != tc.changed || epoch != wantEpoch || oldShards != tc.first.Shards {
				t.Errorf("setconf = (changed %v, epoch %q, oldShards %d), want (%v, %q, %d)",
					changed, epoch, oldShards, tc.changed, wantEpoch, tc.first.Shards)
			}
			stored, err := r.rdb.HGetAll(t.Context(), r.keys.Config(name, 0)).Result()
			if err != nil {
				t.Fatal(err)
			}
			got, err := limiter.ParseStored(stored)
			if err != nil {
				t.Fatal(err)
			}
			wantConf := tc.first
			if tc.changed {
				wantConf = tc.second
			}
			if got.Config != wantConf || got.Epoch != wantEpoch {
				t.Errorf("stored config %+v, want %+v in epoch %s", got, wantConf, wantEpoch)
			}
			if avail := r.open(t, name, got.Algo, epoch).peek(); avail != tc.available {
				t.Errorf("available afterwards = %d, want %d", avail, tc.available)
			}
		})
	}

	t.Run("NX keeps the stored TTL", func(t *testing.T) {
		t.Parallel()
		r.create(t, "nx-no-ttl", tb10)
		r.setConf(t, "nx-no-ttl", withTTL(tb10, time.Second), limiter.SetConfOptions{NX: true, Epoch: "e2"})
		if got := r.pttl(t, r.keys.Config("nx-no-ttl", 0)); got != -1 {
			t.Errorf("config PTTL after NX with a TTL = %d, want -1: the stored config has no TTL", got)
		}
		start := time.Now()
		r.create(t, "nx-ttl", withTTL(tb10, 5*time.Second))
		r.setConf(t, "nx-ttl", withTTL(tb10, time.Hour), limiter.SetConfOptions{NX: true, Epoch: "e2"})
		within(t, "config PTTL after NX with another TTL", r.pttl(t, r.keys.Config("nx-ttl", 0)), since(5000, start))
	})

	t.Run("an unchanged config refreshes its TTL", func(t *testing.T) {
		t.Parallel()
		name := "refresh-ttl"
		c := withTTL(tb10, 5*time.Second)
		conf := r.keys.Config(name, 0)
		r.create(t, name, c)
		for _, o := range []limiter.SetConfOptions{{}, {NX: true}} {
			time.Sleep(300 * time.Millisecond)
			old := r.pttl(t, conf)
			start := time.Now()
			if changed, _, _ := r.setConf(t, name, c, o); changed {
				t.Errorf("setconf %+v of an identical config reported a change", o)
			}
			got := r.pttl(t, conf)
			within(t, "config PTTL after an unchanged setconf", got, since(5000, start))
			if got <= old {
				t.Errorf("config PTTL %d ms before an unchanged setconf, %d ms after: want it refreshed", old, got)
			}
		}
	})
}

// Time comes from the Redis server (TIME inside the script): stored
// timestamps fall between two readings of the server's clock.
func TestClockIsRedisTime(t *testing.T) {
	t.Parallel()
	r := newRig(t)

	// Slow rates: the state must outlive a loaded machine's pause before it is read.
	tb := r.create(t, "clock-tb", tokenBucket(10, time.Minute, 10))
	before := r.redisMs(t)
	tb.take(1)
	after := r.redisMs(t)
	v, err := r.rdb.Get(t.Context(), tb.state()[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	_, ts, _ := strings.Cut(v, ":")
	us, err := strconv.ParseFloat(ts, 64)
	if err != nil {
		t.Fatalf("token bucket state %q: want \"level:ts\"", v)
	}
	within(t, "token bucket timestamp", int64(us/1000), span{before, after})

	sl := r.create(t, "clock-sl", slidingLog(10, time.Minute))
	before = r.redisMs(t)
	sl.take(1)
	after = r.redisMs(t)
	scores, _ := r.grants(t, sl.state()[0])
	if len(scores) != 1 {
		t.Fatalf("sliding log holds %d entries, want 1", len(scores))
	}
	within(t, "sliding log score", scores[0], span{before, after})
}

// A batch of identical asks travels as one run and is answered in 8
// values, however many asks it carries; expanded, its results are those
// the same asks get one call each: the same grants and remaining, and
// durations that differ only by the time between the calls.
func TestRunDecidesLikeSeparateCalls(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const asks = 300
	tests := []struct {
		name    string
		conf    limiter.Config
		permits int64
		granted int   // how many of the asks are granted
		left    int64 // remaining after the last grant, and for the denials
	}{
		{"token bucket", tokenBucket(100, time.Hour, 100), 1, 100, 0},
		{"token bucket, 3 permits each", tokenBucket(100, time.Hour, 100), 3, 33, 1},
		{"token bucket, burst above rate", tokenBucket(10, time.Hour, 100), 1, 100, 0},
		{"sliding log", slidingLog(100, time.Hour), 1, 100, 0},
		{"sliding log, 7 permits each", slidingLog(100, time.Hour), 7, 14, 2},
		{"fixed window", fixedWindow(100, 24*time.Hour), 1, 100, 0},
		{"fixed window, 7 permits each", fixedWindow(100, 24*time.Hour), 7, 14, 2},
		{"sliding window", slidingWindow(100, 24*time.Hour), 1, 100, 0},
		{"sliding window, 7 permits each", slidingWindow(100, 24*time.Hour), 7, 14, 2},
		{"leaky bucket", leakyBucket(100, time.Hour, 100), 1, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run := make([]limiter.Ask, asks)
			for i := range run {
				run[i] = ask(tc.permits)
			}
			retried(t, func(a *attempt) {
				begin := time.Now()
				before := r.clock(t)

				l := r.create(t, fmt.Sprintf("%s/%d/batch", t.Name(), a.n), tc.conf)
				v, err := r.scripts.Limiter(l.algo).Run(t.Context(), r.rdb, l.keys(), limiter.AcquireArgs(l.epoch, run)...).Result()
				if err != nil {
					t.Fatal(err)
				}
				if raw, _ := v.([]any); len(raw) != 2+8 {
					a.Errorf("reply to a run of %d asks has %d values, want %d: %v", asks, len(raw), 2+8, v)
				}
				rep, err := limiter.DecodeReply(v, limiter.OpAcquire, run)
				if err != nil {
					t.Fatal(err)
				}
				l.mustOK(rep)
				batch := rep.Results

				one := r.create(t, fmt.Sprintf("%s/%d/separate", t.Name(), a.n), tc.conf)
				separate := make([]limiter.Result, asks)
				for i := range separate {
					separate[i] = one.take(tc.permits)
				}

				after := r.clock(t)
				took := time.Since(begin)
				// Windows must not turn, and no permit come back (token
				// bucket: one per 36 s; leaky bucket: one per 36 s).
				if !sameWindow(before, after, tc.conf.Interval) {
					a.voidf("a window turned while the test ran")
				}
				if !a.inTime("the calls", took, 10*time.Second) {
					return
				}

				if len(batch) != asks {
					t.Fatalf("%d results for %d asks", len(batch), asks)
				}
				if got := granted(batch); got != tc.granted {
					a.Errorf("batch: %d granted, want %d", got, tc.granted)
				}
				if got := granted(separate); got != tc.granted {
					a.Errorf("separate calls: %d granted, want %d", got, tc.granted)
				}
				slack := took.Milliseconds() + 2
				for i := range batch {
					b, s := batch[i], separate[i]
					wantGrant := i < tc.granted
					want := tc.left
					if wantGrant && tc.granted > 1 {
						want = tc.left + tc.permits*int64(tc.granted-1-i)
					}
					if b.Granted != wantGrant || b.Remaining != want || b.OverCapacity {
						a.Errorf("batch ask %d: %+v, want granted %v with %d left", i, b, wantGrant, want)
					}
					if s.Granted != b.Granted || s.Remaining != b.Remaining || s.OverCapacity {
						a.Errorf("ask %d: separate call %+v, batch %+v: want the same decision and remaining", i, s, b)
					}
					for _, d := range []struct {
						what       string
						batch, sep int64
					}{{"retry_after", b.RetryAfterMs, s.RetryAfterMs}, {"reset_after", b.ResetAfterMs, s.ResetAfterMs}} {
						if diff := d.batch - d.sep; diff < -slack || diff > slack {
							a.Errorf("ask %d: %s %d ms in the batch, %d ms by a separate call: want within %d ms", i, d.what, d.batch, d.sep, slack)
						}
					}
					if b.Granted && (b.RetryAfterMs != 0 || b.RetryAfterUs != 0) {
						a.Errorf("batch ask %d: %+v: a grant without waiting has retry_after 0", i, b)
					}
					if !b.Granted {
						if b != batch[tc.granted] {
							a.Errorf("batch ask %d: %+v, want the same denial as ask %d: %+v", i, b, tc.granted, batch[tc.granted])
						}
						if b.RetryAfterMs <= 0 || b.RetryAfterUs <= (b.RetryAfterMs-1)*1000 || b.RetryAfterUs > b.RetryAfterMs*1000 {
							a.Errorf("batch ask %d: retry_after %d ms, %d µs: want > 0 and the µs rounding up to the ms", i, b.RetryAfterMs, b.RetryAfterUs)
						}
					}
				}
			})
		})
	}
}

// A sliding window decides a run of identical asks in closed form
// (try_run) weighing the previous window's count as each separate call
// does: with a previous window written into the state, a batch grants
// what separate calls grant, with the same remaining, and as many as the
// weighted estimate leaves room for.
func TestSlidingWindowRunWeighsThePreviousWindow(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const asks, prev = 300, 60
	conf := slidingWindow(100, 24*time.Hour)
	iv := conf.Interval.Microseconds()
	// grants is how many asks of n fit at tm: estimate + n <= rate.
	grants := func(tm time.Time, n int64) int {
		start := tm.UnixMicro() / iv * iv
		w := 1 - float64(tm.UnixMicro()-start)/float64(iv)
		return int(math.Floor((100-prev*w)/float64(n) + 1e-9))
	}
	for _, permits := range []int64{1, 7} {
		t.Run(fmt.Sprint(permits, " permits each"), func(t *testing.T) {
			t.Parallel()
			run := make([]limiter.Ask, asks)
			for i := range run {
				run[i] = ask(permits)
			}
			retried(t, func(a *attempt) {
				begin := time.Now()
				before := r.clock(t)
				start := before.UnixMicro() / iv * iv
				var ls []*lim
				for _, how := range []string{"batch", "separate"} {
					l := r.create(t, fmt.Sprintf("%s/%d/%s", t.Name(), a.n, how), conf)
					state := fmt.Sprintf("%d:%d:0", start, prev) // the previous window counted prev
					if err := r.rdb.Set(t.Context(), l.state()[0], state, 48*time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
					ls = append(ls, l)
				}
				batch := ls[0].acquire(run...)
				separate := make([]limiter.Result, asks)
				for i := range separate {
					separate[i] = ls[1].take(permits)
				}
				after := r.clock(t)
				if !sameWindow(before, after, conf.Interval) {
					a.voidf("a window turned while the test ran")
				}
				if grants(before, permits) != grants(after, permits) {
					a.voidf("the weighted estimate crossed a whole permit while the test ran")
				}
				if !a.inTime("the calls", time.Since(begin), 10*time.Second) {
					return
				}
				want := grants(before, permits)
				if got := granted(batch); got != want {
					a.Errorf("batch: %d granted, want %d (the previous window's %d weighed)", got, want, prev)
				}
				if got := granted(separate); got != want {
					a.Errorf("separate calls: %d granted, want %d", got, want)
				}
				for i := range batch {
					b, s := batch[i], separate[i]
					if b.Granted != s.Granted || b.Remaining != s.Remaining {
						a.Errorf("ask %d: batch %+v, separate call %+v: want the same decision and remaining", i, b, s)
					}
				}
			})
		})
	}
}

// A denial or a peek changes nothing: the state is not written again (a
// write with a TTL is most of such a call's cost in Redis), unless the
// key's TTL has come to fall short of the state's — then it is written,
// so the state cannot expire early. The rig's Redis serves this test
// alone, so its count of SET calls shows every write.
func TestUnchangedStateIsNotRewritten(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	sets := func(t *testing.T) int64 {
		t.Helper()
		info, err := r.rdb.Info(t.Context(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(info, "cmdstat_set:calls=")
		if !ok {
			return 0
		}
		n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %v", err)
		}
		return n
	}
	for _, c := range []limiter.Config{
		tokenBucket(2, time.Hour, 2), leakyBucket(2, time.Hour, 2),
		fixedWindow(2, 24*time.Hour), slidingWindow(2, 24*time.Hour),
	} {
		t.Run(string(c.Algo), func(t *testing.T) { // not parallel: SET counts are per server
			l := r.create(t, "unchanged-"+string(c.Algo), c)
			state := l.state()[0]
			l.takes(2) // the leaky bucket grants the first only
			before := sets(t)
			for range 10 {
				if res := l.take(1); res.Granted {
					t.Fatalf("take past the limit: %+v, want denied", res)
				}
				l.peek()
			}
			// At most two writes of 20 calls: PTTL counts from Redis's
			// millisecond clock, which may lag the script's TIME by a
			// millisecond at the write (the check then fails once, and
			// the rewrite sets the TTL afresh), or more when a loaded
			// machine preempts a script between TIME and PTTL.
			if n := sets(t) - before; n > 2 {
				t.Errorf("10 denials and 10 peeks wrote the state %d times, want at most 2", n)
			}

			// A TTL shorter than the state's (as after a rate change that
			// kept the state) is put right by the next call.
			full := r.pttl(t, state)
			if err := r.rdb.PExpire(t.Context(), state, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			l.take(1)
			if got := r.pttl(t, state); got < full-1000 {
				t.Errorf("state PTTL %d ms after a denial, want its own TTL (%d ms) back", got, full)
			}
		})
	}
}
