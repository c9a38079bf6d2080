package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A multi-limit limiter through every option: MODE PER_CLIENT, TTL,
// KEEPSTATE, TIMEOUT (waiting for the latest of its limits), the deny
// cache, RL.AVAILABLE / RL.RELEASE / RL.RESET, RL.CHARGE, SHADOW.
func TestMultiLimitOptions(t *testing.T) {
	nodes := shardNodes(t, 2)
	a, b := shardProxy(t, nodes), shardProxy(t, nodes)

	for _, algo := range []string{"token-bucket", "sliding-log", "fixed-window", "sliding-window"} {
		t.Run(algo, func(t *testing.T) {
			k := "ml-" + algo
			// 5 per hour and 3 per day: the daily limit is the tighter.
			a.Do(t, "RL.SETRATE", k, 5, "1h", "LIMIT", 3, "1d", "ALGO", algo).Equal(int64(1))
			a.Do(t, "RL.AVAILABLE", k).Equal(int64(3)) // the least over all limits
			a.Do(t, "RL.ACQUIRE", k, 2).Granted(1)
			b.Do(t, "RL.AVAILABLE", k).Equal(int64(1))
			b.Do(t, "RL.ACQUIRE", k, 2).Denied(1)
			b.Do(t, "RL.ACQUIRE", k, 2).Denied(1) // the deny cache's answer: the same
			// A release gives back to every limit; the deny cache forgets.
			b.Do(t, "RL.RELEASE", k, 2).OK()
			b.Do(t, "RL.ACQUIRE", k, 2).Granted(1)
			a.Do(t, "RL.ACQUIRE", k, 1).Granted(0)
			a.Do(t, "RL.ACQUIRE", k, 1).Denied(0)
			// A charge takes from every limit, past zero.
			if r := a.Do(t, "RL.CHARGE", k, 2).OK().([]any); r[0] != int64(1) || r[1] != int64(-2) {
				t.Errorf("RL.CHARGE = %v, want [1 -2 ...]", r)
			}
			a.Do(t, "RL.RESET", k).Equal(int64(1))
			b.Do(t, "RL.AVAILABLE", k).Equal(int64(3))
			// KEEPSTATE keeps every limit's state across a change of rate.
			a.Do(t, "RL.ACQUIRE", k, 3).Granted(0)
			a.Do(t, "RL.SETRATE", k, 6, "1h", "LIMIT", 3, "1d", "ALGO", algo, "KEEPSTATE").Equal(int64(1))
			b.Do(t, "RL.ACQUIRE", k, 1).Denied(0)
			// Without it the state starts afresh.
			a.Do(t, "RL.SETRATE", k, 6, "1h", "LIMIT", 4, "1d", "ALGO", algo).Equal(int64(1))
			b.Do(t, "RL.AVAILABLE", k).Equal(int64(4))

			// PER_CLIENT: each named connection has every limit to itself.
			p := "mlpc-" + algo
			a.Do(t, "RL.SETRATE", p, 5, "1h", "LIMIT", 2, "1d", "ALGO", algo, "MODE", "PER_CLIENT").Equal(int64(1))
			c1 := a.Conn(t, nil)
			c1.Do(t, "CLIENT", "SETNAME", "one").OK()
			c2 := b.Conn(t, nil)
			c2.Do(t, "CLIENT", "SETNAME", "two").OK()
			c1.Do(t, "RL.ACQUIRE", p, 2).Granted(0)
			c1.Do(t, "RL.ACQUIRE", p, 1).Denied(0)
			c2.Do(t, "RL.ACQUIRE", p, 2).Granted(0)
		})
	}

	t.Run("SHARDS: every limit split exactly", func(t *testing.T) {
		// Every sub-limiter needs a permit of every limit.
		a.Do(t, "RL.SETRATE", "mls", 100, "1s", "LIMIT", 2, "1d", "SHARDS", 4).ErrContains("more than the limiter's 2 permits")
		// 2 per day over 2 shards: 1 each, never more than 2 in all.
		a.Do(t, "RL.SETRATE", "mls", 100, "1s", "LIMIT", 2, "1d", "SHARDS", 2).Equal(int64(1))
		granted := 0
		for i := 0; i < 10; i++ {
			if g := []*harness{a, b}[i%2].Do(t, "RL.ACQUIRE", "mls").Acquire(); g.Granted {
				granted++
			}
		}
		if granted != 2 {
			t.Errorf("granted %d of a daily limit of 2", granted)
		}
		// A charge is split like every limit: 2 on each shard, past the
		// daily limit's zero on both.
		if r := b.Do(t, "RL.CHARGE", "mls", 4).OK().([]any); r[0] != int64(1) || r[1] != int64(-4) {
			t.Errorf("RL.CHARGE mls 4 = %v, want [1 -4 ...]", r)
		}
		a.Do(t, "RL.AVAILABLE", "mls").Equal(int64(0))
		a.Do(t, "RL.RELEASE", "mls", 4).Equal(int64(0)) // pays the debt back first
		a.Do(t, "RL.RELEASE", "mls", 2).Equal(int64(2))
	})

	t.Run("TTL", func(t *testing.T) {
		a.Do(t, "RL.SETRATE", "mlt", 5, "1h", "LIMIT", 3, "1d", "TTL", "300ms").Equal(int64(1))
		a.Do(t, "RL.ACQUIRE", "mlt", 3).Granted(0)
		c := b.client(t, nil)
		if err := eventually(5*time.Second, func() error {
			if err := c.Do(context.Background(), "RL.GETRATE", "mlt").Err(); err != redis.Nil {
				return fmt.Errorf("RL.GETRATE: %v, want nil", err)
			}
			return nil
		}); err != nil {
			t.Fatalf("a multi-limit limiter with TTL 300ms outlived it: %v", err)
		}
	})

	t.Run("TIMEOUT waits for the latest limit", func(t *testing.T) {
		// 10 per 100ms and 2 per 600ms: once 2 are taken, the second limit
		// is the one to wait for.
		for _, algo := range []string{"token-bucket", "sliding-log"} {
			k := "mlw-" + algo
			a.Do(t, "RL.SETRATE", k, 10, "100ms", "LIMIT", 2, "600ms", "ALGO", algo).Equal(int64(1))
			a.Do(t, "RL.ACQUIRE", k, 2).Granted(0)
			began := time.Now()
			g := b.Do(t, "RL.ACQUIRE", k, 1, "TIMEOUT", "2s").Acquire()
			waited := time.Since(began)
			if !g.Granted {
				t.Fatalf("%s: TIMEOUT 2s denied: %+v", algo, g)
			}
			if waited < 200*time.Millisecond {
				t.Errorf("%s: waited %v, want the second limit's ~300ms or more (not the first's 100ms)", algo, waited)
			}
			// A wait longer than the timeout answers a denial at once,
			// with when the latest limit has room.
			a.Do(t, "RL.SETRATE", k, 10, "100ms", "LIMIT", 1, "10s", "ALGO", algo).Equal(int64(1))
			a.Do(t, "RL.ACQUIRE", k, 1).Granted(0)
			d := b.Do(t, "RL.ACQUIRE", k, 1, "TIMEOUT", "200ms").Acquire()
			if d.Granted || d.RetryAfter < 9*time.Second {
				t.Errorf("%s: want a denial with retry_after ~10s, got %+v", algo, d)
			}
		}
	})
}
