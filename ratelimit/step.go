package ratelimit

import (
	"context"
	"fmt"
)

// The one way a call on a limiter's shards copes with its config changing
// under it. The call runs under a config (withConfig hands it one) and
// says what it needs next as a Step: Done, Reload (a shard says the
// config in hand is not the one in force: shard 0 changed, or the limiter
// went), or Repair(shard) (a follower does not serve the config in hand).
// withConfig owns what follows: the reload, the repair, the bound, and
// the error when the config keeps changing. A call that walks several
// shards keeps its own progress between runs (what it charged or
// released must not be taken twice).

// Step is what a call on a limiter's shards asks of withConfig next.
type Step struct {
	kind  stepKind
	shard int // Repair's
}

type stepKind int

const (
	stepDone stepKind = iota
	stepReload
	stepRepair
)

var (
	// Done: the call is over (with its error, if any).
	Done = Step{}
	// Reload: run the call again under the config read afresh.
	Reload = Step{kind: stepReload}
)

// Repair: a follower shard does not serve the config in hand. Under a
// cached config that config may be what is behind, so it is read afresh
// first; under one read afresh, the follower is repaired from shard 0
// (see repair) before the call runs again.
func Repair(shard int) Step { return Step{kind: stepRepair, shard: shard} }

// maxAttempts bounds the reloads (and repairs) of one call while the
// config changes under it.
const maxAttempts = 8

// withConfig runs f under limiter name's config, from the cache first,
// until f is done, reloading and repairing as it asks: at most
// maxAttempts times, then the call fails (try again).
func (l *Limiters) withConfig(ctx context.Context, name string, f func(*entry) (Step, error)) error {
	for attempt := 0; ; attempt++ {
		e, err := l.config(ctx, name, attempt > 0)
		if err != nil {
			return err
		}
		step, err := f(e)
		if err != nil || step.kind == stepDone {
			return err
		}
		l.forget(name)
		if attempt >= maxAttempts {
			return fmt.Errorf("limiter '%s' keeps changing; try again", name)
		}
		if step.kind == stepRepair && attempt > 0 {
			if err := l.repair(ctx, name, step.shard); err != nil {
				return err
			}
		}
	}
}

// WithPlaced is withConfig for package lease: f runs with the limiter's
// config and the node of each shard, for client's budget.
func (l *Limiters) WithPlaced(ctx context.Context, name, client string, f func(Placed) (Step, error)) error {
	return l.withConfig(ctx, name, func(e *entry) (Step, error) {
		l.keepAlive(ctx, name, e)
		return f(Placed{Stored: *e.Stored, Nodes: e.nodes(), ClientKey: clientKey(e.Stored, client), e: e})
	})
}
