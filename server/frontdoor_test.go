package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/commands"
	"github.com/rlproxy/rlproxy/config"
)

// limiterTable stands in for the limiter commands: the names, categories
// and key positions the server's checks read, with handlers that only
// echo the key.
func limiterTable() []commands.Command {
	echoKey := func(_ context.Context, _ commands.Caller, args []string) (any, error) { return args[1], nil }
	var cmds []commands.Command
	for _, name := range []string{"RL.ACQUIRE", "RL.SETRATE", "RL.DEL", "RL.GETRATE", "CL.THROTTLE"} {
		cmds = append(cmds, commands.Command{Name: name, Arity: -2, KeyPos: 1, Group: "ratelimit", Handler: echoKey})
	}
	return cmds
}

// startFront serves o with the test and limiter commands until the test
// ends; the log goes to the returned buffer.
func startFront(t *testing.T, o Options) (*Server, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	o.Listen = "127.0.0.1:0"
	o.Log = slog.New(slog.NewTextHandler(logs, nil))
	s := New(o, testTable(nil), limiterTable())
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		<-served
	})
	return s, logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

const noauth = "-NOAUTH Authentication required.\r\n"

// Before AUTH a client gets Redis's limits: a header over them is
// answered and the connection closed without the body being read.
func TestPreAuthLimits(t *testing.T) {
	s, _ := startFront(t, Options{RequirePass: "pw"})
	multi := "-ERR Protocol error: unauthenticated multibulk length\r\n"
	bulkErr := "-ERR Protocol error: unauthenticated bulk length\r\n"
	for _, tc := range []struct {
		name, send string
		want       []string
	}{
		{"11 arguments", "*11\r\n", []string{multi}},
		{"a count split over writes", "*1" + "00000\r\n", []string{multi}},
		{"a 16 KiB + 1 bulk", "*1\r\n$16385\r\n", []string{bulkErr}},
		{"a 100 MB bulk, body never sent", "*2\r\n$4\r\nECHO\r\n$104857600\r\n", []string{bulkErr}},
		{"after a good command", encode("PING") + "*1000000\r\n", []string{noauth, multi}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, s)
			c.send(tc.send)
			for _, want := range tc.want {
				if got := c.reply(); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
			}
			c.closed()
		})
	}
	// At the limits: answered (NOAUTH), the connection stays.
	c := dial(t, s)
	args := append([]string{"T.ECHO"}, strings.Split("123456789", "")...)
	if got := c.do(args...); got != noauth {
		t.Errorf("10 arguments: %q", got)
	}
	if got := c.do("ECHO", strings.Repeat("x", 16384)); got != noauth {
		t.Errorf("a 16 KiB argument: %q", got)
	}
	// AUTH then, in the same write, a command past the pre-AUTH limits:
	// judged after the AUTH, as Redis does.
	big := strings.Repeat("y", 100000)
	c.send(encode("AUTH", "pw") + encode("ECHO", big) + encode("T.ECHO", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"))
	if got := c.reply(); got != "+OK\r\n" {
		t.Fatalf("AUTH: %q", got)
	}
	if got := c.reply(); got != bulk(big) {
		t.Errorf("ECHO of 100 KB after AUTH: %.40q", got)
	}
	if got := c.reply(); !strings.HasPrefix(got, "*11\r\n") {
		t.Errorf("11 arguments after AUTH: %q", got)
	}
	// RESET makes the connection unauthenticated again: the limits are back.
	c.do("RESET")
	c.send("*11\r\n")
	if got := c.reply(); got != multi {
		t.Errorf("11 arguments after RESET: %q", got)
	}
}

// Without a password there is no pre-AUTH limit.
func TestNoPreAuthLimitsWithoutPassword(t *testing.T) {
	s, _ := startFront(t, Options{})
	c := dial(t, s)
	if got := c.do("ECHO", strings.Repeat("x", 20000)); len(got) != 20000+len("$20000\r\n\r\n") {
		t.Errorf("ECHO of 20 KB: %.40q", got)
	}
}

func TestMaxRequestBytes(t *testing.T) {
	s, _ := startFront(t, Options{Limits: Limits{MaxClients: 10, MaxRequestBytes: 65536, MaxNameLength: 512}})
	tooBig := "-ERR Protocol error: request is larger than max_request_bytes (65536 bytes)\r\n"
	c := dial(t, s)
	fits := strings.Repeat("z", 65536-len(encode("ECHO", strings.Repeat("z", 60000)))+60000)
	if got := c.do("ECHO", fits); got != bulk(fits) {
		t.Errorf("a command of exactly 65536 bytes: %.40q", got)
	}
	if len(encode("ECHO", fits)) != 65536 {
		t.Fatalf("the test's command is %d bytes", len(encode("ECHO", fits)))
	}
	c.send(encode("ECHO", fits+"z")) // one byte more: refused at its header
	if got := c.reply(); got != tooBig {
		t.Errorf("65537 bytes: %.60q", got)
	}
	c.closed()
	for _, send := range []string{
		"*2\r\n$4\r\nECHO\r\n$1000000\r\n", // the body is never read
		"*20000\r\n",                       // 20000 arguments take more than 65536 bytes
		"*3\r\n$4\r\nECHO\r\n$60000\r\n" + strings.Repeat("a", 60000) + "\r\n$6000\r\n",
	} {
		c := dial(t, s)
		c.send(send)
		if got := c.reply(); got != tooBig {
			t.Errorf("%.30q: %q", send, got)
		}
		c.closed()
	}
}

func TestMaxClients(t *testing.T) {
	s, _ := startFront(t, Options{Limits: Limits{MaxClients: 2, MaxRequestBytes: 1 << 20, MaxNameLength: 512}})
	a, b := dial(t, s), dial(t, s)
	a.do("PING")
	b.do("PING")
	c := dial(t, s)
	if got := c.reply(); got != "-ERR max number of clients reached\r\n" {
		t.Errorf("third client: %q", got)
	}
	c.closed()
	if got := a.do("INFO", "stats"); !strings.Contains(got, "rejected_connections:1\r\n") {
		t.Errorf("INFO stats: %q", got)
	}
	b.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d := dial(t, s)
		d.send(encode("PING"))
		if got := d.reply(); got == "+PONG\r\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("a closed client's slot is not given back: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An idle client is closed after timeout; one waiting for a reply is not.
func TestIdleTimeout(t *testing.T) {
	release := make(chan struct{})
	logs := &syncBuffer{}
	s := New(Options{Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(logs, nil)),
		Limits: Limits{MaxClients: 10, Timeout: 300 * time.Millisecond, MaxRequestBytes: 1 << 20, MaxNameLength: 512}}, testTable(release))
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Close() })

	idle := dial(t, s)
	idle.do("PING")
	waitingAsync, waitingSync := dial(t, s), dial(t, s)
	waitingAsync.send(encode("T.ASYNC"))
	<-asyncStarted
	waitingSync.send(encode("T.WAIT"))
	start := time.Now()
	idle.closed()
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("closed after %v, want about 300ms", d)
	}
	time.Sleep(600 * time.Millisecond) // twice the timeout, waiting
	close(release)
	if got := waitingAsync.reply(); got != "+LATER\r\n" {
		t.Errorf("async waiter: %q", got)
	}
	if got := waitingSync.reply(); got != "+RELEASED\r\n" {
		t.Errorf("sync waiter: %q", got)
	}
	// Reload turns the timeout off, also for a connection already open
	// and idle.
	held := dial(t, s)
	held.do("PING")
	if err := s.Reload(Options{Limits: Limits{MaxClients: 10, MaxRequestBytes: 1 << 20, MaxNameLength: 512}}); err != nil {
		t.Fatal(err)
	}
	c := dial(t, s)
	c.do("PING")
	time.Sleep(500 * time.Millisecond)
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING after 500ms idle with timeout 0: %q", got)
	}
	if got := held.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING on a connection idle since before the reload: %q", got)
	}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestUsers(t *testing.T) {
	s, _ := startFront(t, Options{RequirePass: "root", Users: []config.User{
		{Name: "app", Password: "apppw", Commands: []string{"acquire"}, Limiters: []string{"api:*", "login:?"}},
		{Name: "ops", PasswordSHA256: sha("opspw"), Commands: []string{"admin"}},
		{Name: "all", Password: "allpw", Commands: []string{"acquire"}},
	}})
	const wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	c := dial(t, s)
	for _, st := range []struct {
		args []string
		want string
	}{
		{[]string{"AUTH", "app", "wrong"}, wrongpass},
		{[]string{"AUTH", "apppw"}, wrongpass}, // that is the default user's password: not this one
		{[]string{"AUTH", "nobody", "apppw"}, wrongpass},
		{[]string{"RL.ACQUIRE", "api:x"}, noauth},
		{[]string{"AUTH", "app", "apppw"}, "+OK\r\n"},
		{[]string{"RL.ACQUIRE", "api:x"}, bulk("api:x")},
		{[]string{"rl.acquire", "login:1"}, bulk("login:1")},
		{[]string{"RL.GETRATE", "api:"}, bulk("api:")},
		{[]string{"CL.THROTTLE", "api:y", "1", "2", "3"}, bulk("api:y")},
		{[]string{"RL.ACQUIRE", "other"}, "-NOPERM No permissions to access the 'other' limiter\r\n"},
		{[]string{"RL.ACQUIRE", "login:12"}, "-NOPERM No permissions to access the 'login:12' limiter\r\n"},
		{[]string{"RL.SETRATE", "api:x", "1", "1s"}, "-NOPERM User app has no permissions to run the 'rl.setrate' command\r\n"},
		{[]string{"RL.DEL", "api:x"}, "-NOPERM User app has no permissions to run the 'rl.del' command\r\n"},
		{[]string{"T.ECHO", "x"}, "-NOPERM User app has no permissions to run the 't.echo' command\r\n"},
		{[]string{"CLIENT", "LIST"}, "-NOPERM User app has no permissions to run the 'client|list' command\r\n"},
		{[]string{"PING"}, "+PONG\r\n"},
		{[]string{"CLIENT", "SETNAME", "worker1"}, "+OK\r\n"},
		{[]string{"RL.ACQUIRE", strings.Repeat("n", 513)}, "-ERR limiter name is longer than 512 bytes\r\n"},
		{[]string{"AUTH", "ops", "opspw"}, "+OK\r\n"},
		{[]string{"RL.SETRATE", "other", "1", "1s"}, bulk("other")},
		{[]string{"AUTH", "all", "allpw"}, "+OK\r\n"},
		{[]string{"RL.ACQUIRE", "other"}, bulk("other")},
		{[]string{"AUTH", "default", "root"}, "+OK\r\n"},
		{[]string{"RL.DEL", "other"}, bulk("other")},
	} {
		if got := c.do(st.args...); got != st.want {
			t.Errorf("%.60q:\n got %q\nwant %q", st.args, got, st.want)
		}
	}
	// HELLO 3 AUTH with a user, and a pipelined acquire batch (the batch
	// path checks the same rights).
	c = dial(t, s)
	if got := c.do("HELLO", "3", "AUTH", "app", "apppw"); !strings.HasPrefix(got, "%7\r\n") {
		t.Fatalf("HELLO 3 AUTH app: %q", got)
	}
	c.send(encode("RL.ACQUIRE", "api:a") + encode("RL.ACQUIRE", "nope") + encode("RL.ACQUIRE", "api:b"))
	for _, want := range []string{bulk("api:a"), "-NOPERM No permissions to access the 'nope' limiter\r\n", bulk("api:b")} {
		if got := c.reply(); got != want {
			t.Errorf("pipelined: got %q, want %q", got, want)
		}
	}
	if got := c.do("CLIENT", "INFO"); !strings.Contains(got, " user=app ") {
		t.Errorf("CLIENT INFO: %q", got)
	}
}

