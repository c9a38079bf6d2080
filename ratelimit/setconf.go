package ratelimit

import (
	"context"
	"errors"
	"strconv"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/sharding"
)

// One truth per limiter, whatever the number of proxies.
//
// Shard 0's config is the limiter's. setconf.lua gives every config it
// writes there a generation (gen) higher than any before it —
// max(Redis TIME in µs, old gen + 1), decided inside the script, so two
// writers can never get the same one. The other shards (followers) are
// written with shard 0's epoch and gen, and take a write only when its
// gen is newer than the one they hold (compare-and-set in the script). So
// however RL.SETRATE calls from many proxies interleave, a follower only
// moves forward, and ends on the config of the writer that reached shard
// 0 last — last writer wins. A writer that stops part way (a crash, a
// timeout) leaves followers behind: the first call that finds one serving
// another epoch than shard 0, read afresh, repairs it from shard 0 with
// the same compare-and-set, so repairs never undo a newer write.

// SetRateOptions are the flags of RL.SETRATE.
type SetRateOptions struct {
	NX        bool
	KeepState bool
}

// SetRate creates or replaces a limiter's config on every sub-limiter and
// reports whether the stored config changed. Shard 0 decides (its config is
// the limiter's, with its generation); the others follow it.
func (l *Limiters) SetRate(ctx context.Context, name string, c limiter.Config, o SetRateOptions) (bool, error) {
	subs, nodes := sharding.Subs(c), l.nodes(name, c.Shards)
	lead, err := l.setConf(ctx, nodes[0], name, c, subs[0], limiter.SetConfOptions{NX: o.NX, KeepState: o.KeepState, Epoch: newEpoch(), Feed: l.keys.Changes(), Name: name})
	if errors.Is(err, limiter.ErrKeepLeases) {
		return false, &KeepLeasesError{Name: name}
	}
	if err != nil {
		return false, err
	}
	l.forget(name)
	if o.NX && !lead.Changed {
		return false, nil
	}
	follow := limiter.SetConfOptions{Epoch: lead.Epoch, Gen: lead.Gen}
	for _, sub := range subs[1:] {
		if _, err := l.setConf(ctx, nodes[sub.Shard], name, c, sub, follow); err != nil {
			return lead.Changed, err
		}
	}
	// Sub-limiters past the new shard count, or placed on another node
	// under it, must stop granting where they were — unless a newer
	// writer has put its own config there meanwhile.
	old := l.nodes(name, max(lead.OldShards, 1))
	for shard := 1; shard < lead.OldShards; shard++ {
		if shard < c.Shards && old[shard] == nodes[shard] {
			continue
		}
		if _, err := old[shard].Eval(ctx, l.scripts.SetConf, []string{l.keys.Config(name, shard)}, limiter.DropFollowerArgs(lead.Gen)...); err != nil {
			return lead.Changed, err
		}
	}
	if o.KeepState && lead.Changed && c.Mode == limiter.Overall {
		// The state carried over has a TTL set under the old rate; at a
		// slower one it would expire before it drains, and the limiter
		// would come back full early. A peek on each shard puts the TTLs
		// right. (A PER_CLIENT state is put right by its client's next call.)
		if _, err := l.Available(ctx, Request{Name: name}); err != nil {
			return lead.Changed, err
		}
	}
	if lead.Changed {
		// Waiters may be on shards the new count dropped.
		l.changed(Change{Name: name, Shards: max(c.Shards, lead.OldShards)})
	}
	return lead.Changed, nil
}

func (l *Limiters) setConf(ctx context.Context, node *backend.Node, name string, c limiter.Config, sub limiter.Sub, o limiter.SetConfOptions) (limiter.SetConfReply, error) {
	key := l.keys.Config(name, sub.Shard)
	v, err := node.Eval(ctx, l.scripts.SetConf, []string{key}, limiter.SetConfArgs(c, sub, o)...)
	if err != nil {
		return limiter.SetConfReply{}, err
	}
	return limiter.DecodeSetConfReply(v)
}

// repair writes shard 0's config (its epoch and generation) to a follower
// shard that has none, or another: compare-and-set on the generation, so
// a repair never undoes a newer write. Only a follower ahead of shard 0
// (shard 0's node lost its data) is replaced outright. If the limiter
// itself is gone, it says so.
func (l *Limiters) repair(ctx context.Context, name string, shard int) error {
	e, err := l.load(ctx, name)
	if err != nil {
		return err
	}
	if e == nil {
		return &NoLimiterError{Name: name}
	}
	if shard >= e.Shards {
		return nil // the shard count changed: the reload routes anew
	}
	sub := sharding.Subs(e.Config)[shard]
	o := limiter.SetConfOptions{Epoch: e.Epoch, Gen: e.Gen, Replace: e.Gen == ""}
	if o.Gen == "" {
		o.Gen = "0" // shard 0 written by an rlproxy without generations
	}
	rep, err := l.setConf(ctx, e.node(shard), name, e.Config, sub, o)
	if err != nil || rep.Changed || rep.Epoch == e.Epoch || !newer(rep.Gen, e.Gen) {
		return err
	}
	// The follower holds a newer generation than shard 0 had: either a
	// writer got to shard 0 meanwhile (then the reload sees it), or
	// shard 0 went back in time (its node lost its data): replace it.
	now, err := l.load(ctx, name)
	if err != nil || now == nil || now.Gen != e.Gen || now.Epoch != e.Epoch {
		return err
	}
	o.Replace = true
	_, err = l.setConf(ctx, e.node(shard), name, e.Config, sub, o)
	return err
}

// newer reports whether generation a is after b.
func newer(a, b string) bool {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return x > y
}
