package commands

import (
	"context"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// ParseCharge parses RL.CHARGE key permits.
func ParseCharge(args []string) (ratelimit.Request, error) {
	if len(args) != 3 {
		return ratelimit.Request{}, ArityError(args[0])
	}
	n, err := parseCount("permits", args[2], limiter.MaxRate)
	if err != nil {
		return ratelimit.Request{}, err
	}
	return ratelimit.Request{Name: args[1], Permits: n}, nil
}

// Charge returns RL.CHARGE, served by l: permits taken after the fact,
// even past zero (debt later acquires wait out).
func Charge(l *ratelimit.Limiters) Command {
	return Command{
		Name: "RL.CHARGE", Arity: 3, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
		Summary: "Takes permits after the fact, even past zero. Returns [1, remaining (negative: debt), 0, reset_after_ms].",
		Args:    []Arg{{Name: "key", Type: "key"}, {Name: "permits", Type: "integer"}},
		Handler: func(ctx context.Context, c Caller, args []string) (any, error) {
			r, err := ParseCharge(args)
			if err != nil {
				return nil, err
			}
			r.Client = c.Name()
			res, err := l.Charge(ctx, r)
			if err != nil {
				return nil, err
			}
			return acquireReply(res, nil), nil
		},
	}
}
