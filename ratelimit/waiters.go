package ratelimit

import (
	"fmt"
	"sync/atomic"
)

// Waiters counts the clients waiting now and bounds them (max_waiters):
// RL.ACQUIRE's waiters have one, RL.LEASE's (package lease) another. The
// zero value has no bound.
type Waiters struct {
	n, max atomic.Int64
}

// SetMax changes the bound, live (0: none).
func (w *Waiters) SetMax(n int) { w.max.Store(int64(n)) }

// Enter counts a waiter in, or returns TooManyWaitersError when the bound
// is reached. A waiter let in calls Leave when it is answered.
func (w *Waiters) Enter() error {
	if n, most := w.n.Add(1), w.max.Load(); most > 0 && n > most {
		w.n.Add(-1)
		return TooManyWaitersError{Max: int(most)}
	}
	return nil
}

// Leave counts a waiter out.
func (w *Waiters) Leave() { w.n.Add(-1) }

// Len is how many clients wait now.
func (w *Waiters) Len() int64 { return w.n.Load() }

// TooManyWaitersError: max_waiters clients are already waiting.
type TooManyWaitersError struct{ Max int }

func (e TooManyWaitersError) Error() string {
	return fmt.Sprintf("too many waiting clients (max_waiters is %d); try again later", e.Max)
}
