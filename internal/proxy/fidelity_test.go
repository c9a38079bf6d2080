package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestGatewayInfo: INFO is the backend's reply (its version, settings,
// keyspace) followed by rlproxy's own sections; INFO rlproxy gives only
// rlproxy's, INFO memory only the backend's; RESP2 and RESP3 alike.
func TestGatewayInfo(t *testing.T) {
	h := start(t, passthroughOn)
	backend := h.backend.Client(t)
	ctx := context.Background()
	theirs, err := backend.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	for _, l := range strings.Split(theirs, "\r\n") {
		if v, ok := strings.CutPrefix(l, "redis_version:"); ok {
			version = v
		}
	}
	if err := backend.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "SET", "k", "v").Equal("OK")
	for _, proto := range []int{2, 3} {
		c := h.Conn(t, func(o *redis.Options) { o.Protocol = proto })
		all := c.Do(t, "INFO").OK().(string)
		for _, want := range []string{"# Server\r\nredis_version:" + version + "\r\n", "maxmemory_policy:allkeys-lru\r\n",
			"# Keyspace\r\ndb0:keys=1,", "\r\n# rlproxy\r\nrlproxy_version:", "\r\n# Passthrough\r\n"} {
			if !strings.Contains(all, want) {
				t.Errorf("RESP%d INFO has no %q:\n%s", proto, want, all)
			}
		}
		if strings.Index(all, "# rlproxy") < strings.Index(all, "# Keyspace") {
			t.Errorf("RESP%d INFO: rlproxy's sections come before the backend's", proto)
		}
		own := c.Do(t, "INFO", "rlproxy").OK().(string)
		if !strings.HasPrefix(own, "# rlproxy\r\n") || strings.Contains(own, "redis_version") || strings.Contains(own, "# Passthrough") {
			t.Errorf("RESP%d INFO rlproxy:\n%s", proto, own)
		}
		mem := c.Do(t, "INFO", "memory").OK().(string)
		if !strings.HasPrefix(mem, "# Memory\r\n") || strings.Contains(mem, "# rlproxy") {
			t.Errorf("RESP%d INFO memory:\n%s", proto, mem)
		}
		both := c.Do(t, "INFO", "keyspace", "passthrough").OK().(string)
		if !strings.HasPrefix(both, "# Keyspace\r\ndb0:keys=1,") || !strings.Contains(both, "\r\n# Passthrough\r\n") || !strings.Contains(both, "\r\nforwarded:") {
			t.Errorf("RESP%d INFO keyspace passthrough:\n%s", proto, both)
		}
	}
	// RESP3's INFO is verbatim text, as Redis 7 sends it.
	r := h.raw(t)
	r.Steps([][2]string{{"HELLO 3", "%7"}})
	for r.Line() != "modules" { // the last field
	}
	r.Line()
	if got := r.Call("INFO", "rlproxy"); !strings.HasPrefix(got, "=") {
		t.Errorf("RESP3 INFO rlproxy begins %q, want verbatim text (=)", got)
	}
	if got := r.Line(); got != "txt:# rlproxy" {
		t.Errorf("RESP3 INFO rlproxy's text begins %q, want txt:# rlproxy", got)
	}
}

// transcript sends script (raw RESP or inline commands) to addr, then
// PING with a marker, and returns the reply lines up to the marker: what
// a client reads. With hello3 it first switches to RESP3 (HELLO's reply,
// which names the server, is left out).
func transcript(t *testing.T, addr string, hello3 bool, script string) []string {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, callTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(callTimeout))
	r := bufio.NewReader(nc)
	line := func() string {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: read: %v (read %q)", addr, err, l)
		}
		return strings.TrimSuffix(l, "\r\n")
	}
	if hello3 {
		fmt.Fprint(nc, "HELLO 3\r\n")
		for line() != "modules" {
		}
		line()
	}
	fmt.Fprint(nc, script+"PING marker\r\n")
	var lines []string
	for l := line(); l != "marker"; l = line() {
		lines = append(lines, l)
	}
	return lines
}

// sameAsRedis checks that rlproxy answers a script as the Redis behind
// it does, byte for byte, in RESP2 and RESP3.
func sameAsRedis(t *testing.T, h *harness, script string) {
	t.Helper()
	sameAsRedisIn(t, h, []bool{false, true}, script)
}

// sameAsRedisIn is sameAsRedis in some protocols (RESP3: hello3 true).
func sameAsRedisIn(t *testing.T, h *harness, protocols []bool, script string) {
	t.Helper()
	for _, hello3 := range protocols {
		want := transcript(t, h.backend.Addr(), hello3, script)
		got := transcript(t, h.proxy.Addr(), hello3, script)
		if !slices.Equal(got, want) {
			t.Errorf("RESP3 %v, %q:\nrlproxy answers %q\nRedis answers   %q", hello3, script, got, want)
		}
	}
}

