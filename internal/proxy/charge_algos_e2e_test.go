package proxy

import (
	"testing"
	"time"
)

// RL.CHARGE through the proxy with every algorithm, SHARDS and MODE
// PER_CLIENT: the debt is split like the rate, and the next acquire's
// retry_after is the debt over the rate, within 10 ms (plus the time the
// calls took).
func TestChargeEveryAlgorithm(t *testing.T) {
	nodes := shardNodes(t, 2)
	a, b := shardProxy(t, nodes), shardProxy(t, nodes)
	// 10 per second over 2 shards (5 each); a charge of 30 puts 15 on
	// each, 10 of it debt. One more permit on a shard: 11 at 5/s = 2.2 s
	// (a token bucket); a shaper also waits out its burst first: 15/5 = 3 s.
	for _, tc := range []struct {
		algo  string
		retry time.Duration // 0: only checked to be positive
	}{
		{"token-bucket", 2200 * time.Millisecond},
		{"leaky-bucket", 3000 * time.Millisecond},
		{"sliding-log", time.Second},
		{"fixed-window", 0},
		{"sliding-window", 0},
	} {
		t.Run(tc.algo, func(t *testing.T) {
			for _, mode := range []string{"OVERALL", "PER_CLIENT"} {
				k := "charge-" + tc.algo + "-" + mode
				a.Do(t, "RL.SETRATE", k, 10, "1s", "ALGO", tc.algo, "SHARDS", 2, "MODE", mode).Equal(int64(1))
				c := a.Conn(t, nil)
				c.Do(t, "CLIENT", "SETNAME", "payer").OK()
				began := time.Now()
				r := c.Do(t, "RL.CHARGE", k, 30).OK().([]any)
				if len(r) != 4 || r[0] != int64(1) || r[1] != int64(-20) || r[2] != int64(0) {
					t.Fatalf("%s: RL.CHARGE 30 of 10 = %v, want [1 -20 0 reset]", mode, r)
				}
				g := c.Do(t, "RL.ACQUIRE", k).Acquire()
				took := time.Since(began)
				if g.Granted || g.RetryAfter <= 0 {
					t.Fatalf("%s: acquire in debt = %+v, want denied", mode, g)
				}
				if tc.retry > 0 && (g.RetryAfter > tc.retry+2*time.Millisecond || g.RetryAfter < tc.retry-took-10*time.Millisecond) {
					t.Errorf("%s: retry_after = %v, want debt / rate = %v within 10 ms", mode, g.RetryAfter, tc.retry)
				}
				c.Do(t, "RL.AVAILABLE", k).Equal(int64(0))
				other := b.Conn(t, nil)
				other.Do(t, "CLIENT", "SETNAME", "other").OK()
				if mode == "PER_CLIENT" {
					other.Do(t, "RL.AVAILABLE", k).Equal(int64(10)) // the debt is the payer's
				} else {
					other.Do(t, "RL.AVAILABLE", k).Equal(int64(0))
				}
			}
		})
	}
}
