package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// SIGHUP applies the limiter side's keys at once: max_waiters (RL.ACQUIRE
// and RL.LEASE waiters), the deny cache (on/off, size), max_probes,
// on_backend_error and breaker_cooldown are not logged as needing a
// restart; backend_timeout is.
func TestBinarySIGHUPLimiterKeys(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + freePort(t)
	file := filepath.Join(t.TempDir(), "rlproxy.yaml")
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(fmt.Sprintf("listen: %q\n", addr)+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("max_waiters: 1\ndeny_cache: true\n")
	p := startBinary(t, nil, "--config", file)
	p.waitReady(t, addr)
	hup := func() {
		t.Helper()
		before := strings.Count(p.log(), "config reloaded")
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(p.log(), "config reloaded") == before {
			if time.Now().After(deadline) {
				t.Fatalf("no reload in the log after SIGHUP:\n%s", p.log())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: -1, PoolSize: 10})
	defer c.Close()
	fromCache := func() int64 {
		t.Helper()
		m := regexp.MustCompile(`denied_from_cache:(\d+)`).FindStringSubmatch(c.Info(ctx, "stats").Val() + c.Info(ctx, "all").Val())
		if m == nil {
			t.Fatal("no denied_from_cache in INFO")
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	if err := c.Do(ctx, "RL.SETRATE", "w", 1, "1h").Err(); err != nil {
		t.Fatal(err)
	}
	c.Do(ctx, "RL.ACQUIRE", "w")
	// max_waiters 1: a second waiter is refused.
	first := make(chan error, 1)
	go func() { first <- c.Do(ctx, "RL.ACQUIRE", "w", "TIMEOUT", "3h").Err() }()
	redistest.WaitFor(t, func() bool { return strings.Contains(c.Info(ctx, "limiters").Val(), "waiting_clients:1\r\n") })
	if err := c.Do(ctx, "RL.ACQUIRE", "w", "TIMEOUT", "3h").Err(); err == nil || !strings.Contains(err.Error(), "max_waiters is 1") {
		t.Fatalf("second waiter under max_waiters 1: %v, want refused", err)
	}
	// The deny cache answers repeated denials.
	before := fromCache()
	for range 5 {
		c.Do(ctx, "RL.ACQUIRE", "w")
	}
	if fromCache() == before {
		t.Fatal("the deny cache answered none of 5 repeated denials")
	}

	write("max_waiters: 3\ndeny_cache: false\ndeny_cache_size: 1000\nmax_probes: 4\non_backend_error: deny\nbreaker_cooldown: 2s\nbackend_timeout: 700ms\n")
	start := time.Now()
	hup()
	t.Logf("SIGHUP applied in %v", time.Since(start).Round(time.Millisecond))
	second := make(chan error, 1)
	go func() { second <- c.Do(ctx, "RL.ACQUIRE", "w", "TIMEOUT", "5h").Err() }()
	select {
	case err := <-second:
		t.Fatalf("second waiter after max_waiters 3: %v, want it waiting", err)
	case <-time.After(300 * time.Millisecond):
	}
	before = fromCache()
	for range 5 {
		c.Do(ctx, "RL.ACQUIRE", "w")
	}
	if n := fromCache() - before; n != 0 {
		t.Errorf("deny_cache off: %d of 5 denials answered from the cache", n)
	}
	var restart string
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.Contains(line, "need a restart") {
			restart = line
		}
	}
	if !strings.Contains(restart, "backend_timeout") {
		t.Errorf("backend_timeout's change is not logged as needing a restart: %q", restart)
	}
	for _, key := range []string{"max_waiters", "deny_cache", "max_probes", "on_backend_error", "breaker_cooldown"} {
		if regexp.MustCompile(`\b` + key + `\b`).MatchString(restart) {
			t.Errorf("%s is logged as needing a restart: %q", key, restart)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d\n%s", code, p.log())
	}
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err == nil || err.Error() != "ERR rlproxy is shutting down" {
			t.Errorf("waiter at SIGTERM: %v, want ERR rlproxy is shutting down", err)
		}
	}
}

// hup sends SIGHUP and waits for one more logLine in the log; it returns
// that line.
func (p *process) hup(t *testing.T, logLine string) string {
	t.Helper()
	before := strings.Count(p.log(), logLine)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(p.log(), logLine) == before {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log after SIGHUP:\n%s", logLine, p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var last string
	for _, line := range strings.Split(p.log(), "\n") {
		if strings.Contains(line, logLine) {
			last = line
		}
	}
	return last
}

// A reload never opens the front door by accident (issue 23): an empty
// file, a truncated one and one that drops users or the client-CA
// requirement are refused with one line — the old config stays,
// authentication is still required, the failure is counted — and with
// reload_may_drop_auth: true the same drop is applied, at WARN.
func TestBinarySIGHUPKeepsAuth(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + freePort(t)
	tlsAddr := "127.0.0.1:" + freePort(t)
	dir := t.TempDir()
	ca := redistest.MakeCA(t, dir)
	file := filepath.Join(dir, "rlproxy.yaml")
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	head := fmt.Sprintf("listen: %q\ntls_listen: %q\ntls_cert_file: %q\ntls_key_file: %q\n", addr, tlsAddr, ca.ServerCert, ca.ServerKey)
	clientCA := fmt.Sprintf("tls_client_ca_file: %q\n", ca.CA)
	pass := "require_pass: root\n"
	users := "users:\n  - name: app\n    password: apppw\n    commands: [acquire]\n"
	limiters := "    limiters: [\"api:*\"]\n"
	full := head + clientCA + pass + users + limiters
	write(full)
	p := startBinary(t, nil, "--config", file)
	p.waitReadyAuth(t, addr, "root")

	ctx := context.Background()
	client := func(user, password string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password, MaxRetries: -1, DisableIdentity: true, Protocol: 2})
		t.Cleanup(func() { c.Close() })
		return c
	}
	anon, root, app := client("", ""), client("", "root"), client("app", "apppw")
	tlsRefused := func() bool { // a TLS client without a client certificate
		pool := x509.NewCertPool()
		pem, err := os.ReadFile(ca.CA)
		if err != nil {
			t.Fatal(err)
		}
		pool.AppendCertsFromPEM(pem)
		c := redis.NewClient(&redis.Options{Addr: tlsAddr, Password: "root", MaxRetries: -1,
			TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
		defer c.Close()
		return c.Ping(ctx).Err() != nil
	}
	stillGuarded := func(step string) {
		t.Helper()
		if err := anon.Do(ctx, "RL.SETRATE", "x", 1, "1s").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			t.Errorf("%s: unauthenticated RL.SETRATE: %v, want NOAUTH", step, err)
		}
		if err := app.Do(ctx, "RL.SETRATE", "api:x", 1, "1s").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s: RL.SETRATE as the acquire-only app: %v, want NOPERM", step, err)
		}
		if err := app.Do(ctx, "RL.ACQUIRE", "other").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s: RL.ACQUIRE of a limiter outside app's patterns: %v, want NOPERM", step, err)
		}
		if err := root.Ping(ctx).Err(); err != nil {
			t.Errorf("%s: the running require_pass: %v", step, err)
		}
		if !tlsRefused() {
			t.Errorf("%s: a TLS client without a certificate got in", step)
		}
	}
	stillGuarded("at start")

	for _, step := range []struct{ name, yaml, want string }{
		{"empty file", "", "is empty"},
		{"only comments", "# rlproxy\n", "is empty"},
		{"cut after require_pass", head + clientCA + pass, "drops users"},
		{"cut before limiters", head + clientCA + pass + users, "drops users[0] (app).limiters"},
		{"cut after the first line", head[:strings.Index(head, "\n")+1], "drops require_pass, users, tls_listen, tls_client_ca_file"},
		{"users removed", head + clientCA + pass, "drops users"},
		{"client CA removed", head + pass + users + limiters, "drops tls_client_ca_file"},
		{"require_pass removed", head + clientCA + users + limiters, "drops require_pass"},
	} {
		write(step.yaml)
		line := p.hup(t, "config reload failed")
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, step.want) {
			t.Errorf("%s: the log line %q, want an ERROR naming %q", step.name, line, step.want)
		}
		stillGuarded(step.name)
	}
	info := root.Info(ctx, "reload").Val()
	if !strings.Contains(info, "reload_failures:8\r\n") || !strings.Contains(info, "reloads:0\r\n") {
		t.Errorf("INFO reload after 8 refused reloads: %q", info)
	}

	// A new password is not a drop: applied, logged at WARN.
	write(head + clientCA + "require_pass: root2\n" + users + limiters)
	line := p.hup(t, "config reloaded")
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "auth=[require_pass]") || strings.Contains(line, "dropped") {
		t.Errorf("a new password's reload: %q, want WARN auth=[require_pass] and nothing dropped", line)
	}
	root = client("", "root2")

	// On purpose: everything dropped, applied at once.
	write(fmt.Sprintf("listen: %q\nreload_may_drop_auth: true\n", addr))
	line = p.hup(t, "config reloaded")
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "dropped=\"[require_pass users tls_listen tls_client_ca_file]\"") {
		t.Errorf("the reload that drops authentication on purpose: %q", line)
	}
	anon = client("", "") // rlproxy decides at connect whether a connection needs AUTH
	if n, err := anon.Do(ctx, "RL.SETRATE", "x", 1, "1s").Int64(); err != nil || n != 1 {
		t.Errorf("unauthenticated RL.SETRATE after reload_may_drop_auth: %v, %v", n, err)
	}
	if !regexp.MustCompile(`need a restart.*tls_listen`).MatchString(p.log()) {
		t.Errorf("tls_listen's removal is not logged as needing a restart:\n%s", p.log())
	}
	if !tlsRefused() {
		t.Error("the TLS listener, kept until a restart, let in a client without a certificate")
	}
	if strings.Contains(p.log(), "apppw") || strings.Contains(p.log(), "root2") {
		t.Errorf("a password in the log:\n%s", p.log())
	}
	info = anon.Info(ctx, "reload").Val()
	if !strings.Contains(info, "reload_failures:8\r\n") || !strings.Contains(info, "reloads:2\r\n") {
		t.Errorf("INFO reload: %q", info)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code after SIGTERM: %d\n%s", code, p.log())
	}
}
