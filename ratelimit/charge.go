package ratelimit

import (
	"context"
	"fmt"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/sharding"
)

// Charge takes r.Permits permits after the fact (RL.CHARGE), even past
// zero: split over the shards like the rate is, each shard's share taken
// whatever it has left. The Result is granted; Remaining is the sum over
// the shards (below zero by the debt later acquires wait out) and
// ResetAfterMs the latest shard's.
//
// A shard is charged once: a follower found not serving shard 0's config
// is repaired and asked again, and the walk goes on from it; only a
// config replaced after some shares were taken ends the call with an
// error (charging again would take those shares twice).
func (l *Limiters) Charge(ctx context.Context, r Request) (limiter.Result, error) {
	var c charging
	err := l.withConfig(ctx, r.Name, func(e *entry) (Step, error) {
		if e.Algo == limiter.Concurrency {
			return Done, limiter.LeaseOnlyError{Name: r.Name}
		}
		return l.chargeShards(ctx, e, r, &c)
	})
	if err != nil {
		return limiter.Result{}, err
	}
	return c.out, nil
}

// charging is how far a charge got: the shards below next are done,
// under config e; taken says whether any share was taken.
type charging struct {
	e     *entry
	next  int
	taken bool
	out   limiter.Result
}

// chargeShards charges each of e's shards its share of r.Permits, in
// order, each once, going on from where c got. Under a new config, a
// charge that took nothing starts over; one that took some shares fails
// (charging again would take them twice).
func (l *Limiters) chargeShards(ctx context.Context, e *entry, r Request, c *charging) (Step, error) {
	if c.next > 0 && (e.Epoch != c.e.Epoch || e.Shards != c.e.Shards) {
		if c.taken {
			return Done, fmt.Errorf("limiter '%s' changed during RL.CHARGE; try again", r.Name)
		}
		*c = charging{}
	}
	c.e, c.out.Granted = e, true
	shares := sharding.Split(r.Permits, e.Shards)
	for ; c.next < e.Shards; c.next++ {
		share := shares[c.next]
		if share == 0 {
			continue
		}
		res, ok, err := l.chargeShard(ctx, e, r, c.next, share)
		switch {
		case err != nil:
			return Done, err
		case !ok && c.next == 0:
			return Reload, nil
		case !ok:
			return Repair(c.next), nil
		}
		c.taken = true
		c.out.Remaining += res.Remaining
		c.out.ResetAfterMs = max(c.out.ResetAfterMs, res.ResetAfterMs)
	}
	return Done, nil
}

// chargeShard charges one shard its share; ok is false when the shard
// does not serve st's config.
func (l *Limiters) chargeShard(ctx context.Context, st *entry, r Request, shard int, share int64) (limiter.Result, bool, error) {
	keys := l.keysOf(st, shard, clientKey(st.Stored, r.Client))
	v, err := st.node(shard).Eval(ctx, st.script, keys, limiter.ChargeArgs(st.confArg(shard), share)...)
	if err != nil {
		return limiter.Result{}, false, err
	}
	rep, err := limiter.DecodeReply(v, limiter.OpCharge, []limiter.Ask{{Permits: share}})
	if err != nil || rep.Status != limiter.StatusOK {
		return limiter.Result{}, false, err
	}
	return rep.Results[0], true, nil
}
