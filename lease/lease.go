// Package lease runs concurrency limiters (ALGO concurrency): a
// distributed semaphore whose permits are held as leases — taken with
// Lease, extended with Renew, given back with Return, and expired by the
// backend's clock when their holder vanishes.
//
// The state lives in Redis (concurrency.lua): a sorted set of leases by
// expiry, and a queue of waiters by arrival with a deadline per ticket.
// Waiting is fair across proxies because the queue is in Redis: a waiter
// is granted only when the permits of every waiter queued before it fit
// too. Waking is by Pub/Sub: whenever permits come free (a return through
// any proxy, an expiry noticed by any call) or the queue moves, the script
// PUBLISHes the tickets of the waiters at its head that fit, and only
// those retry. Lost messages cost promptness, never correctness: the
// first local waiter of each sub-limiter sleeps at most until the earliest
// lease expires (so expiries are noticed when no one returns anything),
// and every waiter asks again within refresh to keep its ticket.
package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/feed"
	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// Lookup finds a limiter's config and nodes (ratelimit.Limiters does).
type Lookup interface {
	// WithPlaced runs f with a limiter's config and nodes until f is
	// done, reloading the config (and repairing shards) as f asks, within
	// one bound for every call on limiters.
	WithPlaced(ctx context.Context, name, client string, f func(ratelimit.Placed) (ratelimit.Step, error)) error
	// Nodes returns the node of each shard of a limiter of that many shards.
	Nodes(name string, shards int) []*backend.Node
	// OnChange has f told of every limiter replaced or deleted, through
	// any proxy (the zero Change: any limiter).
	OnChange(f func(ratelimit.Change))
	// Feed is the change feed, whose subscribers carry the waiters'
	// channels too.
	Feed() *feed.Feed
}

// Options configure a Service.
type Options struct {
	// KeyPrefix starts every key rlproxy writes (as sharding's).
	KeyPrefix string
	// MaxWaiters bounds the clients waiting in RL.LEASE at once (0: no bound).
	MaxWaiters int
	// Refresh is how often a waiter asks again to keep its place (its
	// ticket lapses after three times this without one). Defaults to 1s.
	Refresh time.Duration
}

// Service takes, renews and returns leases.
type Service struct {
	look    Lookup
	keys    limiter.Keys
	script  *redis.Script
	opts    Options
	hub     *hub
	waiters ratelimit.Waiters // bounded by Options.MaxWaiters, changed live by SetMaxWaiters
}

// New returns a Service over the limiters lookup finds.
func New(lookup Lookup, scripts *limiter.Scripts, o Options) *Service {
	if o.Refresh <= 0 {
		o.Refresh = time.Second
	}
	s := &Service{look: lookup, keys: limiter.Keys{Prefix: o.KeyPrefix}, script: scripts.Limiter(limiter.Concurrency), opts: o, hub: newHub(lookup.Feed())}
	s.waiters.SetMax(o.MaxWaiters)
	lookup.OnChange(s.changed)
	return s
}

// SetMaxWaiters changes the bound on waiting clients, live (a config
// reload).
func (s *Service) SetMaxWaiters(n int) { s.waiters.SetMax(n) }

// Close stops the hub's timers.
func (s *Service) Close() { s.hub.close() }

// Request is one RL.LEASE.
type Request struct {
	Name    string
	Client  string // connection name (MODE PER_CLIENT)
	Permits int64
	TTL     time.Duration // 0: the limiter's lease TTL
	MaxWait time.Duration // 0: decide now
	Block   bool          // wait until granted
}

// Result is RL.LEASE's answer.
type Result struct {
	Granted      bool
	Remaining    int64 // free permits afterwards (on the sub-limiter asked)
	RetryAfterMs int64 // denied: until the earliest lease expires
	ID           string
}

// NotConcurrencyError: a lease command on a rate limiter.
type NotConcurrencyError struct {
	Name string
	Algo limiter.Algo
}

func (e *NotConcurrencyError) Error() string {
	return fmt.Sprintf("'%s' is a %s limiter, not a concurrency limiter (RL.LEASE needs ALGO concurrency; take permits with RL.ACQUIRE)", e.Name, e.Algo)
}

