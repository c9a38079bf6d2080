package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/redcon"

	"github.com/rlproxy/rlproxy/commands"
)

// These tests run the server on a real loopback socket with a small
// command table of their own (no backend): T.ECHO returns its arguments,
// T.PANIC panics, T.WAIT blocks until the test releases it, T.NIL, T.MAP
// and T.ERR return those replies, T.NAME the caller's connection name,
// T.ASYNC answers a lone call through its batch handler once released.

// asyncStarted hears of every lone T.ASYNC its batch handler takes.
var asyncStarted = make(chan struct{}, 100)

func testTable(release <-chan struct{}) []commands.Command {
	return []commands.Command{
		{Name: "T.ECHO", Arity: -1, Group: "test", Summary: "Returns its arguments.",
			Args: []commands.Arg{{Name: "arg", Type: "string", Optional: true, Multiple: true}},
			Handler: func(_ context.Context, _ commands.Caller, args []string) (any, error) {
				out := []any{}
				for _, a := range args[1:] {
					out = append(out, a)
				}
				return out, nil
			}},
		{Name: "T.PANIC", Arity: 1, Group: "test", Summary: "Panics (pipelined ones as a batch).",
			Handler: func(context.Context, commands.Caller, []string) (any, error) { panic("boom") },
			Batch:   func(context.Context, commands.Caller, [][]string, func(int, any)) { panic("batch boom") }},
		{Name: "T.WAIT", Arity: 1, Group: "test", Summary: "Waits for the test.",
			Handler: func(ctx context.Context, _ commands.Caller, _ []string) (any, error) {
				select {
				case <-release:
					return commands.Status("RELEASED"), nil
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}},
		{Name: "T.NIL", Arity: 1, Group: "test", Summary: "Returns nil.",
			Handler: func(context.Context, commands.Caller, []string) (any, error) { return nil, nil }},
		{Name: "T.MAP", Arity: 1, Group: "test", Summary: "Returns a map.",
			Handler: func(context.Context, commands.Caller, []string) (any, error) {
				return commands.Map{"a", int64(1), "b", "two"}, nil
			}},
		{Name: "T.ERR", Arity: 2, Group: "test", Summary: "Returns its argument as an error.",
			Handler: func(_ context.Context, _ commands.Caller, args []string) (any, error) {
				return nil, errors.New(args[1])
			}},
		{Name: "T.ASYNC", Arity: -1, Group: "test", Summary: "Answers LATER once released; SYNC when pipelined or asked to.",
			Handler: func(context.Context, commands.Caller, []string) (any, error) { return commands.Status("SYNC"), nil },
			Batch: func(_ context.Context, _ commands.Caller, calls [][]string, reply func(int, any)) {
				args := calls[0]
				switch {
				case len(calls) > 1 || len(args) > 1 && args[1] == "sync":
					for i := range calls {
						reply(i, commands.Status("SYNC"))
					}
					return
				case len(args) > 1 && args[1] == "panic":
					reply(0, commands.Status("BEFORE"))
					panic("async boom")
				}
				asyncStarted <- struct{}{}
				go func() {
					<-release
					reply(0, commands.Status("LATER"))
				}()
			}},
		{Name: "T.NAME", Arity: 1, Group: "test", Summary: "Returns the caller's name.",
			Handler: func(_ context.Context, c commands.Caller, _ []string) (any, error) { return c.Name(), nil }},
	}
}

// startServer serves o (on 127.0.0.1:0) with the test commands until the
// test ends. Closing release lets T.WAIT calls return.
func startServer(t *testing.T, o Options, release <-chan struct{}) *Server {
	t.Helper()
	o.Listen = "127.0.0.1:0"
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Version == "" {
		o.Version = "test"
	}
	s := New(o, testTable(release))
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		s.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return s
}

// raw is a plain TCP client that sends bytes and reads whole replies.
type raw struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, s *Server) *raw {
	t.Helper()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &raw{t: t, c: c, r: bufio.NewReader(c)}
}

func (r *raw) send(s string) {
	r.t.Helper()
	if _, err := r.c.Write([]byte(s)); err != nil {
		r.t.Fatal(err)
	}
}

// reply reads one whole reply and returns its bytes.
func (r *raw) reply() string {
	r.t.Helper()
	s, err := readReply(r.r)
	if err != nil {
		r.t.Fatalf("reading a reply: %v (got %q)", err, s)
	}
	return s
}

// do sends a command as a RESP array and returns its reply.
func (r *raw) do(args ...string) string {
	r.t.Helper()
	r.send(encode(args...))
	return r.reply()
}

// closed asserts the server closed the connection.
func (r *raw) closed() {
	r.t.Helper()
	if b, err := r.r.ReadByte(); err == nil {
		rest, _ := r.r.Peek(r.r.Buffered())
		r.t.Fatalf("connection still open: read %q", string(b)+string(rest))
	}
}

func encode(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return line, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return line, fmt.Errorf("bad reply line %q", line)
	}
	n, _ := strconv.Atoi(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':', '_', '#', ',':
		return line, nil
	case '$':
		if n < 0 {
			return line, nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return line, err
		}
		return line + string(body), nil
	case '*', '%':
		if line[0] == '%' {
			n *= 2
		}
		for i := 0; i < n; i++ {
			e, err := readReply(r)
			line += e
			if err != nil {
				return line, err
			}
		}
		return line, nil
	}
	return line, fmt.Errorf("unknown reply type %q", line)
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

