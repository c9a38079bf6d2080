package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

// Waiting (RL.ACQUIRE ... TIMEOUT d | BLOCK).
//
// A waiting request holds only its own client's reply: no backend
// connection is held while it waits, and it never polls — it sleeps until
// the time the limiter told it.
//
//   - Algorithms that book ahead (token-bucket, leaky-bucket) reserve the
//     permits in the script: the grant is decided at once, in the order
//     the backend receives requests, so waiters are served first come,
//     first served across every proxy. The reply is held until the
//     reservation's time; a client that disconnects meanwhile gets its
//     permits released. When there is no room to book (a leaky bucket's
//     queue is full), the waiter sleeps until retry_after and asks again.
//   - The others (sliding-log, sliding-window, fixed-window) queue waiters
//     of one budget in this proxy in arrival order (FIFO): the head asks,
//     sleeps until retry_after, asks again; the rest wait behind it.
//
// If the permits cannot come within the timeout, the denial is answered
// at once rather than after the timeout (like Guava's tryAcquire with a
// timeout): retry_after says when they could. BLOCK is never answered a
// denial: a waiter whose permits are further off than a limiter books
// ahead sleeps until they are within reach and asks again.
//
// A waiter takes its slot under max_waiters when it comes, and is counted
// in waiting_clients once it has its place: its booking made (or its
// denial read), or its place in the queue taken. A client sent after the
// count read n is served after the n counted.

// blockWait is how far ahead BLOCK may book: the longest interval.
const blockWait = limiter.MaxInterval

// AcquireWait asks for permits, waiting up to timeout (or forever when
// timeout is 0) for them. ctx ends when the client disconnects.
func (l *Limiters) AcquireWait(ctx context.Context, r Request, timeout time.Duration) (limiter.Result, error) {
	in, err := l.waiters.Enter()
	if err != nil {
		return limiter.Result{}, err
	}
	defer in.Leave()
	deadline := time.Time{}
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	st, err := l.config(ctx, r.Name, false)
	if err != nil {
		return limiter.Result{}, err
	}
	if st.Algo == limiter.Concurrency {
		return limiter.Result{}, limiter.LeaseOnlyError{Name: r.Name}
	}
	if st.Shadow {
		// A dry run never waits or books ahead: a request that would wait
		// is answered at once as a shadow denial (retry_after_ms > 0).
		r.MaxWait = 0
		return l.Acquire(ctx, r)
	}
	if st.Algo.Reserves() {
		return l.reserve(ctx, r, st, deadline, in)
	}
	return l.queue(ctx, r, st, deadline, in)
}

// WaitLeft is the wait allowed from now until deadline, never below
// zero; for the zero deadline (BLOCK), the farthest a limiter books
// ahead. RL.ACQUIRE and RL.LEASE waiters both ask it.
func WaitLeft(deadline time.Time) time.Duration {
	if deadline.IsZero() {
		return blockWait
	}
	return max(0, time.Until(deadline))
}

// nextAsk is how long a waiter denied with retry_after wait sleeps before
// asking again; ok is false when the denial is its answer (the permits
// cannot come before its deadline). BLOCK always waits: permits further
// off than blockWait could not be booked yet, and are once it has slept
// the difference.
func nextAsk(wait time.Duration, deadline time.Time) (sleep time.Duration, ok bool) {
	if !deadline.IsZero() {
		return wait, wait <= WaitLeft(deadline)
	}
	if wait > blockWait {
		return wait - blockWait, true
	}
	return wait, true
}

func (l *Limiters) reserve(ctx context.Context, r Request, e *entry, deadline time.Time, in *Waiter) (limiter.Result, error) {
	// The acquire path gives back what it grants to a client gone by the
	// time the answer comes; here the waiter does it, exactly once.
	actx := context.WithoutCancel(ctx)
	w := l.sleepers.listen(r.Name)
	defer w.stop()
	for {
		r.MaxWait = WaitLeft(deadline)
		o := l.AcquireAll(actx, []Request{r})[0]
		res, shard, err := o.Result, o.shard, o.Err
		if err != nil {
			return res, err
		}
		// Booked (or told there is no room): those asking later book
		// after it.
		in.Queued()
		booked := l.configs.get(r.Name) // the config the answer came under
		if booked == nil {
			booked = e
		}
		if !res.Granted {
			// No room to book (a leaky bucket's queue is full, or the
			// permits are further off than BLOCK books ahead): sleep until
			// the limiter said, unless that is past the deadline, and ask
			// again (at once if the limiter changes).
			wait, ok := nextAsk(time.Duration(res.RetryAfterMs)*time.Millisecond, deadline)
			if !ok {
				return res, nil
			}
			if err := w.sleep(ctx, wait); err != nil {
				return limiter.Result{}, err
			}
			continue
		}
		if res.ShadowDenied {
			return res, nil // a shadow denial (the limiter turned SHADOW meanwhile) booked nothing
		}
		if res.RetryAfterMs == 0 {
			if ctx.Err() != nil {
				return limiter.Result{}, l.giveBackFor(booked, r, shard, context.Cause(ctx))
			}
			return res, nil
		}
		// Booked: hold the reply until the reservation's time.
		until := time.Now().Add(time.Duration(res.RetryAfterMs) * time.Millisecond)
		redo, err := l.holdBooking(ctx, w, r, booked, shard, until)
		if err != nil || !redo {
			if err == nil {
				res.ResetAfterMs = max(0, res.ResetAfterMs-res.RetryAfterMs)
				res.RetryAfterMs = 0
			}
			return res, err
		}
	}
}

