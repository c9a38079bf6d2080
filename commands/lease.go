package commands

import (
	"context"
	"fmt"
	"time"

	"github.com/rlproxy/rlproxy/lease"
)

// Lease is a parsed RL.LEASE.
type Lease struct {
	Name    string
	Permits int64
	TTL     time.Duration // 0: the limiter's lease TTL
	Timeout time.Duration // 0: decide now
	Block   bool
}

// ParseLease parses RL.LEASE key [permits] [TTL duration] [TIMEOUT duration | BLOCK].
func ParseLease(args []string) (Lease, error) {
	if len(args) < 2 {
		return Lease{}, ArityError(args[0])
	}
	w, err := parseWaitArgs(args[2:], leaseSyntax)
	if err != nil {
		return Lease{}, err
	}
	return Lease{Name: args[1], Permits: w.permits, TTL: w.ttl, Timeout: w.timeout, Block: w.block}, nil
}

// leaseSyntax: RL.LEASE also takes TTL, the lease's.
var leaseSyntax = waitSyntax{ttl: true, expected: "[permits] [TTL duration] [TIMEOUT duration | BLOCK]"}

// Leases returns RL.LEASE, RL.RETURN and RL.RENEW, served by s.
func Leases(s *lease.Service) []Command {
	key := Arg{Name: "key", Type: "key"}
	leaseID := Arg{Name: "lease_id", Type: "string"}
	return []Command{
		{
			Name: "RL.LEASE", Arity: -2, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Takes permits of a concurrency limiter as a lease. Returns [granted, remaining, retry_after_ms, lease_id].",
			Args: []Arg{key, {Name: "permits", Type: "integer", Optional: true},
				{Name: "ttl", Type: "string", Token: "TTL", Optional: true},
				{Name: "wait", Type: "oneof", Optional: true, Args: []Arg{
					{Name: "timeout", Type: "string", Token: "TIMEOUT"},
					{Name: "block", Type: "pure-token", Token: "BLOCK"}}},
			},
			Handler: func(ctx context.Context, c Caller, args []string) (any, error) {
				r, err := ParseLease(args)
				if err != nil {
					return nil, err
				}
				req := lease.Request{Name: r.Name, Client: c.Name(), Permits: r.Permits, TTL: r.TTL, MaxWait: r.Timeout, Block: r.Block}
				if r.Timeout > 0 || r.Block {
					wctx, cancel := c.Watch(ctx)
					defer cancel()
					ctx = wctx
				}
				res, err := s.Lease(ctx, req)
				if err != nil {
					return nil, err
				}
				return []any{boolInt(res.Granted), res.Remaining, res.RetryAfterMs, res.ID}, nil
			},
		},
		{
			Name: "RL.RETURN", Arity: 3, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Gives a lease back. Returns 1 if it was held, else 0.",
			Args:    []Arg{key, leaseID},
			Handler: func(ctx context.Context, c Caller, args []string) (any, error) {
				ok, err := s.Return(ctx, args[1], c.Name(), args[2])
				return boolInt(ok), err
			},
		},
		{
			Name: "RL.RENEW", Arity: 5, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Extends a lease to TTL from now. Returns 1 if it was held (now extended), else 0.",
			Args:    []Arg{key, leaseID, {Name: "ttl", Type: "string", Token: "TTL"}},
			Handler: func(ctx context.Context, c Caller, args []string) (any, error) {
				if !upperIs(args[3], "TTL") {
					return nil, fmt.Errorf("syntax error near %s (expected TTL duration)", quote(args[3]))
				}
				ttl, err := ParseDuration("TTL", args[4], maxTTL)
				if err != nil {
					return nil, err
				}
				ok, err := s.Renew(ctx, args[1], c.Name(), args[2], ttl)
				return boolInt(ok), err
			},
		},
	}
}
