package rls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// Ask is one descriptor's part of a decision: Permits of the limiter Name,
// which Limit governs.
type Ask struct {
	Name    string
	Permits int64
	Limit   *Limit
}

// Decider decides a request's asks together, all or nothing: it returns
// one result per ask, in order; when any is denied, no ask keeps the
// permits it asked for (each result then says what its limiter has
// left). A denial is a result, not an error; an error means no decision.
type Decider interface {
	Decide(ctx context.Context, asks []Ask) ([]limiter.Result, error)
}

// Limiters decides on ratelimit's limiters, making each rule's limiter
// (an explicit limiter, a policy, or an explicit limiter per name made on
// first use; see node.name) when it is missing.
//
// A request's names are decided with ratelimit's AcquireMany (RL.ACQUIRE
// ... ALSO): in one script call per Redis node (per slot on a Cluster),
// atomic there; across nodes granted names are given back when a later
// one denies. AcquireMany takes at most ratelimit.MaxNames names, and
// envoyproxy/ratelimit has no such bound, so more names are decided in
// chunks of that many, one after the other, a chunk's grants given back
// (RL.RELEASE) when a later chunk denies.
type Limiters struct {
	L *ratelimit.Limiters

	mu   sync.Mutex
	made map[string]made // names made on first use
}

// made is when a name's limiter was made on first use, and by which rule.
type made struct {
	at    time.Time
	limit *Limit
}

// maxMade bounds the names remembered as made; past it they are made again.
const maxMade = 100_000

// Decide implements Decider.
func (d *Limiters) Decide(ctx context.Context, asks []Ask) ([]limiter.Result, error) {
	// The same name twice (two equal descriptors) is one name asking for
	// the sum; hits_addend 0 looks and takes nothing, so is not asked.
	var names []ratelimit.NameAsk
	rule := map[string]Ask{}
	at := make([]int, len(asks))
	for i, a := range asks {
		if a.Limit.Pattern == "" && a.Limit.Exact == "" && !d.madeRecently(a) {
			if err := d.make(ctx, a); err != nil {
				return nil, err
			}
		}
		at[i] = -1
		if a.Permits == 0 {
			continue
		}
		if _, seen := rule[a.Name]; !seen {
			names = append(names, ratelimit.NameAsk{Name: a.Name})
		}
		at[i] = slices.IndexFunc(names, func(n ratelimit.NameAsk) bool { return n.Name == a.Name })
		names[at[i]].Permits += a.Permits
		a.Permits = names[at[i]].Permits
		rule[a.Name] = a
	}
	res, err := d.decideChunks(ctx, names, rule)
	if err != nil {
		return nil, err
	}
	out := make([]limiter.Result, len(asks))
	for i, a := range asks {
		if at[i] >= 0 {
			out[i] = res[at[i]]
			continue
		}
		if out[i], err = d.peek(ctx, a); err != nil {
			return nil, err
		}
		out[i].Granted = true
	}
	return out, nil
}

