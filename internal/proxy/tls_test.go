package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// A rediss:// backend whose certificate a private CA signs and which
// requires client certificates (a self-hosted Redis with TLS): rlproxy
// works through it with backend_tls_*, and without them says why not.
func TestTLSBackend(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.WithTLS(true))
	files := srv.TLSFiles()
	tlsProxy := func(t *testing.T, ca, cert, key string) *harness {
		return startProxy(t, srv, func(c *config.Config) {
			c.Backends = []string{srv.TLSURL()}
			c.BackendTLSCAFile, c.BackendTLSCertFile, c.BackendTLSKeyFile = ca, cert, key
		})
	}

	t.Run("CA and client certificate", func(t *testing.T) {
		h := tlsProxy(t, files.CA, files.ClientCert, files.ClientKey)
		h.Do(t, "RL.SETRATE", "tls", 3, "1m").Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "tls", 2).Granted(1)
		h.Do(t, "RL.AVAILABLE", "tls").Equal(int64(1))
		// The proxy's connections arrived on the TLS port (the test's own
		// client uses the plain one).
		list := srv.Client(t).ClientList(t.Context()).Val()
		_, tlsPort, _ := strings.Cut(strings.TrimPrefix(srv.TLSURL(), "rediss://"), ":")
		if !strings.Contains(list, "laddr=127.0.0.1:"+tlsPort+" ") {
			t.Errorf("no client of the server came on its TLS port %s:\n%s", tlsPort, list)
		}
	})
	t.Run("system roots only", func(t *testing.T) {
		h := tlsProxy(t, "", "", "")
		msg := h.Do(t, "RL.SETRATE", "tls", 3, "1m").ErrContains("certificate")
		if !strings.HasPrefix(msg, "ERR ") || strings.Contains(msg, "\n") {
			t.Errorf("error %q: want one ERR line", msg)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		h := tlsProxy(t, files.CA, "", "")
		// Under TLS 1.3 the server refuses a missing certificate with an
		// alert after the client's side of the handshake is done, and a
		// write racing it can meet a reset that hides the alert. Every
		// try fails; the alert's words reach the client within a few
		// (one per breaker cooldown).
		var seen []string
		for range 5 {
			msg := h.Do(t, "RL.SETRATE", "tls", 3, "1m").ErrContains("unavailable")
			if strings.Contains(msg, "certificate required") {
				return
			}
			seen = append(seen, msg)
			time.Sleep(1100 * time.Millisecond) // breaker_cooldown: the next try dials again
		}
		t.Fatalf("no error named the missing certificate: %q", seen)
	})
	t.Run("a CA file without certificates", func(t *testing.T) {
		notPEM := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := config.Default()
		cfg.Listen, cfg.Backends, cfg.BackendTLSCAFile = "127.0.0.1:0", []string{srv.TLSURL()}, notPEM
		if p, err := Start(t.Context(), cfg, nil); err == nil {
			p.Close()
			t.Fatal("Start with a CA file holding no certificate succeeded")
		} else if !strings.Contains(err.Error(), "no PEM certificate") {
			t.Errorf("Start: %v, want it to say the CA file has no certificate", err)
		}
	})
}
