package ratelimit

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
	"github.com/rlproxy/rlproxy/coalesce"
	"github.com/rlproxy/rlproxy/feed"
	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/sharding"
)

// Options configure Limiters.
type Options struct {
	// KeyPrefix starts every key rlproxy writes.
	KeyPrefix string
	// NativeCellKeys keeps GCRA / CL.THROTTLE / RL.THROTTLE state in the
	// key as named, without the prefix (passthrough).
	NativeCellKeys bool
	// MaxProbes is how many other shards a denied request tries.
	MaxProbes int
	// OnBackendError is what an acquire answers when the backend it needs
	// is unavailable (default: the error).
	OnBackendError Policy
	// DenyCache answers repeated denials locally until their retry_after.
	DenyCache bool
	// DenyCacheSize bounds the denials remembered (0: DefaultDenyCacheSize).
	DenyCacheSize int
	// MaxWaiters bounds the clients waiting (TIMEOUT/BLOCK) at once.
	MaxWaiters int
	// MaxPolicies bounds the policies (RL.POLICY; 0: DefaultMaxPolicies).
	MaxPolicies int
	// Backstop is how often changes the change feed may have missed are
	// polled for (0: DefaultBackstop; see change.go).
	Backstop time.Duration
}

// Limiters runs limiter operations on the backend pool: it knows which
// node holds each sub-limiter, caches limiter configs, coalesces
// concurrent acquires of one sub-limiter into one script call, and retries
// once a script says the config it was given has changed.
type Limiters struct {
	pool      *backend.Pool
	keys      limiter.Keys
	scripts   *limiter.Scripts
	live      atomic.Pointer[Options] // opt, SetOptions
	nodeNames []string                // node names, for placement

	configs  configCache
	policies policies
	batches  coalesce.Coalescer[limiter.Ask, answer]  // per sub-limiter budget; MaxGather set in New
	names    coalesce.Coalescer[nameAsk, answer]      // per node and policy (names.go)
	also     coalesce.Coalescer[alsoItem, alsoAnswer] // per node (and slot) for several names at once (also.go)
	cluster  bool                                     // on a Redis Cluster: names calls by master (names.go)
	denials  denyCache
	queues   queues
	sleepers sleepers // waiters asleep, per limiter (Wake)
	changes  changes  // told of changes (OnChange)
	feed     *feed.Feed
	// policyKick asks followPolicies to read the policies now.
	policyKick chan struct{}
	waiters    Waiters // RL.ACQUIRE's (MaxWaiters)
	stats      counters

	noCrossSlot atomic.Bool // the cluster cannot run names calls (Redis 6): a call per name

	closing   chan struct{} // closed by Close: the watches of follow end
	closeOnce sync.Once
}

// counters count decisions as they are made.
type counters struct {
	Granted, Denied, Errors atomic.Int64
	DeniedFromCache         atomic.Int64 // of Denied (and ShadowDenied), answered by the deny cache
	ShadowDenied            atomic.Int64 // of Granted, denied by a SHADOW limiter
}

// decided counts one decision: a grant, a SHADOW limiter's denial
// (granted anyway), or a denial.
func (c *counters) decided(granted, shadowDenied bool) {
	switch {
	case shadowDenied:
		c.Granted.Add(1)
		c.ShadowDenied.Add(1)
	case granted:
		c.Granted.Add(1)
	default:
		c.Denied.Add(1)
	}
}

// maxGather bounds how long a sub-limiter's follow-up batch waits for
// the callers just answered to come back (coalesce.Coalescer.MaxGather).
const maxGather = time.Millisecond

// New returns Limiters over a pool.
func New(pool *backend.Pool, scripts *limiter.Scripts, o Options) *Limiters {
	l := &Limiters{
		pool:    pool,
		keys:    limiter.Keys{Prefix: o.KeyPrefix, NativeCell: o.NativeCellKeys},
		scripts: scripts,
		closing: make(chan struct{}),

		policyKick: make(chan struct{}, 1),
	}
	l.sleepers.watch = l.watch
	l.live.Store(&o)
	l.waiters.SetMax(o.MaxWaiters)
	l.batches.MaxGather = maxGather
	l.names.MaxGather = maxGather
	l.denials.max = o.DenyCacheSize
	for _, n := range pool.Nodes() {
		l.nodeNames = append(l.nodeNames, n.Name())
		if _, ok := n.Client().(*redis.ClusterClient); ok {
			l.cluster = true
		}
	}
	l.feed = feed.New(pool.Nodes(), feed.Options{Channel: l.keys.Changes()})
	l.feed.Listen(l.onFeed)
	l.feed.Start()
	go l.followPolicies()
	return l
}

