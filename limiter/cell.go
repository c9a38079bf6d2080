package limiter

import (
	"fmt"
	"math"
	"strconv"
)

// Throttle is one call of GCRA, the algorithm of redis-cell's CL.THROTTLE
// and of Redis 8.8's proposed GCRA command (RL.THROTTLE is CL.THROTTLE
// under Valkey's proposed name). All three run cell.lua on the same state.
type Throttle struct {
	MaxBurst int64   // actions at once beyond the steady rate: the limit is MaxBurst+1
	Count    int64   // actions per Period
	Period   float64 // seconds (CL.THROTTLE: whole seconds; GCRA: any double > 0)
	Quantity int64   // actions this call takes; 0 only looks
}

// Limits of a Throttle, checked by Check. They keep cell.lua's arithmetic
// in range: the most one argument may be, and the longest time a full
// burst may take to refill (period * (max_burst+1) / count; redis-cell
// works in int64 nanoseconds, which end at about 292 years).
const (
	MaxThrottleArg  = MaxRate
	MaxThrottleFill = 36500 * 24 * 3600 * 1e9 // nanoseconds: 36500 days (100 years)
)

// Emission is the emission interval in whole nanoseconds, as redis-cell
// computes it (Rate::per_period: the period in nanoseconds divided by count
// in floating point, truncated), and at least 1 ns when the rate is
// positive (as Redis 8.8's GCRA, which takes an interval under its unit,
// the microsecond, as one). 0 means a zero or negative rate.
func (t Throttle) Emission() float64 {
	if t.Count <= 0 || !(t.Period > 0) {
		return 0
	}
	return max(1, math.Trunc(t.Period*1e9/float64(t.Count)))
}

// Check reports arguments whose arithmetic would leave cell.lua's range:
// an argument above MaxThrottleArg, or a full burst that takes longer than
// MaxThrottleFill to refill. Parsers check the signs and forms.
func (t Throttle) Check() error {
	if t.MaxBurst > MaxThrottleArg || t.Count > MaxThrottleArg || t.Quantity > MaxThrottleArg {
		return fmt.Errorf("max_burst, count and quantity are at most %d", int64(MaxThrottleArg))
	}
	if fill := t.Emission() * float64(t.MaxBurst+1); math.IsNaN(fill) || fill > MaxThrottleFill {
		return fmt.Errorf("period * (max_burst+1) / count is more than %d days: the limit would take longer than that to refill", int64(MaxThrottleFill/(24*3600*1e9)))
	}
	return nil
}

// Args builds the ARGV of cell.lua: max_burst, the emission interval in
// nanoseconds (computed here, so a double period reaches the script as
// exactly the interval redis-cell would use), quantity.
func (t Throttle) Args() []any {
	return []any{t.MaxBurst, strconv.FormatFloat(t.Emission(), 'f', 0, 64), t.Quantity}
}

// Indexes of the five integers of a CL.THROTTLE reply, in redis-cell's order.
const (
	CellLimited    = iota // 1 when the action was limited, else 0
	CellLimit             // max_burst + 1
	CellRemaining         // actions left now
	CellRetryAfter        // seconds until a retry could succeed; -1 when allowed
	CellResetAfter        // seconds until the limit is fully available again
)

// DecodeCell checks and decodes cell.lua's reply: five integers, indexed by
// CellLimited ... CellResetAfter. A reply of another shape is an error.
func DecodeCell(v any) ([5]int64, error) {
	var out [5]int64
	arr, ok := v.([]any)
	if !ok || len(arr) != len(out) {
		return out, fmt.Errorf("cell script: unexpected reply %T %v", v, v)
	}
	for i := range out {
		n, err := toInt(arr[i])
		if err != nil {
			return [5]int64{}, fmt.Errorf("cell script: reply %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}
