package sharding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

// Limiters runs limiter operations on the backend pool: it knows which
// node holds each sub-limiter, caches limiter configs, and retries once a
// script says the config it was given has changed.
type Limiters struct {
	pool    *backend.Pool
	keys    limiter.Keys
	scripts *limiter.Scripts
	names   []string // node names, for placement

	mu    sync.RWMutex
	cache map[string]limiter.Stored
}

// maxCached bounds the config cache; past it a random entry is dropped
// (configs are re-read on demand, so dropping one only costs a read).
const maxCached = 100_000

// New returns Limiters over a pool. prefix starts every key rlproxy writes.
func New(pool *backend.Pool, scripts *limiter.Scripts, prefix string) *Limiters {
	l := &Limiters{
		pool:    pool,
		keys:    limiter.Keys{Prefix: prefix},
		scripts: scripts,
		cache:   map[string]limiter.Stored{},
	}
	for _, n := range pool.Nodes() {
		l.names = append(l.names, n.Name())
	}
	return l
}

// node returns the node that holds one sub-limiter.
func (l *Limiters) node(name string, shard int) *backend.Node {
	nodes := l.pool.Nodes()
	if len(nodes) == 1 {
		return nodes[0]
	}
	return nodes[Place(name, shard, l.names)]
}

func newEpoch() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// SetRateOptions are the flags of RL.SETRATE.
type SetRateOptions struct {
	NX        bool
	KeepState bool
}

// SetRate creates or replaces a limiter's config on every sub-limiter and
// reports whether the stored config changed. Shard 0 decides (its config is
// the limiter's); the others follow with the epoch it put in force.
func (l *Limiters) SetRate(ctx context.Context, name string, c limiter.Config, o SetRateOptions) (bool, error) {
	subs := Subs(c)
	opts := limiter.SetConfOptions{NX: o.NX, KeepState: o.KeepState, Epoch: newEpoch()}
	changed, epoch, oldShards, err := l.setConf(ctx, name, c, subs[0], opts)
	if err != nil {
		return false, err
	}
	l.forget(name)
	if o.NX && !changed {
		return false, nil
	}
	opts.NX, opts.Epoch = false, epoch
	for _, sub := range subs[1:] {
		if _, _, _, err := l.setConf(ctx, name, c, sub, opts); err != nil {
			return changed, err
		}
	}
	// Sub-limiters past the new shard count must stop granting.
	for shard := c.Shards; shard < oldShards; shard++ {
		if _, err := l.node(name, shard).Del(ctx, l.keys.Config(name, shard)); err != nil {
			return changed, err
		}
	}
	return changed, nil
}

func (l *Limiters) setConf(ctx context.Context, name string, c limiter.Config, sub limiter.Sub, o limiter.SetConfOptions) (bool, string, int, error) {
	key := l.keys.Config(name, sub.Shard)
	v, err := l.node(name, sub.Shard).Eval(ctx, l.scripts.SetConf, []string{key}, limiter.SetConfArgs(c, sub, o)...)
	if err != nil {
		return false, "", 0, err
	}
	return limiter.DecodeSetConf(v)
}

// GetRate reads a limiter's config from the backend (nil when there is none).
func (l *Limiters) GetRate(ctx context.Context, name string) (*limiter.Config, error) {
	st, err := l.load(ctx, name)
	if err != nil || st == nil {
		return nil, err
	}
	return &st.Config, nil
}

// load reads shard 0's config, the limiter's, and caches it.
func (l *Limiters) load(ctx context.Context, name string) (*limiter.Stored, error) {
	h, err := l.node(name, 0).HGetAll(ctx, l.keys.Config(name, 0))
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
	l.mu.Lock()
	if len(l.cache) >= maxCached {
		for k := range l.cache {
			delete(l.cache, k)
			break
		}
	}
	l.cache[name] = st
	l.mu.Unlock()
	return &st, nil
}

// config returns a limiter's config, from the cache unless fresh is set.
// The cache needs no expiry: every script checks the epoch it is given and
// says when the config changed, and then the caller reloads.
func (l *Limiters) config(ctx context.Context, name string, fresh bool) (*limiter.Stored, error) {
	if !fresh {
		l.mu.RLock()
		st, ok := l.cache[name]
		l.mu.RUnlock()
		if ok {
			return &st, nil
		}
	}
	st, err := l.load(ctx, name)
	if err == nil && st == nil {
		err = &NoLimiterError{Name: name}
	}
	return st, err
}

func (l *Limiters) forget(name string) {
	l.mu.Lock()
	delete(l.cache, name)
	l.mu.Unlock()
}

// Request is one call on a limiter.
type Request struct {
	Name    string
	Client  string // connection name; selects the budget in PER_CLIENT mode
	Permits int64
}

// clientKey is the state-key suffix of a request's budget: "" for a
// shared budget; per client, the connection name, with every unnamed
// connection sharing one budget (so reconnecting buys no fresh budget).
func clientKey(st *limiter.Stored, client string) string {
	if st.Mode != limiter.PerClient {
		return ""
	}
	if client == "" {
		return "anon"
	}
	return "n=" + client
}

// errRetry asks run to reload the config and try again.
var errRetry = errors.New("config changed")

