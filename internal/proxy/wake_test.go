package proxy

import (
	"testing"
	"time"
)

// A waiter of a queued algorithm that sleeps until the limiter's
// retry_after is woken by a change made through its proxy: after RL.DEL
// it is told at once that the limiter is gone; after RL.SETRATE to a
// faster rate it is decided again at once, under the new rate.
func TestWaitersWokenByChange(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, algo := range []string{"sliding-log", "sliding-window", "fixed-window"} {
		t.Run(algo, func(t *testing.T) {
			t.Parallel()
			h := h.alone(t) // its own proxy: the test counts waiting clients and decisions
			key := "wake:" + algo
			h.Do(t, setRateArgs(key, 1, "1h", algo)...).Equal(int64(1))
			c := h.waiter(t)
			drained(t, c, key)

			// RL.SETRATE to a rate with room: the waiter is granted now,
			// not in an hour.
			base := decisions(t, h.conn)
			waiting := goDo(c, "RL.ACQUIRE", key, 1, "TIMEOUT", "3h")
			waitAsked(t, h.conn, 1, base+1) // denied, asleep for the hour
			h.Do(t, setRateArgs(key, 100, "1s", algo)...).Equal(int64(1))
			if g := await(t, waiting, 5*time.Second).reply(t).Acquire(); !g.Granted {
				t.Errorf("after RL.SETRATE %s 100 1s: waiter %+v, want granted", key, g)
			}

			// RL.DEL: the waiter hears at once that the limiter is gone.
			h.Do(t, setRateArgs(key, 1, "1h", algo)...).Equal(int64(1))
			drained(t, c, key)
			base = decisions(t, h.conn)
			waiting = goDo(c, "RL.ACQUIRE", key, 1, "BLOCK")
			waitAsked(t, h.conn, 1, base+1)
			h.Do(t, "RL.DEL", key).Equal(int64(1))
			await(t, waiting, 5*time.Second).reply(t).Err("ERR no such limiter '" + key + "' (create it with RL.SETRATE or RL.POLICY SET)")
		})
	}
}
