package ratelimit

import (
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

// Placed is a limiter's config with where its sub-limiters live, as the
// lease service needs it.
type Placed struct {
	limiter.Stored
	Nodes     []*backend.Node // per shard, its node
	ClientKey string          // the state-key suffix of the caller's budget ("" when shared)
	e         *entry
}

// ConfArg is ARGV[2] of a script call on one shard: the epoch the
// config must have, or the config itself for a name a policy governs.
func (p Placed) ConfArg(shard int) string { return p.e.confArg(shard) }

// Nodes returns the node of each shard of a limiter of that many shards.
func (l *Limiters) Nodes(name string, shards int) []*backend.Node { return l.nodes(name, shards) }
