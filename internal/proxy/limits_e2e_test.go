package proxy

import (
	"testing"
	"time"
)

// Issue 12: values at the documented limits answer clean replies or clean
// errors, never a script error.
func TestDocumentedLimits(t *testing.T) {
	h := start(t)
	// A full bucket over 36500 days to refill is refused up front.
	h.Do(t, "RL.SETRATE", "t", 1, "366d", "BURST", 1000000000).Err(
		"ERR BURST 1000000000 at 1 per 366d takes longer than 36500 days to refill (burst × interval / rate is at most 36500 days)")
	h.Do(t, "RL.ACQUIRE", "t", 3162316).Err("ERR no such limiter 't' (create it with RL.SETRATE or RL.POLICY SET)")

	// At the limit: exactly 36500 days to refill, and a reservation on top.
	h.Do(t, "RL.SETRATE", "edge", 1, "1d", "BURST", 36500, "TTL", "3650d").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "edge", 36500).Equal([]any{int64(1), int64(0), int64(0), int64(36500 * 86400000)})
	// A moment later: all of it still to refill, less that moment.
	if g := h.Do(t, "RL.ACQUIRE", "edge", 36500).Denied(0); g.RetryAfter > 36500*24*time.Hour || g.RetryAfter < 36500*24*time.Hour-time.Second {
		t.Errorf("retry_after = %v, want 36500 days less a moment", g.RetryAfter)
	}
	h.Do(t, "RL.RELEASE", "edge", 1000000000).Equal(int64(36500))

	h.Do(t, "RL.SETRATE", "fast", 1000000000, "1ms", "ALGO", "sliding-log", "TTL", "3650d").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "fast", 1000000000).Equal([]any{int64(1), int64(0), int64(0), int64(1)})

	h.Do(t, "CL.THROTTLE", "cx", 1000000000, 1, 1000000000, 1000000000).ErrContains("36500 days")
	h.Do(t, "CL.THROTTLE", "cx", 1000000000, 1000000000, 1000000000, 1000000000).Equal(
		[]any{int64(0), int64(1000000001), int64(1), int64(-1), int64(1000000000)})
}
