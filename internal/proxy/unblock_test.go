package proxy

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// TestGatewayClientUnblock: CLIENT UNBLOCK of an rlproxy client blocked
// in a forwarded BLPOP ends it as Redis would (TIMEOUT: a null reply;
// ERROR: UNBLOCKED), in RESP2 and RESP3; a client not blocked gives 0;
// bad arguments get Redis's errors; the client goes on working.
func TestGatewayClientUnblock(t *testing.T) {
	h := start(t, passthroughOn)
	backend := h.backend.Client(t)
	blocked := func() bool {
		return strings.Contains(backend.Info(context.Background(), "clients").Val(), "blocked_clients:1\r\n")
	}
	for _, proto := range []string{"2", "3"} {
		rd := h.raw(t)
		if proto == "3" {
			rd.Send("HELLO", "3")
			for rd.Line() != "modules" {
			}
			rd.Line()
		}
		id := strings.TrimPrefix(rd.Call("CLIENT", "ID"), ":")
		null := map[string]string{"2": "*-1", "3": "_"}[proto]
		for _, step := range [][2]string{{"", null}, {"TIMEOUT", null}, {"ERROR", "-UNBLOCKED client unblocked via CLIENT UNBLOCK"}} {
			rd.Send("BLPOP", "l", "0")
			redistest.WaitFor(t, blocked)
			args := []any{"CLIENT", "UNBLOCK", id}
			if step[0] != "" {
				args = append(args, step[0])
			}
			h.Do(t, args...).Equal(int64(1))
			if got := rd.Line(); got != step[1] {
				t.Errorf("RESP%s: BLPOP after CLIENT UNBLOCK %s answers %q, want %q", proto, step[0], got, step[1])
			}
		}
		h.Do(t, "CLIENT", "UNBLOCK", id).Equal(int64(0)) // not blocked now
		h.Do(t, "CLIENT", "UNBLOCK", "asd").Err("ERR value is not an integer or out of range")
		h.Do(t, "CLIENT", "UNBLOCK", id, "MAYBE").Err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
		h.Do(t, "CLIENT", "UNBLOCK", strconv.Itoa(1<<30)).Equal(int64(0))
		rd.Send("BLPOP", "l", "0")
		redistest.WaitFor(t, blocked)
		h.Do(t, "LPUSH", "l", "foo").Equal(int64(1))
		if got := rd.Line(); got != "*2" && got != ">2" {
			t.Errorf("RESP%s: BLPOP after LPUSH answers %q", proto, got)
		}
		rd.Line()
	}
}

// TestGatewayClientUnblockAdminOnly: CLIENT UNBLOCK reaches any client's
// backend connection, so only admins may call it.
func TestGatewayClientUnblockAdminOnly(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) {
		c.RequirePass = "adminpw"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"redis"}}}
	})
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "CLIENT", "UNBLOCK", "1").Err("NOPERM User app has no permissions to run the 'client|unblock' command")
	h.Do(t, "CLIENT", "UNBLOCK", "1").Equal(int64(0))
}
