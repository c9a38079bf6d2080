package proxy

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

func passthroughOn(c *config.Config) { c.Passthrough = true }

// pinned reads INFO passthrough's pinned_connections.
func pinned(t testing.TB, h *harness) string {
	t.Helper()
	info := h.Do(t, "INFO", "passthrough").OK().(string)
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "pinned_connections:"); ok {
			return v
		}
	}
	t.Fatalf("INFO passthrough has no pinned_connections: %q", info)
	return ""
}

// waitPinned waits until INFO shows n pinned connections.
func waitPinned(t testing.TB, h *harness, n string) {
	t.Helper()
	if err := eventually(5*time.Second, func() error {
		if got := pinned(t, h); got != n {
			return fmt.Errorf("pinned_connections:%s, want %s", got, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func waitUnpinned(t testing.TB, h *harness) { t.Helper(); waitPinned(t, h, "0") }

// TestPassthroughSession is an application's session through one URL:
// strings, hashes, lists with BLPOP, MULTI/EXEC with WATCH, Pub/Sub,
// SCAN, EVAL of its own script and RL.ACQUIRE, with go-redis in RESP3
// and RESP2, on a real Redis and on the embedded backend.
func TestPassthroughSession(t *testing.T) {
	for _, backend := range []string{"redis", "embedded"} {
		t.Run(backend, func(t *testing.T) {
			var h *harness
			if backend == "redis" {
				h = start(t, passthroughOn)
			} else {
				h = startProxy(t, nil, passthroughOn)
			}
			for _, proto := range []int{3, 2} {
				t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
					session(t, h, proto)
				})
			}
			waitUnpinned(t, h)
		})
	}
}

func session(t *testing.T, h *harness, proto int) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := h.client(t, func(o *redis.Options) { o.Protocol = proto })
	p := fmt.Sprintf("p%d:", proto)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Set(ctx, p+"s", "v", 0).Err())
	if v := c.Get(ctx, p+"s").Val(); v != "v" {
		t.Fatalf("GET = %q", v)
	}
	if err := c.Get(ctx, p+"missing").Err(); err != redis.Nil {
		t.Fatalf("GET of a missing key: %v, want redis.Nil", err)
	}
	must(c.HSet(ctx, p+"h", "a", "1", "b", "2").Err())
	if m := c.HGetAll(ctx, p+"h").Val(); len(m) != 2 || m["a"] != "1" {
		t.Fatalf("HGETALL = %v", m)
	}
	// RL.* on the same connections.
	must(c.Do(ctx, "RL.SETRATE", p+"lim", 2, "1s").Err())
	for i, want := range []int64{1, 1, 0} {
		v, err := c.Do(ctx, "RL.ACQUIRE", p+"lim").Int64Slice()
		must(err)
		if v[0] != want {
			t.Fatalf("RL.ACQUIRE #%d = %v", i, v)
		}
	}
	// BLPOP waits on its own connection while others go on.
	popped := make(chan []string, 1)
	go func() { popped <- c.BLPop(ctx, 10*time.Second, p+"list").Val() }()
	if err := eventually(5*time.Second, func() error {
		if n := pinned(t, h); n == "0" {
			return fmt.Errorf("BLPOP not pinned yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	must(c.Set(ctx, p+"during", "1", 0).Err()) // not held up by the BLPOP
	must(c.RPush(ctx, p+"list", "x").Err())
	if v := <-popped; len(v) != 2 || v[1] != "x" {
		t.Fatalf("BLPOP = %v", v)
	}
	// WATCH, then a transaction that another client's write aborts.
	must(c.Set(ctx, p+"w", "1", 0).Err())
	err := c.Watch(ctx, func(tx *redis.Tx) error {
		if err := c.Set(ctx, p+"w", "2", 0).Err(); err != nil { // another connection
			return err
		}
		_, err := tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Set(ctx, p+"w", "3", 0)
			return nil
		})
		return err
	}, p+"w")
	if err != redis.TxFailedErr {
		t.Fatalf("WATCH then a write from elsewhere: %v, want the transaction to fail", err)
	}
	if v := c.Get(ctx, p+"w").Val(); v != "2" {
		t.Fatalf("after the failed transaction %s = %q, want 2", p+"w", v)
	}
	cmds, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Incr(ctx, p+"n")
		pipe.Incr(ctx, p+"n")
		return nil
	})
	must(err)
	if n := cmds[1].(*redis.IntCmd).Val(); n != 2 {
		t.Fatalf("MULTI INCR INCR EXEC: second INCR = %d", n)
	}
	// Pub/Sub: messages relayed as they come, then back to normal.
	sub := c.Subscribe(ctx, p+"chan")
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	must(c.Publish(ctx, p+"chan", "hello").Err())
	msg, err := sub.ReceiveMessage(ctx)
	must(err)
	if msg.Channel != p+"chan" || msg.Payload != "hello" {
		t.Fatalf("message = %+v", msg)
	}
	must(sub.Close())
	// SCAN and EVAL.
	var keys []string
	iter := c.Scan(ctx, 0, p+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	must(iter.Err())
	if len(keys) < 4 {
		t.Fatalf("SCAN %s* = %v", p, keys)
	}
	v, err := c.Eval(ctx, "return redis.call('GET', KEYS[1]) .. ARGV[1]", []string{p + "s"}, "!").Text()
	must(err)
	if v != "v!" {
		t.Fatalf("EVAL = %q", v)
	}
}

// TestPassthroughReplyTypes checks that every reply type reaches the
// client as the backend wrote it, in RESP2 and RESP3, interleaved in
// order with rlproxy's own replies in one pipeline.
func TestPassthroughReplyTypes(t *testing.T) {
	h := start(t, passthroughOn)
	for _, proto := range []string{"2", "3"} {
		c := h.raw(t)
		c.Send("HELLO", proto)
		for line := c.Line(); line != "*0"; line = c.Line() { // modules: the last field
		}
		k := "rt" + proto + ":"
		c.Send("RPUSH", k+"l", "a", "b")
		c.Send("HSET", k+"h", "f", "v")
		c.Send("SADD", k+"s", "m")
		c.Send("ZADD", k+"z", "1.5", "m")
		for _, args := range [][]string{
			{"HGETALL", k + "h"}, {"PING"}, {"GET", k + "none"}, {"SMEMBERS", k + "s"},
			{"ZSCORE", k + "z", "m"}, {"RL.GETRATE", k + "nolimiter"}, {"LRANGE", k + "l", "0", "-1"},
		} {
			c.Send(args...)
		}
		for _, want := range []string{":2", ":1", ":1", ":1"} {
			if got := c.Line(); got != want {
				t.Fatalf("RESP%s: write reply %q, want %q", proto, got, want)
			}
		}
		var want []string
		if proto == "3" {
			want = []string{"%1", "$1", "f", "$1", "v", "+PONG", "_", "~1", "$1", "m", ",1.5", "_", "*2", "$1", "a", "$1", "b"}
		} else {
			want = []string{"*2", "$1", "f", "$1", "v", "+PONG", "$-1", "*1", "$1", "m", "$3", "1.5", "$-1", "*2", "$1", "a", "$1", "b"}
		}
		for i, w := range want {
			if got := c.Line(); got != w {
				t.Fatalf("RESP%s: line %d = %q, want %q", proto, i, got, w)
			}
		}
	}
}

// TestPassthroughSafety: rlproxy's own keys, the refused commands, the
// users' categories and key patterns.
func TestPassthroughSafety(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) {
		c.RequirePass = "adminpw"
		c.Users = []config.User{
			{Name: "app", Password: "apppw", Commands: []string{"acquire", "redis"}, Keys: []string{"app:*"}},
			{Name: "limited", Password: "lpw", Commands: []string{"acquire"}},
		}
	})
	pre := h.raw(t)
	if got := pre.Call("GET", "app:x"); got != "-NOAUTH Authentication required." {
		t.Fatalf("GET before AUTH = %q", got)
	}
	h.Do(t, "RL.SETRATE", "k", 5, "1s").Equal(int64(1))
	h.Do(t, "GET", "rlproxy:anything").Err("NOPERM No permissions to access a key")
	h.Do(t, "MSET", "a", "1", "rlproxy:x", "2").Err("NOPERM No permissions to access a key")
	h.Do(t, "EVAL", "return 1", 1, "rlproxy:x").Err("NOPERM No permissions to access a key")
	h.Do(t, "EVAL", "return 1", 0, "rlproxy:x").Equal(int64(1)) // an argument, not a key
	h.Do(t, "XREAD", "STREAMS", "s", "rlproxy:s", "0", "0").Err("NOPERM No permissions to access a key")
	// SORT reads keys named by a pattern and the elements: refused, as
	// Redis refuses it to a user without every key, when they may be
	// rlproxy's; allowed otherwise.
	h.Do(t, "RPUSH", "ids", "2", "1").Equal(int64(2))
	h.Do(t, "MSET", "w_1", "1", "w_2", "2", "o_1", "one", "o_2", "two").Equal("OK")
	h.Do(t, "SORT", "ids", "BY", "w_*", "GET", "#", "GET", "o_*").Equal([]any{"1", "one", "2", "two"})
	h.Do(t, "SORT", "ids", "BY", "nosort", "GET", "rlproxy:{k:0}*").Err("ERR GET option of SORT denied due to insufficient ACL permissions.")
	h.Do(t, "SORT_RO", "ids", "BY", "*->f").Err("ERR BY option of SORT denied due to insufficient ACL permissions.")
	h.Do(t, "MONITOR").Err("ERR 'monitor' is not supported by rlproxy")
	h.Do(t, "shutdown", "NOSAVE").Err("ERR 'shutdown' is not supported by rlproxy")

	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "SET", "app:1", "v").Equal("OK")
	app.Do(t, "GET", "app:1").Equal("v")
	app.Do(t, "GET", "other").Err("NOPERM No permissions to access a key")
	app.Do(t, "RPUSH", "app:ids", "1").Equal(int64(1))
	app.Do(t, "SORT", "app:ids").Equal([]any{"1"})
	app.Do(t, "SORT", "app:ids", "GET", "#").Err("ERR GET option of SORT denied due to insufficient ACL permissions.")
	app.Do(t, "FLUSHALL").Err("NOPERM User app has no permissions to run the 'flushall' command")
	app.Do(t, "SWAPDB", "0", "1").Err("NOPERM User app has no permissions to run the 'swapdb' command")
	app.Do(t, "RL.ACQUIRE", "k").Acquire()

	limited := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "limited", "lpw" })
	limited.Do(t, "GET", "app:1").Err("NOPERM User limited has no permissions to run the 'get' command")
	limited.Do(t, "RL.ACQUIRE", "k").Acquire()
	h.Do(t, "FLUSHDB").Equal("OK") // the admin may
}

