package proxy

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strconv"
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

// Each backend node's figures go from one table (stats.go) to both
// outlets, under the names they have always had: INFO's Backends line
// and the node's labelled metrics agree on every figure.
func TestBackendFiguresInInfoAndMetrics(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) { c.MetricsListen = "127.0.0.1:0" })
	h.Do(t, "RL.SETRATE", "b", 10, "1s").Equal(int64(1))
	for range 3 {
		h.Do(t, "RL.ACQUIRE", "b").Acquire()
	}
	addr := h.backend.Addr()
	info := h.Do(t, "INFO", "backends").OK().(string)
	line := regexp.MustCompile(`(?m)^node0:addr=` + regexp.QuoteMeta(addr) + `,state=up,calls=(\d+),errors=0,avg_latency_us=(\d+)\r$`).FindStringSubmatch(info)
	if line == nil {
		t.Fatalf("INFO backends:\n%s\nwant node0:addr=%s,state=up,calls=N,errors=0,avg_latency_us=N", info, addr)
	}
	calls, _ := strconv.ParseFloat(line[1], 64)
	us, _ := strconv.ParseFloat(line[2], 64)
	if calls < 4 || us == 0 {
		t.Errorf("INFO backends says %s calls, %s µs on average after RL.SETRATE and 3 RL.ACQUIRE", line[1], line[2])
	}
	m := h.metricsText(t)
	for metric, want := range map[string]float64{
		"backend_up": 1, "backend_calls_total": calls, "backend_errors_total": 0, "backend_avg_latency_seconds": us / 1e6,
	} {
		got := regexp.MustCompile(`(?m)^rlproxy_` + metric + regexp.QuoteMeta(`{node="`+addr+`"} `) + `(\S+)$`).FindStringSubmatch(m)
		if got == nil {
			t.Errorf("/metrics has no rlproxy_%s of node %s", metric, addr)
			continue
		}
		if v, err := strconv.ParseFloat(got[1], 64); err != nil || math.Abs(v-want) > 1e-6 { // INFO's latency is in whole µs
			t.Errorf("rlproxy_%s = %s, want %v (as INFO says)", metric, got[1], want)
		}
	}
}
