package sharding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

// Options configure Limiters.
type Options struct {
	// KeyPrefix starts every key rlproxy writes.
	KeyPrefix string
	// MaxProbes is how many other shards a denied request tries.
	MaxProbes int
	// OnBackendError is what an acquire answers when the backend it needs
	// is unavailable: "error" (default), "allow" or "deny".
	OnBackendError string
	// DenyCache answers repeated denials locally until their retry_after.
	DenyCache bool
	// MaxWaiters bounds the clients waiting (TIMEOUT/BLOCK) at once.
	MaxWaiters int
}

// Limiters runs limiter operations on the backend pool: it knows which
// node holds each sub-limiter, caches limiter configs, coalesces
// concurrent acquires of one sub-limiter into one script call, and retries
// once a script says the config it was given has changed.
type Limiters struct {
	pool    *backend.Pool
	keys    limiter.Keys
	scripts *limiter.Scripts
	opts    Options
	names   []string // node names, for placement

	mu      sync.RWMutex
	cache   map[string]limiter.Stored
	touched map[string]time.Time // last keepAlive per limiter

	batches backend.Coalescer[limiter.Ask, answer]
	denials denyCache
	queues  queues
	waiters atomic.Int64
	stats   Stats
}

// Stats count decisions, for INFO.
type Stats struct {
	Granted, Denied, Errors, CachedDenials atomic.Int64
}

// maxCached bounds the config cache; past it a random entry is dropped
// (configs are re-read on demand, so dropping one only costs a read).
const maxCached = 100_000

// New returns Limiters over a pool.
func New(pool *backend.Pool, scripts *limiter.Scripts, o Options) *Limiters {
	l := &Limiters{
		pool:    pool,
		keys:    limiter.Keys{Prefix: o.KeyPrefix},
		scripts: scripts,
		opts:    o,
		cache:   map[string]limiter.Stored{},
		touched: map[string]time.Time{},
	}
	for _, n := range pool.Nodes() {
		l.names = append(l.names, n.Name())
	}
	return l
}

// Stats returns the decision counters.
func (l *Limiters) Stats() *Stats { return &l.stats }

// Info returns the INFO lines of the limiters section.
func (l *Limiters) Info() []string {
	return []string{
		fmt.Sprintf("granted:%d", l.stats.Granted.Load()),
		fmt.Sprintf("denied:%d", l.stats.Denied.Load()),
		fmt.Sprintf("denied_from_cache:%d", l.stats.CachedDenials.Load()),
		fmt.Sprintf("errors:%d", l.stats.Errors.Load()),
		fmt.Sprintf("waiting_clients:%d", l.waiters.Load()),
	}
}

