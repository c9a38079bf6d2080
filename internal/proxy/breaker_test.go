package proxy

// The circuit breaker against a real redis-server: it opens only after
// breaker_failures calls in a row found the node stalled, says so in the
// log, and closes (saying so) once the node answers; waits that clients
// or their deadlines end never open it.

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// logged counts the proxy's log lines that contain s.
func logged(h *harness, s string) int {
	n := 0
	for _, l := range h.log.Lines() {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

const (
	breakerOpened = "circuit breaker open"
	breakerClosed = "circuit breaker closed"
)

func TestBreakerOpensOnFailuresInARow(t *testing.T) {
	t.Parallel()
	const failures = 5
	h := start(t, func(c *config.Config) {
		c.BackendTimeout = 100 * time.Millisecond
		c.BreakerFailures = failures
		c.BreakerCooldown = 200 * time.Millisecond
	})
	h.Do(t, "RL.SETRATE", "b", 100, "1h").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "b").Granted(99)

	h.backend.Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			h.backend.Resume(t)
		}
	}()
	// The first calls wait out backend_timeout and fail: below the
	// threshold, the node is still asked. (Background polls that fail
	// count too, so the breaker may open before the fifth acquire.)
	for i := range 2 {
		msg := h.Do(t, "RL.ACQUIRE", "b").ErrContains("unavailable")
		if strings.Contains(msg, "circuit open") {
			t.Fatalf("acquire %d of a stalled node (threshold %d): %q, want it sent and timed out, not refused", i+1, failures, msg)
		}
	}
	if n := logged(h, breakerOpened); n != 0 {
		t.Fatalf("breaker logged open after 2 failed acquires (threshold %d)", failures)
	}
	// Then it opens: a call is refused at once.
	opened := false
	for range failures + 3 {
		if strings.Contains(h.Do(t, "RL.ACQUIRE", "b").ErrContains("unavailable"), "circuit open") {
			opened = true
			break
		}
	}
	if !opened {
		t.Fatalf("the breaker never opened after %d failures in a row", failures+5)
	}
	if n := logged(h, breakerOpened); n != 1 {
		t.Errorf("%d log lines say the breaker opened, want 1", n)
	}

	h.backend.Resume(t)
	resumed = true
	redistest.WaitFor(t, func() bool { return h.Do(t, "RL.ACQUIRE", "b").err == nil })
	redistest.WaitFor(t, func() bool { return logged(h, breakerClosed) == 1 })
}

// Many BLOCK waits that clients give up on (their read deadline, or a
// TIMEOUT of the proxy's own waiting) on a healthy Redis, while the
// limiter's rate changes under them: no call is refused "circuit open",
// and the breaker never opens.
func TestBreakerNotOpenedByWaitsThatEnd(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) {
		c.BreakerFailures = 1 // the strictest: any failure would open it
		c.BreakerCooldown = time.Hour
	})
	h.Do(t, "RL.SETRATE", "w", 1, "1h").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "w").Granted(0)

	impatient := h.client(t, func(o *redis.Options) {
		o.ReadTimeout = 20 * time.Millisecond
		o.PoolSize = 64
	})
	var wg sync.WaitGroup
	var waits, refused atomic.Int64
	var firstRefusal atomic.Value
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				args := []any{"RL.ACQUIRE", "w", 1, "BLOCK"}
				if g%2 == 1 {
					args = []any{"RL.ACQUIRE", "w", 1, "TIMEOUT", "15ms"}
				}
				err := impatient.Do(context.Background(), args...).Err()
				waits.Add(1)
				if err != nil && strings.Contains(err.Error(), "circuit open") {
					refused.Add(1)
					firstRefusal.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	// The rate changes while they wait: waiters are decided again under
	// each new config, reading it from the backend.
	stop := make(chan struct{})
	changes := make(chan int, 1)
	go func() {
		n := 0
		defer func() { changes <- n }()
		for rate := 2; ; rate = 3 - rate {
			select {
			case <-stop:
				return
			default:
			}
			h.Do(t, "RL.SETRATE", "w", rate, "1h")
			n++
		}
	}()
	wg.Wait()
	close(stop)
	t.Logf("%d abandoned waits, %d rate changes meanwhile", waits.Load(), <-changes)

	if n := refused.Load(); n > 0 {
		t.Errorf("%d waits were refused %q on a healthy Redis", n, firstRefusal.Load())
	}
	if n := logged(h, breakerOpened); n > 0 {
		t.Errorf("the breaker opened %d times on a healthy Redis", n)
	}
	// A patient client is served as usual.
	h.Do(t, "RL.SETRATE", "fresh", 5, "1h").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "fresh").Granted(4)
}
