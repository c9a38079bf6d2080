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

// GCRA is a parsed GCRA call: Redis 8.8's proposed command.
type GCRA struct {
	Key string
	limiter.Throttle
}

// The errors of GCRA's arguments, worded as Redis 8.8's gcra.c words them
// (getPositiveLongFromObjectOrReply, getRangeLongFromObjectOrReply,
// getDoubleFromObjectOrReply and its own checks). Redis accepts integers
// up to LONG_MAX; rlproxy takes them up to limiter.MaxThrottleArg, and
// TOKENS 0 (a look that takes nothing, as CL.THROTTLE's quantity 0).
var (
	errGCRANotPositive = errors.New("value is out of range, must be positive")
	errGCRANotInteger  = errors.New("value is not an integer or out of range")
	errGCRANotFloat    = errors.New("value is not a valid float")
	errGCRAPeriod      = errors.New("period must be > 0 and < 1e12")
	errGCRAMissing     = errors.New("Missing TOKENS value")
)

// gcraRange is Redis's error for an integer outside [min, max].
func gcraRange(min int64) error {
	return fmt.Errorf("value is out of range, value must between %d and %d", min, int64(limiter.MaxThrottleArg))
}

// ParseGCRA parses GCRA key max-burst tokens-per-period period [TOKENS
// count], checking the arguments in Redis's order with Redis's errors.
func ParseGCRA(args []string) (GCRA, error) {
	if len(args) < 5 || len(args) > 7 {
		return GCRA{}, ArityError(args[0])
	}
	r := GCRA{Key: args[1], Throttle: limiter.Throttle{Quantity: 1}}
	max := int64(limiter.MaxThrottleArg)
	var ok bool
	if r.MaxBurst, ok = redisInt(args[2]); !ok || r.MaxBurst < 0 {
		return GCRA{}, errGCRANotPositive
	}
	if r.MaxBurst > max {
		return GCRA{}, gcraRange(0)
	}
	if r.Count, ok = redisInt(args[3]); !ok {
		return GCRA{}, errGCRANotInteger
	}
	if r.Count < 1 || r.Count > max {
		return GCRA{}, gcraRange(1)
	}
	var err error
	if r.Period, err = strconv.ParseFloat(args[4], 64); err != nil || math.IsNaN(r.Period) || strings.ContainsRune(args[4], '_') {
		return GCRA{}, errGCRANotFloat
	}
	if !(r.Period > 0 && r.Period < 1e12) {
		return GCRA{}, errGCRAPeriod
	}
	if len(args) >= 6 {
		if !strings.EqualFold(args[5], "TOKENS") {
			return GCRA{}, ErrSyntax
		}
		if len(args) == 6 {
			return GCRA{}, errGCRAMissing
		}
		if r.Quantity, ok = redisInt(args[6]); !ok {
			return GCRA{}, errGCRANotInteger
		}
		if r.Quantity < 0 || r.Quantity > max {
			return GCRA{}, gcraRange(0)
		}
	}
	if r.Check() != nil {
		return GCRA{}, fmt.Errorf("combination of period, tokens-per-period and max-burst would cause an overflow: a full burst must refill within %d days", int64(limiter.MaxThrottleFill/(24*3600*1e9)))
	}
	return r, nil
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
