package proxy

// The helpers below make the end-to-end tests read like a small language,
// in the spirit of tile38's tests:
//
//	h := start(t)
//	h.Do(t, "RL.SETRATE", "k", 3, "1s").Equal(int64(1))
//	h.Do(t, "RL.ACQUIRE", "k").Granted(2)
//	h.Do(t, "RL.ACQUIRE", "nope").Err("ERR no such limiter 'nope' (create it with RL.SETRATE or RL.POLICY SET)")
//
// Every proxy runs in-process on 127.0.0.1:0 in front of a real
// redis-server (internal/redistest) or the embedded backend, and is
// stopped when its test ends.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// callTimeout bounds every call a test makes, so a hung proxy fails the
// test instead of stalling the suite.
const callTimeout = 5 * time.Second

// harness is one rlproxy under test and the redis-server behind it. Its
// embedded conn is a go-redis client with default options (RESP3).
type harness struct {
	conn
	proxy   *Proxy
	backend *redistest.Server // nil on the embedded backend
	cfg     config.Config     // the config the proxy was started with
	log     *lockedLog        // what the proxy logged
}

// start starts a redis-server and an rlproxy in front of it. tweaks
// adjust config.Default() (after Listen and Backends are set).
func start(t testing.TB, tweaks ...func(*config.Config)) *harness {
	t.Helper()
	srv := redistest.StartServer(t)
	return startProxy(t, srv, append([]func(*config.Config){func(c *config.Config) {
		c.Backends = []string{srv.URL()}
	}}, tweaks...)...)
}

// startProxy starts an rlproxy on 127.0.0.1:0; srv is the backend the
// tweaks point it at, or nil for the embedded backend.
func startProxy(t testing.TB, srv *redistest.Server, tweaks ...func(*config.Config)) *harness {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	for _, f := range tweaks {
		f(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	logs := &lockedLog{t: t}
	// Runs last (cleanups are last-in, first-out): the proxy may still log
	// while it closes, but nothing may reach t.Log once the test is over.
	t.Cleanup(logs.stop)
	p, err := Start(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatalf("proxy.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("proxy.Close: %v", err)
		}
	})
	h := &harness{proxy: p, backend: srv, cfg: cfg, log: logs}
	h.conn = conn{h.client(t, nil)}
	return h
}

// client returns a new go-redis client of the proxy (pooled connections),
// with the proxy's password and the options tweak sets. It is closed when
// the test ends.
func (h *harness) client(t testing.TB, tweak func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: h.proxy.Addr(), Password: h.cfg.RequirePass, MaxRetries: -1}
	if tweak != nil {
		tweak(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Conn returns one dedicated connection to the proxy (for connection
// state: CLIENT SETNAME, HELLO, ...), closed when the test ends.
func (h *harness) Conn(t testing.TB, tweak func(*redis.Options)) conn {
	t.Helper()
	c := h.client(t, tweak).Conn()
	t.Cleanup(func() { _ = c.Close() })
	return conn{c}
}

// port is the proxy's TCP port, for redis-cli and redis-benchmark.
func (h *harness) port() string {
	_, port, _ := net.SplitHostPort(h.proxy.Addr())
	return port
}

// doer is what conn sends commands through: a *redis.Client (pooled) or a
// *redis.Conn (one connection).
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// conn sends commands and returns replies to check.
type conn struct{ d doer }

// Do sends one command and returns its reply for checking.
func (c conn) Do(t testing.TB, args ...any) *reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, err := c.d.Do(ctx, args...).Result()
	return &reply{t: t, args: args, val: v, err: err}
}

// reply is the outcome of one command.
type reply struct {
	t    testing.TB
	args []any
	val  any
	err  error
}

func (r *reply) String() string {
	if r.err != nil {
		return fmt.Sprintf("%s -> error %q", show(r.args), r.err)
	}
	return fmt.Sprintf("%s -> %#v", show(r.args), r.val)
}

func show(args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = fmt.Sprint(a)
	}
	return strings.Join(parts, " ")
}

// OK fails the test if the command failed and returns its value.
func (r *reply) OK() any {
	r.t.Helper()
	if r.err != nil {
		r.t.Fatalf("%s: want success", r)
	}
	return r.val
}

// Equal checks the value (go-redis types: int64, string, []any,
// map[any]any, ...).
func (r *reply) Equal(want any) *reply {
	r.t.Helper()
	if got := r.OK(); !reflect.DeepEqual(got, want) {
		r.t.Fatalf("%s: want %#v", r, want)
	}
	return r
}

// Int checks the reply is an integer and returns it.
func (r *reply) Int() int64 {
	r.t.Helper()
	n, ok := r.OK().(int64)
	if !ok {
		r.t.Fatalf("%s: want an integer", r)
	}
	return n
}

// Nil checks the reply is a null.
func (r *reply) Nil() {
	r.t.Helper()
	if !errors.Is(r.err, redis.Nil) {
		r.t.Fatalf("%s: want nil", r)
	}
}

// Err checks the command failed with exactly this error line.
func (r *reply) Err(want string) {
	r.t.Helper()
	if r.err == nil || errors.Is(r.err, redis.Nil) || r.err.Error() != want {
		r.t.Fatalf("%s: want error %q", r, want)
	}
}

// ErrContains checks the command failed with a Redis error reply that
// starts with an upper-case code (ERR unless the parts say otherwise) and
// contains every part.
func (r *reply) ErrContains(parts ...string) string {
	r.t.Helper()
	var rerr redis.Error
	if !errors.As(r.err, &rerr) || errors.Is(r.err, redis.Nil) {
		r.t.Fatalf("%s: want an error reply", r)
	}
	msg := r.err.Error()
	if code, _, _ := strings.Cut(msg, " "); code == "" || strings.ToUpper(code) != code {
		r.t.Fatalf("%s: error does not start with an upper-case code", r)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			r.t.Fatalf("%s: want the error to contain %q", r, p)
		}
	}
	return msg
}

// grant is a decoded RL.ACQUIRE reply.
type grant struct {
	Granted    bool
	Remaining  int64
	RetryAfter time.Duration
	ResetAfter time.Duration
}

// Acquire decodes an RL.ACQUIRE reply: an array of 4 integers.
func (r *reply) Acquire() grant {
	r.t.Helper()
	arr, ok := r.OK().([]any)
	if !ok || len(arr) != 4 {
		r.t.Fatalf("%s: want an array of 4 integers", r)
	}
	var n [4]int64
	for i, v := range arr {
		if n[i], ok = v.(int64); !ok {
			r.t.Fatalf("%s: element %d is %T, want an integer", r, i, v)
		}
	}
	if n[0] != 0 && n[0] != 1 {
		r.t.Fatalf("%s: granted must be 0 or 1", r)
	}
	if n[1] < 0 || n[2] < 0 || n[3] < 0 {
		r.t.Fatalf("%s: negative value", r)
	}
	return grant{n[0] == 1, n[1], time.Duration(n[2]) * time.Millisecond, time.Duration(n[3]) * time.Millisecond}
}

// Granted checks the acquire was granted now (retry_after 0) and left
// remaining permits.
func (r *reply) Granted(remaining int64) grant {
	r.t.Helper()
	g := r.Acquire()
	if !g.Granted || g.Remaining != remaining || g.RetryAfter != 0 {
		r.t.Fatalf("%s: want granted with %d remaining and retry_after 0", r, remaining)
	}
	return g
}

// Denied checks the acquire was denied with remaining permits left and a
// positive retry_after.
func (r *reply) Denied(remaining int64) grant {
	r.t.Helper()
	g := r.Acquire()
	if g.Granted || g.Remaining != remaining || g.RetryAfter <= 0 {
		r.t.Fatalf("%s: want denied with %d remaining and retry_after > 0", r, remaining)
	}
	return g
}

// raw is one plain TCP connection speaking RESP by hand, for checks no
// client library would let through: exactly one reply line per command.
type raw struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func (h *harness) raw(t testing.TB) *raw {
	t.Helper()
	c, err := net.DialTimeout("tcp", h.proxy.Addr(), callTimeout)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &raw{t: t, c: c, r: bufio.NewReader(c)}
}

// Send writes one command as a RESP array of bulk strings.
func (c *raw) Send(args ...string) {
	c.t.Helper()
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatalf("write %q: %v", args, err)
	}
}