// holdBooking holds a booked reservation until its time. It returns redo
// when the limiter changed meanwhile (through any proxy): the booking is
// given back and the request must be decided again under the limiter as
// it is now. When the client leaves or the proxy shuts down, the booking
// is given back and the cause returned; after RL.DEL, no such limiter.
func (l *Limiters) holdBooking(ctx context.Context, w *wakeup, r Request, booked *entry, shard int, until time.Time) (redo bool, err error) {
	for {
		wait := time.Until(until)
		if wait <= 0 {
			return false, nil
		}
		if err := w.sleep(ctx, wait); err != nil {
			return false, l.giveBackFor(booked, r, shard, err)
		}
		if !time.Now().Before(until) {
			return false, nil
		}
		now, err := l.config(ctx, r.Name, true)
		var gone *NoLimiterError
		switch {
		case errors.As(err, &gone):
			return false, err // its state went with it: nothing to give back
		case err != nil:
			continue // cannot tell now: keep the booking
		case now.Epoch == booked.Epoch && now.Gen == booked.Gen:
			continue // woken by something else (a release): keep it
		}
		// Changed: under KEEPSTATE the state (and the booking) carried
		// over, so hand it back before asking again; otherwise the state
		// is new and the give-back finds nothing of it.
		if err := l.giveBackFor(booked, r, shard, nil); err != nil {
			return false, err
		}
		return true, nil
	}
}

// giveBackFor gives back a booking and returns cause (or the give-back's
// error when it failed).
func (l *Limiters) giveBackFor(e *entry, r Request, shard int, cause error) error {
	if err := l.giveBack(e, r, shard); err != nil {
		return err
	}
	return cause
}

func (l *Limiters) queue(ctx context.Context, r Request, e *entry, deadline time.Time, in *Waiter) (limiter.Result, error) {
	key := r.Name + "\x00" + clientKey(e.Stored, r.Client)
	q := l.queues.get(key)
	defer l.queues.put(key)
	if !deadline.IsZero() && q.asksAt().After(deadline) {
		// Behind a waiter that asks again only after the deadline: the
		// permits cannot come in time, so the denial is due now.
		return l.Acquire(ctx, r)
	}
	lockCtx := ctx
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		lockCtx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	turn := q.join()
	in.Queued() // in line: those coming later are behind it
	if err := q.wait(lockCtx, turn); err != nil {
		if ctx.Err() != nil {
			return limiter.Result{}, context.Cause(ctx)
		}
		// Timed out behind other waiters: answer as a denial now.
		res, err := l.Acquire(ctx, r)
		return res, err
	}
	defer q.unlock()
	w := l.sleepers.listen(r.Name)
	defer w.stop()
	for {
		res, err := l.Acquire(ctx, r)
		if err != nil || res.Granted {
			return res, err
		}
		wait, ok := nextAsk(time.Duration(res.RetryAfterMs)*time.Millisecond, deadline)
		if !ok {
			return res, nil
		}
		q.asking(time.Now().Add(wait))
		// A change to the limiter (Wake) ends the sleep early: the loop
		// asks again, and the request is decided under what is in force.
		if err := w.sleep(ctx, wait); err != nil {
			return limiter.Result{}, err
		}
	}
}

// wakeup is a waiter's registration for Wake, held from before its
// first ask until it is answered: a change made between an ask and the
// sleep that follows it still ends that sleep (registered only to sleep,
// the waiter would miss it, and follow, starting from the new config,
// would see no change: it would sleep its whole retry_after).
type wakeup struct {
	s    *sleepers
	name string
	c    chan struct{} // closed by Wake; replaced when a sleep ends by it
}