// TestGatewayPubSub: Pub/Sub exactly as Redis: UNSUBSCRIBE of several
// channels (subscribed or not) and without arguments, one reply each;
// PING while subscribed; RESET; a RESP3 client's pushes mixed with its
// replies, in Redis's order.
func TestGatewayPubSub(t *testing.T) {
	h := start(t, passthroughOn)
	for _, script := range []string{
		"UNSUBSCRIBE foo bar quux\r\n",
		"PUNSUBSCRIBE foo.* bar.*\r\n",
		"UNSUBSCRIBE\r\n",
		"SUBSCRIBE a b c\r\nUNSUBSCRIBE\r\nPING\r\n",
		"SUBSCRIBE a\r\nPING\r\nPING foo\r\nUNSUBSCRIBE a b\r\nPING\r\n",
		"SUBSCRIBE a a b\r\nPSUBSCRIBE p.*\r\nUNSUBSCRIBE\r\nPUNSUBSCRIBE\r\n",
		"SUBSCRIBE a\r\nRESET\r\nPING\r\n",
	} {
		sameAsRedis(t, h, script)
	}
	// RESP3: commands while subscribed, and a message to oneself comes
	// before the reply of the PUBLISH that sent it.
	sameAsRedisIn(t, h, []bool{true}, "SUBSCRIBE a\r\nPUBLISH a hello\r\nSET x 1\r\nGET x\r\nUNSUBSCRIBE a\r\n")
}

// TestGatewayHelloWhilePinned: a client whose backend connection is
// pinned (SELECT 9, as Redis's own tests do) and then switches protocol
// gets its replies in the new protocol.
func TestGatewayHelloWhilePinned(t *testing.T) {
	h := start(t, passthroughOn)
	r := h.raw(t)
	r.Steps([][2]string{{"SELECT 9", "+OK"}, {"DEL nokey", ":0"}, {"GET nokey", "$-1"}, {"HELLO 3", "%7"}})
	for r.Line() != "modules" {
	}
	r.Line()
	r.Steps([][2]string{{"GET nokey", "_"}, {"HELLO 2", "*14"}})
	for r.Line() != "modules" {
	}
	r.Line()
	r.Steps([][2]string{{"GET nokey", "$-1"}})
}

// TestGatewayCommand: COMMAND describes the backend's commands plus
// rlproxy's own (the limiter name as first key), in RESP2 and RESP3.
func TestGatewayCommand(t *testing.T) {
	h := start(t, passthroughOn)
	backend := h.backend.Client(t)
	ctx := context.Background()
	theirs, err := backend.Do(ctx, "COMMAND", "COUNT").Int64()
	if err != nil {
		t.Fatal(err)
	}
	for _, proto := range []int{2, 3} {
		c := h.Conn(t, func(o *redis.Options) { o.Protocol = proto })
		count := c.Do(t, "COMMAND", "COUNT").Int()
		if count <= theirs {
			t.Fatalf("RESP%d COMMAND COUNT %d, the backend's %d: want the backend's plus rlproxy's", proto, count, theirs)
		}
		if all := c.Do(t, "COMMAND").OK().([]any); int64(len(all)) != count {
			t.Errorf("RESP%d COMMAND lists %d commands, COMMAND COUNT says %d", proto, len(all), count)
		}
		theirList, err := backend.Do(ctx, "COMMAND", "LIST").Slice()
		if err != nil {
			t.Fatal(err)
		}
		list := c.Do(t, "COMMAND", "LIST").OK().([]any)
		if want := int64(len(theirList)) + count - theirs; int64(len(list)) != want ||
			!slices.Contains(list, any("rl.acquire")) || !slices.Contains(list, any("zadd")) {
			t.Errorf("RESP%d COMMAND LIST: %d names (want %d, with rl.acquire and zadd)", proto, len(list), want)
		}
		c.Do(t, "COMMAND", "LIST", "FILTERBY", "PATTERN", "rl.acq*").Equal([]any{"rl.acquire"})
		info := c.Do(t, "COMMAND", "INFO", "get", "rl.acquire", "nosuch").OK().([]any)
		if len(info) != 3 || info[0].([]any)[0] != "get" || info[1].([]any)[0] != "rl.acquire" || info[2] != nil {
			t.Errorf("RESP%d COMMAND INFO get rl.acquire nosuch: %v", proto, info)
		}
		c.Do(t, "COMMAND", "GETKEYS", "RL.ACQUIRE", "api", "2").Equal([]any{"api"})
		c.Do(t, "COMMAND", "GETKEYS", "SET", "k", "v").Equal([]any{"k"})
		docs := fmt.Sprint(c.Do(t, "COMMAND", "DOCS", "get", "rl.setrate").OK())
		if !strings.Contains(docs, "rl.setrate") || !strings.Contains(docs, "get") {
			t.Errorf("RESP%d COMMAND DOCS get rl.setrate: %s", proto, docs)
		}
	}
}

// TestClientRefusals: CLIENT PAUSE, UNPAUSE and KILL are refused in the
// contract's words (the clients are rlproxy's, not the backend's);
// NO-EVICT and NO-TOUCH are accepted.
func TestClientRefusals(t *testing.T) {
	h := start(t, passthroughOn)
	h.Do(t, "CLIENT", "PAUSE", "10").Err("ERR 'client|pause' is not supported by rlproxy")
	h.Do(t, "CLIENT", "UNPAUSE").Err("ERR 'client|unpause' is not supported by rlproxy")
	h.Do(t, "CLIENT", "KILL", "ID", "1").Err("ERR 'client|kill' is not supported by rlproxy")
	h.Do(t, "CLIENT", "NO-EVICT", "on").Equal("OK")
	h.Do(t, "CLIENT", "NO-TOUCH", "off").Equal("OK")
}
