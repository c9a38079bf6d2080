package commands

import (
	"context"
	"fmt"
	"strconv"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// ParseThrottle parses CL.THROTTLE key max_burst count period [quantity]
// with redis-cell's rules: max_burst and quantity may be 0, count and
// period must be positive.
func ParseThrottle(args []string) (ThrottleCall, error) {
	if len(args) < 5 || len(args) > 6 {
		return ThrottleCall{}, ArityError(args[0])
	}
	n := [len(throttleArgs)]int64{3: 1} // quantity defaults to 1
	for i, s := range args[2:] {
		a := throttleArgs[i]
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < a.min || v > limiter.MaxRate {
			return ThrottleCall{}, fmt.Errorf("%s must be an integer from %d to %d, got %s", a.name, a.min, int64(limiter.MaxRate), quote(s))
		}
		n[i] = v
	}
	r := ThrottleCall{Key: args[1], Throttle: limiter.Throttle{MaxBurst: n[0], Count: n[1], Period: float64(n[2]), Quantity: n[3]}}
	if err := r.Check(); err != nil {
		return ThrottleCall{}, err
	}
	return r, nil
}

// throttleArgs are CL.THROTTLE's integers after the key, with the least
// value each accepts.
var throttleArgs = [...]struct {
	name string
	min  int64
}{{"max_burst", 0}, {"count", 1}, {"period", 1}, {"quantity", 0}}

// Throttle returns the CL.THROTTLE command, served by l.
func Throttle(l *ratelimit.Limiters) Command { return throttle("CL.THROTTLE", l) }

// RLThrottle returns RL.THROTTLE, Valkey's proposed name for CL.THROTTLE:
// the same arguments, reply and state.
func RLThrottle(l *ratelimit.Limiters) Command { return throttle("RL.THROTTLE", l) }

func throttle(name string, l *ratelimit.Limiters) Command {
	integer := func(name string) Arg { return Arg{Name: name, Type: "integer"} }
	q := integer("quantity")
	q.Optional = true
	return Command{
		Name: name, Arity: -5, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
		Summary: "redis-cell's rate limiter (GCRA). Returns [limited, limit, remaining, retry_after_s, reset_after_s].",
		Args:    []Arg{{Name: "key", Type: "key"}, integer("max_burst"), integer("count"), integer("period"), q},
		Handler: func(ctx context.Context, _ Caller, args []string) (any, error) {
			r, err := ParseThrottle(args)
			if err != nil {
				return nil, err
			}
			return gcraReply(l.GCRA(ctx, r.Key, r.Throttle))
		},
	}
}