// Users change on Reload: a removed user's connections are closed, a
// changed one's rights apply at once.
func TestReloadUsers(t *testing.T) {
	users := []config.User{
		{Name: "app", Password: "apppw", Commands: []string{"acquire"}},
		{Name: "gone", Password: "gonepw", Commands: []string{"admin"}},
	}
	s, _ := startFront(t, Options{Users: users})
	app, gone := dial(t, s), dial(t, s)
	app.do("AUTH", "app", "apppw")
	gone.do("AUTH", "gone", "gonepw")
	if got := app.do("RL.SETRATE", "k", "1", "1s"); !strings.HasPrefix(got, "-NOPERM") {
		t.Fatalf("RL.SETRATE as app: %q", got)
	}
	err := s.Reload(Options{Users: []config.User{{Name: "app", Password: "apppw", Commands: []string{"admin"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := app.do("RL.SETRATE", "k", "1", "1s"); got != bulk("k") {
		t.Errorf("RL.SETRATE as app, now admin: %q", got)
	}
	gone.closed()
}

func TestHelloAllOrNothing(t *testing.T) {
	s, _ := startFront(t, Options{RequirePass: "pw"})
	c := dial(t, s)
	for _, args := range [][]string{
		{"HELLO", "3", "AUTH", "default", "pw", "BOGUS"},
		{"HELLO", "3", "AUTH", "default", "pw", "SETNAME", "bad name"},
		{"HELLO", "3", "AUTH", "default", "pw", "SETNAME", strings.Repeat("n", 513)},
		{"HELLO", "3", "AUTH", "default", "wrong"},
		{"HELLO", "4", "AUTH", "default", "pw"},
		{"HELLO", "3", "AUTH", "default"},
	} {
		if got := c.do(args...); !strings.HasPrefix(got, "-") {
			t.Errorf("%q: %q, want an error", args, got)
		}
		if got := c.do("PING"); got != noauth {
			t.Fatalf("after %q: PING %q, want NOAUTH: the failed HELLO authenticated", args, got)
		}
	}
	c.do("AUTH", "pw")
	c.do("HELLO", "3", "SETNAME", "bad name")
	info := clientFields(t, c.do("CLIENT", "INFO"))
	if info["resp"] != "2" || info["name"] != "" {
		t.Errorf("after a failed HELLO 3 SETNAME: resp=%s name=%s, want 2 and none", info["resp"], info["name"])
	}
}

// Failed AUTHs are counted (INFO auth_failures) and logged at most once a
// second.
func TestAuthFailures(t *testing.T) {
	s, logs := startFront(t, Options{RequirePass: "pw"})
	c := dial(t, s)
	for range 20 {
		c.do("AUTH", "wrong")
	}
	c.do("HELLO", "3", "AUTH", "default", "wrong")
	c.do("AUTH", "pw")
	if got := c.do("INFO", "stats"); !strings.Contains(got, "auth_failures:21\r\n") {
		t.Errorf("INFO stats: %q", got)
	}
	if n := strings.Count(logs.String(), "authentication failed"); n != 1 {
		t.Errorf("%d log lines about failed AUTHs within a second, want 1:\n%s", n, logs.String())
	}
	time.Sleep(1100 * time.Millisecond)
	c.do("AUTH", "wrong")
	if got := logs.String(); strings.Count(got, "authentication failed") != 2 || !strings.Contains(got, "more_failures_since_last_line=20") {
		t.Errorf("the second line must tell the failures it stood for:\n%s", got)
	}
}

func TestNameLength(t *testing.T) {
	s, _ := startFront(t, Options{Limits: Limits{MaxClients: 10, MaxRequestBytes: 1 << 20, MaxNameLength: 8}})
	c := dial(t, s)
	for _, st := range []struct {
		args []string
		want string
	}{
		{[]string{"RL.ACQUIRE", "12345678"}, bulk("12345678")},
		{[]string{"RL.ACQUIRE", "123456789"}, "-ERR limiter name is longer than 8 bytes\r\n"},
		{[]string{"RL.SETRATE", "123456789", "1", "1s"}, "-ERR limiter name is longer than 8 bytes\r\n"},
		{[]string{"CLIENT", "SETNAME", "123456789"}, "-ERR client name is longer than 8 bytes\r\n"},
		{[]string{"HELLO", "3", "SETNAME", "123456789"}, "-ERR client name is longer than 8 bytes\r\n"},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "123456789"}, "-ERR lib-name is longer than 8 bytes\r\n"},
		{[]string{"CLIENT", "SETNAME", "12345678"}, "+OK\r\n"},
	} {
		if got := c.do(st.args...); got != st.want {
			t.Errorf("%q:\n got %q\nwant %q", st.args, got, st.want)
		}
	}
}

// The handshake commands of client libraries' default options, answered
// as Redis 7 answers them (checked against redis-server 7.0).
func TestHandshakeCommands(t *testing.T) {
	s, _ := startFront(t, Options{})
	c := dial(t, s)
	const noCluster = "-ERR This instance has cluster support disabled\r\n"
	for _, st := range []struct {
		args []string
		want string
	}{
		{[]string{"CLIENT", "TRACKING", "on", "OPTIN"}, "+OK\r\n"},
		{[]string{"CLIENT", "CACHING", "yes"}, "+OK\r\n"},
		{[]string{"CLIENT", "GETREDIR"}, ":0\r\n"},
		{[]string{"CLIENT", "TRACKINGINFO"}, "*6\r\n" + bulk("flags") + "*2\r\n" + bulk("on") + bulk("optin") + bulk("redirect") + ":0\r\n" + bulk("prefixes") + "*0\r\n"},
		{[]string{"CLIENT", "TRACKING", "off"}, "+OK\r\n"},
		{[]string{"CLIENT", "CACHING", "yes"}, "-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n"},
		{[]string{"CLIENT", "GETREDIR"}, ":-1\r\n"},
		{[]string{"CLIENT", "TRACKING", "maybe"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"}, "-ERR You can't use both OPTIN and OPTOUT\r\n"},
		{[]string{"CLIENT", "TRACKING", "on", "PREFIX", "a"}, "-ERR PREFIX option requires BCAST mode to be enabled\r\n"},
		{[]string{"CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a", "NOLOOP"}, "+OK\r\n"},
		{[]string{"CLIENT", "TRACKING", "on", "REDIRECT", "999999"}, "-ERR The client ID you want redirect to does not exist\r\n"},
		{[]string{"CLIENT", "NO-EVICT", "on"}, "+OK\r\n"},
		{[]string{"CLIENT", "NO-EVICT", "x"}, "-ERR syntax error\r\n"},
		{[]string{"CLIENT", "NO-TOUCH", "off"}, "+OK\r\n"},
		{[]string{"CLUSTER", "SLOTS"}, noCluster},
		{[]string{"CLUSTER", "SHARDS"}, noCluster},
		{[]string{"CLUSTER", "INFO"}, noCluster},
		{[]string{"CLUSTER"}, "-ERR wrong number of arguments for 'cluster' command\r\n"},
		{[]string{"READONLY"}, noCluster},
		{[]string{"READWRITE"}, noCluster},
		{[]string{"ASKING"}, noCluster},
		{[]string{"ROLE"}, "*3\r\n" + bulk("master") + ":0\r\n*0\r\n"},
	} {
		if got := c.do(st.args...); got != st.want {
			t.Errorf("%q:\n got %q\nwant %q", st.args, got, st.want)
		}
	}
	repl := c.do("INFO", "replication")
	for _, line := range []string{"# Replication\r\n", "role:master\r\n", "connected_slaves:0\r\n", "master_repl_offset:0\r\n"} {
		if !strings.Contains(repl, line) {
			t.Errorf("INFO replication lacks %q: %q", line, repl)
		}
	}
	if got := c.do("INFO", "cluster"); !strings.Contains(got, "cluster_enabled:0\r\n") {
		t.Errorf("INFO cluster: %q", got)
	}
}

// COMMAND DOCS of one name a million times answers it once.
func TestCommandDocsRepeatedNames(t *testing.T) {
	s, _ := startFront(t, Options{})
	c := dial(t, s)
	args := []string{"COMMAND", "DOCS"}
	for range 10000 {
		args = append(args, "echo")
	}
	if got, one := c.do(args...), c.do("COMMAND", "DOCS", "echo"); got != one {
		t.Errorf("COMMAND DOCS echo×10000: %d bytes, want %d", len(got), len(one))
	}
}

var _ = fmt.Sprint
var _ = io.Discard
