package commands

import (
	"context"
	"sync"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// Limiters returns the RL.* commands, CL.THROTTLE and GCRA, served by l.
func Limiters(l *ratelimit.Limiters, o Options) []Command {
	h := &handlers{l: l, o: o}
	key := Arg{Name: "key", Type: "key"}
	return []Command{
		{
			Name: "RL.SETRATE", Arity: -4, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Creates a rate limiter or changes its rate. Returns 1 when the stored config was created or changed, 0 when it was left as it was.",
			Args:    append([]Arg{key}, rateArgs(true)...),
			Handler: h.setRate,
		},
		{
			Name: "RL.ACQUIRE", Arity: -2, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Acquires permits. Returns [granted, remaining, retry_after_ms, reset_after_ms]; with ALSO, every name or none, and the name that denied last.",
			Args: []Arg{key, {Name: "permits", Type: "integer", Optional: true},
				{Name: "also", Type: "block", Token: "ALSO", Optional: true, Multiple: true, Args: []Arg{
					{Name: "key", Type: "key"}, {Name: "permits", Type: "integer", Optional: true}}},
				{Name: "wait", Type: "oneof", Optional: true, Args: []Arg{
					{Name: "timeout", Type: "string", Token: "TIMEOUT"},
					{Name: "block", Type: "pure-token", Token: "BLOCK"}}},
			},
			Batch: h.acquireBatch, OtherKeys: AlsoKeys,
		},
		{
			Name: "RL.AVAILABLE", Arity: 2, Flags: []string{"readonly"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Returns the permits available now.",
			Args:    []Arg{key}, Handler: h.available,
		},
		{
			Name: "RL.GETRATE", Arity: 2, Flags: []string{"readonly"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Returns a limiter's config as field/value pairs, or nil when there is no such limiter.",
			Args:    []Arg{key}, Handler: h.getRate,
		},
		{
			Name: "RL.RELEASE", Arity: 3, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Gives permits back (never above capacity). Returns the permits available afterwards.",
			Args:    []Arg{key, {Name: "permits", Type: "integer"}}, Handler: h.release,
		},
		{
			Name: "RL.RESET", Arity: 2, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Clears a limiter's state (keeps its config). Returns 1 if the limiter exists, else 0.",
			Args:    []Arg{key}, Handler: h.reset,
		},
		{
			Name: "RL.DEL", Arity: 2, Flags: []string{"write"}, KeyPos: 1, Group: "ratelimit",
			Summary: "Deletes a limiter. Returns 1 if it existed, else 0.",
			Args:    []Arg{key}, Handler: h.del,
		},
		Throttle(l),
		RLThrottle(l),
		Charge(l),
		GCRACommand(l),
	}
}

func algoTokens() []Arg {
	args := make([]Arg, len(limiter.Algos))
	for i, a := range limiter.Algos {
		args[i] = Arg{Name: string(a), Type: "pure-token", Token: string(a)}
	}
	return args
}

type handlers struct {
	l *ratelimit.Limiters
	o Options
}

func (h *handlers) setRate(ctx context.Context, _ Caller, args []string) (any, error) {
	r, err := ParseSetRate(args, h.o)
	if err != nil {
		return nil, err
	}
	changed, err := h.l.SetRate(ctx, r.Name, r.Config, r.SetRateOptions)
	return boolInt(changed), err
}

// acquireBatch starts RL.ACQUIREs — a pipeline's run of them, or a lone
// one: the ones that decide now go to the limiters together (one Go), each
// answered as soon as it is decided; one that waits (TIMEOUT/BLOCK) is
// decided after every request before it, and holds the ones after it, as
// a blocking command does.
func (h *handlers) acquireBatch(ctx context.Context, c Caller, calls [][]string, reply func(int, any)) {
	now := make([]ratelimit.Request, 0, len(calls))
	at := make([]int, 0, len(calls)) // the call index of each request in now
	flush := func(wait bool) {
		if len(now) == 0 {
			return
		}
		var wg sync.WaitGroup
		if wait {
			wg.Add(len(now))
		}
		idx := at
		h.l.Go(ctx, now, func(j int, o ratelimit.Outcome) {
			reply(idx[j], acquireReply(o.Result, o.Err))
			if wait {
				wg.Done()
			}
		})
		wg.Wait()
		now, at = nil, nil
	}
	for i, args := range calls {
		r, err := ParseAcquire(args)
		if err != nil {
			reply(i, err)
			continue
		}
		if r.Also != nil {
			flush(true)
			wctx, cancel := c.Watch(ctx)
			reply(i, h.acquireMany(wctx, c, r))
			cancel()
			continue
		}
		req := r.request(c)
		if !r.waits() {
			now, at = append(now, req), append(at, i)
			continue
		}
		flush(true)
		wctx, cancel := c.Watch(ctx)
		reply(i, acquireReply(h.l.AcquireWait(wctx, req, r.Timeout)))
		cancel()
	}
	flush(false)
}

// acquireMany runs an RL.ACQUIRE with ALSO: all or nothing, answered
// [granted, remaining, retry_after_ms, reset_after_ms, name] (name: the
// one that denied, nil when granted).
func (h *handlers) acquireMany(ctx context.Context, c Caller, r Acquire) any {
	req := ratelimit.ManyRequest{Client: c.Name(), Names: r.names()}
	var res ratelimit.ManyResult
	var err error
	if r.waits() {
		res, err = h.l.AcquireManyWait(ctx, req, r.Timeout)
	} else {
		res, err = h.l.AcquireMany(ctx, req)
	}
	if err != nil {
		return err
	}
	var denied any
	if !res.Granted {
		denied = res.Denied
	}
	return []any{boolInt(res.Granted), res.Remaining, res.RetryAfterMs, res.ResetAfterMs, denied}
}

// waits reports whether the acquire may wait (TIMEOUT/BLOCK) rather than
// decide now.
func (r Acquire) waits() bool { return r.Block || r.Timeout != 0 }

// request is the acquire as the caller c's request to the limiters.
func (r Acquire) request(c Caller) ratelimit.Request {
	return ratelimit.Request{Name: r.Name, Client: c.Name(), Permits: r.Permits}
}

// acquireReply is RL.ACQUIRE's reply: [granted, remaining, retry_after_ms, reset_after_ms].
func acquireReply(res limiter.Result, err error) any {
	if err != nil {
		return err
	}
	return []int64{boolInt(res.Granted), res.Remaining, res.RetryAfterMs, res.ResetAfterMs}
}

func (h *handlers) available(ctx context.Context, c Caller, args []string) (any, error) {
	return h.l.Available(ctx, ratelimit.Request{Name: args[1], Client: c.Name()})
}

func (h *handlers) getRate(ctx context.Context, _ Caller, args []string) (any, error) {
	r, err := h.l.GetRate(ctx, args[1])
	if err != nil || r == nil {
		return nil, err
	}
	m := rateMap(&r.Config)
	if r.Policy != "" {
		m = append(m, "policy", r.Policy)
	}
	return m, nil
}

// rateMap is RL.GETRATE's pairs for a config.
func rateMap(cfg *limiter.Config) Map {
	m := Map{
		"rate", cfg.Rate,
		"interval_ms", cfg.Interval.Milliseconds(),
		"algo", string(cfg.Algo),
		"burst", cfg.Burst,
		"shards", int64(cfg.Shards),
		"mode", string(cfg.Mode),
		"ttl_ms", cfg.TTL.Milliseconds(),
	}
	if cfg.Shadow {
		m = append(m, "shadow", int64(1)) // like limits: only when set
	}
	if len(cfg.Limits.List()) > 0 {
		m = append(m, "limits", limitPairs(cfg.Limits))
	}
	return m
}

// limitPairs is RL.GETRATE's limits (only for a limiter that has them):
// [rate, interval_ms] of each limit after the first (RL.SETRATE ... LIMIT
// rate interval).
func limitPairs(l limiter.Limits) []any {
	out := []any{}
	for _, x := range l.List() {
		out = append(out, []any{x.Rate, x.Interval.Milliseconds()})
	}
	return out
}

func (h *handlers) release(ctx context.Context, c Caller, args []string) (any, error) {
	n, err := parseCount("permits", args[2], limiter.MaxRate)
	if err != nil {
		return nil, err
	}
	return h.l.Release(ctx, ratelimit.Request{Name: args[1], Client: c.Name(), Permits: n})
}

func (h *handlers) reset(ctx context.Context, _ Caller, args []string) (any, error) {
	ok, err := h.l.Reset(ctx, args[1])
	return boolInt(ok), err
}

func (h *handlers) del(ctx context.Context, _ Caller, args []string) (any, error) {
	ok, err := h.l.Del(ctx, args[1])
	return boolInt(ok), err
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// rateArgs documents a rule's arguments after its name: RL.SETRATE's,
// and RL.POLICY SET's (withTTL false: a policy has no TTL).
func rateArgs(withTTL bool) []Arg {
	args := []Arg{{Name: "rate", Type: "integer"}, {Name: "interval", Type: "string"},
		{Name: "limit", Type: "block", Token: "LIMIT", Optional: true, Multiple: true, Args: []Arg{
			{Name: "rate", Type: "integer"}, {Name: "interval", Type: "string"}}},
		{Name: "algo", Type: "oneof", Token: "ALGO", Optional: true, Args: algoTokens()},
		{Name: "burst", Type: "integer", Token: "BURST", Optional: true},
		{Name: "shards", Type: "string", Token: "SHARDS", Optional: true},
		{Name: "mode", Type: "oneof", Token: "MODE", Optional: true, Args: []Arg{
			{Name: "overall", Type: "pure-token", Token: "OVERALL"},
			{Name: "per_client", Type: "pure-token", Token: "PER_CLIENT"}}},
	}
	if withTTL {
		args = append(args, Arg{Name: "ttl", Type: "string", Token: "TTL", Optional: true})
	}
	return append(args,
		Arg{Name: "condition", Type: "oneof", Optional: true, Args: []Arg{
			{Name: "nx", Type: "pure-token", Token: "NX"},
			{Name: "keepstate", Type: "pure-token", Token: "KEEPSTATE"}}},
		Arg{Name: "shadow", Type: "pure-token", Token: "SHADOW", Optional: true})
}
