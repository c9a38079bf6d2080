package proxy

// Waiters follow the limiter: a change through another proxy reaches
// them by the change feed (feed_test.go), and they are decided again
// under it at once.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// waitAll starts n RL.ACQUIRE ... BLOCK (or args) on h, each on its own
// connection, and returns their replies once all are answered, with how
// long the last one took from the moment asked (set by the caller).
func waitAll(t *testing.T, h *harness, n int, args ...any) func() ([]any, []error) {
	t.Helper()
	vals, errs := make([]any, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		c := h.client(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			vals[i], errs[i] = c.Do(ctx, args...).Result()
		}()
	}
	return func() ([]any, []error) { wg.Wait(); return vals, errs }
}

// The case, through two proxies: six waiters on a 1-per-10s token
// bucket (booked 10, 20 … 60 s out) on proxy B; RL.SETRATE k 100 1s
// through proxy A grants all six at once, not at the old schedule.
func TestWaitersFollowRateChangeThroughOtherProxy(t *testing.T) {
	t.Parallel()
	for _, algo := range []string{"token-bucket", "sliding-window"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			f := startFleet(t, 2)
			a, b := f.proxies[0], f.proxies[1]
			a.Do(t, "RL.SETRATE", "k", 1, "10s", "ALGO", algo).Equal(int64(1))
			a.Do(t, "RL.ACQUIRE", "k").Granted(0)
			// The six have asked under the old rate: a token bucket books
			// each, a sliding window's head is denied (the rest queue
			// behind it in the proxy).
			asks := map[string]int{"token-bucket": 6, "sliding-window": 1}[algo]
			base := decisions(t, b.conn)
			wait := waitAll(t, b, 6, "RL.ACQUIRE", "k", "BLOCK")
			waitAsked(t, b.conn, 6, base+asks)
			start := time.Now()
			a.Do(t, "RL.SETRATE", "k", 100, "1s", "ALGO", algo).Equal(int64(1))
			vals, errs := wait()
			took := time.Since(start)
			t.Logf("%s: six waiters on proxy B granted %v after the change through proxy A", algo, took.Round(time.Millisecond))
			for i := range vals {
				if errs[i] != nil || fmt.Sprint(vals[i]) == "" || vals[i].([]any)[0] != int64(1) {
					t.Errorf("waiter %d: %v %v, want granted", i, vals[i], errs[i])
				}
			}
			if took > 3*time.Second {
				t.Errorf("the waiters were granted %v after the change, want within ~1s (the old schedule: 10..60s)", took)
			}
		})
	}
}

// RL.DEL through proxy A: waiters on proxy B get "no such limiter" within
// a second; waiters on A at once.
func TestWaitersToldOfDelete(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	a, b := f.proxies[0], f.proxies[1]
	for _, algo := range []string{"token-bucket", "leaky-bucket", "fixed-window"} {
		name := "del-" + algo
		a.Do(t, "RL.SETRATE", name, 1, "1h", "ALGO", algo).Equal(int64(1))
		a.Do(t, "RL.ACQUIRE", name).Acquire()
	}
	var waits []func() ([]any, []error)
	baseA, baseB := decisions(t, a.conn), decisions(t, b.conn)
	for _, algo := range []string{"token-bucket", "leaky-bucket", "fixed-window"} {
		waits = append(waits, waitAll(t, a, 2, "RL.ACQUIRE", "del-"+algo, "TIMEOUT", "1000h"), waitAll(t, b, 2, "RL.ACQUIRE", "del-"+algo, "BLOCK"))
	}
	// On each proxy five have asked: both token-bucket waiters (booked),
	// both leaky-bucket ones (booked, or denied: its queue is full) and
	// the fixed window's head (the other queues behind it).
	waitAsked(t, a.conn, 6, baseA+5)
	waitAsked(t, b.conn, 6, baseB+5)
	start := time.Now()
	for _, algo := range []string{"token-bucket", "leaky-bucket", "fixed-window"} {
		a.Do(t, "RL.DEL", "del-"+algo).Equal(int64(1))
	}
	for i, w := range waits {
		vals, errs := w()
		for j := range errs {
			want := fmt.Sprintf("ERR no such limiter '%s' (create it with RL.SETRATE or RL.POLICY SET)", "del-"+[]string{"token-bucket", "leaky-bucket", "fixed-window"}[i/2])
			if errs[j] == nil || errs[j].Error() != want {
				t.Errorf("waiter %d/%d: %v %v, want %s", i, j, vals[j], errs[j], want)
			}
		}
	}
	took := time.Since(start)
	t.Logf("12 waiters on two proxies told of RL.DEL within %v", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the waiters were told %v after RL.DEL, want within ~1s", took)
	}
}

// Under KEEPSTATE the used permits carry over, bookings included: each
// woken waiter gives its booking back before it is decided again, so the
// six are counted once, not twice.
func TestWaitersFollowKeepState(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	a, b := f.proxies[0], f.proxies[1]
	a.Do(t, "RL.SETRATE", "ks", 1, "10s").Equal(int64(1))
	a.Do(t, "RL.ACQUIRE", "ks").Granted(0)
	base := decisions(t, b.conn)
	wait := waitAll(t, b, 6, "RL.ACQUIRE", "ks", "BLOCK")
	waitAsked(t, b.conn, 6, base+6) // each booked
	start := time.Now()
	a.Do(t, "RL.SETRATE", "ks", 100, "1h", "KEEPSTATE").Equal(int64(1))
	vals, errs := wait()
	t.Logf("six booked waiters on proxy B granted %v after RL.SETRATE ... KEEPSTATE through proxy A", time.Since(start).Round(time.Millisecond))
	for i := range vals {
		if errs[i] != nil || vals[i].([]any)[0] != int64(1) {
			t.Errorf("waiter %d: %v %v, want granted", i, vals[i], errs[i])
		}
	}
	// 1 + 6 permits in use of 100 (a booking counted twice would leave 87).
	if n := a.Do(t, "RL.AVAILABLE", "ks").Int(); n != 93 {
		t.Errorf("RL.AVAILABLE = %d, want 93 (1 + 6 grants of 100)", n)
	}
}