// Redis's @admin commands (its users, persistence, modules, diagnostics)
// are for rlproxy's admins: a user of the redis category gets none of
// them to Redis (ACL SETUSER could lock rlproxy out of its backend), and
// an admin does. The list comes from the backend's own COMMAND.
func TestPassthroughAdminCommands(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) {
		c.RequirePass = "adminpw"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"acquire", "redis"}}}
	})
	cmds, err := h.backend.Client(t).Do(context.Background(), "COMMAND").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var admin [][]any // each as a call: its name, subcommand, an argument
	var walk func(entries []any)
	walk = func(entries []any) {
		for _, e := range entries {
			c := e.([]any)
			for _, cat := range c[6].([]any) {
				if cat == "@admin" && c[0] != "config|get" { // the redis category's (TestGatewayConfig)
					name, sub, _ := strings.Cut(c[0].(string), "|")
					call := []any{name}
					if sub != "" {
						call = append(call, sub)
					}
					admin = append(admin, append(call, "x"))
				}
			}
			if len(c) > 9 {
				walk(c[9].([]any))
			}
		}
	}
	walk(cmds)
	if len(admin) < 40 {
		t.Fatalf("Redis lists %d @admin commands, want the 60 or so of Redis 7", len(admin))
	}
	forwarded := func() string { return shardInfo(t, h, "passthrough")["forwarded"] }
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "GET", "k").Nil()
	before := forwarded()
	// Each is refused, or answered by rlproxy itself (ROLE): none
	// reaches Redis.
	for _, call := range admin {
		app.Do(t, call...)
	}
	if after := forwarded(); after != before {
		t.Errorf("a redis-category user's @admin commands: forwarded went from %s to %s, want none forwarded", before, after)
	}
	app.Do(t, "ACL", "SETUSER", "evil", "on").Err("NOPERM User app has no permissions to run the 'acl|setuser' command")
	app.Do(t, "SAVE").Err("NOPERM User app has no permissions to run the 'save' command")
	app.Do(t, "ACL", "WHOAMI").Equal("default") // not @admin
	before = forwarded()
	h.Do(t, "LASTSAVE").Int() // an admin's goes to Redis
	if after := forwarded(); after == before {
		t.Errorf("an admin's LASTSAVE: forwarded stayed at %s", after)
	}
}