func newClient(t *testing.T, s *Server, o *redis.Options) *redis.Client {
	t.Helper()
	o.Addr = s.Addr()
	o.MaxRetries = -1
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestPingEchoQuitInline(t *testing.T) {
	s := startServer(t, Options{}, nil)
	c := dial(t, s)
	steps := []struct{ send, want string }{
		{"PING\r\n", "+PONG\r\n"},
		{"ping\n", "+PONG\r\n"},
		{"  PING   \r\n", "+PONG\r\n"},
		{"\r\n\nPING\r\n", "+PONG\r\n"}, // empty lines are skipped
		{encode("PING"), "+PONG\r\n"},
		{encode("PING", "hello"), bulk("hello")},
		{encode("ping", "a", "b"), "-ERR wrong number of arguments for 'ping' command\r\n"},
		{encode("ECHO", "a\r\nb"), bulk("a\r\nb")},
		{encode("ECHO", ""), bulk("")},
		{encode("echo"), "-ERR wrong number of arguments for 'echo' command\r\n"},
		{"ECHO \"hello world\"\r\n", bulk("hello world")},
		{"ECHO \"a\\nb\"\r\n", bulk("a\nb")},
		{encode("T.ECHO", "x", "", "y z"), "*3\r\n" + bulk("x") + bulk("") + bulk("y z")},
		{"T.ECHO a b\r\n", "*2\r\n" + bulk("a") + bulk("b")},
		{encode("T.NIL"), "$-1\r\n"},
		{encode("T.MAP"), "*4\r\n" + bulk("a") + ":1\r\n" + bulk("b") + bulk("two")},
		{encode("T.ERR", "plain"), "-ERR plain\r\n"},
		{encode("T.ERR", "WRONGTYPE coded"), "-WRONGTYPE coded\r\n"},
		{encode("T.ERR", "SHARDS 4 is more"), "-ERR SHARDS 4 is more\r\n"},
		{encode("T.ERR", "two\r\nlines"), "-ERR two  lines\r\n"},
	}
	for _, st := range steps {
		c.send(st.send)
		if got := c.reply(); got != st.want {
			t.Errorf("%q: got %q, want %q", st.send, got, st.want)
		}
	}
	if got := c.do("QUIT"); got != "+OK\r\n" {
		t.Errorf("QUIT: %q", got)
	}
	c.closed()

	// Inline QUIT, and commands after it in the same write are not run.
	c = dial(t, s)
	c.send("QUIT\r\nPING\r\n")
	if got := c.reply(); got != "+OK\r\n" {
		t.Errorf("QUIT: %q", got)
	}
	c.closed()
}

func TestUnknownCommandAndArity(t *testing.T) {
	s := startServer(t, Options{}, nil)
	c := dial(t, s)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"FOO", "a", "b"}, "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n"},
		{[]string{"foo"}, "-ERR unknown command 'foo', with args beginning with: \r\n"},
		{[]string{"GET", "k\r\nx"}, "-ERR unknown command 'GET', with args beginning with: 'k  x' \r\n"},
		{[]string{""}, "-ERR unknown command '', with args beginning with: \r\n"},
		{[]string{"T.NIL", "extra"}, "-ERR wrong number of arguments for 't.nil' command\r\n"},
		{[]string{"T.ERR"}, "-ERR wrong number of arguments for 't.err' command\r\n"},
		{[]string{"CLIENT"}, "-ERR wrong number of arguments for 'client' command\r\n"},
		{[]string{"CLIENT", "FOO"}, "-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"},
		{[]string{"client", "setname"}, "-ERR wrong number of arguments for 'client|setname' command\r\n"},
		{[]string{"CONFIG", "GET"}, "-ERR wrong number of arguments for 'config|get' command\r\n"},
		{[]string{"SELECT"}, "-ERR wrong number of arguments for 'select' command\r\n"},
	}
	for _, st := range steps {
		if got := c.do(st.args...); got != st.want {
			t.Errorf("%q: got %q, want %q", st.args, got, st.want)
		}
	}
	// A long command line is cut in the error, which stays one line.
	long := strings.Repeat("x", 1000)
	got := c.do("NOPE", long, long, long)
	if !strings.HasPrefix(got, "-ERR unknown command 'NOPE', with args beginning with: 'xxx") ||
		len(got) > 600 || strings.Count(got, "\r\n") != 1 {
		t.Errorf("long unknown command: %q", got)
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING after errors: %q", got)
	}
}

// helloReply is HELLO's reply fields after "proto".
func helloMap(proto int, id int64) string {
	return bulk("server") + bulk("redis") + bulk("version") + bulk("7.0.0") +
		bulk("proto") + fmt.Sprintf(":%d\r\n", proto) + bulk("id") + fmt.Sprintf(":%d\r\n", id) +
		bulk("mode") + bulk("standalone") + bulk("role") + bulk("master") + bulk("modules") + "*0\r\n"
}

func TestHello(t *testing.T) {
	s := startServer(t, Options{}, nil)
	c := dial(t, s)
	id, _ := strconv.ParseInt(strings.TrimSpace(c.do("CLIENT", "ID")[1:]), 10, 64)
	if id <= 0 {
		t.Fatalf("CLIENT ID = %d", id)
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"HELLO"}, "*14\r\n" + helloMap(2, id)},
		{[]string{"CLIENT", "GETNAME"}, "$-1\r\n"},
		{[]string{"HELLO", "3"}, "%7\r\n" + helloMap(3, id)},
		// RESP3 from now on: null is "_", maps are maps.
		{[]string{"CLIENT", "GETNAME"}, "_\r\n"},
		{[]string{"T.NIL"}, "_\r\n"},
		{[]string{"T.MAP"}, "%2\r\n" + bulk("a") + ":1\r\n" + bulk("b") + bulk("two")},
		{[]string{"CONFIG", "GET", "*"}, "%0\r\n"},
		{[]string{"HELLO"}, "%7\r\n" + helloMap(3, id)}, // keeps the protocol
		{[]string{"HELLO", "4"}, "-NOPROTO unsupported protocol version\r\n"},
		{[]string{"HELLO", "1"}, "-NOPROTO unsupported protocol version\r\n"},
		{[]string{"HELLO", "three"}, "-ERR Protocol version is not an integer or out of range\r\n"},
		{[]string{"T.NIL"}, "_\r\n"}, // a failed HELLO changes nothing
		{[]string{"HELLO", "3", "SETNAME", "worker-1"}, "%7\r\n" + helloMap(3, id)},
		{[]string{"CLIENT", "GETNAME"}, bulk("worker-1")},
		{[]string{"T.NAME"}, bulk("worker-1")},
		{[]string{"HELLO", "3", "SETNAME", "bad name"}, "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"},
		{[]string{"HELLO", "3", "SETNAME"}, "-ERR syntax error in HELLO option 'SETNAME'\r\n"},
		{[]string{"HELLO", "3", "FOO"}, "-ERR syntax error in HELLO option 'FOO'\r\n"},
		{[]string{"HELLO", "3", "AUTH", "default"}, "-ERR syntax error in HELLO option 'AUTH'\r\n"},
		{[]string{"CLIENT", "GETNAME"}, bulk("worker-1")},
		{[]string{"HELLO", "2"}, "*14\r\n" + helloMap(2, id)},
		{[]string{"T.NIL"}, "$-1\r\n"},
		{[]string{"T.MAP"}, "*4\r\n" + bulk("a") + ":1\r\n" + bulk("b") + bulk("two")},
	}
	for _, st := range steps {
		if got := c.do(st.args...); got != st.want {
			t.Errorf("%q:\n got %q\nwant %q", st.args, got, st.want)
		}
	}
	// Without a password configured, AUTH with a password alone fails like
	// Redis's, AUTH default <anything> is accepted.
	if got := c.do("AUTH", "pw"); !strings.HasPrefix(got, "-ERR AUTH <password> called without any password configured") {
		t.Errorf("AUTH pw: %q", got)
	}
	if got := c.do("HELLO", "3", "AUTH", "default", "pw"); got != "%7\r\n"+helloMap(3, id) {
		t.Errorf("HELLO 3 AUTH default pw: %q", got)
	}
	// Any other user does not exist (Redis 7: WRONGPASS), and HELLO then
	// changes nothing: the connection stays on RESP3 from the HELLO above.
	const wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	if got := c.do("AUTH", "app", "pw"); got != wrongpass {
		t.Errorf("AUTH app pw: %q", got)
	}
	if got := c.do("HELLO", "2", "AUTH", "app", "pw"); got != wrongpass {
		t.Errorf("HELLO 2 AUTH app pw: %q", got)
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING after failed AUTHs: %q", got)
	}
}

