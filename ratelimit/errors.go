package ratelimit

import "fmt"

// NoLimiterError: the named limiter does not exist (or expired).
type NoLimiterError struct{ Name string }

func (e *NoLimiterError) Error() string {
	return fmt.Sprintf("no such limiter '%s' (create it with RL.SETRATE)", e.Name)
}

// OverCapacityError: a request asks for more permits than the limiter (or,
// when sharded, any of its sub-limiters) can ever hold, so it could never
// be granted.
type OverCapacityError struct {
	Name     string
	Permits  int64
	Capacity int64
}

func (e *OverCapacityError) Error() string {
	return fmt.Sprintf("requested %d permits but limiter '%s' holds at most %d per request", e.Permits, e.Name, e.Capacity)
}
