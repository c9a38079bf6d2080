package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
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

// Users' limiters: patterns are checked for every name; a name too long
// is refused like the key.
func TestAlsoUsers(t *testing.T) {
	h := start(t, func(c *config.Config) {
		c.RequirePass = "root"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"acquire"}, Limiters: []string{"api:*"}}}
	})
	h.Do(t, "RL.POLICY", "SET", "*", 5, "1m").Equal(int64(1))
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "RL.ACQUIRE", "api:1", "ALSO", "api:2").Also()
	app.Do(t, "RL.ACQUIRE", "api:1", "ALSO", "api:2", "ALSO", "billing:1").Err("NOPERM No permissions to access the 'billing:1' limiter")
	app.Do(t, "RL.ACQUIRE", "api:1", 2, "ALSO", "billing:1", 3).Err("NOPERM No permissions to access the 'billing:1' limiter")
	h.Do(t, "RL.AVAILABLE", "api:1").Equal(int64(4)) // refused before anything was taken
	h.Do(t, "RL.ACQUIRE", "api:1", "ALSO", strings.Repeat("x", 600)).Err("ERR limiter name is longer than 512 bytes")
}

// MODE PER_CLIENT names: each connection name its own budget, in ALSO too.
// SHADOW names grant as alone; their denial does not deny the call.
func TestAlsoPerClientAndShadow(t *testing.T) {
	h := start(t)
	h.Do(t, "RL.SETRATE", "pc", 1, "1h", "MODE", "PER_CLIENT").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "shared", 10, "1h").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "dry", 1, "1h", "SHADOW").Equal(int64(1))
	a := h.Conn(t, nil)
	b := h.Conn(t, nil)
	a.Do(t, "CLIENT", "SETNAME", "a").OK()
	b.Do(t, "CLIENT", "SETNAME", "b").OK()
	if g := a.Do(t, "RL.ACQUIRE", "pc", "ALSO", "shared").Also(); !g.Granted {
		t.Fatalf("a's first: %+v", g)
	}
	if g := b.Do(t, "RL.ACQUIRE", "pc", "ALSO", "shared").Also(); !g.Granted {
		t.Fatalf("b's first (its own budget of pc): %+v", g)
	}
	if g := a.Do(t, "RL.ACQUIRE", "pc", "ALSO", "shared").Also(); g.Granted || g.Name != "pc" {
		t.Fatalf("a's second: %+v, want denied by pc", g)
	}
	h.Do(t, "RL.AVAILABLE", "shared").Equal(int64(8))

	if g := h.Do(t, "RL.ACQUIRE", "dry", "ALSO", "shared").Also(); !g.Granted {
		t.Fatalf("first with dry: %+v", g)
	}
	// dry is out: a SHADOW name's denial grants (counted in the
	// metrics), and shared still pays.
	if g := h.Do(t, "RL.ACQUIRE", "dry", "ALSO", "shared").Also(); !g.Granted || g.RetryAfter != 0 {
		t.Fatalf("second with dry: %+v, want granted", g)
	}
	h.Do(t, "RL.AVAILABLE", "shared").Equal(int64(6))
	if n := limiterStats(t, h)["shadow_denied"]; n != 1 {
		t.Errorf("shadow denials counted %d, want 1", n)
	}
}

// TIMEOUT / BLOCK: the call waits until every name fits; a name that
// books ahead books as alone, and when another denies the booking is
// given back.
func TestAlsoWait(t *testing.T) {
	h := start(t)
	h.Do(t, "RL.SETRATE", "tb", 1, "200ms").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "log", 1, "300ms", "ALGO", "sliding-log").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "tb", "ALSO", "log").Also()
	// Both are out: a TIMEOUT long enough waits for both.
	if g := h.Do(t, "RL.ACQUIRE", "tb", "ALSO", "log", "TIMEOUT", "5s").Also(); !g.Granted || g.RetryAfter != 0 {
		t.Fatalf("TIMEOUT 5s: %+v, want granted", g)
	}
	if g := h.Do(t, "RL.ACQUIRE", "tb", "ALSO", "log", "BLOCK").Also(); !g.Granted {
		t.Fatalf("BLOCK: %+v, want granted", g)
	}
	// A TIMEOUT too short for the log is answered at once, and the
	// bucket keeps nothing of its booking.
	h.Do(t, "RL.SETRATE", "long", 1, "1h", "ALGO", "sliding-log").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "long").Granted(0)
	if g := h.Do(t, "RL.ACQUIRE", "tb", "ALSO", "long", "TIMEOUT", "1s").Also(); g.Granted || g.Name != "long" {
		t.Fatalf("TIMEOUT 1s with long: %+v, want denied by long", g)
	}
	if err := eventually(5*time.Second, func() error {
		if n := h.Do(t, "RL.AVAILABLE", "tb").Int(); n != 1 {
			return fmt.Errorf("tb has %d available, want 1 once it refills", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// The embedded backend (the zero-setup default) runs ALSO too.
func TestAlsoEmbedded(t *testing.T) {
	h := startProxy(t, nil)
	h.Do(t, "RL.SETRATE", "e1", 2, "1h").Equal(int64(1))
	h.Do(t, "RL.POLICY", "SET", "eu:*", 1, "1h", "ALGO", "sliding-window").Equal(int64(1))
	if g := h.Do(t, "RL.ACQUIRE", "e1", "ALSO", "eu:1").Also(); !g.Granted {
		t.Fatalf("first: %+v", g)
	}
	if g := h.Do(t, "RL.ACQUIRE", "e1", "ALSO", "eu:1").Also(); g.Granted || g.Name != "eu:1" {
		t.Fatalf("second: %+v, want denied by eu:1", g)
	}
	h.Do(t, "RL.AVAILABLE", "e1").Equal(int64(1))
}