func TestAuth(t *testing.T) {
	s := startServer(t, Options{RequirePass: "s3cret"}, nil)
	c := dial(t, s)
	const noauth = "-NOAUTH Authentication required.\r\n"
	const wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, noauth},
		{[]string{"T.ECHO", "x"}, noauth},
		{[]string{"CLIENT", "SETNAME", "x"}, noauth},
		{[]string{"NOSUCH"}, "-ERR unknown command 'NOSUCH', with args beginning with: \r\n"},
		{[]string{"HELLO", "3"}, "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"},
		{[]string{"AUTH", "wrong"}, wrongpass},
		{[]string{"AUTH", "S3CRET"}, wrongpass},
		{[]string{"AUTH", "admin", "s3cret"}, wrongpass},
		{[]string{"AUTH", "a", "b", "c"}, "-ERR syntax error\r\n"},
		{[]string{"HELLO", "3", "AUTH", "default", "wrong"}, wrongpass},
		{[]string{"PING"}, noauth},
		{[]string{"AUTH", "s3cret"}, "+OK\r\n"},
		{[]string{"PING"}, "+PONG\r\n"},
		{[]string{"AUTH", "default", "s3cret"}, "+OK\r\n"},
		{[]string{"AUTH", "wrong"}, wrongpass},
		{[]string{"PING"}, "+PONG\r\n"}, // a failed AUTH keeps the earlier one
		{[]string{"RESET"}, "+RESET\r\n"},
		{[]string{"PING"}, noauth},
	}
	for _, st := range steps {
		if got := c.do(st.args...); got != st.want {
			t.Errorf("%q:\n got %q\nwant %q", st.args, got, st.want)
		}
	}
	id := strings.TrimSpace(c.do("AUTH", "s3cret")) // re-authenticate
	if id != "+OK" {
		t.Fatalf("AUTH: %q", id)
	}
	if got := c.do("HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "n1"); !strings.HasPrefix(got, "%7\r\n") {
		t.Errorf("HELLO 3 AUTH SETNAME: %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != bulk("n1") {
		t.Errorf("name after HELLO: %q", got)
	}

	// HELLO AUTH authenticates a new connection; QUIT needs no AUTH.
	c = dial(t, s)
	if got := c.do("HELLO", "2", "AUTH", "default", "s3cret"); !strings.HasPrefix(got, "*14\r\n") {
		t.Errorf("HELLO 2 AUTH: %q", got)
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING after HELLO AUTH: %q", got)
	}
	c = dial(t, s)
	if got := c.do("QUIT"); got != "+OK\r\n" {
		t.Errorf("QUIT before AUTH: %q", got)
	}
	c.closed()

	// go-redis, both protocols: with the password, without, with a wrong one.
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		good := newClient(t, s, &redis.Options{Protocol: proto, Password: "s3cret"})
		if err := good.Ping(ctx).Err(); err != nil {
			t.Errorf("RESP%d with the password: %v", proto, err)
		}
		none := newClient(t, s, &redis.Options{Protocol: proto})
		if err := none.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			t.Errorf("RESP%d without a password: %v, want NOAUTH", proto, err)
		}
		bad := newClient(t, s, &redis.Options{Protocol: proto, Password: "nope"})
		if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("RESP%d with a wrong password: %v, want WRONGPASS", proto, err)
		}
	}
}

