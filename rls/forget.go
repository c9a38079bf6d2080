package rls

import (
	"context"
	"errors"
	"fmt"
)

// Forget removes from the backend the limiters of old's rules that next,
// now in force, no longer has, so a removed rule stops deciding at once
// and leaves nothing behind. Deleted, not left to a TTL: a rule's own
// limiter has no TTL, and an explicit limiter outranks a policy, so one
// left behind would go on deciding a name that a policy of the new rules
// governs. So:
//   - a rule's explicit limiter (exact values only) is deleted (RL.DEL);
//   - a rule's policy is deleted (RL.POLICY DEL); the states of its names
//     expire by their own TTLs;
//   - the limiters this process made per name are deleted when their
//     rule's place is gone; those of a rule still there are made again on
//     their next use (keeping their state), taking its new limit. Those
//     another process made, or this one before a restart, expire two
//     windows (at least a minute) after their last use.
//
// A limit Envoy sends in a descriptor is no rule of the file: its
// limiters are kept.
func (d *Limiters) Forget(ctx context.Context, old, next *Rules) error {
	exact, patterns, places := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, l := range next.Limits() {
		switch {
		case !l.limited():
		case l.Exact != "":
			exact[l.Exact] = true
		case l.Pattern != "":
			patterns[l.Pattern] = true
		default:
			places[l.path] = true
		}
	}
	var errs []error
	fail := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for _, l := range old.Limits() {
		switch {
		case !l.limited():
		case l.Exact != "" && !exact[l.Exact]:
			_, err := d.L.Del(ctx, l.Exact)
			fail(l.Exact, err)
		case l.Pattern != "" && !patterns[l.Pattern]:
			_, err := d.L.PolicyDel(ctx, l.Pattern)
			fail(l.Pattern, err)
		}
	}
	var gone []string
	d.mu.Lock()
	for name, m := range d.made {
		if m.limit.path == "" || places[m.limit.path] {
			continue // Envoy's own limit, or a rule still there: made again on next use
		}
		delete(d.made, name)
		if !exact[name] { // else the new rules' explicit limiter now
			gone = append(gone, name)
		}
	}
	d.mu.Unlock()
	for _, name := range gone {
		_, err := d.L.Del(ctx, name)
		fail(name, err)
	}
	return errors.Join(errs...)
}