// Line reads one reply line, without its CRLF.
func (c *raw) Line() string {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(callTimeout))
	line, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read reply line: %v (read %q)", err, line)
	}
	if !strings.HasSuffix(line, "\r\n") {
		c.t.Fatalf("reply line %q does not end in CRLF", line)
	}
	return strings.TrimSuffix(line, "\r\n")
}

// Call sends a command and reads the first line of its reply.
func (c *raw) Call(args ...string) string {
	c.t.Helper()
	c.Send(args...)
	return c.Line()
}

// Steps sends each command (words split on spaces) and checks the first
// line of its reply, stopping the test at the first that differs.
func (c *raw) Steps(steps [][2]string) {
	c.t.Helper()
	for _, st := range steps {
		if got := c.Call(strings.Fields(st[0])...); got != st[1] {
			c.t.Fatalf("%s = %q, want %q", st[0], got, st[1])
		}
	}
}

// backendCalls returns a backend's INFO commandstats as command name
// (lower case, "config|resetstat" for subcommands) → calls. Use one
// client for it and resetBackendStats, so that its own handshake is not
// counted.
func backendCalls(t testing.TB, backend *redis.Client) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	text, err := backend.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("backend INFO commandstats: %v", err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(text, "\r\n") {
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				calls[name], _ = strconv.Atoi(v)
			}
		}
	}
	return calls
}

// resetBackendStats zeroes a backend's command statistics.
func resetBackendStats(t testing.TB, backend *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := backend.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatalf("backend CONFIG RESETSTAT: %v", err)
	}
}

// run runs a command-line tool against the proxy with stdin and returns
// its stdout; it fails the test if the tool fails.
func (h *harness) run(t testing.TB, name, stdin string, args ...string) string {
	t.Helper()
	out, stderr, err := h.runTool(t, name, stdin, args...)
	if err != nil {
		t.Fatalf("%s %q: %v\nstdout:\n%s\nstderr:\n%s", name, args, err, out, stderr)
	}
	return out
}

func (h *harness) runTool(t testing.TB, name, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin := redistest.LookPath(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-h", "127.0.0.1", "-p", h.port()}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// eventually calls f every 20ms until it returns nil or `within` has
// passed, and returns f's last error.
func eventually(within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockedLog passes the proxy's log lines to t.Log until the test ends.
type lockedLog struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
	lines   []string
}

func (l *lockedLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSuffix(string(b), "\n"))
	if !l.stopped {
		l.t.Log("rlproxy: " + strings.TrimSuffix(string(b), "\n"))
	}
	return len(b), nil
}

func (l *lockedLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

// Lines returns every line logged so far.
func (l *lockedLog) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}