func TestClientCommands(t *testing.T) {
	s := startServer(t, Options{}, nil)
	c := dial(t, s)
	other := dial(t, s)
	other.do("CLIENT", "SETNAME", "other")

	if got := c.do("CLIENT", "SETNAME", "app-1"); got != "+OK\r\n" {
		t.Errorf("CLIENT SETNAME: %q", got)
	}
	if got := c.do("client", "getname"); got != bulk("app-1") {
		t.Errorf("CLIENT GETNAME: %q", got)
	}
	for _, bad := range []string{"a b", "a\nb", "é"} {
		if got := c.do("CLIENT", "SETNAME", bad); got != "-ERR Client names cannot contain spaces, newlines or special characters.\r\n" {
			t.Errorf("CLIENT SETNAME %q: %q", bad, got)
		}
	}
	if got := c.do("CLIENT", "GETNAME"); got != bulk("app-1") {
		t.Errorf("a refused name replaced the name: %q", got)
	}
	if got := c.do("CLIENT", "SETNAME", ""); got != "+OK\r\n" {
		t.Errorf("CLIENT SETNAME '': %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != "$-1\r\n" {
		t.Errorf("CLIENT GETNAME after clearing: %q", got)
	}
	c.do("CLIENT", "SETNAME", "app-1")

	idReply := c.do("CLIENT", "ID")
	otherID := other.do("CLIENT", "ID")
	if !strings.HasPrefix(idReply, ":") || idReply == otherID {
		t.Errorf("CLIENT ID: %q and %q", idReply, otherID)
	}
	id := strings.TrimSpace(idReply[1:])
	for _, st := range []struct{ args, want string }{
		{"CLIENT SETINFO LIB-NAME old-name", "+OK\r\n"},
		{"CLIENT SETINFO LIB-NAME go-redis(,go1.26)", "+OK\r\n"}, // replaces
		{"CLIENT SETINFO lib-ver 9.23.0", "+OK\r\n"},
		{"CLIENT SETINFO lib-ver 9.é", "-ERR lib-ver cannot contain spaces, newlines or special characters.\r\n"},
		{"CLIENT SETINFO color blue", "-ERR Unrecognized option 'color'\r\n"},
		{"CLIENT SETINFO LIB-NAME", "-ERR wrong number of arguments for 'client|setinfo' command\r\n"},
		{"CLIENT NO-EVICT on", "+OK\r\n"},
		{"CLIENT NO-TOUCH on", "+OK\r\n"},
	} {
		if got := c.do(strings.Fields(st.args)...); got != st.want {
			t.Errorf("%s: %q, want %q", st.args, got, st.want)
		}
	}
	info := clientFields(t, c.do("CLIENT", "INFO"))
	for k, want := range map[string]string{"id": id, "name": "app-1", "resp": "2", "lib-name": "go-redis(,go1.26)",
		"lib-ver": "9.23.0", "cmd": "client|info", "idle": "0", "flags": "N", "db": "0", "multi": "-1"} {
		if info[k] != want {
			t.Errorf("CLIENT INFO %s=%q, want %q (%v)", k, info[k], want, info)
		}
	}
	if !strings.HasPrefix(info["addr"], "127.0.0.1:") || info["laddr"] != s.Addr() {
		t.Errorf("CLIENT INFO addr=%q laddr=%q, want 127.0.0.1:port and %s", info["addr"], info["laddr"], s.Addr())
	}
	// Client libraries convert these with int() (redis-py's client_info).
	for _, k := range []string{"id", "age", "idle", "db", "sub", "psub", "multi", "qbuf", "qbuf-free", "obl", "argv-mem", "oll", "omem", "tot-mem"} {
		if _, err := strconv.Atoi(info[k]); err != nil {
			t.Errorf("CLIENT INFO %s=%q is not an integer", k, info[k])
		}
	}

	list := c.do("CLIENT", "LIST")
	if !strings.Contains(list, " name=app-1 ") || !strings.Contains(list, " name=other ") || strings.Count(list, "id=") != 2 ||
		strings.Index(list, "id="+id+" ") > strings.Index(list, "id="+otherID[1:len(otherID)-2]+" ") {
		t.Errorf("CLIENT LIST (two clients, in id order): %q", list)
	}
	if got := c.do("CLIENT", "LIST", "ID", id); strings.Count(got, "id=") != 1 || !strings.Contains(got, " name=app-1 ") {
		t.Errorf("CLIENT LIST ID %s: %q", id, got)
	}
	for _, st := range []struct{ args, want string }{
		{"CLIENT LIST TYPE normal", list},
		{"CLIENT LIST TYPE pubsub", bulk("")},
		{"CLIENT LIST TYPE nobody", "-ERR Unknown client type 'nobody'\r\n"},
		{"CLIENT LIST ID x", "-ERR Invalid client ID\r\n"},
		{"CLIENT LIST ID 999999", bulk("")},
		{"CLIENT LIST sideways", "-ERR syntax error\r\n"},
	} {
		if got := c.do(strings.Fields(st.args)...); got != st.want {
			t.Errorf("%s: %q, want %q", st.args, got, st.want)
		}
	}
	help := c.do("CLIENT", "HELP")
	if !strings.HasPrefix(help, "*") || !strings.Contains(help, "SETNAME") {
		t.Errorf("CLIENT HELP: %q", help)
	}

	// SELECT 0 is the only database.
	for _, st := range []struct{ args, want string }{
		{"SELECT 0", "+OK\r\n"},
		{"SELECT 1", "-ERR DB index is out of range\r\n"},
		{"SELECT -1", "-ERR DB index is out of range\r\n"},
		{"SELECT x", "-ERR value is not an integer or out of range\r\n"},
	} {
		if got := c.do(strings.Fields(st.args)...); got != st.want {
			t.Errorf("%s: %q, want %q", st.args, got, st.want)
		}
	}

	// RESET: back to RESP2, no name.
	c.do("HELLO", "3")
	if got := c.do("RESET"); got != "+RESET\r\n" {
		t.Errorf("RESET: %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != "$-1\r\n" {
		t.Errorf("GETNAME after RESET: %q (want a RESP2 null)", got)
	}
	// The library is still the one behind the connection.
	if info := clientFields(t, c.do("CLIENT", "INFO")); info["resp"] != "2" || info["name"] != "" || info["lib-name"] != "go-redis(,go1.26)" {
		t.Errorf("CLIENT INFO after RESET: resp=%s name=%s lib-name=%s; want 2, empty, the library", info["resp"], info["name"], info["lib-name"])
	}
}

func TestCommandIntrospection(t *testing.T) {
	s := startServer(t, Options{}, nil)
	c := dial(t, s)
	// connection commands + the 8 test commands
	names := []string{"asking", "auth", "client", "cluster", "command", "config", "echo", "hello", "info", "ping", "quit",
		"readonly", "readwrite", "reset", "role", "select",
		"t.async", "t.echo", "t.err", "t.map", "t.name", "t.nil", "t.panic", "t.wait"}
	if got := c.do("COMMAND", "COUNT"); got != fmt.Sprintf(":%d\r\n", len(names)) {
		t.Errorf("COMMAND COUNT: %q, want %d", got, len(names))
	}
	want := fmt.Sprintf("*%d\r\n", len(names))
	for _, n := range names {
		want += bulk(n)
	}
	if got := c.do("COMMAND", "LIST"); got != want {
		t.Errorf("COMMAND LIST:\n got %q\nwant %q", got, want)
	}
	if got := c.do("COMMAND", "INFO", "ping", "NOSUCH"); got != "*2\r\n*10\r\n"+bulk("ping")+":-1\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*0\r\n*0\r\n$-1\r\n" {
		t.Errorf("COMMAND INFO ping NOSUCH: %q", got)
	}
	if got := c.do("COMMAND", "DOCS", "echo"); got != "*2\r\n"+bulk("echo")+"*8\r\n"+
		bulk("summary")+bulk("Returns the message.")+bulk("since")+bulk("1.0.0")+bulk("group")+bulk("connection")+
		bulk("arguments")+"*1\r\n*4\r\n"+bulk("name")+bulk("message")+bulk("type")+bulk("string") {
		t.Errorf("COMMAND DOCS echo: %q", got)
	}
	if got := c.do("COMMAND", "DOCS", "nosuch"); got != "*0\r\n" {
		t.Errorf("COMMAND DOCS nosuch: %q", got)
	}
	if got := c.do("COMMAND", "NOPE"); got != "-ERR unknown subcommand 'NOPE'. Try COMMAND HELP.\r\n" {
		t.Errorf("COMMAND NOPE: %q", got)
	}
	all := c.do("COMMAND")
	if !strings.HasPrefix(all, fmt.Sprintf("*%d\r\n", len(names))) {
		t.Errorf("COMMAND: %.100q", all)
	}

	// go-redis parses COMMAND (it reads it for cluster routing) and COMMAND DOCS.
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		rc := newClient(t, s, &redis.Options{Protocol: proto})
		cmds, err := rc.Command(ctx).Result()
		if err != nil {
			t.Fatalf("RESP%d COMMAND: %v", proto, err)
		}
		if len(cmds) != len(names) {
			t.Errorf("RESP%d COMMAND: %d commands, want %d", proto, len(cmds), len(names))
		}
		client := cmds["client"]
		if client == nil || client.Arity != -2 || cmds["echo"].Arity != 2 || cmds["t.echo"] == nil {
			t.Errorf("RESP%d COMMAND: client %+v, echo %+v", proto, client, cmds["echo"])
		}
		docs, err := rc.Do(ctx, "COMMAND", "DOCS", "hello").Result()
		if err != nil {
			t.Fatalf("RESP%d COMMAND DOCS: %v", proto, err)
		}
		if !strings.Contains(fmt.Sprint(docs), "protover") || !strings.Contains(fmt.Sprint(docs), "SETNAME") {
			t.Errorf("RESP%d COMMAND DOCS hello: %v", proto, docs)
		}
		if proto == 3 {
			if _, ok := docs.(map[any]any); !ok {
				t.Errorf("RESP3 COMMAND DOCS is a %T, want a map", docs)
			}
		}
	}
}

func TestInfoAndConfig(t *testing.T) {
	s := startServer(t, Options{Version: "1.2.3", Info: []InfoSection{
		{Name: "Limiters", Lines: func() []string { return []string{"limiters:5"} }},
	}}, nil)
	ctx := context.Background()
	rc := newClient(t, s, &redis.Options{Protocol: 3})
	info, err := rc.Info(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Server\r\n", "redis_version:7.0.0\r\n", "rlproxy_version:1.2.3\r\n", "redis_mode:standalone\r\n",
		"tcp_port:" + s.Addr()[strings.LastIndex(s.Addr(), ":")+1:] + "\r\n",
		"# Clients\r\nconnected_clients:", "# Persistence\r\nloading:0\r\n", "# Stats\r\n", "# Limiters\r\nlimiters:5\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO lacks %q:\n%s", want, info)
		}
	}
	for section, want := range map[string][]string{
		"server":      {"# Server"},
		"PERSISTENCE": {"# Persistence"},
		"limiters":    {"# Limiters"},
		"all":         {"# Server", "# Clients", "# Persistence", "# Stats", "# Replication", "# Cluster", "# Keyspace", "# Limiters"},
		"nosuch":      nil,
	} {
		got, err := rc.Info(ctx, section).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(got, "# ") != len(want) {
			t.Errorf("INFO %s: %q", section, got)
		}
		for _, w := range want {
			if !strings.Contains(got, w+"\r\n") {
				t.Errorf("INFO %s lacks %s: %q", section, w, got)
			}
		}
	}
	got, err := rc.Info(ctx, "server", "stats").Result()
	if err != nil || strings.Count(got, "# ") != 2 || !strings.Contains(got, "# Stats") {
		t.Errorf("INFO server stats: %q, %v", got, err)
	}

	for _, proto := range []int{2, 3} {
		rc := newClient(t, s, &redis.Options{Protocol: proto})
		cfg, err := rc.ConfigGet(ctx, "*").Result()
		if err != nil || len(cfg) != 0 {
			t.Errorf("RESP%d CONFIG GET *: %v, %v", proto, cfg, err)
		}
		if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR CONFIG SET is not supported") {
			t.Errorf("RESP%d CONFIG SET: %v", proto, err)
		}
		if err := rc.ConfigResetStat(ctx).Err(); err != nil {
			t.Errorf("RESP%d CONFIG RESETSTAT: %v", proto, err)
		}
	}
}

