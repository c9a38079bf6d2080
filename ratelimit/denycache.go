package ratelimit

import (
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// denyCache remembers denials until their retry_after, so requests that
// would surely be denied again are answered without a backend call (an
// attack's traffic stays in the proxy).
//
// It never denies a request the backend would grant: a denial of n
// permits at time t with retry_after r means no request for n permits can
// be granted before t+r (only requests for exactly n are answered, so the
// retry_after they get is theirs too) — unless permits come back by
// RL.RELEASE, RL.RESET, a rate change or an explicit limiter made over a
// policy's name. Those invalidate the cache on this proxy; another
// proxy, which cannot see them, answers a cached denial for at most
// maxDenialAge, then asks the backend again.
//
// It holds at most max denials (0: DefaultDenyCacheSize). When it is full,
// a new denial first clears the expired ones; if most are still live, an
// eighth of them, picked at random, make room — so new denials are always
// remembered, and the cost of clearing is spread over many adds.
type denyCache struct {
	max int

	mu     sync.Mutex
	byName map[string]map[subKey]denial
	size   int
}

// DefaultDenyCacheSize is the deny cache's bound when none is configured.
const DefaultDenyCacheSize = 100_000

// maxDenialAge bounds how long a denial is answered from memory, whatever
// its retry_after: a change made through another proxy (a higher rate, a
// reset, an explicit limiter for a user) is seen within it, as a changed
// policy is. A name denied for an hour then costs a backend call a
// second per proxy, not one per request.
const maxDenialAge = time.Second

type subKey struct {
	shard         int
	epoch, client string
}

type denial struct {
	permits int64
	sent    time.Time // the decision was made no earlier than this
	until   time.Time // answer locally until then
	res     limiter.Result
}

// check returns the cached denial for a request of permits, with its
// durations brought up to now.
func (c *denyCache) check(name string, k subKey, permits int64, now time.Time) (limiter.Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.byName[name][k]
	if !ok {
		return limiter.Result{}, false
	}
	if !now.Before(d.until) {
		c.remove(name, k)
		return limiter.Result{}, false
	}
	// Fewer permits might be granted; more would be denied too, but for
	// longer than the cached retry_after says.
	if permits != d.permits {
		return limiter.Result{}, false
	}
	res := d.res
	elapsed := now.Sub(d.sent).Milliseconds()
	res.RetryAfterMs = max(1, res.RetryAfterMs-elapsed) // never 0: that would read as granted
	res.RetryAfterUs = max(1, res.RetryAfterUs-now.Sub(d.sent).Microseconds())
	res.ResetAfterMs = max(res.RetryAfterMs, res.ResetAfterMs-elapsed)
	return res, true
}

// add remembers a denial decided no earlier than sent, until its
// retry_after or for maxDenialAge, whichever is shorter. retry_after is
// rounded up to whole microseconds by the script, so one is taken off to
// stay on the safe side.
func (c *denyCache) add(name string, k subKey, permits int64, sent time.Time, res limiter.Result) {
	until := sent.Add(min(time.Duration(res.RetryAfterUs-1)*time.Microsecond, maxDenialAge))
	if !until.After(sent) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[string]map[subKey]denial{}
	}
	if _, ok := c.byName[name][k]; !ok {
		if c.size >= c.bound() {
			c.makeRoom(sent)
		}
		c.size++
	}
	m := c.byName[name]
	if m == nil {
		m = map[subKey]denial{}
		c.byName[name] = m
	}
	m[k] = denial{permits: permits, sent: sent, until: until, res: res}
}

func (c *denyCache) bound() int {
	if c.max <= 0 {
		return DefaultDenyCacheSize
	}
	return c.max
}

// makeRoom clears the denials expired by now and, when that frees less
// than an eighth of the cache, drops live ones until it has.
func (c *denyCache) makeRoom(now time.Time) {
	target := c.bound() - max(1, c.bound()/8)
	for name, m := range c.byName {
		for k, d := range m {
			if !now.Before(d.until) {
				c.remove(name, k)
			}
		}
	}
	for name, m := range c.byName { // map order: a random pick
		for k := range m {
			if c.size <= target {
				return
			}
			c.remove(name, k)
		}
	}
}

// len is how many denials are held.
func (c *denyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

func (c *denyCache) remove(name string, k subKey) {
	if _, ok := c.byName[name][k]; ok {
		delete(c.byName[name], k)
		c.size--
		if len(c.byName[name]) == 0 {
			delete(c.byName, name)
		}
	}
}

// forget drops every cached denial of a limiter.
func (c *denyCache) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.size -= len(c.byName[name])
	delete(c.byName, name)
}
