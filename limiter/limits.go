package limiter

import (
	"fmt"
	"time"
)

// MaxRefill bounds how long a full bucket may take to refill (burst ×
// interval / rate of a token or leaky bucket): 36500 days (100 years).
// Every duration a script computes, stores as a TTL or replies with then
// stays a whole number well inside what Redis takes (SET PX reads at most
// 17 significant digits from Lua; replies are int64 microseconds), with a
// margin for sharding (a shard's burst/rate ratio may be up to twice the
// limiter's) and for reservations (TIMEOUT up to 3650 days on top).
const MaxRefill = 36500 * 24 * time.Hour

// Check reports a config the scripts cannot serve: SHADOW on a
// concurrency limiter, further limits on an algorithm without them or with fewer permits than shards, or durations
// that would leave the range a script can compute and reply exactly (a
// full bucket must refill within MaxRefill). The parser checks each
// value's own range (MaxRate, MaxInterval, MaxShards) first.
func (c Config) Check() error {
	if c.Shadow && c.Algo == Concurrency {
		// A dry run grants what it would deny; a semaphore that grants
		// past its limit is no semaphore, and its leases would have to be
		// returned all the same.
		return fmt.Errorf("SHADOW applies to the rate algorithms, not %s", c.Algo)
	}
	if extra := c.Limits.List(); len(extra) > 0 {
		if !c.Algo.MultiLimit() {
			return fmt.Errorf("LIMIT applies to token-bucket, sliding-log, sliding-window and fixed-window, not %s", c.Algo)
		}
		for _, l := range extra {
			if int64(c.Shards) > l.Rate {
				return fmt.Errorf("SHARDS %d is more than the %d permits of LIMIT %d %s: every sub-limiter needs at least one", c.Shards, l.Rate, l.Rate, formatDays(l.Interval))
			}
		}
	}
	if !c.Algo.HasBurst() || c.Rate <= 0 {
		return nil
	}
	// burst × interval / rate, in float64: the operands may overflow int64.
	refill := float64(c.Burst) * float64(c.Interval) / float64(c.Rate)
	if refill > float64(MaxRefill) {
		return fmt.Errorf("BURST %d at %d per %s takes longer than %d days to refill (burst × interval / rate is at most %d days)",
			c.Burst, c.Rate, formatDays(c.Interval), int64(MaxRefill/(24*time.Hour)), int64(MaxRefill/(24*time.Hour)))
	}
	return nil
}

// formatDays writes an interval as the contract spells durations.
func formatDays(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// MultiLimit reports whether a limiter of the algorithm may have several
// limits (RL.SETRATE ... LIMIT rate interval): all but leaky-bucket.
func (a Algo) MultiLimit() bool {
	return a == TokenBucket || a == SlidingLog || a == SlidingWindow || a == FixedWindow
}