// Supports reports whether rlproxy has a script for an algorithm.
func (l *Limiters) Supports(a limiter.Algo) bool { return l.scripts.Limiter(a) != nil }

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
		_, got, _, err := l.setConf(ctx, name, c, sub, opts)
		if err == nil && got != epoch {
			// This sub-limiter kept an older epoch (shard 0's node lost its
			// data, or KEEPSTATE kept it): replace it, or every acquire on it
			// would see the epoch change and fail.
			if _, err = l.node(name, sub.Shard).Del(ctx, l.keys.Config(name, sub.Shard)); err == nil {
				_, _, _, err = l.setConf(ctx, name, c, sub, opts)
			}
		}
		if err != nil {
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
			delete(l.touched, k)
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

// forget drops what this proxy remembers of a limiter: its config and
// its cached denials.
func (l *Limiters) forget(name string) {
	l.mu.Lock()
	delete(l.cache, name)
	delete(l.touched, name)
	l.mu.Unlock()
	l.denials.forget(name)
}

// Request is one call on a limiter.
type Request struct {
	Name    string
	Client  string // connection name; selects the budget in PER_CLIENT mode
	Permits int64
	// MaxWait lets an algorithm that books ahead reserve permits that come
	// within it (see AcquireWait).
	MaxWait time.Duration
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

// answer is one sub-limiter's decision on one request.
type answer struct {
	limiter.Result
	status limiter.Status
	epoch  string
}

// errConfigChanged asks the caller to reload the config and try again.
var errConfigChanged = errors.New("limiter config changed")

// missingShard: a sub-limiter other than shard 0 has no config although
// the limiter exists — its TTL ran out while other shards were used, or
// its node restarted empty.
type missingShard struct{ shard int }

func (e *missingShard) Error() string {
	return fmt.Sprintf("sub-limiter %d has no config", e.shard)
}

// repair writes a missing sub-limiter's config back from shard 0's, with
// the epoch in force (its state starts full). If the limiter itself is
// gone, it says so.
func (l *Limiters) repair(ctx context.Context, name string, shard int) error {
	st, err := l.load(ctx, name)
	if err != nil {
		return err
	}
	if st == nil {
		return &NoLimiterError{Name: name}
	}
	if shard >= st.Shards {
		return nil // the shard count changed: the reload routes anew
	}
	_, _, _, err = l.setConf(ctx, name, st.Config, Subs(st.Config)[shard], limiter.SetConfOptions{Epoch: st.Epoch})
	return err
}

// keepAlive refreshes the TTL of a limiter's shard-0 config (which says
// whether the limiter exists) at most every quarter TTL per proxy: with
// many shards, shard 0 may see no request for a while although the
// limiter is in use.
func (l *Limiters) keepAlive(ctx context.Context, name string, st *limiter.Stored) {
	if st.TTL <= 0 || st.Shards == 1 {
		return // a single shard refreshes its own TTL on every call
	}
	now := time.Now()
	l.mu.Lock()
	last, ok := l.touched[name]
	due := !ok || now.Sub(last) >= st.TTL/4
	if due {
		l.touched[name] = now
	}
	l.mu.Unlock()
	if due {
		// TTL plus the refresh period: whatever call comes last before the
		// next refresh, the limiter lives at least TTL after it.
		l.node(name, 0).PExpire(ctx, l.keys.Config(name, 0), st.TTL+st.TTL/4) //nolint:errcheck // the next call retries
	}
}

// Acquire asks for r.Permits permits: it tries a shard, and on a denial up
// to MaxProbes others, skipping shards whose node is down.
func (l *Limiters) Acquire(ctx context.Context, r Request) (limiter.Result, error) {
	res, _, err := l.acquireCounted(ctx, r)
	return res, err
}

// acquireCounted is Acquire that also says which shard answered.
func (l *Limiters) acquireCounted(ctx context.Context, r Request) (limiter.Result, int, error) {
	res, shard, err := l.acquire(ctx, r)
	switch {
	case err == nil && res.Granted:
		l.stats.Granted.Add(1)
	case err == nil:
		l.stats.Denied.Add(1)
	default:
		l.stats.Errors.Add(1)
		if errors.Is(err, backend.ErrUnavailable) {
			res, err = l.onBackendError(err)
		}
	}
	return res, shard, err
}

// onBackendError applies the configured policy when a needed backend is down.
func (l *Limiters) onBackendError(err error) (limiter.Result, error) {
	switch l.opts.OnBackendError {
	case "allow":
		return limiter.Result{Granted: true}, nil
	case "deny":
		return limiter.Result{RetryAfterMs: 1000, ResetAfterMs: 1000}, nil
	}
	return limiter.Result{}, err
}

func (l *Limiters) acquire(ctx context.Context, r Request) (limiter.Result, int, error) {
	for attempt := 0; ; attempt++ {
		st, err := l.config(ctx, r.Name, attempt > 0)
		if err != nil {
			return limiter.Result{}, 0, err
		}
		if c := st.Capacity(); r.Permits > c {
			if attempt == 0 {
				continue // the cached config may be old: check the current one
			}
			return limiter.Result{}, 0, &OverCapacityError{Name: r.Name, Permits: r.Permits, Capacity: c}
		}
		l.keepAlive(ctx, r.Name, st)
		res, shard, err := l.acquireShards(ctx, st, r)
		var missing *missingShard
		if errors.As(err, &missing) && attempt < 3 {
			err = l.repair(ctx, r.Name, missing.shard)
		}
		if (err == nil && missing != nil) || (errors.Is(err, errConfigChanged) && attempt < 3) {
			l.forget(r.Name)
			continue
		}
		return res, shard, err
	}
}

func (l *Limiters) acquireShards(ctx context.Context, st *limiter.Stored, r Request) (limiter.Result, int, error) {
	client := clientKey(st, r.Client)
	var denied merged
	var lastErr error
	order := Probe(st.Shards, l.opts.MaxProbes, rand.Uint64())
	for i := 0; i < len(order); i++ {
		shard := order[i]
		k := subKey{shard: shard, epoch: st.Epoch, client: client}
		if l.opts.DenyCache && r.MaxWait == 0 {
			if res, ok := l.denials.check(r.Name, k, r.Permits, time.Now()); ok {
				l.stats.CachedDenials.Add(1)
				denied.add(res.Remaining, res.RetryAfterMs, res.ResetAfterMs)
				continue
			}
		}
		sent := time.Now()
		a, err := l.acquireOn(ctx, st, r, shard, client)
		if err != nil {
			lastErr = err
			if errors.Is(err, backend.ErrUnavailable) {
				// Other shards may still serve: a dead one costs no probe,
				// the walk goes one shard further.
				if len(order) < st.Shards {
					order = append(order, (order[len(order)-1]+1)%st.Shards)
				}
				continue
			}
			return limiter.Result{}, 0, err
		}
		switch {
		case a.status == limiter.StatusNoLimiter && shard == 0:
			l.forget(r.Name)
			return limiter.Result{}, 0, &NoLimiterError{Name: r.Name}
		case a.status == limiter.StatusNoLimiter:
			return limiter.Result{}, 0, &missingShard{shard: shard}
		case a.status != limiter.StatusOK:
			return limiter.Result{}, 0, errConfigChanged
		case a.OverCapacity:
			return limiter.Result{}, 0, errConfigChanged
		case a.Granted:
			return a.Result, shard, nil
		}
		if l.opts.DenyCache && r.MaxWait == 0 {
			l.denials.add(r.Name, k, r.Permits, sent, a.Result)
		}
		denied.add(a.Remaining, a.RetryAfterMs, a.ResetAfterMs)
	}
	if denied.n == 0 {
		return limiter.Result{}, 0, lastErr
	}
	return limiter.Result{
		Remaining:    denied.res.remaining,
		RetryAfterMs: denied.res.retryAfter,
		ResetAfterMs: denied.res.resetAfter,
	}, 0, nil
}

// acquireOn asks one sub-limiter. Concurrent requests for the same
// sub-limiter share one script call. The call runs to its end even when
// the client goes away (ctx ends); permits granted to nobody are given
// back.
func (l *Limiters) acquireOn(ctx context.Context, st *limiter.Stored, r Request, shard int, client string) (answer, error) {
	node := l.node(r.Name, shard)
	script := l.scripts.Limiter(st.Algo)
	if script == nil {
		return answer{}, fmt.Errorf("algorithm '%s' is not supported yet", st.Algo)
	}
	keys := l.keys.Script(st.Algo, r.Name, shard, st.Epoch, client)
	run := func(ctx context.Context, asks []limiter.Ask) ([]answer, error) {
		v, err := node.Eval(ctx, script, keys, limiter.AcquireArgs(st.Epoch, asks)...)
		if err != nil {
			return nil, err
		}
		rep, err := limiter.DecodeReply(v, limiter.OpAcquire, len(asks))
		if err != nil {
			return nil, err
		}
		out := make([]answer, len(asks))
		for i := range out {
			out[i] = answer{status: rep.Status, epoch: rep.Epoch}
			if rep.Status == limiter.StatusOK {
				out[i].Result = rep.Results[i]
			}
		}
		return out, nil
	}
	a, err := l.batches.Do(context.Background(), node.Name()+"\x00"+keys[1], limiter.Ask{Permits: r.Permits, MaxWait: r.MaxWait}, run)
	if err == nil && a.Granted && ctx.Err() != nil {
		l.giveBack(st, r.Name, shard, client, r.Permits) //nolint:errcheck // best effort for a gone client
	}
	return a, err
}

// giveBack returns permits granted to a client that is gone (best
// effort: if the config changed meanwhile, its state is gone anyway).
func (l *Limiters) giveBack(st *limiter.Stored, name string, shard int, client string, permits int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys := l.keys.Script(st.Algo, name, shard, st.Epoch, client)
	_, err := l.node(name, shard).Eval(ctx, l.scripts.Limiter(st.Algo), keys, limiter.Args(limiter.OpRelease, st.Epoch, permits)...)
	// Denials remembered meanwhile counted these permits as taken.
	l.denials.forget(name)
	return err
}

// eachShard runs a peek or release op on every shard of a limiter and
// sums what they report available.
func (l *Limiters) eachShard(ctx context.Context, r Request, op limiter.Op, permits func(shard int, st *limiter.Stored) []int64) (int64, error) {
	for attempt := 0; ; attempt++ {
		st, err := l.config(ctx, r.Name, attempt > 0)
		if err != nil {
			return 0, err
		}
		script := l.scripts.Limiter(st.Algo)
		if script == nil {
			return 0, fmt.Errorf("algorithm '%s' is not supported yet", st.Algo)
		}
		var total int64
		changed := false
		for shard := 0; shard < st.Shards && !changed; shard++ {
			keys := l.keys.Script(st.Algo, r.Name, shard, st.Epoch, clientKey(st, r.Client))
			v, err := l.node(r.Name, shard).Eval(ctx, script, keys, limiter.Args(op, st.Epoch, permits(shard, st)...)...)
			if err != nil {
				return 0, err
			}
			rep, err := limiter.DecodeReply(v, op, 0)
			if err != nil {
				return 0, err
			}
			changed = rep.Status != limiter.StatusOK
			total += rep.Count
		}
		if !changed {
			return total, nil
		}
		l.forget(r.Name)
		if attempt >= 2 {
			return 0, fmt.Errorf("limiter '%s' keeps changing; try again", r.Name)
		}
	}
}

// Available returns the permits r.Client could acquire now, summed over shards.
func (l *Limiters) Available(ctx context.Context, r Request) (int64, error) {
	return l.eachShard(ctx, r, limiter.OpPeek, func(int, *limiter.Stored) []int64 { return nil })
}

// Release gives r.Permits permits back, split over the shards like the
// rate is (each capped at its capacity), and returns the permits
// available afterwards.
func (l *Limiters) Release(ctx context.Context, r Request) (int64, error) {
	l.denials.forget(r.Name)
	return l.eachShard(ctx, r, limiter.OpRelease, func(shard int, st *limiter.Stored) []int64 {
		return []int64{Split(r.Permits, st.Shards)[shard]}
	})
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
		_, err := l.node(name, shard).Eval(ctx, l.scripts.Reset, []string{key}, epoch)
		if err != nil && !errors.Is(err, redis.Nil) { // Nil: no such sub-limiter
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

// ThrottleRequest is one redis-cell CL.THROTTLE call.
type ThrottleRequest struct {
	Key                               string
	MaxBurst, Count, Period, Quantity int64
}

// Throttle runs redis-cell's CL.THROTTLE and returns its five-integer reply.
func (l *Limiters) Throttle(ctx context.Context, r ThrottleRequest) ([5]int64, error) {
	node := l.node(r.Key, 0)
	v, err := node.Eval(ctx, l.scripts.Cell, []string{l.keys.Cell(r.Key)}, limiter.CellArgs(r.MaxBurst, r.Count, r.Period, r.Quantity)...)
	if err != nil {
		return [5]int64{}, err
	}
	return limiter.DecodeCell(v)
}
