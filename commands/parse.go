package commands

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseCount reads a positive integer argument no larger than max.
func parseCount(what, s string, max int64) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil && !isRange(err) {
		return 0, fmt.Errorf("%s must be a positive integer, got %s", what, quote(s))
	}
	if n <= 0 && err == nil {
		return 0, fmt.Errorf("%s must be a positive integer, got %s", what, quote(s))
	}
	if err != nil || n > max {
		return 0, fmt.Errorf("%s is out of range, got %s (at most %d)", what, quote(s), max)
	}
	return n, nil
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

var durationUnits = []struct {
	suffix string
	unit   time.Duration
}{
	// "ms" before "m" and "s": the longest suffix must match first.
	{"ms", time.Millisecond},
	{"s", time.Second},
	{"m", time.Minute},
	{"h", time.Hour},
	{"d", 24 * time.Hour},
}

// ParseDuration reads a duration as the contract spells it: a positive
// integer of milliseconds, or a number with a unit suffix (ms, s, m, h, d),
// such as 500ms, 1s, 1.5m, 10m. The result is whole milliseconds, at least
// 1 and at most max.
func ParseDuration(what, s string, max time.Duration) (time.Duration, error) {
	bad := fmt.Errorf("invalid %s %s: use milliseconds or a number with ms, s, m, h or d (like 500ms, 1s, 10m)", what, quote(s))
	num, unit := s, time.Millisecond
	lower := strings.ToLower(s)
	for _, u := range durationUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, unit = s[:len(s)-len(u.suffix)], u.unit
			break
		}
	}
	whole, frac, hasFrac := strings.Cut(num, ".")
	if !digits(whole) || (hasFrac && !digits(frac)) {
		return 0, bad
	}
	// Plain digits only: no signs, exponents, hex, "inf" or "nan".
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, bad
	}
	ms := f * float64(unit) / float64(time.Millisecond)
	if ms > float64(max/time.Millisecond) || math.IsInf(ms, 0) {
		return 0, fmt.Errorf("%s %s is out of range (at most %s)", what, quote(s), max)
	}
	if ms < 1 || ms != math.Trunc(ms) {
		return 0, fmt.Errorf("%s %s must be a whole number of milliseconds, at least 1", what, quote(s))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
