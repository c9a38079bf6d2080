package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// readyz returns /readyz's status and body.
func readyz(t *testing.T, h *harness) (int, string) {
	t.Helper()
	c := http.Client{Timeout: callTimeout}
	resp, err := c.Get("http://" + h.proxy.MetricsAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A node whose breaker opened (a call found it frozen) is not ready
// while the breaker cools down, although it answers again: requests
// would be refused at once until then. Once the cooldown is over it is.
func TestReadyzBreakerOpen(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.BackendTimeout = 100 * time.Millisecond
		c.BreakerCooldown = 3 * time.Second // long enough to see it cooling on a busy machine
		c.BreakerFailures = 1
	})
	h.Do(t, "RL.SETRATE", "r", 10, "1s").Equal(int64(1))
	if code, body := readyz(t, h); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz: %d %q, want 200 ok", code, body)
	}
	h.backend.Pause(t)
	h.Do(t, "RL.ACQUIRE", "r").ErrContains("unavailable")
	h.backend.Resume(t)
	code, body := readyz(t, h)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "circuit open") {
		t.Errorf("/readyz while the breaker cools down: %d %q, want 503 naming the open circuit", code, body)
	}
	if err := eventually(10*time.Second, func() error {
		if code, body := readyz(t, h); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	}); err != nil {
		t.Errorf("after the cooldown: %v, want 200", err)
	}
}

// On Redis Cluster /readyz checks every master: one frozen makes it 503
// naming that master; back, it is 200 again.
func TestReadyzCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	h := startProxy(t, nil, func(c *config.Config) {
		c.Cluster = cluster.URLs()
		c.MetricsListen = "127.0.0.1:0"
		c.BackendTimeout = 200 * time.Millisecond
	})
	if code, body := readyz(t, h); code != http.StatusOK {
		t.Fatalf("/readyz: %d %q, want 200", code, body)
	}
	frozen := cluster.Nodes[1]
	frozen.Pause(t)
	code, body := readyz(t, h)
	t.Logf("/readyz with a master frozen: %d %q", code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, frozen.Addr()) {
		t.Errorf("/readyz with master %s frozen: %d %q, want 503 naming it", frozen.Addr(), code, body)
	}
	frozen.Resume(t)
	if err := eventually(5*time.Second, func() error {
		if code, body := readyz(t, h); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	}); err != nil {
		t.Errorf("after SIGCONT: %v, want 200", err)
	}
}