// Stats are the limiters' figures at one moment: decisions since start
// and what is held now. INFO and /metrics read them (internal/proxy's
// stats table).
type Stats struct {
	Granted, Denied, Errors int64
	DeniedFromCache         int64 // of Denied (and ShadowDenied), answered by the deny cache
	// ShadowDenied: of Granted, the requests a SHADOW limiter denied (and
	// granted anyway); a shadow denial answered from the deny cache is
	// counted here and in DeniedFromCache.
	ShadowDenied     int64
	WaitingClients   int64 // waiting (TIMEOUT/BLOCK) now
	DenyCacheEntries int64 // denials the deny cache holds now
}

// Stats returns the limiters' figures now.
func (l *Limiters) Stats() Stats {
	return Stats{
		Granted:          l.stats.Granted.Load(),
		Denied:           l.stats.Denied.Load(),
		Errors:           l.stats.Errors.Load(),
		DeniedFromCache:  l.stats.DeniedFromCache.Load(),
		ShadowDenied:     l.stats.ShadowDenied.Load(),
		WaitingClients:   l.waiters.Len(),
		DenyCacheEntries: int64(l.denials.len()),
	}
}

// nodes returns the node of each of a limiter's shards (see placement).
// Shard 0, whose config says whether the limiter exists, is on the same
// node whatever the count.
func (l *Limiters) nodes(name string, shards int) []*backend.Node {
	all := l.pool.Nodes()
	out := make([]*backend.Node, shards)
	if len(all) == 1 {
		for i := range out {
			out[i] = all[0]
		}
		return out
	}
	for shard, n := range l.placement(name, shards) {
		out[shard] = all[n]
	}
	return out
}

// placement maps each of a limiter's shards to the index of its node in
// the pool (rendezvous hashing with bounded loads, see sharding.Placement).
func (l *Limiters) placement(name string, shards int) []uint16 {
	place := sharding.Placement(name, shards, l.nodeNames)
	out := make([]uint16, len(place))
	for i, n := range place {
		out[i] = uint16(n)
	}
	return out
}

func newEpoch() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// Rule is the config a name follows, and the pattern of the policy that
// gives it ("" for a limiter of its own).
type Rule struct {
	limiter.Config
	Policy string
}

// GetRate reads the config a name follows from the backend: its own, or
// its policy's (nil when there is none).
func (l *Limiters) GetRate(ctx context.Context, name string) (*Rule, error) {
	e, err := l.load(ctx, name)
	if err != nil || e == nil {
		return nil, err
	}
	r := &Rule{Config: e.Config}
	if e.policy != nil {
		r.Policy = e.policy.pattern
	}
	return r, nil
}

// eachShard runs a peek or release op on every shard of a limiter and
// sums what they report available. Each shard is asked once: after a
// follower is repaired the walk goes on from it, and a release whose
// config was replaced after some shares were given back ends with an
// error (giving them again would release them twice).
func (l *Limiters) eachShard(ctx context.Context, r Request, op limiter.Op, permits func(shard int, st *entry) []int64) (int64, error) {
	var total int64
	var asked *entry // the config the shards below next were asked under
	next := 0
	err := l.withConfig(ctx, r.Name, func(e *entry) (Step, error) {
		if e.Algo == limiter.Concurrency && op == limiter.OpRelease {
			return Done, limiter.LeaseOnlyError{Name: r.Name}
		}
		if next > 0 && (e.Epoch != asked.Epoch || e.Shards != asked.Shards) {
			if op == limiter.OpRelease {
				return Done, fmt.Errorf("limiter '%s' changed during RL.RELEASE; try again", r.Name)
			}
			total, next = 0, 0
		}
		for ; next < e.Shards; next++ {
			keys := l.keysOf(e, next, clientKey(e.Stored, r.Client))
			v, err := e.node(next).Eval(ctx, e.script, keys, limiter.Args(op, e.confArg(next), permits(next, e)...)...)
			if err != nil {
				return Done, err
			}
			rep, err := limiter.DecodeReply(v, op, nil)
			switch {
			case err != nil:
				return Done, err
			case rep.Status != limiter.StatusOK && next == 0:
				return Reload, nil
			case rep.Status != limiter.StatusOK:
				return Repair(next), nil
			}
			total += rep.Count
			asked = e
		}
		return Done, nil
	})
	return total, err
}

// Available returns the permits r.Client could acquire now, summed over shards.
func (l *Limiters) Available(ctx context.Context, r Request) (int64, error) {
	return l.eachShard(ctx, r, limiter.OpPeek, func(int, *entry) []int64 { return nil })
}