// sub is one sub-limiter of a concurrency limiter, as one call sees it.
type sub struct {
	name  string
	shard int
	node  *backend.Node
	keys  []string
	epoch string
}

func (s *Service) sub(p ratelimit.Placed, name string, shard int) sub {
	return sub{name: name, shard: shard, node: p.Nodes[shard], epoch: p.ConfArg(shard),
		keys: s.keys.Script(limiter.Concurrency, name, shard, p.Epoch, p.ClientKey)}
}

// channel is the Pub/Sub channel of a sub-limiter's waiters.
func (s *Service) channel(name string, shard int) string {
	return s.keys.Config(name, shard) + ":w"
}

// errChanged: the limiter's config or state was replaced; reload and retry.
var errChanged = errors.New("limiter changed")

// call runs one op on a sub-limiter. It is not cut short by ctx (a reply
// that granted a lease must be read, or the lease could not be given
// back): it is bounded by the node's timeout instead.
func (s *Service) call(ctx context.Context, b sub, op limiter.Op, args []any) (limiter.LeaseReply, error) {
	v, err := b.node.Eval(context.WithoutCancel(ctx), s.script, b.keys, args...)
	if err != nil {
		return limiter.LeaseReply{}, err
	}
	r, err := limiter.DecodeLease(v, op)
	if err != nil {
		return r, err
	}
	switch r.Status {
	case limiter.StatusNoLimiter:
		return r, errChanged // the reload finds out whether it is gone
	case limiter.StatusEpochChange:
		return r, errChanged
	}
	return r, nil
}

// withPlaced runs f with the concurrency limiter's placement, again
// under the config read afresh when a script says it changed (errChanged).
func (s *Service) withPlaced(ctx context.Context, name, client string, f func(p ratelimit.Placed) error) error {
	return s.look.WithPlaced(ctx, name, client, func(p ratelimit.Placed) (ratelimit.Step, error) {
		if p.Algo != limiter.Concurrency {
			return ratelimit.Done, &NotConcurrencyError{Name: name, Algo: p.Algo}
		}
		err := f(p)
		if errors.Is(err, errChanged) {
			return ratelimit.Reload, nil
		}
		return ratelimit.Done, err
	})
}

// Lease takes r.Permits permits for r.TTL, waiting up to r.MaxWait (or
// until granted with r.Block) in arrival order. ctx ends when the client
// disconnects (or the proxy shuts down: the error is ctx's cause): a
// waiter then leaves the queue, and a lease granted at that very moment is
// given back.
func (s *Service) Lease(ctx context.Context, r Request) (Result, error) {
	if r.Permits <= 0 {
		r.Permits = 1
	}
	if r.MaxWait > 0 || r.Block {
		return s.wait(ctx, r)
	}
	var res Result
	err := s.withPlaced(ctx, r.Name, r.Client, func(p ratelimit.Placed) error {
		// Every shard holds an exact share: try them all, from a random one.
		first := rand.IntN(p.Shards)
		res = Result{}
		for i := 0; i < p.Shards; i++ {
			b := s.sub(p, r.Name, (first+i)%p.Shards)
			id := limiter.NewLeaseID(b.shard, r.Permits)
			rep, err := s.call(ctx, b, limiter.OpLease, limiter.LeaseArgs(b.epoch, r.Permits, r.TTL, id, "", 0))
			if err != nil {
				return err
			}
			if rep.Granted == 1 {
				res = Result{Granted: true, Remaining: rep.Free, ID: id}
				return nil
			}
			if rep.Granted < 0 {
				return overLimit(p, r)
			}
			if i == 0 || usToMs(rep.RetryAfterUs) < res.RetryAfterMs {
				res.Remaining, res.RetryAfterMs = rep.Free, usToMs(rep.RetryAfterUs)
			}
		}
		return nil
	})
	return res, err
}

// overLimit is the error of a lease the script found over its
// sub-limiter's share of the limit (the script, reading the config in
// force, is the judge: a cached config may be old).
func overLimit(p ratelimit.Placed, r Request) error {
	return &ratelimit.OverCapacityError{Name: r.Name, Permits: r.Permits, Capacity: p.Capacity(), Lease: true}
}

