package proxy

import (
	"testing"
	"time"
)

// RL.CHARGE: permits taken after the fact, even past zero; later acquires
// wait the debt out.
func TestCharge(t *testing.T) {
	h := start(t)
	// 10 per hour: one permit per 6 minutes, so the time the calls take
	// on a loaded machine (up to a second allowed) cannot move the figures.
	h.Do(t, "RL.SETRATE", "llm", 10, "1h").Equal(int64(1))
	charged := h.Do(t, "RL.CHARGE", "llm", 25).OK().([]any)
	if len(charged) != 4 || charged[0] != int64(1) || charged[1] != int64(-15) || charged[2] != int64(0) {
		t.Fatalf("RL.CHARGE llm 25 = %v, want [1 -15 0 ~9000000]", charged)
	}
	// 25 permits to make up at 6 minutes each.
	if reset := charged[3].(int64); reset < 8_999_000 || reset > 9_000_000 {
		t.Errorf("reset_after = %d ms, want ~9000000 (2.5 h)", reset)
	}
	g := h.Do(t, "RL.ACQUIRE", "llm").Denied(0)
	// 15 of debt and the permit itself: 16 permits at 6 minutes each.
	if g.RetryAfter < 5_759*time.Second || g.RetryAfter > 5_760*time.Second {
		t.Errorf("retry_after = %v, want ~96m", g.RetryAfter)
	}
	h.Do(t, "RL.AVAILABLE", "llm").Equal(int64(0))

	// Sharded: the charge is split like the rate; remaining is the total.
	h.Do(t, "RL.SETRATE", "sh", 10, "1h", "SHARDS", 2).Equal(int64(1))
	if r := h.Do(t, "RL.CHARGE", "sh", 13).OK().([]any); r[1] != int64(-3) { // shares 7 and 6 of 5 and 5
		t.Errorf("RL.CHARGE sh 13 = %v, want remaining -3", r)
	}
	h.Do(t, "RL.AVAILABLE", "sh").Equal(int64(0))

	h.Do(t, "RL.CHARGE", "nope", 1).Err("ERR no such limiter 'nope' (create it with RL.SETRATE or RL.POLICY SET)")
	h.Do(t, "RL.CHARGE", "llm", 0).Err("ERR permits must be a positive integer, got '0'")
	h.Do(t, "RL.CHARGE", "llm").Err("ERR wrong number of arguments for 'rl.charge' command")
}