// TestPassthroughMultiRefusesLimiters: an RL.* command inside MULTI is
// refused, the transaction stays open and EXEC aborts it.
func TestPassthroughMultiRefusesLimiters(t *testing.T) {
	h := start(t, passthroughOn)
	h.Do(t, "RL.SETRATE", "k", 5, "1s").Equal(int64(1))
	c := h.raw(t)
	c.Steps([][2]string{
		{"MULTI", "+OK"},
		{"SET m 1", "+QUEUED"},
		{"RL.ACQUIRE k", "-ERR RL.ACQUIRE is not allowed inside MULTI"},
		{"INCR m", "+QUEUED"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors."},
		{"GET m", "$-1"},
		{"RL.AVAILABLE k", ":5"},
	})
	waitUnpinned(t, h)
}

// TestPassthroughMaxPinned: pinned connections are bounded, and one goes
// back when its client leaves.
func TestPassthroughMaxPinned(t *testing.T) {
	h := start(t, passthroughOn, func(c *config.Config) { c.PassthroughMaxPinned = 1 })
	blocked := h.raw(t)
	blocked.Send("BLPOP", "mp:l", "0")
	waitPinned(t, h, "1")
	h.Do(t, "BLPOP", "mp:other", "1").Err("ERR max number of pinned connections reached")
	h.Do(t, "GET", "mp:x").Nil() // shared connections are not bounded by it
	blocked.c.Close()
	waitUnpinned(t, h)
	h.Do(t, "BLPOP", "mp:other", "0.01").Nil()
}

// TestPassthroughBackendBreaks kills the proxy's backend connections
// (CLIENT KILL TYPE normal, then pubsub) under a pipelined load from many clients:
// every reply is its own request's, or an error; never another's. A
// subscribed client whose connection breaks gets an error and is closed.
func TestPassthroughBackendBreaks(t *testing.T) {
	srv := redistest.StartServer(t)
	h := startProxy(t, srv, passthroughOn, func(c *config.Config) { c.Backends = []string{srv.URL()} })
	sub := h.raw(t)
	sub.Send("SUBSCRIBE", "bb:c")
	for range 6 { // *3 $9 subscribe $4 bb:c :1
		sub.Line()
	}
	const clients, rounds, depth = 16, 30, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var broken, good int
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h.raw(t)
			for r := range rounds {
				for d := range depth {
					c.Send("ECHO_IS_OURS_NOT", "") // an unknown command goes to Redis too
					c.Send("SET", fmt.Sprintf("bb:%d", i), fmt.Sprintf("%d-%d-%d", i, r, d), "GET")
				}
				for range depth {
					if got := c.Line(); !strings.HasPrefix(got, "-ERR unknown command") && !strings.HasPrefix(got, "-ERR passthrough backend connection broken") {
						errs <- fmt.Errorf("client %d: unknown command answered %q", i, got)
						return
					}
					got := c.Line()
					if strings.HasPrefix(got, "-ERR passthrough backend connection broken") {
						mu.Lock()
						broken++
						mu.Unlock()
						continue
					}
					if strings.HasPrefix(got, "$") && got != "$-1" {
						got = c.Line()
						// The previous value written by this client.
						if !strings.HasPrefix(got, fmt.Sprintf("%d-", i)) {
							errs <- fmt.Errorf("client %d round %d: SET ... GET answered %q (another client's value)", i, r, got)
							return
						}
					}
					mu.Lock()
					good++
					mu.Unlock()
				}
			}
		}()
	}
	killer := srv.Client(t)
	for range 5 {
		time.Sleep(20 * time.Millisecond)
		killer.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	}
	wg.Wait()
	killer.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d replies right, %d answered broken connection", good, broken)
	if good == 0 {
		t.Fatal("no reply came through")
	}
	// The subscriber's pinned connection was killed: an error, then EOF.
	_ = sub.c.SetReadDeadline(time.Now().Add(callTimeout))
	line, _ := sub.r.ReadString('\n')
	if !strings.HasPrefix(line, "-ERR passthrough backend connection broken") {
		t.Fatalf("subscriber got %q, want the broken connection's error", line)
	}
	if _, err := sub.r.ReadString('\n'); err == nil {
		t.Fatal("the subscriber's connection stayed open")
	}
	h.Do(t, "SET", "bb:after", "1").Equal("OK") // new backend connections
	waitUnpinned(t, h)
}