// listen registers a waiter of limiter name for Wake, starting the
// watch on the limiter when nobody watches it yet (follow.go). The
// waiter calls stop when it is done.
func (s *sleepers) listen(name string) *wakeup {
	w := &wakeup{s: s, name: name}
	w.c = s.add(name)
	return w
}

// sleep waits d, or until ctx ends (then it returns ctx's cause), or
// until Wake(name) has been called since listen or the last sleep ended
// — by a change through this proxy, by the change feed for one through
// another (change.go), or by the backstop's watch on shard 0 (follow.go).
func (w *wakeup) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.c:
		w.c = w.s.add(w.name) // listen on for the next ask
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

func (w *wakeup) stop() { w.s.remove(w.name, w.c) }

// Wake ends the sleep of every waiter of the limiter name: each is
// decided again at once under the limiter's config as it is now (a
// booked reservation is given back first), or told the limiter is gone.
// RL.SETRATE, RL.RESET, RL.DEL and RL.RELEASE through this proxy call it;
// the change feed, for changes through other proxies (change.go).
func (l *Limiters) Wake(name string) { l.sleepers.wake(name) }

// sleepers are the waiters of each limiter (each with the channel that
// wakes it), and the limiters whose shard 0 is watched.
type sleepers struct {
	watch   func(name string) // starts the watch of a limiter (Limiters.watch)
	mu      sync.Mutex
	m       map[string]map[chan struct{}]struct{}
	watched map[string]bool
}

// add registers a waiter and returns the channel Wake closes, starting
// the watch when nobody watches the limiter yet.
func (s *sleepers) add(name string) chan struct{} {
	s.mu.Lock()
	if s.m == nil {
		s.m = map[string]map[chan struct{}]struct{}{}
		s.watched = map[string]bool{}
	}
	if s.m[name] == nil {
		s.m[name] = map[chan struct{}]struct{}{}
	}
	w := make(chan struct{})
	s.m[name][w] = struct{}{}
	first := !s.watched[name]
	s.watched[name] = true
	s.mu.Unlock()
	if first {
		s.watch(name) // not under mu: it reads the config cache
	}
	return w
}

// unwatch ends the watch of a limiter nobody sleeps on, and reports
// whether it did.
func (s *sleepers) unwatch(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m[name]) > 0 {
		return false
	}
	delete(s.watched, name)
	return true
}

func (s *sleepers) remove(name string, w chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[name][w]; ok {
		delete(s.m[name], w)
		if len(s.m[name]) == 0 {
			delete(s.m, name)
		}
	}
}

func (s *sleepers) wake(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.m[name] {
		close(w)
	}
	delete(s.m, name)
}

// queues holds a FIFO lock per waited-on budget, dropped when unused.
type queues struct {
	mu sync.Mutex
	m  map[string]*fifo
}

func (qs *queues) get(key string) *fifo {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.m == nil {
		qs.m = map[string]*fifo{}
	}
	q := qs.m[key]
	if q == nil {
		q = &fifo{}
		qs.m[key] = q
	}
	q.refs++
	return q
}

func (qs *queues) put(key string) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if q := qs.m[key]; q != nil {
		if q.refs--; q.refs == 0 {
			delete(qs.m, key)
		}
	}
}

// fifo is a lock granted in arrival order.
type fifo struct {
	refs int // guarded by queues.mu

	mu      sync.Mutex
	held    bool
	next    time.Time // when the holder asks the limiter again (zero: unknown)
	waiting []chan struct{}
}

// asking records when the holder asks the limiter again.
func (q *fifo) asking(at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next = at
}

// asksAt is when the holder asks the limiter again: no waiter behind it
// is served sooner (zero: free, or unknown).
func (q *fifo) asksAt() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.next
}

// join takes a place in line for the lock and returns the turn to wait
// for (nil: the lock is free, and now the caller's).
func (q *fifo) join() (turn chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.held {
		q.held = true
		return nil
	}
	turn = make(chan struct{})
	q.waiting = append(q.waiting, turn)
	return turn
}

// wait waits for the lock until turn (from join) comes; when ctx ends
// first, it leaves the line and returns ctx's error.
func (q *fifo) wait(ctx context.Context, turn chan struct{}) error {
	if turn == nil {
		return nil
	}
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		for i, c := range q.waiting {
			if c == turn {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				return ctx.Err()
			}
		}
		// Handed the lock just as ctx ended: pass it on.
		q.unlockLocked()
		return ctx.Err()
	}
}

func (q *fifo) unlock() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unlockLocked()
}

func (q *fifo) unlockLocked() {
	q.next = time.Time{}
	if len(q.waiting) == 0 {
		q.held = false
		return
	}
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	close(next)
}