// run runs one limiter script op on a shard chosen by pick, reloading the
// config and retrying when the script reports it changed.
func (l *Limiters) run(ctx context.Context, r Request, op limiter.Op, check func(*limiter.Stored) error,
	call func(st *limiter.Stored, shard int, keys []string) (limiter.Reply, error)) (limiter.Reply, error) {
	for attempt := 0; ; attempt++ {
		st, err := l.config(ctx, r.Name, attempt > 0)
		if err != nil {
			return limiter.Reply{}, err
		}
		if check != nil {
			if err := check(st); err != nil {
				if attempt == 0 {
					continue // the cached config may be old: check the current one
				}
				return limiter.Reply{}, err
			}
		}
		script := l.scripts.Limiter(st.Algo)
		if script == nil {
			return limiter.Reply{}, fmt.Errorf("algorithm '%s' is not supported yet", st.Algo)
		}
		rep, err := call(st, 0, l.keys.Script(st.Algo, r.Name, 0, st.Epoch, clientKey(st, r.Client)))
		if err != nil {
			return rep, err
		}
		switch rep.Status {
		case limiter.StatusOK:
			return rep, nil
		case limiter.StatusNoLimiter, limiter.StatusEpochChange:
			l.forget(r.Name)
			if attempt >= 2 {
				if rep.Status == limiter.StatusNoLimiter {
					return rep, &NoLimiterError{Name: r.Name}
				}
				return rep, fmt.Errorf("limiter '%s' keeps changing; try again", r.Name)
			}
		default:
			return rep, fmt.Errorf("limiter script: unknown status %d", rep.Status)
		}
	}
}

func (l *Limiters) eval(ctx context.Context, name string, shard int, script *redis.Script, keys []string, op limiter.Op, epoch string, permits ...int64) (limiter.Reply, error) {
	v, err := l.node(name, shard).Eval(ctx, script, keys, limiter.Args(op, epoch, permits...)...)
	if err != nil {
		return limiter.Reply{}, err
	}
	return limiter.DecodeReply(v, op, 0)
}

// Acquire asks for r.Permits permits now.
func (l *Limiters) Acquire(ctx context.Context, r Request) (limiter.Result, error) {
	check := func(st *limiter.Stored) error {
		if c := st.Capacity(); r.Permits > c {
			return &OverCapacityError{Name: r.Name, Permits: r.Permits, Capacity: c}
		}
		return nil
	}
	rep, err := l.run(ctx, r, limiter.OpAcquire, check, func(st *limiter.Stored, shard int, keys []string) (limiter.Reply, error) {
		v, err := l.node(r.Name, shard).Eval(ctx, l.scripts.Limiter(st.Algo), keys, limiter.AcquireArgs(st.Epoch, []limiter.Ask{{Permits: r.Permits}})...)
		if err != nil {
			return limiter.Reply{}, err
		}
		return limiter.DecodeReply(v, limiter.OpAcquire, 1)
	})
	if err != nil {
		return limiter.Result{}, err
	}
	res := rep.Results[0]
	if res.OverCapacity {
		// The config changed under us to a smaller capacity.
		l.forget(r.Name)
		return res, &OverCapacityError{Name: r.Name, Permits: r.Permits, Capacity: res.Remaining}
	}
	return res, nil
}

// Available returns the permits r.Client could acquire now.
func (l *Limiters) Available(ctx context.Context, r Request) (int64, error) {
	rep, err := l.run(ctx, r, limiter.OpPeek, nil, func(st *limiter.Stored, shard int, keys []string) (limiter.Reply, error) {
		return l.eval(ctx, r.Name, shard, l.scripts.Limiter(st.Algo), keys, limiter.OpPeek, st.Epoch)
	})
	return rep.Count, err
}

// Release gives r.Permits permits back (never above capacity) and returns
// the permits available afterwards.
func (l *Limiters) Release(ctx context.Context, r Request) (int64, error) {
	rep, err := l.run(ctx, r, limiter.OpRelease, nil, func(st *limiter.Stored, shard int, keys []string) (limiter.Reply, error) {
		return l.eval(ctx, r.Name, shard, l.scripts.Limiter(st.Algo), keys, limiter.OpRelease, st.Epoch, r.Permits)
	})
	return rep.Count, err
}

// Reset gives a limiter fresh, full state (its config is kept). It reports
// whether the limiter exists.
func (l *Limiters) Reset(ctx context.Context, name string) (bool, error) {
	st, err := l.load(ctx, name)
	if err != nil || st == nil {
		return false, err
	}
	l.forget(name)
	epoch := newEpoch()
	for shard := 0; shard < st.Shards; shard++ {
		key := l.keys.Config(name, shard)
		if _, err := l.node(name, shard).Eval(ctx, l.scripts.Reset, []string{key}, epoch); err != nil && !errors.Is(err, redis.Nil) {
			return false, err
		}
		// The shared budget's old state goes now; per-client state expires.
		old := l.keys.Script(st.Algo, name, shard, st.Epoch, "")[1:]
		if _, err := l.node(name, shard).Del(ctx, old...); err != nil {
			return false, err
		}
	}
	return true, nil
}

// Del deletes a limiter (config and shared state) and reports whether it existed.
func (l *Limiters) Del(ctx context.Context, name string) (bool, error) {
	st, err := l.load(ctx, name)
	if err != nil || st == nil {
		return false, err
	}
	l.forget(name)
	// Shard 0 last: while it exists the limiter exists, so a failure part
	// way leaves something RL.DEL can be called on again.
	for shard := st.Shards - 1; shard >= 0; shard-- {
		keys := l.keys.Script(st.Algo, name, shard, st.Epoch, "")
		if _, err := l.node(name, shard).Del(ctx, keys...); err != nil {
			return false, err
		}
	}
	return true, nil
}

// Supports reports whether rlproxy has a script for an algorithm.
func (l *Limiters) Supports(a limiter.Algo) bool { return l.scripts.Limiter(a) != nil }
