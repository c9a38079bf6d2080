package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/coalesce"
	"github.com/rlproxy/rlproxy/limiter"
)

// entry is a limiter config with what an acquire needs worked out: where
// each shard lives and, filled on use, the routes of its shared budget.
// An entry's memory does not grow with its shard count beyond a 2-byte
// placement per shard (and none on one node): routes are built when a
// shard is used and only routeSlots of them are kept. Entries are
// immutable but for that route table: a changed config gets a new entry.
type entry struct {
	*limiter.Stored // a policy's names share their policy's
	name            string
	script          *redis.Script   // never nil in an entry config returns
	all             []*backend.Node // the pool's nodes
	place           []uint16        // per shard, its node's index in all; nil on one node
	// policy is the policy that governs this name (nil for an explicit
	// limiter): its config is given to each script call, no config key
	// is read (see policy.go).
	policy *policy
	routes [routeSlots]atomic.Pointer[route] // shared-budget routes, by shard % routeSlots
}

// routeSlots is how many shared-budget routes an entry keeps: every
// route of a limiter of up to that many shards, the last used otherwise.
const routeSlots = 4

// route is where one budget of one sub-limiter lives and how to run
// acquires on it.
type route struct {
	shard    int
	node     *backend.Node
	keys     []string // KEYS of the limiter script
	batchKey string   // the coalescer key: node and state key
	run      coalesce.RunFunc[limiter.Ask, answer]
}

func (l *Limiters) newEntry(name string, st *limiter.Stored, p *policy) *entry {
	e := &entry{Stored: st, name: name, script: l.scripts.For(st.Config), all: l.pool.Nodes(), policy: p}
	if len(e.all) > 1 {
		e.place = l.placement(name, st.Shards)
	}
	return e
}

// node returns the node of one of e's shards.
func (e *entry) node(shard int) *backend.Node {
	if e.place == nil {
		return e.all[0]
	}
	return e.all[e.place[shard]]
}

// nodes returns the node of each of e's shards.
func (e *entry) nodes() []*backend.Node {
	out := make([]*backend.Node, e.Shards)
	for shard := range out {
		out[shard] = e.node(shard)
	}
	return out
}

// confArg is ARGV[2] of a script call on one of e's shards: the epoch an
// explicit limiter's config must have, or a policy's config in full.
func (e *entry) confArg(shard int) string {
	if e.policy != nil {
		return e.policy.arg(shard)
	}
	return e.Epoch
}

// keysOf returns the KEYS of e's script on one shard for a client's budget.
func (l *Limiters) keysOf(e *entry, shard int, client string) []string {
	return l.keys.ScriptLimits(e.Algo, e.name, shard, e.Epoch, client, len(e.LimitList()))
}

// route returns the route of a shard for a client's budget: a shared
// budget's from e's route table when it holds it.
func (l *Limiters) route(e *entry, shard int, client string) *route {
	ck := clientKey(e.Stored, client)
	if ck != "" {
		return l.newRoute(e, shard, ck)
	}
	slot := &e.routes[shard%routeSlots]
	if rt := slot.Load(); rt != nil && rt.shard == shard {
		return rt
	}
	rt := l.newRoute(e, shard, "")
	slot.Store(rt)
	return rt
}