// TestGoRedis drives the connection commands and replies of every type
// with go-redis in both protocols.
func TestGoRedis(t *testing.T) {
	s := startServer(t, Options{}, nil)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			rc := newClient(t, s, &redis.Options{Protocol: proto, ClientName: "gr", PoolSize: 1})
			if got, err := rc.Ping(ctx).Result(); err != nil || got != "PONG" {
				t.Errorf("PING: %q, %v", got, err)
			}
			if got, err := rc.Echo(ctx, "hi\r\nthere").Result(); err != nil || got != "hi\r\nthere" {
				t.Errorf("ECHO: %q, %v", got, err)
			}
			hello, err := rc.Do(ctx, "HELLO", strconv.Itoa(proto)).Result()
			if err != nil {
				t.Fatalf("HELLO: %v", err)
			}
			if proto == 3 {
				m, _ := hello.(map[any]any)
				if m["server"] != "redis" || m["proto"] != int64(3) || m["mode"] != "standalone" || m["role"] != "master" ||
					m["version"] != "7.0.0" || m["id"] == nil || !reflect.DeepEqual(m["modules"], []any{}) {
					t.Errorf("HELLO 3: %#v", hello)
				}
			} else if l, _ := hello.([]any); len(l) != 14 || l[0] != "server" || l[5] != int64(2) {
				t.Errorf("HELLO 2: %#v", hello)
			}
			if got, err := rc.ClientGetName(ctx).Result(); err != nil || got != "gr" {
				t.Errorf("CLIENT GETNAME: %q, %v", got, err)
			}
			if got, err := rc.Do(ctx, "T.NAME").Result(); err != nil || got != "gr" {
				t.Errorf("T.NAME: %q, %v", got, err)
			}
			if id, err := rc.ClientID(ctx).Result(); err != nil || id <= 0 {
				t.Errorf("CLIENT ID: %d, %v", id, err)
			}
			if info, err := rc.ClientInfo(ctx).Result(); err != nil || info.Name != "gr" || info.Resp != proto {
				t.Errorf("CLIENT INFO: %+v, %v", info, err)
			}
			if list, err := rc.ClientList(ctx).Result(); err != nil || !strings.Contains(list, "name=gr ") {
				t.Errorf("CLIENT LIST: %q, %v", list, err)
			}
			if err := rc.Do(ctx, "T.NIL").Err(); err != redis.Nil {
				t.Errorf("T.NIL: %v, want redis.Nil", err)
			}
			m, err := rc.Do(ctx, "T.MAP").Result()
			wantMap := any([]any{"a", int64(1), "b", "two"})
			if proto == 3 {
				wantMap = map[any]any{"a": int64(1), "b": "two"}
			}
			if err != nil || !reflect.DeepEqual(m, wantMap) {
				t.Errorf("T.MAP: %#v, %v", m, err)
			}
			if got, err := rc.Do(ctx, "T.ECHO", "a", "b").StringSlice(); err != nil || !reflect.DeepEqual(got, []string{"a", "b"}) {
				t.Errorf("T.ECHO: %q, %v", got, err)
			}
			if err := rc.Do(ctx, "SELECT", "0").Err(); err != nil {
				t.Errorf("SELECT 0: %v", err)
			}
			if err := rc.Do(ctx, "SELECT", "1").Err(); err == nil || err.Error() != "ERR DB index is out of range" {
				t.Errorf("SELECT 1: %v", err)
			}
			err = rc.Do(ctx, "FOO", "a", "b").Err()
			if err == nil || err.Error() != "ERR unknown command 'FOO', with args beginning with: 'a' 'b' " {
				t.Errorf("FOO a b: %v", err)
			}
			if err := rc.Do(ctx, "ECHO").Err(); err == nil || err.Error() != "ERR wrong number of arguments for 'echo' command" {
				t.Errorf("ECHO: %v", err)
			}
			if err := rc.Do(ctx, "T.PANIC").Err(); err == nil || err.Error() != "ERR internal error while running 'T.PANIC'" {
				t.Errorf("T.PANIC: %v", err)
			}
			// The same connection (the pool has one) keeps serving.
			if got, err := rc.Ping(ctx).Result(); err != nil || got != "PONG" {
				t.Errorf("PING after a panic: %q, %v", got, err)
			}
			if got, err := rc.Do(ctx, "RESET").Result(); err != nil || got != "RESET" {
				t.Errorf("RESET: %v, %v", got, err)
			}
			if err := rc.Do(ctx, "CLIENT", "GETNAME").Err(); err != redis.Nil {
				t.Errorf("CLIENT GETNAME after RESET: %v, want redis.Nil", err)
			}
		})
	}
}

