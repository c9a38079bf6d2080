package ratelimit

import (
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/feed"
)

// Changes through any proxy (package feed).
//
// The scripts that change a limiter (setconf.lua, reset.lua, del.lua) or
// a policy (policy.lua) announce it on the change feed. Every proxy's
// subscriber hears it and, here, drops what it cached of the limiter
// (config, denials) and wakes its waiters, or reads the policies again —
// within one round trip of the change. A proxy whose subscriber was down
// resyncs once it is back: it drops every cached config and denial,
// reads the policies and wakes every waiter. As a backstop for a
// subscriber that cannot subscribe at all, each proxy also reads the
// policies' version, and shard 0 of the limiters it has waiters on, every
// Options.Backstop.

// DefaultBackstop is how often a proxy polls for changes it may have
// missed when no Backstop is configured.
const DefaultBackstop = 5 * time.Second

func (o *Options) backstop() time.Duration {
	if o.Backstop > 0 {
		return o.Backstop
	}
	return DefaultBackstop
}

// Change is a limiter whose config or state was replaced (RL.SETRATE that
// changed it, RL.RESET, RL.DEL), with how many shards its waiters may be
// on. The Change without a Name is every limiter: the feed resynced.
type Change struct {
	Name   string
	Shards int
}

// changes are the listeners OnChange registered.
type changes struct {
	mu sync.Mutex
	fs []func(Change)
}

// OnChange has f told of every Change, made through this proxy (as the
// command makes it) or through another (by the change feed). f runs on
// the feed's goroutine: it must not block.
func (l *Limiters) OnChange(f func(Change)) {
	l.changes.mu.Lock()
	defer l.changes.mu.Unlock()
	l.changes.fs = append(l.changes.fs, f)
}

// Feed is the change feed: its subscriber on each node carries other
// channels too (the lease waiters').
func (l *Limiters) Feed() *feed.Feed { return l.feed }

// changed drops what this proxy cached of a limiter replaced or deleted,
// wakes its waiters (Wake) and tells OnChange's listeners.
func (l *Limiters) changed(c Change) {
	if c.Name == "" {
		l.configs.clear()
		l.denials.resize(l.opt().DenyCacheSize, true)
		l.sleepers.wakeAll()
	} else {
		l.forget(c.Name)
		l.Wake(c.Name)
	}
	l.changes.mu.Lock()
	fs := l.changes.fs
	l.changes.mu.Unlock()
	for _, f := range fs {
		f(c)
	}
}

// onFeed follows the change feed's events.
func (l *Limiters) onFeed(e feed.Event) {
	switch e.Kind {
	case feed.Limiter:
		l.changed(Change{Name: e.Name, Shards: e.Shards})
	case feed.Policies:
		l.refreshPoliciesSoon()
	case feed.Resync:
		l.refreshPoliciesSoon()
		l.changed(Change{})
	}
}

// refreshPoliciesSoon has followPolicies read the policies now (not on
// the feed's goroutine: that would hold up the messages behind).
func (l *Limiters) refreshPoliciesSoon() {
	select {
	case l.policyKick <- struct{}{}:
	default: // a read is due already
	}
}
