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
	for attempt := 0; err == nil; attempt++ {
		if st.Algo == limiter.Concurrency {
			return limiter.Result{}, limiter.ErrLeaseOnly{Name: r.Name}
		}
		out, fresh, cerr := l.chargeShards(ctx, st, r)
		switch {
		case cerr != nil:
			return limiter.Result{}, cerr
		case fresh == nil:
			return out, nil
		case attempt >= maxAttempts:
			return limiter.Result{}, fmt.Errorf("limiter '%s' changed during RL.CHARGE; try again", r.Name)
		}
		st = fresh // nothing was taken: start over under the new config
	}
	return limiter.Result{}, err
}

// chargeShards charges each of st's shards its share of r.Permits, in
// order, each once. A shard that does not serve st's config is sorted out
// by reading the config afresh: a follower left behind is repaired and
// asked again, and the walk goes on from it; a new config before any
// share was taken is returned (fresh), for the caller to start over; one
// after some were taken is an error (charging again would take them twice).
func (l *Limiters) chargeShards(ctx context.Context, st *entry, r Request) (out limiter.Result, fresh *entry, err error) {
	out.Granted = true
	charged := false
	shares := sharding.Split(r.Permits, st.Shards)
	for shard, share := range shares {
		if share == 0 {
			continue
		}
		res, ok, err := l.chargeShard(ctx, st, r, shard, share)
		for attempt := 1; err == nil && !ok; attempt++ {
			// This shard does not serve the config in hand: read shard 0's.
			l.forget(r.Name)
			now, ferr := l.config(ctx, r.Name, true)
			switch {
			case ferr != nil:
				return out, nil, ferr
			case attempt > maxAttempts, charged && now.Epoch != st.Epoch:
				return out, nil, fmt.Errorf("limiter '%s' changed during RL.CHARGE; try again", r.Name)
			case now.Epoch != st.Epoch || now.Shards != st.Shards:
				return out, now, nil
			case shard > 0:
				// A follower behind shard 0 (a writer stopped part way).
				if err = l.repair(ctx, r.Name, shard); err != nil {
					return out, nil, err
				}
			}
			st = now
			res, ok, err = l.chargeShard(ctx, st, r, shard, share)
		}
		if err != nil {
			return out, nil, err
		}
		charged = true
		out.Remaining += res.Remaining
		out.ResetAfterMs = max(out.ResetAfterMs, res.ResetAfterMs)
	}
	return out, nil, nil
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