func TestPanicIsContained(t *testing.T) {
	s := startServer(t, Options{}, nil)
	a, b := dial(t, s), dial(t, s)
	// A pipeline around the panic: every reply comes, in order.
	a.send(encode("PING") + encode("T.PANIC") + encode("ECHO", "after"))
	for _, want := range []string{"+PONG\r\n", "-ERR internal error while running 'T.PANIC'\r\n", bulk("after")} {
		if got := a.reply(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	// Pipelined ones run as one batch: the panic answers each of them.
	a.send(encode("T.PANIC") + encode("T.PANIC") + encode("ECHO", "after"))
	for _, want := range []string{"-ERR internal error while running 'T.PANIC'\r\n", "-ERR internal error while running 'T.PANIC'\r\n", bulk("after")} {
		if got := a.reply(); got != want {
			t.Errorf("batch: got %q, want %q", got, want)
		}
	}
	if got := b.do("PING"); got != "+PONG\r\n" {
		t.Errorf("other connection: %q", got)
	}
	if got := a.do("INFO", "stats"); !strings.Contains(got, "recovered_panics:2\r\n") {
		t.Errorf("INFO stats: %q", got)
	}
}

// TestWaitingHandlerBlocksOnlyItsClient: while one client's command
// waits, other clients are served.
func TestWaitingHandlerBlocksOnlyItsClient(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, Options{}, release)
	a, b := dial(t, s), dial(t, s)
	a.send(encode("T.WAIT"))
	for i := 0; i < 3; i++ {
		if got := b.do("ECHO", strconv.Itoa(i)); got != bulk(strconv.Itoa(i)) {
			t.Errorf("other client while one waits: %q", got)
		}
	}
	close(release)
	if got := a.reply(); got != "+RELEASED\r\n" {
		t.Errorf("T.WAIT: %q", got)
	}
}

// A lone call of a command with a batch handler is answered whenever
// its handler replies, while the connection reads on; the client's next
// command waits for that reply, so replies keep their order.
func TestAsyncReply(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, Options{}, release)
	a, b := dial(t, s), dial(t, s)
	a.send(encode("T.ASYNC"))
	<-asyncStarted
	a.send(encode("PING")) // must wait for T.ASYNC's reply
	if got := b.do("ECHO", "x"); got != bulk("x") {
		t.Errorf("other client meanwhile: %q", got)
	}
	a.quiet()
	close(release)
	for _, want := range []string{"+LATER\r\n", "+PONG\r\n"} {
		if got := a.reply(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}

	// Pipelined, or declined by its handler: the ordinary path.
	a.send(encode("T.ASYNC") + encode("T.ASYNC"))
	for range 2 {
		if got := a.reply(); got != "+SYNC\r\n" {
			t.Errorf("pipelined: %q", got)
		}
	}
	if got := a.do("T.ASYNC", "sync"); got != "+SYNC\r\n" {
		t.Errorf("declined: %q", got)
	}
	// A handler that panics after replying: one reply, the panic counted.
	if got := a.do("T.ASYNC", "panic"); got != "+BEFORE\r\n" {
		t.Errorf("panic after reply: %q", got)
	}
	if got := a.do("INFO", "stats"); !strings.Contains(got, "recovered_panics:1\r\n") {
		t.Errorf("INFO stats: %q", got)
	}

	// A protocol error waits for the reply on its way too.
	release = make(chan struct{})
	g := dial(t, startServer(t, Options{}, release))
	g.send(encode("T.ASYNC"))
	<-asyncStarted
	g.send("*x\r\n")
	g.quiet()
	close(release)
	for _, want := range []string{"+LATER\r\n", "-ERR Protocol error: invalid multibulk length\r\n"} {
		if got := g.reply(); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	g.closed()
}

// quiet asserts that no reply comes for 100ms.
func (r *raw) quiet() {
	r.t.Helper()
	if err := r.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		r.t.Fatal(err)
	}
	if b, err := r.r.ReadByte(); err == nil {
		r.t.Fatalf("a reply came too early: %q...", b)
	}
	if err := r.c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		r.t.Fatal(err)
	}
}

