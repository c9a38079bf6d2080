package ratelimit

import "fmt"

// NoLimiterError: the named limiter does not exist (or expired).
type NoLimiterError struct{ Name string }

func (e *NoLimiterError) Error() string {
	return fmt.Sprintf("no such limiter '%s' (create it with RL.SETRATE or RL.POLICY SET)", e.Name)
}

// OverCapacityError: a request asks for more permits than the limiter (or,
// when sharded, any of its sub-limiters) can ever hold, so it could never
// be granted. Lease marks a concurrency limiter's (RL.LEASE), whose
// capacity is the permits held at once.
type OverCapacityError struct {
	Name     string
	Permits  int64
	Capacity int64
	Lease    bool
}

func (e *OverCapacityError) Error() string {
	if e.Lease {
		return fmt.Sprintf("%d permits is more than the limit of '%s' (%d at once); a lease can never get them", e.Permits, e.Name, e.Capacity)
	}
	return fmt.Sprintf("requested %d permits but limiter '%s' holds at most %d per request", e.Permits, e.Name, e.Capacity)
}

// KeepLeasesError: RL.SETRATE ... KEEPSTATE would change the shard count
// or mode of a concurrency limiter, and so forget the leases held (the
// new config would over-admit).
type KeepLeasesError struct{ Name string }

func (e *KeepLeasesError) Error() string {
	return fmt.Sprintf("KEEPSTATE cannot carry the leases held on '%s' over a change of SHARDS or MODE: set it without KEEPSTATE (the leases held are forgotten) or keep SHARDS and MODE", e.Name)
}
