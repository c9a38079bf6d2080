package commands

import (
	"context"

	"github.com/rlproxy/rlproxy/ratelimit"
)

// Policies returns RL.POLICY: one rule over every name that starts with
// a prefix (SET, GET, DEL, LIST, MATCH). It is in the users' admin
// category (not in acquire).
func Policies(l *ratelimit.Limiters, o Options) []Command {
	h := &policyHandlers{l: l, o: o}
	pattern := Arg{Name: "pattern", Type: "string"}
	return []Command{{
		Name: "RL.POLICY", Arity: -2, Group: "ratelimit",
		Summary: "Manages policies: one rule over every name that starts with a prefix (like user:*).",
		Sub: []Command{
			{Name: "SET", Arity: -5, Flags: []string{"write"}, PatternPos: 2,
				Summary: "Creates or changes a policy (the options of RL.SETRATE but TTL). Returns 1 when it was created or changed, 0 when it was left as it was.",
				Args:    append([]Arg{pattern}, rateArgs(false)...),
				Handler: h.set},
			{Name: "GET", Arity: 3, Flags: []string{"readonly"}, Summary: "Returns a policy's config as RL.GETRATE does, or nil.",
				Args: []Arg{pattern}, Handler: h.get},
			{Name: "DEL", Arity: 3, Flags: []string{"write"}, Summary: "Deletes a policy. Returns 1 if it existed, else 0.",
				Args: []Arg{pattern}, Handler: h.del},
			{Name: "LIST", Arity: 2, Flags: []string{"readonly"}, Summary: "Returns the patterns of the policies, sorted.", Handler: h.list},
			{Name: "MATCH", Arity: 3, Flags: []string{"readonly"}, Summary: "Returns the pattern of the policy that governs a name, or nil.",
				Args: []Arg{{Name: "name", Type: "string"}}, Handler: h.match},
			{Name: "HELP", Arity: 2, Summary: "Lists the subcommands.", Handler: policyHelp},
		},
	}}
}

type policyHandlers struct {
	l *ratelimit.Limiters
	o Options
}

// PolicySet is a parsed RL.POLICY SET.
type PolicySet = SetRate

// ParsePolicySet parses RL.POLICY SET pattern rate interval [option]...
// (args[0] and args[1] are the command and subcommand as sent): the
// pattern's shape, then RL.SETRATE's options but TTL.
func ParsePolicySet(args []string, o Options) (PolicySet, error) {
	if len(args) < 5 {
		return PolicySet{}, ArityError("rl.policy|set")
	}
	if err := ratelimit.CheckPolicyPattern(args[2]); err != nil {
		return PolicySet{}, err
	}
	return parseSetRate(args[1:], o, true)
}

func (h *policyHandlers) set(ctx context.Context, _ Caller, args []string) (any, error) {
	r, err := ParsePolicySet(args, h.o)
	if err != nil {
		return nil, err
	}
	changed, err := h.l.PolicySet(ctx, r.Name, r.Config, r.SetRateOptions)
	return boolInt(changed), err
}

func (h *policyHandlers) get(ctx context.Context, _ Caller, args []string) (any, error) {
	cfg, err := h.l.PolicyGet(ctx, args[2])
	if err != nil || cfg == nil {
		return nil, err
	}
	return rateMap(cfg), nil
}

func (h *policyHandlers) del(ctx context.Context, _ Caller, args []string) (any, error) {
	ok, err := h.l.PolicyDel(ctx, args[2])
	return boolInt(ok), err
}

func (h *policyHandlers) list(ctx context.Context, _ Caller, _ []string) (any, error) {
	pats, err := h.l.PolicyList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(pats))
	for i, p := range pats {
		out[i] = p
	}
	return out, nil
}

func (h *policyHandlers) match(ctx context.Context, _ Caller, args []string) (any, error) {
	pat, err := h.l.PolicyMatch(ctx, args[2])
	if err != nil || pat == "" {
		return nil, err
	}
	return pat, nil
}

func policyHelp(context.Context, Caller, []string) (any, error) {
	return []any{
		"RL.POLICY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"SET <pattern> <rate> <interval> [LIMIT rate interval]... [ALGO name] [BURST n] [SHARDS n|AUTO] [MODE OVERALL|PER_CLIENT] [NX|KEEPSTATE] [SHADOW]",
		"    Creates or changes the policy of every name that starts with the pattern's prefix.",
		"GET <pattern>", "    Returns the policy's config.",
		"DEL <pattern>", "    Deletes the policy.",
		"LIST", "    Returns the patterns, sorted.",
		"MATCH <name>", "    Returns the pattern of the policy that governs the name.",
		"HELP", "    Prints this help.",
	}, nil
}
