package ratelimit

import (
	"context"
	"time"
)

// watch starts following limiter name from the config cached now: the
// one its first waiter is about to ask under (sleepers.add calls it as
// that waiter registers, before it asks).
func (l *Limiters) watch(name string) {
	var epoch, gen string
	if e := l.configs.get(name); e != nil {
		epoch, gen = e.Epoch, e.Gen
	}
	// A name a policy governs has no config of its own: one appearing is
	// the change to notice (policy changes are followed in policies.go).
	known := epoch != "" || l.governed(name) != nil
	go l.follow(name, epoch, gen, known)
}

// follow watches shard 0's config of limiter name while this proxy has
// waiters on it: one small read every backstop (change.go: the change
// feed tells of changes at once; this is for when it cannot). When the epoch or
// generation differs from what the waiters were decided under (a
// RL.SETRATE, RL.RESET or RL.DEL through any proxy), the cached config is
// dropped and the waiters are woken (Wake).
func (l *Limiters) follow(name, epoch, gen string, known bool) {
	every := l.opt().backstop()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-l.closing:
			l.sleepers.unwatch(name)
			return
		}
		if l.sleepers.unwatch(name) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		h, err := l.nodes(name, 1)[0].HGetAll(ctx, l.keys.Config(name, 0))
		cancel()
		if err != nil {
			continue
		}
		if known && h["epoch"] == epoch && h["gen"] == gen {
			continue
		}
		if known || len(h) == 0 {
			l.forget(name)
			l.Wake(name)
		}
		epoch, gen, known = h["epoch"], h["gen"], true
	}
}

// Close ends the watches of follow and drops the change feed's
// subscribers. Waiters end with their contexts.
func (l *Limiters) Close() {
	l.closeOnce.Do(func() {
		close(l.closing)
		l.feed.Close()
	})
}
