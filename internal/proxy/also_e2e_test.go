package proxy

import (
	"testing"
	"time"
)

// RL.ACQUIRE key [permits] [ALSO key [permits]]...: several names, one
// decision, against a real redis-server.

// alsoGrant is a decoded RL.ACQUIRE ... ALSO reply.
type alsoGrant struct {
	grant
	Name any // the name that denied, nil when granted
}

// Also decodes an RL.ACQUIRE ... ALSO reply: 4 integers and a name or nil.
func (r *reply) Also() alsoGrant {
	r.t.Helper()
	arr, ok := r.OK().([]any)
	if !ok || len(arr) != 5 {
		r.t.Fatalf("%s: want an array of 5 elements", r)
	}
	g := (&reply{t: r.t, args: r.args, val: arr[:4]}).Acquire()
	if name, ok := arr[4].(string); arr[4] != nil && (!ok || g.Granted) {
		r.t.Fatalf("%s: want a name only when denied, got %#v", r, arr[4])
	} else if !g.Granted && name == "" {
		r.t.Fatalf("%s: want the name that denied", r)
	}
	return alsoGrant{g, arr[4]}
}

func TestAlsoReplyAndErrors(t *testing.T) {
	h := start(t)
	h.Do(t, "RL.SETRATE", "user:1", 3, "1m").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "tenant", 5, "1h", "ALGO", "sliding-log").Equal(int64(1))
	h.Do(t, "RL.POLICY", "SET", "ip:*", 4, "1m", "ALGO", "sliding-window").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "conns", 2, "1m", "ALGO", "concurrency").Equal(int64(1))

	// Granted: remaining the least over the names, name nil.
	g := h.Do(t, "RL.ACQUIRE", "user:1", 2, "ALSO", "tenant", 1, "ALSO", "ip:9").Also()
	if !g.Granted || g.Remaining != 1 || g.RetryAfter != 0 || g.Name != nil {
		t.Fatalf("first call: %+v, want granted with 1 remaining", g)
	}
	// Denied by user:1 (1 left, 2 asked): nobody keeps anything.
	g = h.Do(t, "RL.ACQUIRE", "tenant", 3, "ALSO", "user:1", 2, "ALSO", "ip:9", 1).Also()
	if g.Granted || g.Name != "user:1" || g.RetryAfter <= 0 || g.Remaining != 1 {
		t.Fatalf("second call: %+v, want denied by user:1 with 1 remaining", g)
	}
	h.Do(t, "RL.AVAILABLE", "tenant").Equal(int64(4))
	h.Do(t, "RL.AVAILABLE", "ip:9").Equal(int64(3))
	h.Do(t, "RL.AVAILABLE", "user:1").Equal(int64(1))
	// The name with the largest retry is named: tenant's hour beats user:1's 20 s.
	h.Do(t, "RL.ACQUIRE", "tenant", 4).Granted(0)
	g = h.Do(t, "RL.ACQUIRE", "user:1", 2, "ALSO", "tenant").Also()
	if g.Granted || g.Name != "tenant" || g.RetryAfter < 30*time.Minute {
		t.Fatalf("third call: %+v, want denied by tenant", g)
	}
	// Without ALSO the reply is as today.
	h.Do(t, "RL.ACQUIRE", "ip:9").Granted(2)

	h.Do(t, "RL.ACQUIRE", "user:1", "ALSO", "conns").Err("ERR ALSO does not apply to a concurrency limiter 'conns'")
	h.Do(t, "RL.ACQUIRE", "user:1", "ALSO", "nope").Err("ERR no such limiter 'nope' (create it with RL.SETRATE or RL.POLICY SET)")
	h.Do(t, "RL.ACQUIRE", "user:1", "ALSO", "ip:9", "ALSO", "user:1").Err("ERR limiter 'user:1' is named twice in one RL.ACQUIRE")
	h.Do(t, "RL.ACQUIRE", "user:1", "ALSO", "ip:9", 5).Err("ERR requested 5 permits but limiter 'ip:9' holds at most 4 per request")
	h.Do(t, "RL.ACQUIRE", "user:1", "ALSO", "ip:9", 0).Err("ERR permits must be a positive integer, got '0'")
	h.Do(t, "RL.ACQUIRE", "a", "ALSO", "b", "ALSO", "c", "ALSO", "d", "ALSO", "e", "ALSO", "f", "ALSO", "g", "ALSO", "h", "ALSO", "i").
		Err("ERR too many names: at most 8 in one RL.ACQUIRE")
	h.Do(t, "RL.ACQUIRE", "user:1", "ALSO").Err("ERR syntax error: ALSO needs a key")
	h.Do(t, "PING").Equal("PONG") // the connection stays
}
