package ratelimit

import (
	"context"
	"sync"
)

// Change is a limiter whose config or state was replaced through this
// proxy (RL.SETRATE that changed it, RL.RESET, RL.DEL), with how many
// shards its waiters may be on.
type Change struct {
	Name   string
	Shards int
}

// changes are the listeners OnChange registered.
type changes struct {
	mu sync.Mutex
	fs []func(context.Context, Change)
}

// OnChange has f told of every Change made through this proxy, after the
// limiters' own waiters are woken (the lease service wakes its waiters,
// in every proxy). The command that made the change waits for f.
func (l *Limiters) OnChange(f func(context.Context, Change)) {
	l.changes.mu.Lock()
	defer l.changes.mu.Unlock()
	l.changes.fs = append(l.changes.fs, f)
}

// changed wakes the waiters of a limiter replaced or deleted (Wake) and
// tells OnChange's listeners.
func (l *Limiters) changed(ctx context.Context, c Change) {
	l.Wake(c.Name)
	l.changes.mu.Lock()
	fs := l.changes.fs
	l.changes.mu.Unlock()
	for _, f := range fs {
		f(ctx, c)
	}
}
