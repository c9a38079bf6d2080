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
	st, err := l.config(ctx, r.Name, false)
	if err != nil {
		return limiter.Result{}, err
	}
	out := limiter.Result{Granted: true}
	charged := false
	shares := sharding.Split(r.Permits, st.Shards)
	for shard := 0; shard < len(shares); shard++ {
		if st.Algo == limiter.Concurrency {
			return limiter.Result{}, limiter.ErrLeaseOnly{Name: r.Name}
		}
		if shares[shard] == 0 {
			continue
		}
		res, ok, err := l.chargeShard(ctx, st, r, shard, shares[shard])
		for attempt := 1; err == nil && !ok; attempt++ {
			// This shard does not serve the config in hand: read shard 0's.
			l.forget(r.Name)
			fresh, ferr := l.config(ctx, r.Name, true)
			switch {
			case ferr != nil:
				return limiter.Result{}, ferr
			case attempt > maxAttempts, charged && fresh.Epoch != st.Epoch:
				return limiter.Result{}, fmt.Errorf("limiter '%s' changed during RL.CHARGE; try again", r.Name)
			case fresh.Epoch != st.Epoch || fresh.Shards != st.Shards:
				// Nothing taken yet: start over under the new config.
				st, shares, shard = fresh, sharding.Split(r.Permits, fresh.Shards), -1
				ok = true
				continue
			case shard > 0:
				// A follower behind shard 0 (a writer stopped part way).
				if err = l.repair(ctx, r.Name, shard); err != nil {
					return limiter.Result{}, err
				}
			}
			st = fresh
			res, ok, err = l.chargeShard(ctx, st, r, shard, shares[shard])
		}
		if err != nil {
			return limiter.Result{}, err
		}
		if shard < 0 {
			continue // starting over
		}
		charged = true
		out.Remaining += res.Remaining
		out.ResetAfterMs = max(out.ResetAfterMs, res.ResetAfterMs)
	}
	return out, nil
}

// chargeShard charges one shard its share; ok is false when the shard
// does not serve st's config.
func (l *Limiters) chargeShard(ctx context.Context, st *entry, r Request, shard int, share int64) (limiter.Result, bool, error) {
	keys := l.keysOf(st, shard, clientKey(&st.Stored, r.Client))
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
