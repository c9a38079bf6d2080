package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/coalesce"
	"github.com/rlproxy/rlproxy/limiter"
)

// entry is a cached limiter config with what every acquire needs worked
// out once: for each shard, its node, the script keys of the shared
// budget and the batch function that runs them. Entries are immutable:
// a changed config gets a new entry.
type entry struct {
	limiter.Stored
	name   string
	script *redis.Script   // never nil in an entry config returns
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
	run      coalesce.RunFunc[limiter.Ask, answer]
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
	l.configs.put(name, e)
	return e, nil
}

// config returns a limiter's config, from the cache unless fresh is set.
// The cache needs no expiry: every script checks the epoch it is given and
// says when the config changed, and then the caller reloads.
func (l *Limiters) config(ctx context.Context, name string, fresh bool) (*entry, error) {
	var e *entry
	if !fresh {
		e = l.configs.get(name)
	}
	if e == nil {
		var err error
		if e, err = l.load(ctx, name); err != nil {
			return nil, err
		}
		if e == nil {
			return nil, &NoLimiterError{Name: name}
		}
	}
	if e.script == nil {
		// Written by a proxy that knows an algorithm this one does not:
		// rejected here, where the stored config is read, so nothing past
		// this point meets an algorithm without a script.
		return nil, fmt.Errorf("limiter '%s' uses algorithm '%s', which this rlproxy does not know", name, e.Algo)
	}
	return e, nil
}

// forget drops what this proxy remembers of a limiter: its config and
// its cached denials.
func (l *Limiters) forget(name string) {
	l.configs.drop(name)
	l.denials.forget(name)
}

// configCache holds the limiter configs this proxy has read, and when it
// last refreshed each one's TTL (keepAlive). It needs no expiry: every
// script checks the epoch it is given and says when the config changed,
// and then the caller reloads. The zero value is ready to use.
type configCache struct {
	mu      sync.RWMutex
	entries map[string]*entry
	touched map[string]time.Time // last keepAlive per limiter
}

// maxCached bounds the config cache; past it a random entry is dropped
// (configs are re-read on demand, so dropping one only costs a read).
const maxCached = 100_000

// get returns a cached config, or nil.
func (c *configCache) get(name string) *entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.entries[name]
}

// put caches a config, dropping a random one when full.
func (c *configCache) put(name string, e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*entry{}
	}
	if len(c.entries) >= maxCached {
		for k := range c.entries {
			delete(c.entries, k)
			delete(c.touched, k)
			break
		}
	}
	c.entries[name] = e
}

// drop forgets a limiter's config.
func (c *configCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
	delete(c.touched, name)
}

// due reports whether a limiter's TTL was last refreshed at least every
// ago (or never), and if so records now as its last refresh.
func (c *configCache) due(name string, now time.Time, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if last, ok := c.touched[name]; ok && now.Sub(last) < every {
		return false
	}
	if c.touched == nil {
		c.touched = map[string]time.Time{}
	}
	c.touched[name] = now
	return true
}
