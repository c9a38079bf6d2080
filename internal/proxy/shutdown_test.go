package proxy

import (
	"context"
	"testing"
	"time"
)

// Shutdown answers every kind of waiter — RL.ACQUIRE on each algorithm
// and RL.LEASE — "ERR rlproxy is shutting down" at once, and gives the
// bookings back: a proxy on the same Redis sees the limiters as the
// grants left them.
func TestShutdownAnswersEveryWaiter(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	a, b := f.proxies[0], f.proxies[1]
	algos := []string{"token-bucket", "leaky-bucket", "sliding-log", "sliding-window", "fixed-window"}
	var waits []func() ([]any, []error)
	for _, algo := range algos {
		a.Do(t, "RL.SETRATE", algo, 1, "1h", "ALGO", algo).Equal(int64(1))
		a.Do(t, "RL.ACQUIRE", algo).Acquire()
	}
	base := decisions(t, a.conn)
	for _, algo := range algos {
		waits = append(waits, waitAll(t, a, 3, "RL.ACQUIRE", algo, "BLOCK"))
	}
	a.Do(t, "RL.SETRATE", "db", 1, "1h", "ALGO", "concurrency").Equal(int64(1))
	a.Do(t, "RL.LEASE", "db")
	waits = append(waits, waitAll(t, a, 3, "RL.LEASE", "db", "BLOCK"))
	// All have asked: the buckets' waiters booked (or, a leaky bucket's
	// queue full, were denied), the head of each queue was denied (the
	// rest wait behind it), and the lease waiters are queued in Redis.
	waitAsked(t, a.conn, 15, base+3+3+1+1+1)
	found := false
	for _, rdb := range f.backends {
		if rdb.Exists(context.Background(), "rlproxy:{db:0}:c").Val() == 1 {
			waitQueued(t, rdb, "db", 1, 3)
			found = true
		}
	}
	if !found {
		t.Fatal("no backend holds the config of 'db'")
	}
	waitLeaseWaiting(t, a.conn, 3)
	start := time.Now()
	if err := a.proxy.Shutdown(5 * time.Second); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	took := time.Since(start)
	for i, w := range waits {
		vals, errs := w()
		for j, err := range errs {
			if err == nil || err.Error() != "ERR rlproxy is shutting down" {
				t.Errorf("waiter %d/%d: %v %v, want ERR rlproxy is shutting down", i, j, vals[j], err)
			}
		}
	}
	t.Logf("Shutdown with 18 waiters took %v", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("Shutdown took %v with nothing in flight", took)
	}
	// The bookings were given back: one permit in use, the next due
	// within the hour (a sliding window's weighting may add some), not
	// the 3 more hours the bookings had pushed it to.
	for _, algo := range algos {
		g := b.Do(t, "RL.ACQUIRE", algo).Acquire()
		if g.Granted || g.RetryAfter > 2*time.Hour {
			t.Errorf("%s after the shutdown: %+v, want a denial with retry_after <= 2h", algo, g)
		}
	}
}
