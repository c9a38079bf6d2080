package ratelimit

import (
	"fmt"
	"sync/atomic"
)

// Waiters counts the clients waiting now and bounds them (max_waiters):
// RL.ACQUIRE's waiters have one, RL.LEASE's (package lease) another. The
// zero value has no bound.
//
// A waiter takes its slot under the bound before it waits (Enter), but
// is counted as waiting (Len) only once it has its place in the queue it
// waits in (Queued): a client sent after Len read n is served after the n
// counted.
type Waiters struct {
	slots, queued, max atomic.Int64
}

// Waiter is one client's slot among the Waiters, used by its goroutine.
type Waiter struct {
	w      *Waiters
	queued bool
}

// SetMax changes the bound, live (0: none).
func (w *Waiters) SetMax(n int) { w.max.Store(int64(n)) }

// Enter takes a slot for a waiter, or returns TooManyWaitersError when
// the bound is reached. A waiter let in calls Queued once it has its
// place in the queue, and Leave when it is answered.
func (w *Waiters) Enter() (*Waiter, error) {
	if n, most := w.slots.Add(1), w.max.Load(); most > 0 && n > most {
		w.slots.Add(-1)
		return nil, TooManyWaitersError{Max: int(most)}
	}
	return &Waiter{w: w}, nil
}

// Queued counts the waiter as waiting (again is a no-op).
func (s *Waiter) Queued() {
	if !s.queued {
		s.queued = true
		s.w.queued.Add(1)
	}
}

// Leave gives the slot back.
func (s *Waiter) Leave() {
	if s.queued {
		s.w.queued.Add(-1)
	}
	s.w.slots.Add(-1)
}

// Len is how many clients wait now, each in its place in a queue.
func (w *Waiters) Len() int64 { return w.queued.Load() }

// TooManyWaitersError: max_waiters clients are already waiting.
type TooManyWaitersError struct{ Max int }

func (e TooManyWaitersError) Error() string {
	return fmt.Sprintf("too many waiting clients (max_waiters is %d); try again later", e.Max)
}
