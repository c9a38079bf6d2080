package proxy

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// Tests of the gateway's fidelity: with passthrough on, an application
// sees its Redis (with a rate-limit module), not a look-alike.

// TestGatewayConfig: CONFIG GET, SET, RESETSTAT and REWRITE are the
// backend's: a setting made through the gateway is the backend's, its
// errors are Redis's own; GET is open to the redis category, the rest to
// admins.
func TestGatewayConfig(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) {
		c.RequirePass = "adminpw"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"redis"}}}
	})
	backend := h.backend.Client(t)
	ctx := context.Background()
	h.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru").Equal("OK")
	if got, err := backend.ConfigGet(ctx, "maxmemory-policy").Result(); err != nil || got["maxmemory-policy"] != "allkeys-lru" {
		t.Fatalf("the backend's maxmemory-policy after CONFIG SET through rlproxy: %v, %v", got, err)
	}
	h.Do(t, "CONFIG", "GET", "maxmemory-policy").Equal(map[any]any{"maxmemory-policy": "allkeys-lru"})
	h.Do(t, "CONFIG", "SET", "no-such-setting", "1").ErrContains("ERR Unknown option or number of arguments for CONFIG SET - 'no-such-setting'")
	backend.Incr(ctx, "counted")
	h.Do(t, "CONFIG", "RESETSTAT").Equal("OK")
	if calls := backendCalls(t, backend); calls["incr"] != 0 {
		t.Errorf("the backend's commandstats after CONFIG RESETSTAT through rlproxy: incr calls=%d, want 0", calls["incr"])
	}
	// REWRITE reaches the backend: redistest's server has no config file.
	h.Do(t, "CONFIG", "REWRITE").ErrContains("ERR The server is running without a config file")

	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "CONFIG", "GET", "maxmemory-policy").Equal(map[any]any{"maxmemory-policy": "allkeys-lru"})
	app.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction").Err("NOPERM User app has no permissions to run the 'config|set' command")
	app.Do(t, "CONFIG", "RESETSTAT").Err("NOPERM User app has no permissions to run the 'config|resetstat' command")
}

// TestGatewayDebug: DEBUG goes to the backend for admins, which answers
// it as its enable-debug-command says; other users get NOPERM.
func TestGatewayDebug(t *testing.T) {
	srv := redistest.StartServer(t, redistest.WithArgs("--enable-debug-command", "yes"))
	h := startProxy(t, srv, passthroughOn, func(c *config.Config) {
		c.Backends = []string{srv.URL()}
		c.RequirePass = "adminpw"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"redis"}}}
	})
	h.Do(t, "SET", "d", "12345").Equal("OK")
	h.Do(t, "DEBUG", "SET-ACTIVE-EXPIRE", 1).Equal("OK")
	h.Do(t, "DEBUG", "RELOAD").Equal("OK")
	h.Do(t, "GET", "d").Equal("12345")
	h.Do(t, "OBJECT", "ENCODING", "d").Equal("int")
	h.Do(t, "DEBUG", "NO-SUCH").ErrContains("ERR unknown subcommand or wrong number of arguments for 'NO-SUCH'")
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "DEBUG", "SLEEP", 0).Err("NOPERM User app has no permissions to run the 'debug' command")
}