// TestPassthroughOff: without passthrough a Redis command is unknown, as
// before.
func TestPassthroughOff(t *testing.T) {
	h := start(t)
	h.Do(t, "GET", "k").ErrContains("unknown command 'GET'")
	h.Do(t, "SELECT", "1").Err("ERR DB index is out of range")
}

// TestPassthroughNativeCellKeys: with passthrough on, GCRA, CL.THROTTLE
// and RL.THROTTLE keep their state in the key as named, as Redis 8.8 and
// redis-cell do.
func TestPassthroughNativeCellKeys(t *testing.T) {
	h := start(t, passthroughOn)
	for _, cmd := range []string{"CL.THROTTLE", "RL.THROTTLE", "GCRA"} {
		k := "native:" + cmd
		first := h.Do(t, cmd, k, 1, 10, 60).OK().([]any)
		h.Do(t, cmd, k, 1, 10, 60)
		h.Do(t, "EXISTS", k).Equal(int64(1))
		if ttl := h.Do(t, "PTTL", k).Int(); ttl <= 0 {
			t.Fatalf("%s: PTTL %s = %d, want the state's TTL", cmd, k, ttl)
		}
		h.Do(t, "DEL", k).Equal(int64(1))
		again := h.Do(t, cmd, k, 1, 10, 60).OK().([]any)
		if again[2] != first[2] {
			t.Fatalf("%s after DEL: remaining %v, want %v (a fresh limit)", cmd, again[2], first[2])
		}
		h.Do(t, "HSET", k+":hash", "f", "v").Equal(int64(1))
		h.Do(t, cmd, k+":hash", 1, 10, 60).Err("WRONGTYPE Operation against a key holding the wrong kind of value")
	}
}

