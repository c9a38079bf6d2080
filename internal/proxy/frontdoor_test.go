package proxy

// The front door end to end: clients over TLS (redis-cli --tls, go-redis)
// with and without client certificates, certificates reloaded live, and
// users.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// tlsClient is a go-redis client of addr that trusts ca and, when cert is
// set, presents that client certificate.
func tlsClient(t *testing.T, addr string, ca redistest.CA, cert bool, password string) *redis.Client {
	t.Helper()
	pem, err := os.ReadFile(ca.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert {
		pair, err := tls.LoadX509KeyPair(ca.ClientCert, ca.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: cfg, Password: password, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// redisCLI runs redis-cli against addr with args (TLS options included)
// and returns its output and error.
func redisCLI(t *testing.T, addr string, args ...string) (string, error) {
	t.Helper()
	bin := redistest.LookPath(t, "redis-cli")
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	return string(out), err
}

func TestTLSClients(t *testing.T) {
	ca := redistest.MakeCA(t, t.TempDir())
	tlsOn := func(clientCA string) func(*config.Config) {
		return func(c *config.Config) {
			c.TLSListen, c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = "127.0.0.1:0", ca.ServerCert, ca.ServerKey, clientCA
		}
	}
	ctx := t.Context()

	t.Run("server certificate only", func(t *testing.T) {
		h := start(t, tlsOn(""))
		tlsAddr := h.proxy.TLSAddr()
		c := tlsClient(t, tlsAddr, ca, false, "")
		if err := c.Do(ctx, "RL.SETRATE", "tls", 3, "1m").Err(); err != nil {
			t.Fatalf("go-redis over TLS: %v", err)
		}
		if v, err := c.Do(ctx, "RL.ACQUIRE", "tls").Int64Slice(); err != nil || v[0] != 1 || v[1] != 2 {
			t.Errorf("RL.ACQUIRE over TLS: %v, %v", v, err)
		}
		// The plain listener keeps working, on the same limiters.
		h.Do(t, "RL.AVAILABLE", "tls").Equal(int64(2))
		out, err := redisCLI(t, tlsAddr, "--tls", "--cacert", ca.CA, "RL.AVAILABLE", "tls")
		if err != nil || out != "2\n" {
			t.Errorf("redis-cli --tls: %q, %v", out, err)
		}
		// A client that does not trust the CA, and one speaking plain RESP
		// to the TLS port, get nowhere.
		if out, err := redisCLI(t, tlsAddr, "--tls", "PING"); err == nil && strings.Contains(out, "PONG") {
			t.Errorf("redis-cli --tls without the CA: %q", out)
		}
		plain := redis.NewClient(&redis.Options{Addr: tlsAddr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		defer plain.Close()
		if err := plain.Ping(ctx).Err(); err == nil {
			t.Error("plain RESP on the TLS port answered")
		}
	})

	t.Run("client certificates required", func(t *testing.T) {
		h := start(t, tlsOn(ca.CA), func(c *config.Config) { c.RequirePass = "pw" })
		tlsAddr := h.proxy.TLSAddr()
		if err := tlsClient(t, tlsAddr, ca, true, "pw").Ping(ctx).Err(); err != nil {
			t.Errorf("go-redis with a client certificate: %v", err)
		}
		if err := tlsClient(t, tlsAddr, ca, false, "pw").Ping(ctx).Err(); err == nil {
			t.Error("go-redis without a client certificate got in")
		}
		out, err := redisCLI(t, tlsAddr, "--tls", "--cacert", ca.CA, "--cert", ca.ClientCert, "--key", ca.ClientKey, "--user", "default", "--pass", "pw", "--no-auth-warning", "PING")
		if err != nil || out != "PONG\n" {
			t.Errorf("redis-cli --tls --cert: %q, %v", out, err)
		}
		if out, err := redisCLI(t, tlsAddr, "--tls", "--cacert", ca.CA, "--pass", "pw", "--no-auth-warning", "PING"); err == nil && strings.Contains(out, "PONG") {
			t.Errorf("redis-cli --tls without a client certificate: %q", out)
		}
	})

	t.Run("certificates reloaded", func(t *testing.T) {
		dir := t.TempDir()
		cert, key := dir+"/server.crt", dir+"/server.key"
		copyFile(t, ca.ServerCert, cert)
		copyFile(t, ca.ServerKey, key)
		h := start(t, func(c *config.Config) { c.TLSListen, c.TLSCertFile, c.TLSKeyFile = "127.0.0.1:0", cert, key })
		tlsAddr := h.proxy.TLSAddr()
		old := tlsClient(t, tlsAddr, ca, false, "")
		if err := old.Ping(ctx).Err(); err != nil {
			t.Fatalf("before the reload: %v", err)
		}
		// The certificate is renewed in place (by another CA) and the
		// config reloaded: new connections get the new one.
		ca2 := redistest.MakeCA(t, t.TempDir())
		copyFile(t, ca2.ServerCert, cert)
		copyFile(t, ca2.ServerKey, key)
		if restart, err := h.proxy.Reload(h.cfg); err != nil || len(restart) > 0 {
			t.Fatalf("Reload: %v, restart %q", err, restart)
		}
		if err := tlsClient(t, tlsAddr, ca2, false, "").Ping(ctx).Err(); err != nil {
			t.Errorf("a client trusting the new CA: %v", err)
		}
		if err := tlsClient(t, tlsAddr, ca, false, "").Ping(ctx).Err(); err == nil {
			t.Error("a new client trusting only the old CA got in after the reload")
		}
		// A broken certificate file keeps the one in use.
		if err := os.WriteFile(cert, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := h.proxy.Reload(h.cfg); err == nil {
			t.Error("Reload with a broken certificate file succeeded")
		}
		if err := tlsClient(t, tlsAddr, ca2, false, "").Ping(ctx).Err(); err != nil {
			t.Errorf("after a failed reload: %v", err)
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// An acquire-only user, end to end: it acquires from its limiters and
// can do nothing else; an admin set them up; nothing it is refused
// reaches the backend.
func TestUsersEndToEnd(t *testing.T) {
	h := start(t, func(c *config.Config) {
		c.RequirePass = "root"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"acquire"}, Limiters: []string{"api:*"}}}
	})
	h.Do(t, "RL.SETRATE", "api:search", 2, "1m").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "billing", 2, "1m").Equal(int64(1))
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "RL.ACQUIRE", "api:search").Granted(1)
	app.Do(t, "RL.AVAILABLE", "api:search").Equal(int64(1))
	app.Do(t, "CL.THROTTLE", "api:cell", 1, 1, 60).OK()
	// GCRA, RL.THROTTLE and RL.CHARGE are acquire-class too.
	app.Do(t, "GCRA", "api:gcra", 1, 1, 60).OK()
	app.Do(t, "RL.THROTTLE", "api:cell", 1, 1, 60).OK()
	h.Do(t, "RL.SETRATE", "api:llm", 2, "1m").Equal(int64(1))
	app.Do(t, "RL.CHARGE", "api:llm", 3).OK()
	app.Do(t, "RL.AVAILABLE", "api:llm").Equal(int64(0))
	backend := h.backend.Client(t)
	resetBackendStats(t, backend)
	app.Do(t, "RL.ACQUIRE", "billing").Err("NOPERM No permissions to access the 'billing' limiter")
	app.Do(t, "RL.SETRATE", "api:search", 100, "1s").Err("NOPERM User app has no permissions to run the 'rl.setrate' command")
	app.Do(t, "RL.DEL", "api:search").Err("NOPERM User app has no permissions to run the 'rl.del' command")
	app.Do(t, "RL.RESET", "api:search").Err("NOPERM User app has no permissions to run the 'rl.reset' command")
	app.Do(t, "RL.ACQUIRE", strings.Repeat("x", 513)).Err("ERR limiter name is longer than 512 bytes")
	if calls := backendCalls(t, backend); len(calls) > 1+min(calls["get"], 1) { // config|resetstat, and get: the proxy's poll of the policies' version
		t.Errorf("refused commands reached the backend: %v", calls)
	}
	h.Do(t, "RL.AVAILABLE", "api:search").Equal(int64(1))
	// HELLO 3 AUTH with the user (go-redis' own handshake above used it too).
	c := h.raw(t)
	if got := c.Call("HELLO", "3", "AUTH", "app", "wrong"); !strings.HasPrefix(got, "-WRONGPASS") {
		t.Errorf("HELLO 3 AUTH app wrong: %q", got)
	}
	if got := c.Call("AUTH", "app", "apppw"); got != "+OK" {
		t.Errorf("AUTH app: %q", got)
	}
}

// max_name_length: a long limiter name never reaches a backend.
func TestNameLengthEndToEnd(t *testing.T) {
	h := start(t)
	backend := h.backend.Client(t)
	resetBackendStats(t, backend)
	long := strings.Repeat("n", 513)
	h.Do(t, "RL.SETRATE", long, 1, "1s", "SHARDS", 1024).Err("ERR limiter name is longer than 512 bytes")
	h.Do(t, "RL.ACQUIRE", long).Err("ERR limiter name is longer than 512 bytes")
	h.Do(t, "CLIENT", "SETNAME", long).Err("ERR client name is longer than 512 bytes")
	if calls := backendCalls(t, backend); len(calls) > 1+min(calls["get"], 1) { // config|resetstat, and get: the proxy's poll of the policies' version
		t.Errorf("a too long name reached the backend: %v", calls)
	}
	h.Do(t, "RL.SETRATE", strings.Repeat("n", 512), 1, "1s").Equal(int64(1))
}

// Failed AUTHs show in INFO and in /metrics.
func TestAuthFailuresInMetrics(t *testing.T) {
	h := start(t, func(c *config.Config) { c.RequirePass = "pw"; c.MetricsListen = "127.0.0.1:0" })
	bad := h.raw(t)
	for range 3 {
		if got := bad.Call("AUTH", "wrong"); !strings.HasPrefix(got, "-WRONGPASS") {
			t.Fatalf("AUTH wrong: %q", got)
		}
	}
	if info := h.Do(t, "INFO", "stats").OK().(string); !strings.Contains(info, "auth_failures:3\r\n") {
		t.Errorf("INFO stats: %q", info)
	}
	resp, err := http.Get("http://" + h.proxy.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "rlproxy_auth_failures_total 3\n") {
		t.Errorf("/metrics lacks rlproxy_auth_failures_total 3")
	}
}

// metricsText is the proxy's /metrics page.
func (h *harness) metricsText(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + h.proxy.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// Failed TLS handshakes — plain RESP on the TLS port, no client
// certificate, a client that does not trust the server — are counted in
// INFO and /metrics and logged at most once a second; a good one is not.
func TestTLSHandshakeFailures(t *testing.T) {
	ca := redistest.MakeCA(t, t.TempDir())
	h := start(t, func(c *config.Config) {
		c.TLSListen, c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = "127.0.0.1:0", ca.ServerCert, ca.ServerKey, ca.CA
		c.MetricsListen = "127.0.0.1:0"
	})
	tlsAddr := h.proxy.TLSAddr()
	began := time.Now()
	const rounds = 4
	// One connection, so one handshake, each: PING over TLS with cfg
	// (nil: plain RESP); it reports whether PONG came back.
	ping := func(cfg *tls.Config) bool {
		c, err := net.DialTimeout("tcp", tlsAddr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if cfg != nil {
			c = tls.Client(c, cfg)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return false
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line == "+PONG\r\n"
	}
	trusting := func(ca redistest.CA, cert bool) *tls.Config {
		cfg := tlsClient(t, tlsAddr, ca, cert, "").Options().TLSConfig.Clone()
		cfg.ServerName = "127.0.0.1" // as go-redis sets it when it dials
		return cfg
	}
	for range rounds {
		if ping(nil) {
			t.Fatal("plain RESP on the TLS port answered")
		}
		if ping(trusting(ca, false)) {
			t.Fatal("a client without a certificate got in")
		}
		if ping(trusting(redistest.MakeCA(t, t.TempDir()), true)) {
			t.Fatal("a client that does not trust the server's CA got in")
		}
	}
	took := time.Since(began)
	if !ping(trusting(ca, true)) {
		t.Fatal("a good TLS client got no PONG")
	}
	want := fmt.Sprintf("tls_handshake_failures:%d\r\n", 3*rounds)
	if err := eventually(5*time.Second, func() error {
		if info := h.Do(t, "INFO", "stats").OK().(string); !strings.Contains(info, want) {
			return fmt.Errorf("INFO stats lacks %q: %q", want, info)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if m := h.metricsText(t); !strings.Contains(m, fmt.Sprintf("rlproxy_tls_handshake_failures_total %d\n", 3*rounds)) {
		t.Error("/metrics lacks rlproxy_tls_handshake_failures_total")
	}
	lines := 0
	for _, l := range h.log.Lines() {
		if strings.Contains(l, "TLS handshake failed") {
			lines++
		}
	}
	if most := 1 + int(took/time.Second) + 1; lines < 1 || lines > most {
		t.Errorf("%d log lines for %d failed handshakes in %v, want 1..%d", lines, 3*rounds, took, most)
	}
}

// INFO shows the backends' addresses to admins only; an acquire-only
// user gets the rest (ioredis waits for loading:0 whoever it is).
func TestInfoBackendsForAdminsOnly(t *testing.T) {
	h := start(t, func(c *config.Config) {
		c.RequirePass = "root"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"acquire"}}}
	})
	addr := strings.TrimPrefix(h.backend.URL(), "redis://")
	if info := h.Do(t, "INFO").OK().(string); !strings.Contains(info, "# Backends\r\n") || !strings.Contains(info, addr) {
		t.Errorf("INFO as the default user lacks the backends:\n%s", info)
	}
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	for _, args := range [][]any{{"INFO"}, {"INFO", "all"}, {"INFO", "everything"}, {"INFO", "backends", "server"}} {
		info := app.Do(t, args...).OK().(string)
		if strings.Contains(info, "Backends") || strings.Contains(info, addr) {
			t.Errorf("%v as the acquire-only app shows the backends:\n%s", args, info)
		}
		if !strings.Contains(info, "redis_version:") {
			t.Errorf("%v as app lacks the Server section:\n%s", args, info)
		}
	}
	if info := app.Do(t, "INFO").OK().(string); !strings.Contains(info, "loading:0\r\n") || !strings.Contains(info, "# Limiters\r\n") {
		t.Errorf("INFO as app lacks loading:0 or the Limiters section:\n%s", info)
	}
}

// A reload that drops authentication is refused and counted (INFO and
// /metrics); with reload_may_drop_auth it applies.
func TestReloadDroppingAuth(t *testing.T) {
	h := start(t, func(c *config.Config) { c.RequirePass = "root"; c.MetricsListen = "127.0.0.1:0" })
	cfg := h.cfg
	cfg.RequirePass = ""
	if _, err := h.proxy.Reload(cfg); err == nil || !strings.Contains(err.Error(), "drops require_pass") {
		t.Fatalf("Reload without require_pass: %v, want refused", err)
	}
	h.proxy.ReloadFailed() // as cmd/rlproxy counts a file that did not load
	anon := h.raw(t)
	if got := anon.Call("PING"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Errorf("PING without AUTH after the refused reload: %q", got)
	}
	if info := h.Do(t, "INFO", "reload").OK().(string); !strings.Contains(info, "reloads:0\r\nreload_failures:2\r\n") {
		t.Errorf("INFO reload: %q", info)
	}
	cfg.ReloadMayDropAuth = true
	if restart, err := h.proxy.Reload(cfg); err != nil || len(restart) > 0 {
		t.Fatalf("Reload with reload_may_drop_auth: %v, restart %q", err, restart)
	}
	if got := h.raw(t).Call("PING"); got != "+PONG" {
		t.Errorf("PING without AUTH after the reload: %q", got)
	}
	m := h.metricsText(t)
	for _, want := range []string{"rlproxy_reloads_total 1\n", "rlproxy_reload_failures_total 2\n"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// The server's figures (INFO Clients and Stats) are on /metrics too.
func TestServerStatsInMetrics(t *testing.T) {
	h := start(t, func(c *config.Config) { c.MetricsListen = "127.0.0.1:0"; c.MaxClients = 2 })
	h.Do(t, "PING").Equal("PONG")
	if got := h.raw(t).Call("PING"); got != "+PONG" {
		t.Fatalf("PING: %q", got)
	}
	third, err := net.Dial("tcp", h.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if line, _ := bufio.NewReader(third).ReadString('\n'); line != "-ERR max number of clients reached\r\n" {
		t.Fatalf("a third client under max_clients 2: %q", line)
	}
	m := h.metricsText(t)
	for _, want := range []string{
		"rlproxy_connected_clients 2\n", "rlproxy_connections_received_total 2\n", "rlproxy_rejected_connections_total 1\n",
		"rlproxy_accept_errors_out_of_fds_total 0\n", "rlproxy_recovered_panics_total 0\n", "rlproxy_commands_processed_total ",
		"rlproxy_auth_failures_total 0\n", "rlproxy_tls_handshake_failures_total 0\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	info := h.Do(t, "INFO").OK().(string)
	for _, want := range []string{"connected_clients:2\r\n", "total_connections_received:2\r\n", "rejected_connections:1\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO lacks %q", want)
		}
	}
}
