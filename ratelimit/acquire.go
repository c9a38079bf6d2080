package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/coalesce"
	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/sharding"
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

// Acquire asks for r.Permits permits: it tries a shard, and on a denial up
// to MaxProbes others, skipping shards whose node is down.
func (l *Limiters) Acquire(ctx context.Context, r Request) (limiter.Result, error) {
	o := l.AcquireAll(ctx, []Request{r})[0]
	return o.Result, o.Err
}

// AcquireAll is Go that waits for every outcome.
func (l *Limiters) AcquireAll(ctx context.Context, reqs []Request) []Outcome {
	out := make([]Outcome, len(reqs))
	var wg sync.WaitGroup
	wg.Add(len(reqs))
	l.Go(ctx, reqs, func(i int, o Outcome) { out[i] = o; wg.Done() })
	wg.Wait()
	return out
}

// Go decides a batch of requests — one client's pipeline, or a lone
// request as a batch of one — and reports each outcome through done, with
// the request's index, as soon as it is known. It is the one acquire
// path: every request goes through the same steps. First tries go out
// together, so requests on one sub-limiter share one script call, in
// order; a request that needs more (probing on from a denied first try,
// a reload after a config change, a node that is down) goes on by itself.
//
// done runs once per request: on the caller's goroutine before Go returns
// when the answer is at hand (a cached denial, an idle sub-limiter, the
// full path of a lone request), otherwise on the goroutine that ran the
// batch or one of its own. It must be quick, must not panic, and must be
// safe to call concurrently.
func (l *Limiters) Go(ctx context.Context, reqs []Request, done func(i int, o Outcome)) {
	var (
		tries, ntries []firstTry
		at, nat       []int // the request index of each try
		calls         []coalesce.Call[limiter.Ask, answer]
		ncalls        []coalesce.Call[nameAsk, answer] // tries with other names of a policy
		rest          []int                            // requests that take the full path from the start
	)
	for i, r := range reqs {
		t, cached, way := l.firstTry(ctx, r)
		switch {
		case way == answered:
			done(i, cached)
		case way == fullPath:
			rest = append(rest, i)
		case t.names != nil:
			left := len(reqs) - i
			ntries, nat, ncalls = add(ntries, t, left), add(nat, i, left), add(ncalls, *t.names, left)
		default:
			left := len(reqs) - i
			tries, at, calls = add(tries, t, left), add(at, i, left), add(calls, t.call, left)
		}
	}
	for j, i := range rest {
		if j < len(rest)-1 || len(calls)+len(ncalls) > 0 {
			go func() { done(i, l.full(ctx, reqs[i], nil)) }()
		} else {
			done(i, l.full(ctx, reqs[i], nil)) // nothing else to wait for: on the caller's goroutine
		}
	}
	sent := time.Now() // before any of the calls: a cached denial never outlives the real one
	settled := func(tries []firstTry, at []int) func(j int, o coalesce.Outcome[answer]) {
		return func(j int, o coalesce.Outcome[answer]) {
			i := at[j]
			res, ok, from := l.settle(ctx, reqs[i], tries[j], o, sent)
			if ok {
				done(i, res)
				return
			}
			go func() { done(i, l.full(ctx, reqs[i], from)) }() // not on the batch's goroutine: it has others to answer
		}
	}
	if len(calls) > 0 {
		l.batches.GoAll(calls, settled(tries, at))
	}
	if len(ncalls) > 0 {
		l.names.GoAll(ncalls, settled(ntries, nat))
	}
}

// add appends v to s, making room for n at the first append: a batch's
// slices take one allocation each, not one per doubling.
func add[T any](s []T, v T, n int) []T {
	if s == nil {
		s = make([]T, 0, n)
	}
	return append(s, v)
}

// firstTry is a request's first try: one sub-limiter, picked at random,
// asked in a batch with whatever else is queued for it.
type firstTry struct {
	e     *entry
	shard int
	call  coalesce.Call[limiter.Ask, answer]
	names *coalesce.Call[nameAsk, answer] // instead of call: with other names of a policy (names.go)
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
	if err != nil || r.Permits > e.Capacity() || e.Algo == limiter.Concurrency {
		return firstTry{}, Outcome{}, fullPath
	}
	l.keepAlive(ctx, r.Name, e)
	shard := int(rand.Uint64() % uint64(e.Shards))
	if e.Shards == 1 {
		if res, ok := l.cachedDenial(r, e, shard); ok {
			return firstTry{}, l.final(Outcome{Result: res}, e), answered
		}
	}
	if e.node(shard).Down() != nil {
		return firstTry{}, Outcome{}, fullPath // the full path walks past dead shards
	}
	if nc, ok := l.namesCall(e, r); ok {
		names := nc // its own variable: only a names call costs an allocation
		return firstTry{e: e, shard: shard, names: &names}, Outcome{}, batched
	}
	rt := l.route(e, shard, r.Client)
	return firstTry{e: e, shard: shard, call: coalesce.Call[limiter.Ask, answer]{
		Key: rt.batchKey, Item: limiter.Ask{Permits: r.Permits, MaxWait: r.MaxWait}, Run: rt.run,
	}}, Outcome{}, batched
}

