package rls

import (
	"context"
	"errors"
	"fmt"
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
// Until RL.ACQUIRE ... ALSO (one script call per node) is in package
// ratelimit, Decide asks each name alone, at once, and gives back the
// grants when one is denied: others may see those permits taken for the
// round trip that gives them back. Decide is where that call goes.
type Limiters struct {
	L *ratelimit.Limiters

	mu   sync.Mutex
	made map[string]time.Time // names made on first use, and when
}

// maxMade bounds the names remembered as made; past it they are made again.
const maxMade = 100_000

// Decide implements Decider.
func (d *Limiters) Decide(ctx context.Context, asks []Ask) ([]limiter.Result, error) {
	reqs := make([]ratelimit.Request, len(asks))
	for i, a := range asks {
		if a.Limit.Pattern == "" && a.Limit.Exact == "" && !d.madeRecently(a) {
			if err := d.make(ctx, a); err != nil {
				return nil, err
			}
		}
		reqs[i] = ratelimit.Request{Name: a.Name, Permits: a.Permits}
	}
	out := make([]limiter.Result, len(asks))
	outs := d.L.AcquireAll(ctx, reqs)
	all := true
	var failed error
	for i, o := range outs {
		if _, missing := o.Err.(*ratelimit.NoLimiterError); missing {
			// Its limiter is gone (RL.DEL, an expired TTL, a fresh
			// backend): make it again and ask once more.
			if err := d.make(ctx, asks[i]); err != nil {
				return nil, err
			}
			o.Result, o.Err = d.L.Acquire(ctx, reqs[i])
		}
		var over *ratelimit.OverCapacityError
		switch {
		case errors.As(o.Err, &over):
			o.Result, o.Err = limiter.Result{OverCapacity: true}, nil
		case o.Err != nil:
			failed = o.Err
			continue
		}
		out[i] = o.Result
		all = all && o.Granted
	}
	if failed != nil {
		d.giveBack(ctx, asks, out) // no decision: nothing is kept
		return nil, failed
	}
	if !all {
		d.giveBack(ctx, asks, out)
	}
	return out, nil
}

// giveBack returns the permits of the asks that were granted (a shadow
// denial took nothing) and counts them as left again.
func (d *Limiters) giveBack(ctx context.Context, asks []Ask, res []limiter.Result) {
	for i, r := range res {
		if !r.Granted || r.ShadowDenied || asks[i].Permits == 0 {
			continue
		}
		left, err := d.L.Release(ctx, ratelimit.Request{Name: asks[i].Name, Permits: asks[i].Permits})
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
			d.made = map[string]time.Time{}
		}
		d.made[a.Name] = time.Now()
		d.mu.Unlock()
	}
	return err
}

// madeTTL is how long a limiter made per name lives unused: two windows,
// at least a minute.
func madeTTL(window time.Duration) time.Duration { return max(2*window, time.Minute) }

// madeRecently reports whether a's limiter was made within half its TTL
// (so it has not expired since).
func (d *Limiters) madeRecently(a Ask) bool {
	d.mu.Lock()
	at, ok := d.made[a.Name]
	d.mu.Unlock()
	return ok && time.Since(at) < madeTTL(a.Limit.Config().Interval)/2
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