// Release gives r.Permits permits back, split over the shards like the
// rate is (each capped at its capacity), and returns the permits
// available afterwards.
func (l *Limiters) Release(ctx context.Context, r Request) (int64, error) {
	l.denials.forget(r.Name)
	n, err := l.eachShard(ctx, r, limiter.OpRelease, func(shard int, st *entry) []int64 {
		return []int64{sharding.Split(r.Permits, st.Shards)[shard]}
	})
	if err == nil {
		l.Wake(r.Name) // permits came back: sleeping waiters may have room now
	}
	return n, err
}

// Reset gives a limiter fresh, full state (its config is kept). It reports
// whether the limiter exists.
func (l *Limiters) Reset(ctx context.Context, name string) (bool, error) {
	st, err := l.load(ctx, name)
	if err != nil || st == nil {
		return false, err
	}
	l.forget(name)
	if st.policy != nil {
		// A policy's name has no epoch of its own: its state goes.
		_, err := l.delState(ctx, st)
		return err == nil, err
	}
	epoch := newEpoch()
	for shard := 0; shard < st.Shards; shard++ {
		key := l.keys.Config(name, shard)
		feed, msg := l.announce(name, st.Shards, shard == st.Shards-1)
		_, err := st.node(shard).Eval(ctx, l.scripts.Reset, []string{key}, epoch, feed, msg)
		if err != nil && !errors.Is(err, redis.Nil) { // Nil: no such sub-limiter
			return false, err
		}
		// The shared budget's old state goes now; per-client state expires.
		if _, err := st.node(shard).Del(ctx, l.keysOf(st, shard, "")[1:]...); err != nil {
			return false, err
		}
	}
	l.changed(Change{Name: name, Shards: st.Shards})
	return true, nil
}

// announce is the change feed's channel and message for a change to
// limiter name of that many shards, made by the script called with them;
// both empty unless last (the change's last script call announces it).
func (l *Limiters) announce(name string, shards int, last bool) (channel, msg string) {
	if !last {
		return "", ""
	}
	return l.keys.Changes(), feed.LimiterMessage(name, shards)
}

// Del deletes a limiter (config and shared state) and reports whether it
// existed; for a name a policy governs, its state, and whether it had any.
func (l *Limiters) Del(ctx context.Context, name string) (bool, error) {
	st, err := l.load(ctx, name)
	if err != nil || st == nil {
		return false, err
	}
	l.forget(name)
	if st.policy != nil {
		n, err := l.delState(ctx, st)
		return n > 0, err
	}
	// Shard 0 last: while it exists the limiter exists, so a failure part
	// way leaves something RL.DEL can be called on again.
	for shard := st.Shards - 1; shard >= 0; shard-- {
		feed, msg := l.announce(name, st.Shards, shard == 0)
		if _, err := st.node(shard).Eval(ctx, l.scripts.Del, l.keysOf(st, shard, ""), feed, msg); err != nil {
			return false, err
		}
	}
	l.changed(Change{Name: name, Shards: st.Shards})
	return true, nil
}

// delState deletes the shared-budget state of every shard of e (a name a
// policy governs: RL.RESET and RL.DEL) and returns how many keys had
// state. The change is announced once the state is gone (a PUBLISH of its
// own: the state may be in the policy's hashes, cleared by the
// algorithm's script).
func (l *Limiters) delState(ctx context.Context, e *entry) (int64, error) {
	n, err := l.delShards(ctx, e)
	if err == nil {
		feed, msg := l.announce(e.name, e.Shards, true)
		err = e.node(0).Publish(ctx, feed, msg)
	}
	l.changed(Change{Name: e.name, Shards: e.Shards})
	return n, err
}

func (l *Limiters) delShards(ctx context.Context, e *entry) (int64, error) {
	var n int64
	for shard := 0; shard < e.Shards; shard++ {
		keys := l.keysOf(e, shard, "")
		var d int64
		var err error
		if e.policy.hashes != "" {
			// In the policy's hashes, maybe: the script knows where.
			var v any
			if v, err = e.node(shard).Eval(ctx, e.script, keys, limiter.Args(limiter.OpClear, e.confArg(shard))...); err == nil {
				var rep limiter.Reply
				rep, err = limiter.DecodeReply(v, limiter.OpClear, nil)
				d = rep.Count
			}
		} else {
			d, err = e.node(shard).Del(ctx, keys[1:]...)
		}
		if err != nil {
			return n, err
		}
		n += d
	}
	return n, nil
}