// TestPassthroughConnectionState: SELECT of another database pins the
// client for good (RL.* unaffected); CLIENT TRACKING ON relays
// invalidations as RESP3 pushes.
func TestPassthroughConnectionState(t *testing.T) {
	h := start(t, passthroughOn)
	h.Do(t, "RL.SETRATE", "cs", 5, "1s").Equal(int64(1))
	db := h.raw(t)
	db.Steps([][2]string{
		{"SELECT 0", "+OK"},
		{"SELECT 3", "+OK"},
		{"SET cs:x in3", "+OK"},
		{"RL.AVAILABLE cs", ":5"},
		{"SELECT 0", "+OK"},
		{"GET cs:x", "$-1"},
		{"SELECT 3", "+OK"},
		{"GET cs:x", "$3"},
	})
	db.Line()
	h.Do(t, "GET", "cs:x").Nil() // other clients stay on database 0
	if n := pinned(t, h); n != "1" {
		t.Fatalf("pinned_connections:%s after SELECT 3, want 1", n)
	}

	tr := h.raw(t)
	tr.Send("HELLO", "3")
	for line := tr.Line(); line != "*0"; line = tr.Line() {
	}
	tr.Steps([][2]string{
		{"CLIENT TRACKING ON", "+OK"},
		{"SET cs:t 1", "+OK"},
		{"GET cs:t", "$1"},
	})
	tr.Line()
	h.Do(t, "SET", "cs:t", "2").Equal("OK") // another client changes the key
	for _, want := range []string{">2", "$10", "invalidate", "*1", "$4", "cs:t"} {
		if got := tr.Line(); got != want {
			t.Fatalf("invalidation: %q, want %q", got, want)
		}
	}
	if got := tr.Call("CLIENT", "TRACKING", "OFF"); got != "+OK" {
		t.Fatalf("CLIENT TRACKING OFF = %q", got)
	}
	db.c.Close()
	waitUnpinned(t, h)
}

