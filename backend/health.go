package backend

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a node's circuit breaker: after a node fails to answer, calls
// to it fail at once for a cooldown instead of each waiting out a timeout;
// then one call goes through to probe it, and success closes the breaker.
type breaker struct {
	cooldown atomic.Int64 // nanoseconds; changes live (Pool.SetBreakerCooldown)

	open atomic.Bool // openUntil is set: lets the common, closed case skip the lock and the clock

	mu        sync.Mutex
	openUntil time.Time // zero when closed
	lastErr   error
	failures  uint64 // calls that found the node unreachable, ever
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

func (b *breaker) record(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		b.openUntil, b.lastErr = time.Time{}, nil
		b.open.Store(false)
		return
	}
	b.openUntil, b.lastErr = now.Add(b.cd()), err
	b.open.Store(true)
	b.failures++
}

// failed returns the number of failures so far and, if there is one, the
// last error (refusing calls that were queued before it).
func (b *breaker) failed() (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failures, b.lastErr
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

// do runs one backend call through the breaker and the counters.
func (n *Node) do(call func() error) error {
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
	case errors.As(err, &refused):
		// Refused without asking the node (queued behind a call that
		// found it dead): nothing learned.
	// Error replies prove the node is alive; only unreachability opens the breaker.
	case errors.Is(werr, ErrUnavailable):
		n.breaker.record(time.Now(), err)
	case n.breaker.isOpen():
		n.breaker.record(time.Now(), nil)
	}
	return werr
}

// cd is the cooldown in force.
func (b *breaker) cd() time.Duration { return time.Duration(b.cooldown.Load()) }