func TestPipelinedRepliesInOrder(t *testing.T) {
	s := startServer(t, Options{}, nil)
	c := dial(t, s)
	var req strings.Builder
	var want []string
	for i := 0; i < 500; i++ {
		v := strconv.Itoa(i)
		switch i % 5 {
		case 0:
			req.WriteString(encode("ECHO", v))
			want = append(want, bulk(v))
		case 1:
			req.WriteString("PING " + v + "\r\n") // inline between RESP frames
			want = append(want, bulk(v))
		case 2:
			req.WriteString(encode("NOPE", v))
			want = append(want, "-ERR unknown command 'NOPE', with args beginning with: '"+v+"' \r\n")
		case 3:
			req.WriteString(encode("T.ECHO", v, strings.Repeat("x", i)))
			want = append(want, "*2\r\n"+bulk(v)+bulk(strings.Repeat("x", i)))
		case 4:
			req.WriteString(encode("T.PANIC"))
			want = append(want, "-ERR internal error while running 'T.PANIC'\r\n")
		}
	}
	c.send(req.String()) // one write
	for i, w := range want {
		if got := c.reply(); got != w {
			t.Fatalf("reply %d: %q, want %q", i, got, w)
		}
	}

	// The same bytes one at a time: frames split anywhere still parse.
	c = dial(t, s)
	small := encode("ECHO", "a\r\n*9\r\n$x") + "PING\r\n" + encode("T.ECHO", "", "bc")
	for i := 0; i < len(small); i++ {
		c.send(small[i : i+1])
	}
	for _, w := range []string{bulk("a\r\n*9\r\n$x"), "+PONG\r\n", "*2\r\n" + bulk("") + bulk("bc")} {
		if got := c.reply(); got != w {
			t.Errorf("byte by byte: %q, want %q", got, w)
		}
	}
}

func TestMalformedFrames(t *testing.T) {
	s := startServer(t, Options{}, nil)
	const (
		bulkLen  = "-ERR Protocol error: invalid bulk length\r\n"
		multiLen = "-ERR Protocol error: invalid multibulk length\r\n"
	)
	tests := []struct {
		name   string
		writes []string
		want   []string
	}{
		{"negative bulk length", []string{"*2\r\n$3\r\nfoo\r\n$-5\r\n"}, []string{bulkLen}},
		{"huge count", []string{"*99999999999\r\n"}, []string{multiLen}},
		{"max int64 count", []string{"*9223372036854775807\r\n"}, []string{multiLen}},
		{"count past int64", []string{"*99999999999999999999999\r\n"}, []string{multiLen}},
		{"max int64 bulk length", []string{"*1\r\n$9223372036854775807\r\nPING\r\n"}, []string{bulkLen}},
		{"bulk length past int64", []string{"*1\r\n$99999999999999999999\r\nPING\r\n"}, []string{bulkLen}},
		{"bulk length over 512MB", []string{"*1\r\n$536870913\r\n"}, []string{bulkLen}},
		{"bulk length split over writes", []string{"*1\r\n$92233720", "36854775807\r\nPING\r\n"}, []string{bulkLen}},
		{"count split over writes", []string{"*9999", "9999999\r\n"}, []string{multiLen}},
		{"empty count", []string{"*\r\n"}, []string{multiLen}},
		{"zero count, skipped", []string{"*0\r\n*1\r\n$4\r\nPING\r\n*0\rx"}, []string{"+PONG\r\n", multiLen}},
		{"negative count, skipped", []string{"*-1\r\n*-", "10\r\n*1\r\n$4\r\nPING\r\n*x"}, []string{"+PONG\r\n", multiLen}},
		{"count not a number", []string{"*x\r\n"}, []string{multiLen}},
		{"count without CR", []string{"*1\nPING\n"}, []string{multiLen}},
		{"bulk length without CR", []string{"*1\r\n$4\nPING\r\n"}, []string{bulkLen}},
		{"bulk length not a number", []string{"*1\r\n$four\r\nPING\r\n"}, []string{bulkLen}},
		{"no $", []string{"*1\r\nPING\r\n"}, []string{"-ERR Protocol error: expected '$', got 'P'\r\n"}},
		{"no $, a CR", []string{"*1\r\n\r\n"}, []string{"-ERR Protocol error: expected '$', got ' '\r\n"}}, // Redis's: CR and LF become spaces
		{"bad argument terminator", []string{"*1\r\n$4\r\nPINGxx"}, []string{bulkLen}},
		{"unbalanced quotes", []string{"ECHO \"abc\r\n"}, []string{"-ERR Protocol error: unbalanced quotes in request\r\n"}},
		{"inline line too long", []string{strings.Repeat("A", 70000)}, []string{"-ERR Protocol error: too big inline request\r\n"}},
		{"good commands first", []string{"PING\r\n" + encode("ECHO", "x") + "*99999999999\r\n"},
			[]string{"+PONG\r\n", bulk("x"), multiLen}},
		{"partial command first", []string{"*2\r\n$4\r\nECHO\r\n", "$-1\r\n"}, []string{bulkLen}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, s)
			for _, w := range tt.writes {
				c.send(w)
			}
			for _, want := range tt.want {
				if got := c.reply(); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
			}
			c.closed()
			// The server serves on.
			if got := dial(t, s).do("PING"); got != "+PONG\r\n" {
				t.Errorf("PING on a new connection: %q", got)
			}
		})
	}
}