// wait is a Lease that may wait: it queues on one sub-limiter (picked at
// random when sharded) and asks again when woken, when the earliest lease
// expires (first local waiter only), to keep its ticket, and once more at
// its deadline. It is counted as waiting once its ticket is queued.
func (s *Service) wait(ctx context.Context, r Request) (Result, error) {
	in, err := s.waiters.Enter()
	if err != nil {
		return Result{}, err
	}
	defer in.Leave()
	q := &queued{svc: s, r: r, w: &waiter{ticket: limiter.NewTicket(), wake: make(chan struct{}, 1)}}
	if !r.Block {
		q.deadline = time.Now().Add(r.MaxWait)
	}
	defer q.leave(ctx)
	for {
		rest := ratelimit.WaitLeft(q.deadline)
		rep, id, err := q.ask(ctx, rest)
		switch {
		case err != nil:
			return Result{}, err
		case rep.Granted == 1:
			return q.take(ctx, rep, id)
		case rep.Granted < 0:
			return Result{}, overLimit(q.p, r)
		case rest <= 0:
			return Result{Remaining: rep.Free, RetryAfterMs: usToMs(rep.RetryAfterUs)}, nil
		}
		in.Queued() // its ticket is in the queue: those asking later are behind it
		if err := q.sleepUntil(ctx, rep, rest); err != nil {
			return Result{}, err
		}
	}
}

// queued is one waiting RL.LEASE: where it waits and whether its ticket
// is in a queue.
type queued struct {
	svc      *Service
	r        Request
	deadline time.Time // zero: BLOCK
	w        *waiter
	p        ratelimit.Placed
	shard    int
	node     *backend.Node // the shard's, whose channel w joined
	channel  string
	// subscribed is closed once the channel is subscribed (nil: it was
	// when w joined, or has been waited for since).
	subscribed <-chan struct{}
	in         *sub // the sub-limiter whose queue holds the ticket, if any
	timer      *time.Timer
}

// place takes the limiter's placement and, the first time or when its
// sub-limiter went away or moved to another node, picks one to queue on
// and joins its local waiters.
func (q *queued) place(p ratelimit.Placed) {
	q.p = p
	if q.node != nil && q.shard < p.Shards && p.Nodes[q.shard] == q.node {
		return
	}
	if q.node != nil {
		q.svc.hub.leave(q.node, q.channel, q.w)
	}
	q.shard = rand.IntN(p.Shards)
	q.node, q.channel = p.Nodes[q.shard], q.svc.channel(q.r.Name, q.shard)
	q.subscribed = q.svc.hub.join(q.node, q.channel, q.w)
}

func (q *queued) sub() sub { return q.svc.sub(q.p, q.r.Name, q.shard) }

// ask makes one lease call, queueing the ticket unless it is a final try
// (rest 0) not queued yet. It places the waiter before each call (from
// the config cache, or the policy in force: a name a policy governs
// learns of its policy's change or deletion here, as no script can tell
// it). When the limiter changed, it leaves the old queue and asks again
// under the config read afresh (withPlaced).
func (q *queued) ask(ctx context.Context, rest time.Duration) (rep limiter.LeaseReply, id string, err error) {
	err = q.svc.withPlaced(ctx, q.r.Name, q.r.Client, func(p ratelimit.Placed) error {
		q.place(p)
		b, ticket := q.sub(), q.w.ticket
		id = limiter.NewLeaseID(q.shard, q.r.Permits)
		if q.in != nil && q.in.epoch != b.epoch {
			q.dequeue(ctx) // queued under a config no longer in force
		}
		if rest <= 0 && q.in == nil {
			ticket = ""
		}
		refresh := q.svc.opts.Refresh
		var err error
		rep, err = q.svc.call(ctx, b, limiter.OpLease, limiter.LeaseArgs(b.epoch, q.r.Permits, q.r.TTL, id, ticket, min(rest, refresh)+2*refresh))
		switch {
		case errors.Is(err, errChanged):
			q.dequeue(ctx)
		case err != nil:
		case rep.Granted == 1:
			q.in = nil // the grant took the ticket out of the queue
		case ticket != "":
			q.in = &b
		}
		return err
	})
	return rep, id, err
}

