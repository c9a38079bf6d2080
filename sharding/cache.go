package sharding

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

// entry is a cached limiter config with what every acquire needs worked
// out once: for each shard, its node, the script keys of the shared
// budget and the batch function that runs them. Entries are immutable:
// a changed config gets a new entry.
type entry struct {
	limiter.Stored
	name   string
	script *redis.Script   // nil when rlproxy has no script for the algorithm
	nodes  []*backend.Node // per shard, its node
	shared []route         // per shard, for the shared budget (OVERALL mode)
}

// route is where one budget of one sub-limiter lives and how to run
// acquires on it.
type route struct {
	shard    int
	node     *backend.Node
	keys     []string // KEYS of the limiter script
	batchKey string   // the coalescer key: node and state key
	run      backend.RunFunc[limiter.Ask, answer]
}

func (l *Limiters) newEntry(name string, st limiter.Stored) *entry {
	e := &entry{Stored: st, name: name, script: l.scripts.For(st.Config), nodes: l.nodes(name, st.Shards)}
	if st.Mode != limiter.PerClient {
		e.shared = make([]route, st.Shards)
		for shard := range e.shared {
			e.shared[shard] = l.newRoute(e, shard, "")
		}
	}
	return e
}

// route returns the route of a shard for a client's budget.
func (l *Limiters) route(e *entry, shard int, client string) route {
	if e.shared != nil {
		return e.shared[shard]
	}
	return l.newRoute(e, shard, clientKey(&e.Stored, client))
}

func (l *Limiters) newRoute(e *entry, shard int, client string) route {
	node := e.nodes[shard]
	keys := l.keys.ScriptLimits(e.Algo, e.name, shard, e.Epoch, client, len(e.LimitList()))
	script, epoch := e.script, e.Epoch
	return route{
		shard:    shard,
		node:     node,
		keys:     keys,
		batchKey: node.Name() + "\x00" + keys[1],
		run: func(ctx context.Context, asks []limiter.Ask) ([]answer, error) {
			v, err := node.Eval(ctx, script, keys, limiter.AcquireArgs(epoch, asks)...)
			if err != nil {
				return nil, err
			}
			rep, err := limiter.DecodeReply(v, limiter.OpAcquire, asks)
			if err != nil {
				return nil, err
			}
			out := make([]answer, len(asks))
			for i := range out {
				out[i] = answer{status: rep.Status}
				if rep.Status == limiter.StatusOK {
					out[i].Result = rep.Results[i]
				}
			}
			return out, nil
		},
	}
}

// load reads shard 0's config, the limiter's, and caches it.
func (l *Limiters) load(ctx context.Context, name string) (*entry, error) {
	h, err := l.nodes(name, 1)[0].HGetAll(ctx, l.keys.Config(name, 0))
	if err != nil {
		return nil, err
	}
	if len(h) == 0 {
		l.forget(name)
		return nil, nil
	}
	st, err := limiter.ParseStored(h)
	if err != nil {
		return nil, fmt.Errorf("limiter '%s': %w", name, err)
	}
	e := l.newEntry(name, st)
	l.mu.Lock()
	if len(l.cache) >= maxCached {
		for k := range l.cache {
			delete(l.cache, k)
			delete(l.touched, k)
			break
		}
	}
	l.cache[name] = e
	l.mu.Unlock()
	return e, nil
}

// config returns a limiter's config, from the cache unless fresh is set.
// The cache needs no expiry: every script checks the epoch it is given and
// says when the config changed, and then the caller reloads.
func (l *Limiters) config(ctx context.Context, name string, fresh bool) (*entry, error) {
	if !fresh {
		l.mu.RLock()
		e, ok := l.cache[name]
		l.mu.RUnlock()
		if ok {
			return e, nil
		}
	}
	e, err := l.load(ctx, name)
	if err == nil && e == nil {
		err = &NoLimiterError{Name: name}
	}
	return e, err
}

// forget drops what this proxy remembers of a limiter: its config and
// its cached denials.
func (l *Limiters) forget(name string) {
	l.mu.Lock()
	delete(l.cache, name)
	delete(l.touched, name)
	l.mu.Unlock()
	l.denials.forget(name)
}
