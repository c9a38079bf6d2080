package commands

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// ThrottleCall is a parsed GCRA, CL.THROTTLE or RL.THROTTLE call: one
// algorithm (limiter.Throttle) on one key's state.
type ThrottleCall struct {
	Key string
	limiter.Throttle
}

// The errors of GCRA's arguments, worded as Redis 8.8's gcra.c words them
// (getPositiveLongFromObjectOrReply, getRangeLongFromObjectOrReply,
// getDoubleFromObjectOrReply and its own checks).
var (
	errGCRANotPositive = errors.New("value is out of range, must be positive")
	errGCRANotInteger  = errors.New("value is not an integer or out of range")
	errGCRANotFloat    = errors.New("value is not a valid float")
	errGCRAPeriod      = errors.New("period must be > 0 and < 1e12")
	errGCRAMissing     = errors.New("Missing TOKENS value")
	errGCRATokens      = errors.New("GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow")
	errGCRABurst       = errors.New("GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow")
)

// gcraRange is Redis's error for an integer outside [min, max].
func gcraRange(min, max int64) error {
	return fmt.Errorf("value is out of range, value must between %d and %d", min, max)
}

// ParseGCRA parses GCRA key max-burst tokens-per-period period [TOKENS
// count] as Redis's gcra.c does: the same checks, in its order, with its
// errors, then its overflow checks. rlproxy's own, narrower limits come
// last (limiter.MaxThrottleArg, limiter.MaxThrottleFill), so that every
// call Redis refuses is refused with Redis's words.
func ParseGCRA(args []string) (ThrottleCall, error) {
	if len(args) < 5 || len(args) > 7 {
		return ThrottleCall{}, ArityError(args[0])
	}
	r := ThrottleCall{Key: args[1], Throttle: limiter.Throttle{Quantity: 1}}
	var ok bool
	if r.MaxBurst, ok = redisInt(args[2]); !ok || r.MaxBurst < 0 {
		return ThrottleCall{}, errGCRANotPositive
	}
	if r.Count, ok = redisInt(args[3]); !ok {
		return ThrottleCall{}, errGCRANotInteger
	}
	if r.Count < 1 {
		return ThrottleCall{}, gcraRange(1, math.MaxInt64)
	}
	var err error
	if r.Period, err = strconv.ParseFloat(args[4], 64); err != nil || math.IsNaN(r.Period) || strings.ContainsRune(args[4], '_') {
		return ThrottleCall{}, errGCRANotFloat
	}
	if !(r.Period > 0 && r.Period < 1e12) {
		return ThrottleCall{}, errGCRAPeriod
	}
	if len(args) >= 6 {
		if !strings.EqualFold(args[5], "TOKENS") {
			return ThrottleCall{}, ErrSyntax
		}
		if len(args) == 6 {
			return ThrottleCall{}, errGCRAMissing
		}
		if r.Quantity, ok = redisInt(args[6]); !ok {
			return ThrottleCall{}, errGCRANotInteger
		}
		if r.Quantity < 1 {
			return ThrottleCall{}, gcraRange(1, math.MaxInt64)
		}
	}
	if err := gcraOverflow(r.Throttle); err != nil {
		return ThrottleCall{}, err
	}
	max := int64(limiter.MaxThrottleArg)
	switch {
	case r.MaxBurst > max:
		return ThrottleCall{}, gcraRange(0, max)
	case r.Count > max, r.Quantity > max:
		return ThrottleCall{}, gcraRange(1, max)
	}
	if r.Check() != nil {
		return ThrottleCall{}, fmt.Errorf("combination of period, tokens-per-period and max-burst would cause an overflow: a full burst must refill within %d days", int64(limiter.MaxThrottleFill/(24*3600*1e9)))
	}
	return r, nil
}

// gcraOverflow is gcra.c's overflow check: the emission interval in whole
// microseconds (rounded to the nearest, at least 1) times TOKENS, and
// times max-burst+1, must fit an int64. (gcra.c also refuses a TAT plus
// TOKENS' intervals past the int64 microseconds, which depends on the
// state; rlproxy's refill limit, checked next, is far below that.)
func gcraOverflow(t limiter.Throttle) error {
	emission := max(1, int64(float64(t.Period*1e6)/float64(t.Count)+0.5))
	burst := t.MaxBurst
	if burst < math.MaxInt64 {
		burst++
	}
	switch {
	case emission > math.MaxInt64/t.Quantity:
		return errGCRATokens
	case emission > math.MaxInt64/burst:
		return errGCRABurst
	}
	return nil
}

// redisInt reads an integer as Redis's string2ll does: an optional '-',
// then "0" or digits without a leading zero, within int64 (no '+', no
// spaces, no "-0").
func redisInt(s string) (int64, bool) {
	d := strings.TrimPrefix(s, "-")
	if d == "" || (d[0] == '0' && (len(d) > 1 || len(d) < len(s))) || !digits(d) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// GCRACommand returns the GCRA command, served by l: the algorithm and
// state of CL.THROTTLE, with a period in seconds that may be fractional.
func GCRACommand(l *ratelimit.Limiters) Command {
	return Command{
		Name: "GCRA", Arity: -5, Flags: []string{"write", "denyoom", "fast"}, KeyPos: 1, Group: "ratelimit",
		Summary: "Rate limit via GCRA (Generic Cell Rate Algorithm), as Redis 8.8 proposes it. Returns [limited, max_burst+1, available, retry_after_s, full_burst_after_s].",
		Args: []Arg{{Name: "key", Type: "key"}, {Name: "max-burst", Type: "integer"},
			{Name: "tokens-per-period", Type: "integer"}, {Name: "period", Type: "double"},
			{Name: "count", Type: "integer", Token: "TOKENS", Optional: true}},
		Handler: func(ctx context.Context, _ Caller, args []string) (any, error) {
			r, err := ParseGCRA(args)
			if err != nil {
				return nil, err
			}
			return gcraReply(l.GCRA(ctx, r.Key, r.Throttle))
		},
	}
}

// gcraReply is the five-integer reply of CL.THROTTLE, RL.THROTTLE and GCRA.
func gcraReply(reply [5]int64, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	out := make([]any, len(reply))
	for i, v := range reply {
		out[i] = v
	}
	return out, nil
}
