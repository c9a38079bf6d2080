package proxy

// The front door end to end: clients over TLS (redis-cli --tls, go-redis)
// with and without client certificates, certificates reloaded live, and
// users.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
