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
func (l *Limiters) Charge(ctx context.Context, r Request) (limiter.Result, error) {
	for attempt := 0; ; attempt++ {
		st, err := l.config(ctx, r.Name, attempt > 0)
		if err != nil {
			return limiter.Result{}, err
		}
		if st.Algo == limiter.Concurrency {
			return limiter.Result{}, limiter.ErrLeaseOnly{Name: r.Name}
		}
		script := st.script
		out := limiter.Result{Granted: true}
		charged, changed := 0, false
		for shard, share := range sharding.Split(r.Permits, st.Shards) {
			if share == 0 {
				continue
			}
			keys := l.keys.ScriptLimits(st.Algo, r.Name, shard, st.Epoch, clientKey(&st.Stored, r.Client), len(st.LimitList()))
			asks := []limiter.Ask{{Permits: share}}
			v, err := st.nodes[shard].Eval(ctx, script, keys, limiter.ChargeArgs(st.Epoch, share)...)
			if err != nil {
				return limiter.Result{}, err
			}
			rep, err := limiter.DecodeReply(v, limiter.OpCharge, asks)
			if err != nil {
				return limiter.Result{}, err
			}
			if changed = rep.Status != limiter.StatusOK; changed {
				break
			}
			charged++
			res := rep.Results[0]
			out.Remaining += res.Remaining
			out.ResetAfterMs = max(out.ResetAfterMs, res.ResetAfterMs)
		}
		if !changed {
			return out, nil
		}
		l.forget(r.Name)
		// Shards already charged under the old config keep their shares:
		// charging again would take them twice.
		if charged > 0 || attempt >= 2 {
			return limiter.Result{}, fmt.Errorf("limiter '%s' changed during RL.CHARGE; try again", r.Name)
		}
	}
}