// TestPassthroughClients runs an application's session through the
// gateway with redis-py and ioredis (RESP2 and RESP3), on a real Redis
// and on the embedded backend (testdata/clients/*/gateway.*), and
// redis-cli as a person types at it.
func TestPassthroughClients(t *testing.T) {
	for _, backend := range []string{"redis", "embedded"} {
		t.Run(backend, func(t *testing.T) {
			var h *harness
			if backend == "redis" {
				h = start(t, passthroughOn)
			} else {
				h = startProxy(t, nil, passthroughOn)
			}
			runGatewaySessions(t, h, false)
			t.Run("redis-cli", func(t *testing.T) {
				stdin := "SET cli:a 1\nGET cli:a\nRL.SETRATE cli 1 1h\nRL.ACQUIRE cli\nHSET cli:h f v\nHGETALL cli:h\nGET rlproxy:x\nMONITOR\nECHO done\n"
				out := h.run(t, "redis-cli", stdin, "--no-raw")
				want := "OK\n\"1\"\n(integer) 1\n1) (integer) 1\n2) (integer) 0\n3) (integer) 0\n4) (integer) 3600000\n(integer) 1\n1) \"f\"\n2) \"v\"\n" +
					"(error) NOPERM No permissions to access a key\n(error) ERR 'monitor' is not supported by rlproxy\n\"done\"\n"
				if out != want {
					t.Fatalf("redis-cli printed:\n%s\nwant:\n%s", out, want)
				}
				// SUBSCRIBE, as redis-cli shows it, until a message comes.
				sub := exec.Command(redistest.LookPath(t, "redis-cli"), "-p", h.port(), "SUBSCRIBE", "cli:chan")
				stdout, err := sub.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := sub.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = sub.Process.Kill(); _ = sub.Wait() }()
				lines := make(chan string, 16)
				go func() {
					sc := bufio.NewScanner(stdout)
					for sc.Scan() {
						lines <- sc.Text()
					}
					close(lines)
				}()
				if err := eventually(5*time.Second, func() error {
					if n := h.Do(t, "PUBLISH", "cli:chan", "hi").Int(); n != 1 {
						return fmt.Errorf("PUBLISH reached %d subscribers", n)
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				var seen []string
				timeout := time.After(5 * time.Second)
				for !strings.HasSuffix(strings.Join(seen, "\n"), "message\ncli:chan\nhi") {
					select {
					case line, ok := <-lines:
						if !ok {
							t.Fatalf("redis-cli SUBSCRIBE ended after %q", seen)
						}
						seen = append(seen, line)
					case <-timeout:
						t.Fatalf("redis-cli SUBSCRIBE printed %q, no message", seen)
					}
				}
			})
		})
	}
}

// runGatewaySessions runs the application sessions of testdata/clients
// (redis-py, ioredis RESP2 and RESP3) through h; on a cluster they expect
// SCAN refused.
func runGatewaySessions(t *testing.T, h *harness, cluster bool) {
	node := nodeChecks(t)
	python := pythonWithRedis(t)
	for i, s := range []struct {
		name, dir string
		cmd       []string
	}{
		{"redis-py", "python", []string{python, "gateway.py", h.port()}},
		{"ioredis RESP2", "node", []string{node, "gateway.mjs", h.port(), "2"}},
		{"ioredis RESP3", "node", []string{node, "gateway.mjs", h.port(), "3"}},
	} {
		t.Run(s.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, s.cmd[0], append(s.cmd[1:], fmt.Sprintf("g%d:", i))...)
			cmd.Dir = filepath.Join("testdata", "clients", s.dir)
			if cluster {
				cmd.Env = append(os.Environ(), "RLPROXY_CLUSTER=1")
			}
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "ok gateway session") {
				t.Fatalf("%s: %v\n%s", strings.Join(s.cmd, " "), err, out)
			}
		})
	}
}

