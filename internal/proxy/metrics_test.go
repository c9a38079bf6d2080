package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

func TestMetricsEndpointCountsDecisions(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.Backends = []string{srv.URL()}
	p, err := Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "RL.SETRATE", "m", 2, "1m").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := c.Do(ctx, "RL.ACQUIRE", "m").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A SHADOW limiter's denial is a grant, counted as shadow_denied too.
	for i := 0; i < 2; i++ {
		if err := c.Do(ctx, "RL.SETRATE", "s", 1, "1m", "SHADOW").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, "RL.ACQUIRE", "s").Err(); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get("http://" + p.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		"rlproxy_acquire_granted_total 4",
		"rlproxy_acquire_shadow_denied_total 1",
		"rlproxy_acquire_denied_total 1",
		`rlproxy_backend_up{node="` + srv.Addr() + `"} 1`,
		"rlproxy_busy_poll_reads_total ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