// settle turns a first try's answer into r's outcome, or returns false
// when r needs the full path: errors and config changes, which it sorts
// out, or a denial with other shards to probe — then the tried shard and
// its denial come back, so probing goes on from there. sent is when the
// try went out (a cached denial must not outlive the real one).
func (l *Limiters) settle(ctx context.Context, r Request, t firstTry, o coalesce.Outcome[answer], sent time.Time) (Outcome, bool, *tried) {
	a := o.Res
	if errors.Is(o.Err, backend.ErrUnavailable) {
		// The script may have run: the full path goes on from the next
		// shard, never sending it to this one again (twice spent).
		return Outcome{}, false, &tried{e: t.e, shard: t.shard, failed: o.Err}
	}
	if o.Err != nil {
		return Outcome{}, false, nil
	}
	switch decide(a) {
	case grant:
		if ctx.Err() != nil {
			// Best effort for a gone client, and not on the batch's
			// goroutine: it has others to answer.
			go l.giveBack(t.e, r, t.shard) //nolint:errcheck
		}
		return l.final(Outcome{Result: a.Result, shard: t.shard}, t.e), true, nil
	case missing, reload:
		return Outcome{}, false, nil // the full path sorts it out
	}
	l.rememberDenial(r, t.e, t.shard, sent, a.Result)
	if t.e.Shards > 1 && l.opt().MaxProbes > 0 {
		// Other shards may have permits: the full path probes on from here.
		from := &tried{e: t.e, shard: t.shard}
		from.denied.Add(a.Remaining, a.RetryAfterMs, a.ResetAfterMs)
		return Outcome{}, false, from
	}
	return l.final(Outcome{Result: a.Result}, t.e), true, nil
}

// tried is a first try that was denied: the full path goes on probing
// from the shard after it, with its denial counted, when the config is
// still the one it was made under.
type tried struct {
	e      *entry
	shard  int
	denied sharding.Merged
	failed error // the first try's node could not be reached (then denied is empty)
}

// full decides r on the full path, probing on from a denied first try
// when there was one.
func (l *Limiters) full(ctx context.Context, r Request, from *tried) Outcome {
	res, shard, e, err := l.acquire(ctx, r, from)
	return l.final(Outcome{Result: res, Err: err, shard: shard}, e)
}

// final is the one last step of every acquire's outcome, however it was
// decided (a first try, probing, the deny cache): a SHADOW limiter's
// denial becomes a grant here (limiter.Result.Shadowed) — after probing,
// so a sharded shadow limiter counts a request that some shard grants as
// granted, not denied — and the outcome is counted in the stats, with the
// backend error policy applied (a dry run never denies, not even when
// that policy fails closed). e is the config that decided (nil when none
// did); a policy's decisions are counted for it too.
func (l *Limiters) final(o Outcome, e *entry) Outcome {
	shadow := e != nil && e.Shadow
	if o.Err != nil {
		l.stats.Errors.Add(1)
		if errors.Is(o.Err, backend.ErrUnavailable) {
			o.Result, o.Err = l.onBackendError(o.Err)
			if shadow && o.Err == nil {
				o.Result = o.Result.Shadowed()
				o.ShadowDenied = false // not a decision of the limiter
			}
		}
		return o
	}
	if shadow {
		o.Result = o.Result.Shadowed()
	}
	l.stats.decided(o.Granted, o.ShadowDenied)
	if e != nil && e.policy != nil {
		e.policy.counts.count(o.Granted)
	}
	return o
}

// onBackendError applies the configured policy when a needed backend is down.
func (l *Limiters) onBackendError(err error) (limiter.Result, error) {
	switch l.opt().OnBackendError {
	case FailOpen:
		return limiter.Result{Granted: true}, nil
	case FailClosed:
		return limiter.Result{RetryAfterMs: 1000, ResetAfterMs: 1000}, nil
	}
	return limiter.Result{}, err
}

// acquire is the full path of one request: config (reloaded when it
// changed), capacity, shards in probe order, repairs (withConfig). It
// returns the config that decided (final applies its SHADOW), nil when
// none did.
func (l *Limiters) acquire(ctx context.Context, r Request, from *tried) (res limiter.Result, shard int, decided *entry, err error) {
	cached := true // the first config may come from the cache
	err = l.withConfig(ctx, r.Name, func(e *entry) (Step, error) {
		first := cached
		cached = false
		if e.Algo == limiter.Concurrency {
			return Done, limiter.LeaseOnlyError{Name: r.Name}
		}
		if c := e.Capacity(); r.Permits > c {
			if first {
				return Reload, nil // the cached config may be old: check the current one
			}
			return Done, &OverCapacityError{Name: r.Name, Permits: r.Permits, Capacity: c}
		}
		l.keepAlive(ctx, r.Name, e)
		if from != nil && from.e != e {
			from = nil // made under another config: probe afresh
		}
		var step Step
		res, shard, step, err = l.acquireShards(ctx, e, r, from)
		from, decided = nil, e
		return step, err
	})
	return res, shard, decided, err
}