// decideChunks decides names all or nothing, ratelimit.MaxNames at a
// time; rule gives each name's ask (its rule, to make its limiter when
// missing, and its permits summed).
func (d *Limiters) decideChunks(ctx context.Context, names []ratelimit.NameAsk, rule map[string]Ask) ([]limiter.Result, error) {
	out := make([]limiter.Result, len(names))
	for from := 0; from < len(names); from += ratelimit.MaxNames {
		to := min(from+ratelimit.MaxNames, len(names))
		granted, err := d.decideOnce(ctx, names[from:to], rule, out[from:to])
		if err == nil && granted {
			continue
		}
		d.giveBack(ctx, names[:from], out[:from])
		if err != nil {
			return nil, err
		}
		// Denied: the later chunks are not asked; say what they have.
		for j := to; j < len(names); j++ {
			if out[j], err = d.peek(ctx, rule[names[j].Name]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return out, nil
}

// decideOnce decides one chunk of at most ratelimit.MaxNames names in one
// AcquireMany, each name's result into out. A name whose limiter is
// missing is made and the chunk asked again; a name asking more than its
// limiter can ever hold denies the chunk.
func (d *Limiters) decideOnce(ctx context.Context, names []ratelimit.NameAsk, rule map[string]Ask, out []limiter.Result) (bool, error) {
	for attempt := 0; ; attempt++ {
		res, err := d.acquire(ctx, names)
		if err == nil {
			for i, n := range res.Names {
				if out[i] = n.Result; !n.Asked {
					// After a node that denied: not asked, say what it has.
					if out[i], err = d.peek(ctx, rule[n.Name]); err != nil {
						return false, err
					}
				}
			}
			return res.Granted, nil
		}
		var missing *ratelimit.NoLimiterError
		var over *ratelimit.OverCapacityError
		switch {
		case errors.As(err, &missing) && attempt <= len(names):
			// Its limiter is gone (RL.DEL, an expired TTL, a fresh
			// backend): make it again and ask once more.
			if err := d.make(ctx, rule[missing.Name]); err != nil {
				return false, err
			}
			continue
		case errors.As(err, &over):
			for i, n := range names {
				if n.Name == over.Name {
					out[i] = limiter.Result{OverCapacity: true}
				} else if out[i], err = d.peek(ctx, rule[n.Name]); err != nil {
					return false, err
				}
			}
			return false, nil
		}
		return false, err
	}
}

// acquire decides names in one decision. A lone name (most requests
// carry one limited descriptor) takes RL.ACQUIRE's own path: coalesced
// with the other requests on its sub-limiter (or, under a policy, with
// the other names of its policy on its node) into one script call that
// waits a little for more callers, answered from the deny cache while
// the name is exhausted, probing other shards on a denial. That costs
// Redis far less per decision than a multi-name call (AcquireMany).
func (d *Limiters) acquire(ctx context.Context, names []ratelimit.NameAsk) (ratelimit.ManyResult, error) {
	if len(names) > 1 {
		return d.L.AcquireMany(ctx, ratelimit.ManyRequest{Names: names})
	}
	r, err := d.L.Acquire(ctx, ratelimit.Request{Name: names[0].Name, Permits: names[0].Permits})
	return ratelimit.ManyResult{Result: r, Names: []ratelimit.NameResult{{Name: names[0].Name, Asked: true, Result: r}}}, err
}

// peek is what an ask's limiter has now, as a result: granted when the
// ask alone would have room.
func (d *Limiters) peek(ctx context.Context, a Ask) (limiter.Result, error) {
	left, err := d.L.Available(ctx, ratelimit.Request{Name: a.Name})
	var missing *ratelimit.NoLimiterError
	if errors.As(err, &missing) {
		if err = d.make(ctx, a); err == nil {
			left, err = d.L.Available(ctx, ratelimit.Request{Name: a.Name})
		}
	}
	return limiter.Result{Granted: left >= a.Permits, Remaining: left}, err
}

// giveBack returns the permits of the names that were granted (a shadow
// denial took nothing) and counts them as left again.
func (d *Limiters) giveBack(ctx context.Context, names []ratelimit.NameAsk, res []limiter.Result) {
	for i, r := range res {
		if !r.Granted || r.ShadowDenied {
			continue
		}
		left, err := d.L.Release(ctx, ratelimit.Request{Name: names[i].Name, Permits: names[i].Permits})
		if err == nil {
			res[i].Remaining = left
		}
	}
}

// make creates the limiter an ask's rule needs, keeping the state of one
// that exists (an unchanged config is a no-op).
func (d *Limiters) make(ctx context.Context, a Ask) error {
	c, keep := a.Limit.Config(), ratelimit.SetRateOptions{KeepState: true}
	if a.Limit.Pattern != "" {
		_, err := d.L.PolicySet(ctx, a.Limit.Pattern, c, keep)
		return err
	}
	if a.Limit.Exact == "" {
		c.TTL = madeTTL(c.Interval) // made per name: gone once unused
	}
	_, err := d.L.SetRate(ctx, a.Name, c, keep)
	if err == nil && a.Limit.Exact == "" {
		d.mu.Lock()
		if d.made == nil || len(d.made) >= maxMade {
			d.made = map[string]made{}
		}
		d.made[a.Name] = made{time.Now(), a.Limit}
		d.mu.Unlock()
	}
	return err
}

// madeTTL is how long a limiter made per name lives unused: two windows,
// at least a minute.
func madeTTL(window time.Duration) time.Duration { return max(2*window, time.Minute) }

// madeRecently reports whether a's limiter was made by a's rule (not one
// of the rules before a reload) within half its TTL (so it has not
// expired since).
func (d *Limiters) madeRecently(a Ask) bool {
	d.mu.Lock()
	m, ok := d.made[a.Name]
	d.mu.Unlock()
	return ok && m.limit == a.Limit && time.Since(m.at) < madeTTL(a.Limit.Config().Interval)/2
}

// Install makes the limiters of every rule that has one name or one
// pattern (the rest are made on first use). Unlimited rules and rules of
// 0 requests need none.
func (d *Limiters) Install(ctx context.Context, r *Rules) error {
	for _, l := range r.Limits() {
		if !l.limited() || (l.Exact == "" && l.Pattern == "") {
			continue
		}
		if err := d.make(ctx, Ask{Name: l.Exact, Limit: l}); err != nil {
			return fmt.Errorf("%s: %w", l.Where, err)
		}
	}
	return nil
}

// limited reports whether l needs a limiter.
func (l *Limit) limited() bool { return !l.Unlimited && l.RequestsPerUnit > 0 }
