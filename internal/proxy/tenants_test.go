package proxy

// Tenants of one gateway: what a user bound to key patterns may reach
// (scripts, GCRA keys), and what one user's pinned connections may take
// from the others.

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
)

// A user with keys: patterns runs scripts only as a backend ACL user with
// the same patterns: a script reads what its arguments name, which no
// check of its declared keys sees.
func TestGatewayScriptsUnderKeyPatterns(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) {
		c.RequirePass = "adminpw"
		c.Users = []config.User{
			{Name: "app", Password: "apppw", Commands: []string{"redis"}, Keys: []string{"app:*"}},
			{Name: "acl", Password: "aclpw", Commands: []string{"redis"}, Keys: []string{"app:*"},
				BackendUser: &config.BackendUser{Name: "appacl", Password: "backendpw"}},
			{Name: "free", Password: "freepw", Commands: []string{"redis"}},
		}
	})
	ctx := context.Background()
	backend := h.backend.Client(t)
	if err := backend.Do(ctx, "ACL", "SETUSER", "appacl", "on", ">backendpw", "~app:*", "+@all", "-@admin").Err(); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "SET", "other:secret", "s3cret").Equal("OK")
	h.Do(t, "SET", "app:1", "mine").Equal("OK")
	const steal = "return redis.call('get', ARGV[1])"

	refused := "NOPERM this user may not run scripts (its keys: patterns cannot be checked inside a script)"
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "EVAL", steal, 0, "other:secret").Err(refused)
	app.Do(t, "EVAL_RO", steal, 0, "app:1").Err(refused)
	app.Do(t, "EVALSHA", "0123456789012345678901234567890123456789", 0).Err(refused)
	app.Do(t, "FCALL", "f", 0).Err(refused)
	app.Do(t, "FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('f', function() return 1 end)").Err(refused)
	app.Do(t, "SCRIPT", "LOAD", steal).Err(refused)
	app.Do(t, "GET", "app:1").Equal("mine") // the rest as before

	// As the backend ACL user: Redis checks what the script touches.
	acl := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "acl", "aclpw" })
	acl.Do(t, "EVAL", steal, 0, "app:1").Equal("mine")
	acl.Do(t, "EVAL", steal, 0, "other:secret").ErrContains("can't access")
	acl.Do(t, "EVAL", steal, 0, "rlproxy:{policies}:v").ErrContains("can't access")
	acl.Do(t, "GET", "other:secret").Err("NOPERM No permissions to access a key")
	acl.Do(t, "ACL", "WHOAMI").Equal("appacl") // its every command runs as appacl

	// A user without key patterns runs scripts as before.
	free := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "free", "freepw" })
	free.Do(t, "EVAL", steal, 0, "other:secret").Equal("s3cret")
}

// With passthrough on, the GCRA family keeps its state in the key as the
// client names it: never one of rlproxy's keys, only keys the user's
// patterns allow, and never over an application's string.
func TestGatewayGCRAKeys(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) {
		c.RequirePass = "adminpw"
		c.Users = []config.User{
			{Name: "app", Password: "apppw", Commands: []string{"acquire"}, Keys: []string{"app:*"}},
		}
	})
	h.Do(t, "RL.POLICY", "SET", "user:*", 5, "1s").Equal(int64(1))
	version := h.backend.Client(t).Get(context.Background(), "rlproxy:{policies}:v").Val()
	h.Do(t, "SET", "app:session", "user=42").Equal("OK")
	h.Do(t, "SET", "app:count", "1234567890123456789").Equal("OK")
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	for _, cmd := range []string{"CL.THROTTLE", "GCRA", "RL.THROTTLE"} {
		h.Do(t, cmd, "rlproxy:{policies}:v", 1, 1, 1).Err("NOPERM No permissions to access a key")
		app.Do(t, cmd, "rlproxy:x", 1, 1, 1).Err("NOPERM No permissions to access a key")
		app.Do(t, cmd, "other:"+cmd, 1, 1, 1).Err("NOPERM No permissions to access a key")
		h.Do(t, "EXISTS", "other:"+cmd).Equal(int64(0))
		for _, k := range []string{"app:session", "app:count"} {
			app.Do(t, cmd, k, 1, 1, 1).Err("WRONGTYPE Operation against a key holding the wrong kind of value")
		}
		app.Do(t, cmd, "app:"+cmd, 1, 1, 1).OK()
		app.Do(t, cmd, "app:"+cmd, 1, 1, 1).OK() // its own state again
	}
	h.Do(t, "GET", "app:session").Equal("user=42")
	h.Do(t, "GET", "app:count").Equal("1234567890123456789")
	if got := h.backend.Client(t).Get(context.Background(), "rlproxy:{policies}:v").Val(); got != version {
		t.Errorf("the policies' version went from %q to %q", version, got)
	}
}

// One user's blocked clients take at most passthrough_max_pinned_per_user
// pinned connections (a tenth of passthrough_max_pinned by default): the
// other users keep MULTI, WATCH, SUBSCRIBE and SELECT.
func TestGatewayPinnedPerUser(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) {
		c.RequirePass = "adminpw"
		c.PassthroughMaxPinned = 30 // 3 per user
		c.Users = []config.User{
			{Name: "app", Password: "apppw", Commands: []string{"redis"}},
			{Name: "web", Password: "webpw", Commands: []string{"redis"}},
		}
	})
	blockers := make([]*raw, 3)
	for i := range blockers {
		blockers[i] = h.raw(t)
		blockers[i].Steps([][2]string{{"AUTH app apppw", "+OK"}})
		blockers[i].Send("BLPOP", "app:q"+strconv.Itoa(i), "0")
	}
	waitPinned(t, h, "3")
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "BLPOP", "app:q", 0).Err("ERR max number of pinned connections per user reached")
	app.Do(t, "SELECT", 1).Err("ERR max number of pinned connections per user reached")
	app.Do(t, "GET", "app:x").Nil() // shared connections are not pinned

	web := h.raw(t)
	web.Steps([][2]string{
		{"AUTH web webpw", "+OK"},
		{"WATCH web:k", "+OK"},
		{"MULTI", "+OK"},
		{"SET web:k 1", "+QUEUED"},
		{"EXEC", "*1"},
	})
	web.Line()
	sub := h.raw(t)
	sub.Steps([][2]string{{"AUTH web webpw", "+OK"}, {"SUBSCRIBE web:c", "*3"}})
	admin := h.raw(t)
	admin.Steps([][2]string{{"AUTH adminpw", "+OK"}, {"SELECT 2", "+OK"}}) // passthrough_max_pinned only

	h.Do(t, "RPUSH", "app:q0", "v").Equal(int64(1))
	if got := blockers[0].Line(); got != "*2" {
		t.Fatalf("BLPOP after RPUSH: %q", got)
	}
	blockers[0].Line()
	blockers[0].Line()
	blockers[0].Line()
	blockers[0].Line()
	app.Do(t, "BLPOP", "app:q0", 0.01).Nil() // its pin was given back
}