func (l *Limiters) newRoute(e *entry, shard int, client string) *route {
	node := e.node(shard)
	keys := l.keysOf(e, shard, client)
	script, arg := e.script, e.confArg(shard)
	return &route{
		shard:    shard,
		node:     node,
		keys:     keys,
		batchKey: node.Name() + "\x00" + keys[1],
		run: func(ctx context.Context, asks []limiter.Ask) ([]answer, error) {
			v, err := node.Eval(ctx, script, keys, limiter.AcquireArgs(arg, asks)...)
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

// size estimates the bytes an entry holds once its route table is full,
// for the cache's byte bound.
func (l *Limiters) size(e *entry) int {
	const overhead = 400 // the entry, its cache node and map slot
	keys := len(l.keys.Config(e.name, 0)) + 24
	n := 1 + len(e.LimitList())*4 // at most 4 state keys per limit
	route := 200 + (n+1)*keys
	return overhead + len(e.name) + 2*len(e.place) + min(e.Shards, routeSlots)*route
}

// load reads shard 0's config, the limiter's, and caches it. A name
// without one that a policy governs gets the policy's entry (not cached:
// policy names cost the proxy nothing each). It returns nil when the name
// is no limiter.
func (l *Limiters) load(ctx context.Context, name string) (*entry, error) {
	h, err := l.nodes(name, 1)[0].HGetAll(ctx, l.keys.Config(name, 0))
	if err != nil {
		return nil, err
	}
	if len(h) == 0 {
		l.forget(name)
		return l.governed(name), nil
	}
	st, err := limiter.ParseStored(h)
	if err != nil {
		return nil, fmt.Errorf("limiter '%s': %w", name, err)
	}
	e := l.newEntry(name, &st, nil)
	l.configs.put(name, e, l.size(e))
	return e, nil
}

// config returns a limiter's config, from the cache (or the policies)
// unless fresh is set. The cache needs no expiry: every script checks the
// epoch it is given (a policy's script, that the name has no config of
// its own) and says when the config changed, and then the caller reloads.
func (l *Limiters) config(ctx context.Context, name string, fresh bool) (*entry, error) {
	var e *entry
	if !fresh {
		if e = l.configs.get(name); e == nil {
			e = l.governed(name)
		}
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

// configCache holds the limiter configs this proxy has read, least
// recently used first out once it holds maxCached entries or about
// maxCachedBytes (configs are read again on demand, so dropping one costs
// a read), and when it last refreshed each one's TTL (keepAlive). It
// needs no expiry: every script checks the epoch it is given and says
// when the config changed, and then the caller reloads. The zero value is
// ready to use.
type configCache struct {
	mu      sync.Mutex
	byName  map[string]*cached
	newest  *cached // head of the use order; newest.older ... runs to the oldest
	oldest  *cached
	bytes   int
	maxSize int // bytes (0: maxCachedBytes)
}

// cached is one entry of the cache, in its use order.
type cached struct {
	name         string
	e            *entry
	size         int
	touched      time.Time // last keepAlive
	newer, older *cached
}

// The cache's bounds: entries and estimated bytes (see Limiters.size).
const (
	maxCached      = 100_000
	maxCachedBytes = 64 << 20
)

// get returns a cached config, or nil, and marks it used.
func (c *configCache) get(name string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.byName[name]
	if n == nil || n.e == nil {
		return nil
	}
	c.unlink(n)
	c.pushNewest(n)
	return n.e
}

// put caches a config of about size bytes, dropping the least recently
// used ones past the bounds.
func (c *configCache) put(name string, e *entry, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[string]*cached{}
	}
	n := c.byName[name]
	if n == nil {
		n = &cached{name: name}
		c.byName[name] = n
	} else {
		c.unlink(n)
		c.bytes -= n.size
	}
	n.e, n.size = e, size
	c.bytes += size
	c.pushNewest(n)
	limit := c.maxSize
	if limit <= 0 {
		limit = maxCachedBytes
	}
	for c.oldest != n && (len(c.byName) > maxCached || c.bytes > limit) {
		c.remove(c.oldest)
	}
}

// drop forgets a limiter's config.
func (c *configCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.byName[name]; n != nil {
		c.remove(n)
	}
}

// clear forgets every config.
func (c *configCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byName, c.newest, c.oldest, c.bytes = nil, nil, nil, 0
}

// due reports whether a limiter's TTL was last refreshed at least every
// ago (or never), and if so records now as its last refresh. A limiter
// not in the cache is always due.
func (c *configCache) due(name string, now time.Time, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.byName[name]
	if n == nil {
		return true
	}
	if !n.touched.IsZero() && now.Sub(n.touched) < every {
		return false
	}
	n.touched = now
	return true
}

func (c *configCache) remove(n *cached) {
	c.unlink(n)
	c.bytes -= n.size
	delete(c.byName, n.name)
}

func (c *configCache) unlink(n *cached) {
	if n.newer != nil {
		n.newer.older = n.older
	} else if c.newest == n {
		c.newest = n.older
	}
	if n.older != nil {
		n.older.newer = n.newer
	} else if c.oldest == n {
		c.oldest = n.newer
	}
	n.newer, n.older = nil, nil
}

func (c *configCache) pushNewest(n *cached) {
	n.older = c.newest
	if c.newest != nil {
		c.newest.newer = n
	}
	c.newest = n
	if c.oldest == nil {
		c.oldest = n
	}
}
