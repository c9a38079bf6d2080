package backend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a node's circuit breaker: once a node has failed to answer
// threshold calls in a row, calls to it fail at once for a cooldown
// instead of each waiting out a timeout; then one call goes through to
// probe it, and success closes the breaker. One slow answer among good
// ones does not open it.
type breaker struct {
	cooldown  atomic.Int64 // nanoseconds; changes live (Pool.SetBreaker)
	threshold atomic.Int64 // failures in a row that open it; changes live

	open   atomic.Bool  // openUntil is set: lets the common, closed case skip the lock and the clock
	streak atomic.Int64 // failures in a row so far: a success skips the lock when 0

	mu        sync.Mutex
	openUntil time.Time // zero when closed
	lastErr   error
	opened    uint64 // times it opened, ever
}

// allow reports whether a call may go to the node now. While open, one
// call per cooldown is let through as a probe.
func (b *breaker) allow(now time.Time) error {
	if b.cd() <= 0 || !b.open.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() || now.After(b.openUntil) {
		if !b.openUntil.IsZero() {
			b.openUntil = now.Add(b.cd()) // this call is the probe
		}
		return nil
	}
	return circuitOpen{b.lastErr}
}

// circuitOpen is the error of a call the breaker refused: the node was
// not asked, so the refusal says nothing new about it.
type circuitOpen struct{ last error }

func (e circuitOpen) Error() string { return "circuit open after: " + e.last.Error() }
func (e circuitOpen) Unwrap() error { return e.last }

// A breaker's change of state, for the log.
type change int

const (
	unchanged change = iota
	opened
	closed
)

// record counts a call's outcome: err nil if the node answered, else why
// it could not be reached. It reports whether the breaker opened or closed.
func (b *breaker) record(now time.Time, err error) change {
	if err == nil && b.streak.Load() == 0 && !b.open.Load() {
		return unchanged
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.streak.Store(0)
		if !b.open.Load() {
			return unchanged
		}
		b.openUntil, b.lastErr = time.Time{}, nil
		b.open.Store(false)
		return closed
	}
	b.lastErr = err
	streak := b.streak.Add(1)
	switch {
	case b.open.Load():
		b.openUntil = now.Add(b.cd()) // a failed probe: another cooldown
	case streak >= max(b.threshold.Load(), 1):
		b.openUntil = now.Add(b.cd())
		b.open.Store(true)
		b.opened++
		return opened
	}
	return unchanged
}

// openings returns how many times the breaker has opened and, if it
// has, the last error (to refuse calls queued before an opening).
func (b *breaker) openings() (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opened, b.lastErr
}

// cooling returns the error that opened the breaker while its cooldown
// is not over (a call now would fail at once), else nil.
func (b *breaker) cooling(now time.Time) error {
	if !b.open.Load() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() || !now.Before(b.openUntil) {
		return nil
	}
	return circuitOpen{b.lastErr}
}

func (b *breaker) isOpen() bool { return b.open.Load() }

// Stats are a node's counters, for INFO.
type Stats struct {
	Calls      int64
	Errors     int64
	AvgLatency time.Duration
	Up         bool
}

type counters struct {
	calls, errors, nanos atomic.Int64
}

// Down returns the error calls to the node fail with now while its
// breaker is open and cooling down (nil otherwise), so routing can go
// elsewhere without a call.
func (n *Node) Down() error {
	if !n.breaker.open.Load() {
		return nil
	}
	if err := n.breaker.cooling(time.Now()); err != nil {
		return &unavailableError{node: n.name, err: err}
	}
	return nil
}

// Stats returns the node's counters so far.
func (n *Node) Stats() Stats {
	s := Stats{Calls: n.stats.calls.Load(), Errors: n.stats.errors.Load(), Up: !n.breaker.isOpen()}
	if s.Calls > 0 {
		s.AvgLatency = time.Duration(n.stats.nanos.Load() / s.Calls)
	}
	return s
}

// do runs one backend call through the breaker and the counters. ctx is
// the caller's: a call that failed because the caller stopped waiting
// (its deadline or cancellation) says nothing about the node.
func (n *Node) do(ctx context.Context, call func() error) error {
	return n.run(ctx, true, call)
}

// run is do; record false leaves the breaker to the caller (a pipeline
// records its outcome once for all its calls).
func (n *Node) run(ctx context.Context, record bool, call func() error) error {
	start := time.Now()
	if err := n.breaker.allow(start); err != nil {
		n.stats.errors.Add(1)
		return &unavailableError{node: n.name, err: err}
	}
	err := call()
	n.stats.calls.Add(1)
	n.stats.nanos.Add(int64(time.Since(start)))
	if err != nil {
		n.stats.errors.Add(1)
	}
	werr := n.wrap(err)
	n.reloadOnFailure(werr)
	var refused circuitOpen
	switch {
	case !record, ctx.Err() != nil && err != nil, errors.As(err, &refused):
		// Refused without asking the node, or the caller gave up: nothing learned.
	// Error replies prove the node is alive; only unreachability counts as a failure.
	case errors.Is(werr, ErrUnavailable):
		n.note(n.breaker.record(time.Now(), err))
	default:
		n.note(n.breaker.record(time.Now(), nil))
	}
	return werr
}

// note logs the breaker opening or closing.
func (n *Node) note(c change) {
	if c == unchanged || n.breaker.cd() <= 0 || n.log == nil {
		return
	}
	if c == opened {
		_, last := n.breaker.openings()
		n.log.Warn("backend node failing: circuit breaker open, its calls fail at once until a probe succeeds",
			"node", n.name, "failures_in_a_row", n.breaker.threshold.Load(), "cooldown", n.breaker.cd().String(), "err", oneLine(last.Error()))
		return
	}
	n.log.Info("backend node answering again: circuit breaker closed", "node", n.name)
}

// cd is the cooldown in force.
func (b *breaker) cd() time.Duration { return time.Duration(b.cooldown.Load()) }