// take answers a grant, or gives the lease back to a client gone by now.
func (q *queued) take(ctx context.Context, rep limiter.LeaseReply, id string) (Result, error) {
	if ctx.Err() != nil {
		b := q.sub()
		_, _ = q.svc.call(ctx, b, limiter.OpReturn, limiter.ReturnArgs(b.epoch, id))
		return Result{}, context.Cause(ctx)
	}
	return Result{Granted: true, Remaining: rep.Free, ID: id}, nil
}

// sleepUntil waits until the waiter should ask again: once subscribed (a
// wake-up sent before was missed), when woken, after Refresh to keep its
// ticket, at its deadline, or — the first local waiter, too few permits
// free — when the earliest lease expires (nobody may return anything;
// with enough free, the waiters queued ahead hold it back and the queue
// moving wakes it). It returns ctx's cause when ctx ends first.
func (q *queued) sleepUntil(ctx context.Context, rep limiter.LeaseReply, rest time.Duration) error {
	if q.subscribed != nil {
		select {
		case <-q.subscribed:
			q.subscribed = nil
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	d := min(rest, q.svc.opts.Refresh)
	if rep.Free < q.r.Permits && q.svc.hub.head(q.node, q.channel, q.w) {
		d = min(d, time.Duration(rep.RetryAfterUs)*time.Microsecond)
	}
	if q.timer == nil {
		q.timer = time.NewTimer(d)
	} else {
		q.timer.Reset(d)
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-q.w.wake:
	case <-q.timer.C:
	}
	return nil
}

// dequeue takes the ticket out of its queue (so those behind move up); on
// failure it lapses by its deadline.
func (q *queued) dequeue(ctx context.Context) {
	if q.in != nil {
		_, _ = q.svc.call(ctx, *q.in, limiter.OpCancel, limiter.CancelArgs(q.in.epoch, q.w.ticket, q.r.Permits))
		q.in = nil
	}
}

// leave ends the wait: out of the queue and the local waiters.
func (q *queued) leave(ctx context.Context) {
	if q.timer != nil {
		q.timer.Stop()
	}
	if q.node != nil {
		q.svc.hub.leave(q.node, q.channel, q.w)
	}
	q.dequeue(ctx)
}

// Return gives a lease back; it reports whether the lease was held.
func (s *Service) Return(ctx context.Context, name, client, id string) (bool, error) {
	return s.onLease(ctx, name, client, id, limiter.OpReturn, func(epoch string) []any {
		return limiter.ReturnArgs(epoch, id)
	})
}

// Renew extends a held lease to ttl from now (0: the limiter's lease
// TTL); it reports whether the lease was held.
func (s *Service) Renew(ctx context.Context, name, client, id string, ttl time.Duration) (bool, error) {
	return s.onLease(ctx, name, client, id, limiter.OpRenew, func(epoch string) []any {
		return limiter.RenewArgs(epoch, id, ttl)
	})
}

func (s *Service) onLease(ctx context.Context, name, client, id string, op limiter.Op, args func(epoch string) []any) (bool, error) {
	shard, ok := limiter.LeaseShard(id)
	held := false
	err := s.withPlaced(ctx, name, client, func(p ratelimit.Placed) error {
		if !ok || shard >= p.Shards {
			return nil // not a lease of this limiter
		}
		b := s.sub(p, name, shard)
		rep, err := s.call(ctx, b, op, args(b.epoch))
		held = rep.Granted == 1
		return err
	})
	return held, err
}

// changed wakes this proxy's waiters on a limiter whose config or state
// was replaced (RL.SETRATE, RL.RESET, RL.DEL through any proxy: the
// change feed tells each proxy), so they are decided again at once.
func (s *Service) changed(c ratelimit.Change) {
	if c.Name == "" {
		s.hub.wakeEveryone()
		return
	}
	for shard, n := range s.look.Nodes(c.Name, max(1, c.Shards)) {
		s.hub.wakeAll(n, s.channel(c.Name, shard))
	}
}

// Info returns the INFO lines of leases.
// Waiting is the number of clients waiting in RL.LEASE now.
func (s *Service) Waiting() int64 { return s.waiters.Len() }

func usToMs(us int64) int64 { return (us + 999) / 1000 }
