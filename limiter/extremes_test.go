package limiter_test

// The extremes of every algorithm (issue 12): every config the parser
// accepts (rate and burst up to 10⁹, interval up to 366 days, TTL up to
// 3650 days, permits up to capacity, waits up to 3650 days) gets a clean
// reply from the scripts, never a script error, with every figure in range.

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

const (
	day     = 24 * time.Hour
	maxWait = 3650 * day // TIMEOUT's limit
	maxTTL  = 3650 * day
)

// extremeConfigs lists the corners of the config space Check accepts.
func extremeConfigs() []limiter.Config {
	var out []limiter.Config
	for _, algo := range limiter.Algos {
		if algo == limiter.Concurrency {
			continue // no acquire: TestConcurrencyExtremes
		}
		for _, rate := range []int64{1, 7, limiter.MaxRate} {
			for _, interval := range []time.Duration{time.Millisecond, 1001 * time.Millisecond, limiter.MaxInterval} {
				bursts := []int64{rate}
				if algo.HasBurst() {
					bursts = []int64{1, rate, 36500, limiter.MaxRate}
				}
				for _, burst := range bursts {
					for _, shards := range []int{1, 3} {
						c := limiter.Config{Algo: algo, Rate: rate, Interval: interval, Burst: burst,
							Shards: shards, Mode: limiter.Overall, TTL: maxTTL}
						if int64(shards) > min(rate, burst) || c.Check() != nil {
							continue
						}
						out = append(out, c)
					}
				}
			}
		}
	}
	return out
}

func TestExtremesGiveCleanReplies(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for i, c := range extremeConfigs() {
		name := fmt.Sprintf("x%d-%s-%d-%v-%d-%d", i, c.Algo, c.Rate, c.Interval, c.Burst, c.Shards)
		t.Run(name, func(t *testing.T) {
			sub := shard0(c)
			capacity := sub.Rate
			if c.Algo.HasBurst() {
				capacity = sub.Burst
			}
			ps := []int64{1}
			if capacity > 1 {
				ps = append(ps, capacity)
			}
			for _, p := range ps {
				l := r.create(t, fmt.Sprintf("%s-%d", name, p), c)
				// The longest any figure may honestly be: a full bucket's
				// refill (a shard's may be up to twice the limiter's), two
				// windows, and a reservation's wait on top.
				longest := 2*limiter.MaxRefill + 2*c.Interval + maxWait
				check := func(what string, res limiter.Result) {
					t.Helper()
					if res.OverCapacity {
						return
					}
					if res.Remaining < 0 || res.Remaining > capacity {
						t.Errorf("%s: remaining %d, want 0..%d", what, res.Remaining, capacity)
					}
					for _, d := range []struct {
						name string
						ms   int64
					}{{"retry_after", res.RetryAfterMs}, {"reset_after", res.ResetAfterMs}} {
						if d.ms < 0 || d.ms > longest.Milliseconds() {
							t.Errorf("%s: %s %d ms, want 0..%d", what, d.name, d.ms, longest.Milliseconds())
						}
					}
					if res.RetryAfterUs < 0 || (res.RetryAfterUs+999)/1000 != res.RetryAfterMs {
						t.Errorf("%s: retry_after %d µs vs %d ms", what, res.RetryAfterUs, res.RetryAfterMs)
					}
				}
				steps := [][]limiter.Ask{
					{ask(p)}, {ask(p)}, {askWait(p, maxWait)}, {askWait(p, maxWait)},
					{ask(1), ask(1), ask(1), ask(1), ask(1)}, {askWait(1, limiter.MaxInterval)},
				}
				for j, asks := range steps {
					for k, res := range l.acquire(asks...) {
						check(fmt.Sprintf("step %d ask %d (%+v)", j, k, asks[k]), res)
					}
				}
				if n := l.peek(); n < 0 || n > capacity {
					t.Errorf("peek = %d, want 0..%d", n, capacity)
				}
				if n := l.release(limiter.MaxRate); n < 0 || n > capacity {
					t.Errorf("release = %d, want 0..%d", n, capacity)
				}
				if res := l.take(capacity + 1); !res.OverCapacity {
					t.Errorf("%d permits of a capacity of %d: %+v, want over capacity", capacity+1, capacity, res)
				}
				check("after release", l.take(p))
				for _, key := range l.state() {
					if ms := r.pttl(t, key); ms == -1 {
						t.Errorf("state key %s has no TTL", key)
					}
				}
			}
		})
	}
}