// TestPassthroughCluster: on a Redis Cluster, forwarded commands go to
// the primary of their keys' slot; keys in two slots get Redis's
// CROSSSLOT; keyspace-wide keyless commands are refused; a slot moved
// behind the proxy's back is followed (MOVED).
func TestPassthroughCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	h := startProxy(t, nil, passthroughOn, func(c *config.Config) { c.Cluster = cluster.URLs() })
	cc := cluster.Client(t)
	ctx := context.Background()
	for i := range 50 {
		h.Do(t, "SET", fmt.Sprintf("ck:%d", i), i).Equal("OK")
	}
	for i := range 50 {
		k := fmt.Sprintf("ck:%d", i)
		h.Do(t, "GET", k).Equal(fmt.Sprint(i))
		if v, err := cc.Get(ctx, k).Result(); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("%s on the cluster: %q, %v", k, v, err)
		}
	}
	h.Do(t, "MSET", "{t}a", "1", "{t}b", "2").Equal("OK")
	h.Do(t, "MGET", "{t}a", "{t}b").Equal([]any{"1", "2"})
	h.Do(t, "MSET", "a", "1", "b", "2").Err("CROSSSLOT Keys in request don't hash to the same slot")
	for _, cmd := range []string{"KEYS", "SCAN", "DBSIZE", "RANDOMKEY", "FLUSHDB", "FLUSHALL"} {
		args := []any{cmd}
		if cmd == "KEYS" {
			args = append(args, "*")
		} else if cmd == "SCAN" {
			args = append(args, 0)
		}
		h.Do(t, args...).Err("ERR '" + strings.ToLower(cmd) + "' is not supported by rlproxy in cluster mode")
	}
	h.Do(t, "PUBLISH", "ck:chan", "x").Equal(int64(0)) // keyless: any primary
	sub := h.client(t, nil).Subscribe(ctx, "ck:chan")
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "PUBLISH", "ck:chan", "hello").Equal(int64(1))
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Payload != "hello" {
		t.Fatalf("message: %v, %v", msg, err)
	}
	sub.Close()
	h.Do(t, "EVAL", "return redis.call('GET', KEYS[1])", 1, "ck:1").Equal("1")
	h.Do(t, "SELECT", 1).Err("ERR 'select' is not supported by rlproxy in cluster mode")
	h.Do(t, "CONFIG", "GET", "maxmemory").Err("ERR 'config' is not supported by rlproxy in cluster mode")
	// A transaction runs on the node of its first command's keys.
	gr := h.client(t, nil)
	if err := gr.Watch(ctx, func(tx *redis.Tx) error {
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, "{tx}n")
			p.Incr(ctx, "{tx}n")
			return nil
		})
		return err
	}, "{tx}n"); err != nil {
		t.Fatalf("WATCH MULTI INCR INCR EXEC: %v", err)
	}
	h.Do(t, "GET", "{tx}n").Equal("2")
	tx := h.raw(t)
	tx.Steps([][2]string{
		{"MULTI", "+OK"}, {"EXEC", "*0"},
		{"MULTI", "+OK"}, {"RL.ACQUIRE ck", "-ERR RL.ACQUIRE is not allowed inside MULTI"}, {"EXEC", "-EXECABORT Transaction discarded because of previous errors."},
		{"MULTI", "+OK"}, {"SET {tx}m 1", "+QUEUED"}, {"DISCARD", "+OK"}, {"GET {tx}m", "$-1"},
	})
	h.Do(t, "RL.SETRATE", "ck", 2, "1s").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "ck").Granted(1)
	c := h.raw(t)
	if got := c.Call("BLPOP", "ck:list", "0.01"); got != "*-1" {
		t.Fatalf("BLPOP on its key's node = %q", got)
	}
	t.Run("applications", func(t *testing.T) { runGatewaySessions(t, h, true) })

	// Move ck:0's slot to another primary; the proxy still thinks it is
	// where it was, gets MOVED and follows it.
	key := "ck:0"
	slot := redistest.KeySlot(key)
	from, err := cc.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var to *redis.Client
	for _, n := range cluster.Nodes {
		if n.Addr() != from.Options().Addr {
			to = n.Client(t)
			break
		}
	}
	toID, err := to.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	fromID, err := from.ClusterMyID(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must(from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	host, port, _ := strings.Cut(to.Options().Addr, ":")
	inSlot, err := from.ClusterGetKeysInSlot(ctx, slot, 1000).Result() // the limiter's keys may share it
	must(err)
	must(from.Do(ctx, append([]any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}, toAny(inSlot)...)...).Err())
	h.Do(t, "GET", key).Equal("0") // mid-migration: ASK, then ASKING + GET on the new node
	for _, n := range cluster.Nodes {
		must(n.Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	}
	h.Do(t, "GET", key).Equal("0")
	h.Do(t, "SET", key, "moved").Equal("OK")
	if v, err := to.Get(ctx, key).Result(); err != nil || v != "moved" {
		t.Fatalf("%s on its new node: %q, %v", key, v, err)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
