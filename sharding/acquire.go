package sharding

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

// Request is one call on a limiter.
type Request struct {
	Name    string
	Client  string // connection name; selects the budget in PER_CLIENT mode
	Permits int64
	// MaxWait lets an algorithm that books ahead reserve permits that come
	// within it (see AcquireWait).
	MaxWait time.Duration
}

// Outcome is the answer to one request of AcquireAll.
type Outcome struct {
	limiter.Result
	Err   error
	shard int // the shard that granted
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

// Acquire asks for r.Permits permits: it tries a shard, and on a denial up
// to MaxProbes others, skipping shards whose node is down.
func (l *Limiters) Acquire(ctx context.Context, r Request) (limiter.Result, error) {
	o := l.AcquireAll(ctx, []Request{r})[0]
	return o.Result, o.Err
}

// AcquireAll decides many requests (one client's pipeline) at once. Their
// first tries go out together, so requests on one sub-limiter share one
// script call, in order; a request that needs more (probing after a
// denial, a reload after a config change) goes on by itself.
func (l *Limiters) AcquireAll(ctx context.Context, reqs []Request) []Outcome {
	out := make([]Outcome, len(reqs))
	tries := make([]firstTry, 0, len(reqs))
	at := make([]int, 0, len(reqs)) // the request index of each try
	calls := make([]backend.Call[limiter.Ask, answer], 0, len(reqs))
	var rest []int // requests that go on by themselves
	for i, r := range reqs {
		t, cached, way := l.firstTry(ctx, r)
		switch way {
		case answered:
			out[i] = cached
		case fullPath:
			rest = append(rest, i)
		default:
			tries, at, calls = append(tries, t), append(at, i), append(calls, t.call)
		}
	}
	sent := time.Now() // before any of the calls: a cached denial never outlives the real one
	for j, o := range l.batches.DoAll(calls) {
		i := at[j]
		if res, ok := l.settle(ctx, reqs[i], tries[j], o, sent); ok {
			out[i] = res
		} else {
			rest = append(rest, i)
		}
	}
	l.each(rest, func(i int) { out[i] = l.full(ctx, reqs[i]) })
	return out
}

// AcquireAsync decides r as Acquire does but hands the outcome to done
// instead of waiting for it, so that a caller serving one request at a
// time need not sleep while its request is in a batch. done runs once, on
// the caller's goroutine before AcquireAsync returns when the answer is
// at hand (cached denial, idle sub-limiter, full path), otherwise on the
// goroutine that ran the batch: it must be quick and must not panic.
func (l *Limiters) AcquireAsync(ctx context.Context, r Request, done func(Outcome)) {
	t, cached, way := l.firstTry(ctx, r)
	switch way {
	case answered:
		done(cached)
		return
	case fullPath:
		done(l.full(ctx, r))
		return
	}
	sent := time.Now()
	l.batches.Go(t.call.Key, t.call.Item, t.call.Run, func(o backend.Outcome[answer]) {
		if res, ok := l.settle(ctx, r, t, o, sent); ok {
			done(res)
			return
		}
		go func() { done(l.full(ctx, r)) }() // not on the batch's goroutine: it has others to answer
	})
}

// firstTry is a request's first try: one sub-limiter, picked at random,
// asked in a batch with whatever else is queued for it.
type firstTry struct {
	e     *entry
	shard int
	call  backend.Call[limiter.Ask, answer]
}

// How a request goes on after firstTry.
const (
	batched  = iota // its first try joins a batch
	answered        // the deny cache answered it
	fullPath        // it needs the full path (acquire)
)

// firstTry prepares r's first try, or answers it from the deny cache, or
// sends it to the full path (unknown config, over capacity, node down).
func (l *Limiters) firstTry(ctx context.Context, r Request) (firstTry, Outcome, int) {
	e, err := l.config(ctx, r.Name, false)
	if err != nil || r.Permits > e.Capacity() || e.script == nil || e.Algo == limiter.Concurrency {
		return firstTry{}, Outcome{}, fullPath
	}
	l.keepAlive(ctx, r.Name, e)
	shard := int(rand.Uint64() % uint64(e.Shards))
	if l.opts.DenyCache && r.MaxWait == 0 && e.Shards == 1 {
		k := subKey{shard: shard, epoch: e.Epoch, client: clientKey(&e.Stored, r.Client)}
		if res, ok := l.denials.check(r.Name, k, r.Permits, time.Now()); ok {
			l.stats.CachedDenials.Add(1)
			return firstTry{}, l.count(Outcome{Result: res}), answered
		}
	}
	rt := l.route(e, shard, r.Client)
	if rt.node.Down() != nil {
		return firstTry{}, Outcome{}, fullPath // the full path walks past dead shards
	}
	return firstTry{e: e, shard: shard, call: backend.Call[limiter.Ask, answer]{
		Key: rt.batchKey, Item: limiter.Ask{Permits: r.Permits, MaxWait: r.MaxWait}, Run: rt.run,
	}}, Outcome{}, batched
}

// settle turns a first try's answer into r's outcome, or returns false
// when r needs the full path: errors and config changes, which it sorts
// out, or a denial with other shards to probe. sent is when the try went
// out (a cached denial must not outlive the real one).
func (l *Limiters) settle(ctx context.Context, r Request, t firstTry, o backend.Outcome[answer], sent time.Time) (Outcome, bool) {
	a := o.Res
	switch {
	case o.Err != nil, a.status != limiter.StatusOK, a.OverCapacity:
		return Outcome{}, false
	case a.Granted:
		if ctx.Err() != nil {
			// Best effort for a gone client, and not on the batch's
			// goroutine (AcquireAsync): it has others to answer.
			go l.giveBack(t.e, r, t.shard) //nolint:errcheck
		}
		return l.count(Outcome{Result: a.Result, shard: t.shard}), true
	case t.e.Shards > 1 && l.opts.MaxProbes > 0:
		return Outcome{}, false // other shards may have permits
	}
	if l.opts.DenyCache && r.MaxWait == 0 {
		k := subKey{shard: t.shard, epoch: t.e.Epoch, client: clientKey(&t.e.Stored, r.Client)}
		l.denials.add(r.Name, k, r.Permits, sent, a.Result)
	}
	return l.count(Outcome{Result: a.Result}), true
}

// full decides r on the full path.
func (l *Limiters) full(ctx context.Context, r Request) Outcome {
	res, shard, err := l.acquire(ctx, r)
	return l.count(Outcome{Result: res, Err: err, shard: shard})
}

// each runs f for every index, at the same time when there are several.
func (l *Limiters) each(idx []int, f func(i int)) {
	if len(idx) == 1 {
		f(idx[0])
		return
	}
	done := make(chan struct{}, len(idx))
	for _, i := range idx {
		go func() { f(i); done <- struct{}{} }()
	}
	for range idx {
		<-done
	}
}

// count records an outcome in the stats and applies the backend error
// policy to it.
func (l *Limiters) count(o Outcome) Outcome {
	switch {
	case o.Err == nil && o.Granted:
		l.stats.Granted.Add(1)
	case o.Err == nil:
		l.stats.Denied.Add(1)
	default:
		l.stats.Errors.Add(1)
		if errors.Is(o.Err, backend.ErrUnavailable) {
			o.Result, o.Err = l.onBackendError(o.Err)
		}
	}
	return o
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

// acquire is the full path of one request: config (reloaded when it
// changed), capacity, shards in probe order, repairs.
func (l *Limiters) acquire(ctx context.Context, r Request) (limiter.Result, int, error) {
	for attempt := 0; ; attempt++ {
		e, err := l.config(ctx, r.Name, attempt > 0)
		if err != nil {
			return limiter.Result{}, 0, err
		}
		if e.script == nil {
			return limiter.Result{}, 0, fmt.Errorf("algorithm '%s' is not supported yet", e.Algo)
		}
		if e.Algo == limiter.Concurrency {
			return limiter.Result{}, 0, limiter.ErrLeaseOnly{Name: r.Name}
		}
		if c := e.Capacity(); r.Permits > c {
			if attempt == 0 {
				continue // the cached config may be old: check the current one
			}
			return limiter.Result{}, 0, &OverCapacityError{Name: r.Name, Permits: r.Permits, Capacity: c}
		}
		l.keepAlive(ctx, r.Name, e)
		res, shard, err := l.acquireShards(ctx, e, r)
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

func (l *Limiters) acquireShards(ctx context.Context, e *entry, r Request) (limiter.Result, int, error) {
	client := clientKey(&e.Stored, r.Client)
	var denied merged
	var lastErr error
	order := Probe(e.Shards, l.opts.MaxProbes, rand.Uint64())
	for i := 0; i < len(order); i++ {
		shard := order[i]
		k := subKey{shard: shard, epoch: e.Epoch, client: client}
		if l.opts.DenyCache && r.MaxWait == 0 {
			if res, ok := l.denials.check(r.Name, k, r.Permits, time.Now()); ok {
				l.stats.CachedDenials.Add(1)
				denied.add(res.Remaining, res.RetryAfterMs, res.ResetAfterMs)
				continue
			}
		}
		sent := time.Now()
		var a answer
		err := e.nodes[shard].Down()
		if err == nil {
			a, err = l.acquireOn(ctx, e, r, shard)
		}
		if err != nil {
			lastErr = err
			if errors.Is(err, backend.ErrUnavailable) {
				// Other shards may still serve: a dead one costs no probe,
				// the walk goes one shard further.
				if len(order) < e.Shards {
					order = append(order, (order[len(order)-1]+1)%e.Shards)
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
func (l *Limiters) acquireOn(ctx context.Context, e *entry, r Request, shard int) (answer, error) {
	rt := l.route(e, shard, r.Client)
	a, err := l.batches.Do(context.Background(), rt.batchKey, limiter.Ask{Permits: r.Permits, MaxWait: r.MaxWait}, rt.run)
	if err == nil && a.Granted && ctx.Err() != nil {
		l.giveBack(e, r, shard) //nolint:errcheck // best effort for a gone client
	}
	return a, err
}

// giveBack returns permits granted to a client that is gone (best
// effort: if the config changed meanwhile, its state is gone anyway).
func (l *Limiters) giveBack(e *entry, r Request, shard int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rt := l.route(e, shard, r.Client)
	_, err := rt.node.Eval(ctx, e.script, rt.keys, limiter.Args(limiter.OpRelease, e.Epoch, r.Permits)...)
	// Denials remembered meanwhile counted these permits as taken.
	l.denials.forget(r.Name)
	return err
}

// repair writes a missing sub-limiter's config back from shard 0's, with
// the epoch in force (its state starts full). If the limiter itself is
// gone, it says so.
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
	_, _, _, err = l.setConf(ctx, e.nodes[shard], name, e.Config, Subs(e.Config)[shard], limiter.SetConfOptions{Epoch: e.Epoch})
	return err
}

// keepAlive refreshes the TTL of a limiter's shard-0 config (which says
// whether the limiter exists) at most every quarter TTL per proxy: with
// many shards, shard 0 may see no request for a while although the
// limiter is in use.
func (l *Limiters) keepAlive(ctx context.Context, name string, e *entry) {
	if e.TTL <= 0 || e.Shards == 1 {
		return // a single shard refreshes its own TTL on every call
	}
	now := time.Now()
	l.mu.Lock()
	last, ok := l.touched[name]
	due := !ok || now.Sub(last) >= e.TTL/4
	if due {
		l.touched[name] = now
	}
	l.mu.Unlock()
	if due {
		// TTL plus the refresh period: whatever call comes last before the
		// next refresh, the limiter lives at least TTL after it.
		e.nodes[0].PExpire(ctx, l.keys.Config(name, 0), e.TTL+e.TTL/4) //nolint:errcheck // the next call retries
	}
}