// The configs Check rejects are exactly those whose full bucket takes
// over MaxRefill to refill, and the parser's message names the limit.
func TestConfigCheck(t *testing.T) {
	tb := func(rate int64, interval time.Duration, burst int64) limiter.Config {
		return limiter.Config{Algo: limiter.TokenBucket, Rate: rate, Interval: interval, Burst: burst, Shards: 1, Mode: limiter.Overall}
	}
	// Issue 12's reproduction: a Lua error before.
	if err := tb(1, 366*day, limiter.MaxRate).Check(); err == nil {
		t.Error("BURST 10^9 at 1 per 366d: no error")
	} else if want := "BURST 1000000000 at 1 per 366d takes longer than 36500 days to refill (burst × interval / rate is at most 36500 days)"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
	if err := tb(1, day, 36500).Check(); err != nil {
		t.Errorf("36500 at 1 per day (exactly 36500 days): %v", err)
	}
	if err := tb(1, day, 36501).Check(); err == nil {
		t.Error("36501 at 1 per day: no error")
	}
	if err := tb(limiter.MaxRate, time.Millisecond, limiter.MaxRate).Check(); err != nil {
		t.Errorf("10^9 per ms: %v", err)
	}
	lb := tb(10, limiter.MaxInterval, limiter.MaxRate)
	lb.Algo = limiter.LeakyBucket
	if lb.Check() == nil {
		t.Error("leaky-bucket: the same limit applies")
	}
	// The window algorithms' capacity is their rate: nothing to check.
	fw := tb(1, limiter.MaxInterval, 1)
	fw.Algo = limiter.FixedWindow
	if err := fw.Check(); err != nil {
		t.Errorf("fixed-window: %v", err)
	}
	if math.MaxInt64/int64(time.Millisecond) < int64(limiter.MaxRefill/time.Millisecond) {
		t.Error("MaxRefill does not fit int64 ms")
	}
}

// A semaphore at the corners of what RL.SETRATE accepts (limit 1e9,
// lease TTLs from 1 ms to 366 days) answers cleanly: a lease of the whole
// limit, a renewal to the longest TTL, a return.
func TestConcurrencyExtremes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, limit := range []int64{1, limiter.MaxRate} {
		for _, ttl := range []time.Duration{time.Millisecond, limiter.MaxInterval} {
			c := concurrency(limit, ttl)
			c.TTL = maxTTL
			s := sem{r.create(t, fmt.Sprintf("cx-%d-%v", limit, ttl), c)}
			rep, id := s.lease(limit, limiter.MaxInterval, "") // held past any test
			if rep.Granted != 1 || rep.Free != 0 {
				t.Fatalf("limit %d ttl %v: lease of all: %+v", limit, ttl, rep)
			}
			if denied, _ := s.lease(1, 0, ""); denied.Granted != 0 || denied.RetryAfterUs < 0 || denied.RetryAfterUs > limiter.MaxInterval.Microseconds() {
				t.Errorf("limit %d ttl %v: lease past the limit: %+v", limit, ttl, denied)
			}
			if !s.renew(id, limiter.MaxInterval) {
				t.Errorf("limit %d ttl %v: renew to %v failed", limit, ttl, limiter.MaxInterval)
			}
			if !s.give(id) || s.free() != limit {
				t.Errorf("limit %d ttl %v: after return, free %d", limit, ttl, s.free())
			}
		}
	}
}