// A large argument passes the frame check intact.
func TestLargeArgument(t *testing.T) {
	s := startServer(t, Options{}, nil)
	c := dial(t, s)
	big := strings.Repeat("0123456789", 100000) // 1MB
	if got := c.do("ECHO", big); got != bulk(big) {
		t.Errorf("ECHO of 1MB: %d bytes back", len(got))
	}
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING after: %q", got)
	}
}

func TestCloseEndsServeAndConnections(t *testing.T) {
	s := New(Options{Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	c := dial(t, s)
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	c.closed()
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Error("still accepting after Close")
	}
}

// A disconnected client leaves the client list.
func TestConnectedClients(t *testing.T) {
	s := startServer(t, Options{}, nil)
	a := dial(t, s)
	b := dial(t, s)
	b.do("PING")
	if got := a.do("INFO", "clients"); !strings.Contains(got, "connected_clients:2\r\n") {
		t.Fatalf("INFO clients: %q", got)
	}
	b.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(a.do("INFO", "clients"), "connected_clients:1\r\n") {
		if time.Now().After(deadline) {
			t.Fatal("a closed client is still counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// guardInput is a net.Conn that reads from a byte slice.
type guardInput struct {
	net.Conn
	r   io.Reader
	out bytes.Buffer
}

func (g *guardInput) Read(p []byte) (int, error)  { return g.r.Read(p) }
func (g *guardInput) Write(p []byte) (int, error) { return g.out.Write(p) }

// FuzzFrameGuard feeds any bytes through the frame check into redcon's
// parser: it must never panic, and must finish. Not run by `make test`;
// run it with go test -fuzz=FuzzFrameGuard ./server.
func FuzzFrameGuard(f *testing.F) {
	for _, s := range []string{
		"PING\r\n", encode("ECHO", "x"), "*1\r\n$9223372036854775807\r\nPING\r\n", "*99999999999\r\n",
		"*2\r\n$3\r\nfoo\r\n$-5\r\n", "*1\r\n$4\r\nPING\r\n*1\r\n$0\r\n\r\n", "ECHO \"a\r\n", "*1\r\n$-9223372036854775808\r\n",
	} {
		f.Add([]byte(s), uint8(7))
	}
	srv := New(Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		in := &guardInput{r: &chunked{b: data, n: int(chunk%16) + 1}}
		rd := redcon.NewReader(&guardedConn{Conn: in, srv: srv})
		for {
			cmds, err := rd.ReadCommands()
			if err != nil {
				return
			}
			for _, c := range cmds {
				if len(c.Args) == 0 {
					t.Fatalf("a command without arguments from %q", data)
				}
			}
		}
	})
}

// chunked reads b n bytes at a time.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}

// Close may come before Serve has started (a proxy that fails to start
// right after Listen): Serve must still return, and the port be freed.
func TestCloseBeforeServe(t *testing.T) {
	s := New(Options{Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after an earlier Close")
	}
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Error("still accepting after Close")
	}
}

// clientFields parses a CLIENT INFO reply (a bulk string of one line of
// key=value fields).
func clientFields(t *testing.T, reply string) map[string]string {
	t.Helper()
	_, line, ok := strings.Cut(strings.TrimSuffix(reply, "\r\n"), "\r\n")
	if !ok || !strings.HasSuffix(line, "\n") {
		t.Fatalf("CLIENT INFO reply %q is not one line in a bulk string", reply)
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("CLIENT INFO field %q has no '=': %q", f, line)
		}
		fields[k] = v
	}
	return fields
}

// CLIENT LIST reads other connections' names, library and protocol while
// they change them (run with -race).
func TestClientListWhileOthersChange(t *testing.T) {
	s := startServer(t, Options{}, nil)
	lister, changer := dial(t, s), dial(t, s)
	// A reply proves the server has taken the connection in (a dial
	// returns once the kernel accepted it, maybe before the server did).
	for _, c := range []*raw{lister, changer} {
		if got := c.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING: %q", got)
		}
	}
	const rounds = 200
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range rounds {
			n := strconv.Itoa(i)
			changer.send(encode("CLIENT", "SETNAME", "n"+n) + encode("CLIENT", "SETINFO", "LIB-VER", n) + encode("HELLO", strconv.Itoa(2+i%2)))
			for range 3 {
				changer.reply()
			}
		}
	}()
	for range rounds {
		if got := lister.do("CLIENT", "LIST"); strings.Count(got, "id=") != 2 {
			t.Fatalf("CLIENT LIST: %q", got)
		}
	}
	wg.Wait()
	last := strconv.Itoa(rounds - 1)
	if got := lister.do("CLIENT", "LIST"); !strings.Contains(got, " name=n"+last+" ") || !strings.Contains(got, " lib-ver="+last+"\n") {
		t.Errorf("CLIENT LIST after the changes: %q", got)
	}
}