// acquireShards tries e's shards in probe order until one grants: from a
// random start, or on from a denied first try (from), so a request costs
// at most 1 + MaxProbes script calls either way.
func (l *Limiters) acquireShards(ctx context.Context, e *entry, r Request, from *tried) (limiter.Result, int, Step, error) {
	var denied sharding.Merged
	var lastErr error
	var order []int
	before := 0 // shards asked before this walk (a denied first try)
	if from != nil {
		order = sharding.Probe(e.Shards, l.opt().MaxProbes, uint64(from.shard))[1:]
		denied, before, lastErr = from.denied, 1, from.failed
		if from.failed != nil && before+len(order) < e.Shards {
			// A dead shard costs no probe: one shard further.
			order = append(order, (from.shard+len(order)+1)%e.Shards)
		}
	} else {
		order = sharding.Probe(e.Shards, l.opt().MaxProbes, rand.Uint64())
	}
	for i := 0; i < len(order); i++ {
		shard := order[i]
		if res, ok := l.cachedDenial(r, e, shard); ok {
			denied.Add(res.Remaining, res.RetryAfterMs, res.ResetAfterMs)
			continue
		}
		sent := time.Now()
		var a answer
		err := e.node(shard).Down()
		if err == nil {
			a, err = l.acquireOn(ctx, e, r, shard)
		}
		if err != nil {
			lastErr = err
			if errors.Is(err, backend.ErrUnavailable) {
				// Other shards may still serve: a dead one costs no probe,
				// the walk goes one shard further.
				if before+len(order) < e.Shards {
					order = append(order, (order[len(order)-1]+1)%e.Shards)
				}
				continue
			}
			return limiter.Result{}, 0, Done, err
		}
		switch decide(a) {
		case missing, reload:
			// Shard 0 missing: gone (RL.DEL), or expired; the reload says
			// whether a policy governs the name now. A follower missing
			// the config or serving another epoch: its TTL ran out, its
			// node restarted empty, or a writer stopped part way.
			if shard > 0 && (a.status == limiter.StatusNoLimiter || a.status == limiter.StatusEpochChange) {
				return limiter.Result{}, 0, Repair(shard), nil
			}
			return limiter.Result{}, 0, Reload, nil
		case grant:
			return a.Result, shard, Done, nil
		}
		l.rememberDenial(r, e, shard, sent, a.Result)
		denied.Add(a.Remaining, a.RetryAfterMs, a.ResetAfterMs)
	}
	if denied.Len() == 0 {
		return limiter.Result{}, 0, Done, lastErr
	}
	var res limiter.Result
	res.Remaining, res.RetryAfterMs, res.ResetAfterMs = denied.Result()
	return res, 0, Done, nil
}

// verdict is what one sub-limiter's answer means for a request.
type verdict int

const (
	grant verdict = iota
	deny
	reload  // the config changed (epoch, or a capacity the request is over): reload, try again
	missing // this sub-limiter has no config
)

// decide is the one reading of a sub-limiter's answer, for first tries
// and probes alike.
func decide(a answer) verdict {
	switch {
	case a.status == limiter.StatusNoLimiter:
		return missing
	case a.status != limiter.StatusOK, a.OverCapacity:
		return reload
	case a.Granted:
		return grant
	}
	return deny
}

// cachedDenial answers r on e's shard from the deny cache, if it may.
func (l *Limiters) cachedDenial(r Request, e *entry, shard int) (limiter.Result, bool) {
	if !l.opt().DenyCache || r.MaxWait != 0 {
		return limiter.Result{}, false
	}
	k := subKey{shard: shard, epoch: e.Epoch, client: clientKey(e.Stored, r.Client)}
	res, ok := l.denials.check(r.Name, k, r.Permits, time.Now())
	if ok {
		l.stats.DeniedFromCache.Add(1)
	}
	return res, ok
}

// rememberDenial puts a denial of r on e's shard, decided no earlier than
// sent, in the deny cache.
func (l *Limiters) rememberDenial(r Request, e *entry, shard int, sent time.Time, res limiter.Result) {
	if !l.opt().DenyCache || r.MaxWait != 0 {
		return
	}
	k := subKey{shard: shard, epoch: e.Epoch, client: clientKey(e.Stored, r.Client)}
	l.denials.add(r.Name, k, r.Permits, sent, res)
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
	_, err := rt.node.Eval(ctx, e.script, rt.keys, limiter.Args(limiter.OpRelease, e.confArg(shard), r.Permits)...)
	// Denials remembered meanwhile counted these permits as taken.
	l.denials.forget(r.Name)
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
	if l.configs.due(name, time.Now(), e.TTL/4) {
		// TTL plus the refresh period: whatever call comes last before the
		// next refresh, the limiter lives at least TTL after it.
		e.node(0).PExpire(ctx, l.keys.Config(name, 0), e.TTL+e.TTL/4) //nolint:errcheck // the next call retries
	}
}
