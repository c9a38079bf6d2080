package proxy

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// rueidis with its DEFAULT options: it opens with HELLO 3, turns on
// client-side caching (CLIENT TRACKING ON OPTIN), probes CLUSTER SLOTS to
// tell a cluster from a single node, and auto-pipelines. An
// application's session runs through it, and it reconnects by itself
// after the proxy restarts.
func TestRueidis(t *testing.T) {
	backend := redistest.StartServer(t)
	cfg := config.Default()
	cfg.Listen, cfg.Backends = "127.0.0.1:0", []string{backend.URL()}
	p, err := Start(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	addr := p.Addr()
	defer func() { p.Close() }()

	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		t.Fatalf("rueidis.NewClient with default options: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	do := func(args ...string) rueidis.RedisResult {
		return c.Do(ctx, c.B().Arbitrary(args...).Build())
	}

	// Create, then a pipeline of 5 on 3 per 10s: exactly the first 3
	// granted, in order.
	if n, err := do("RL.SETRATE", "rue", "3", "10s").AsInt64(); err != nil || n != 1 {
		t.Fatalf("RL.SETRATE: %d, %v", n, err)
	}
	var pipe rueidis.Commands
	for range 5 {
		pipe = append(pipe, c.B().Arbitrary("RL.ACQUIRE", "rue").Build())
	}
	var granted, remaining []int64
	for i, r := range c.DoMulti(ctx, pipe...) {
		v, err := r.AsIntSlice()
		if err != nil || len(v) != 4 {
			t.Fatalf("pipelined RL.ACQUIRE %d: %v, %v", i, v, err)
		}
		granted, remaining = append(granted, v[0]), append(remaining, v[1])
	}
	if !slices.Equal(granted, []int64{1, 1, 1, 0, 0}) || !slices.Equal(remaining, []int64{2, 1, 0, 0, 0}) {
		t.Errorf("pipeline of 5 on 3/10s: granted %v remaining %v, want [1 1 1 0 0] [2 1 0 0 0]", granted, remaining)
	}

	// A TIMEOUT wait is granted once a permit is back (2 per second).
	do("RL.SETRATE", "rue-wait", "2", "1s")
	do("RL.ACQUIRE", "rue-wait", "2")
	start := time.Now()
	v, err := do("RL.ACQUIRE", "rue-wait", "1", "TIMEOUT", "3s").AsIntSlice()
	if err != nil || len(v) != 4 || v[0] != 1 {
		t.Errorf("RL.ACQUIRE TIMEOUT 3s: %v, %v; want granted", v, err)
	} else if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Errorf("RL.ACQUIRE TIMEOUT granted after %v, want about 500ms", d)
	}

	// RL.GETRATE is a map (RESP3).
	m, err := do("RL.GETRATE", "rue").ToMap()
	if err != nil {
		t.Fatalf("RL.GETRATE as a map: %v", err)
	}
	field := func(name string) *rueidis.RedisMessage { v := m[name]; return &v }
	rate, _ := field("rate").AsInt64()
	interval, _ := field("interval_ms").AsInt64()
	algo, _ := field("algo").ToString()
	if rate != 3 || interval != 10000 || algo != "token-bucket" || len(m) != 7 {
		t.Errorf("RL.GETRATE: rate %d interval_ms %d algo %q (%d fields)", rate, interval, algo, len(m))
	}
	if err := do("RL.GETRATE", "rue-none").Error(); !rueidis.IsRedisNil(err) {
		t.Errorf("RL.GETRATE of no limiter: %v, want nil", err)
	}

	// An error is rueidis's error type, with Redis's wording (rueidis
	// drops the "ERR " of an error line).
	err = do("RL.ACQUIRE", "rue-none").Error()
	if re, ok := rueidis.IsRedisErr(err); !ok || re.Error() != "no such limiter 'rue-none' (create it with RL.SETRATE or RL.POLICY SET)" {
		t.Errorf("RL.ACQUIRE of no limiter: %T %v", err, err)
	}

	// CL.THROTTLE: redis-cell's reply.
	th, err := do("CL.THROTTLE", "rue-cell", "4", "2", "60").AsIntSlice()
	if err != nil || len(th) != 5 || th[0] != 0 || th[1] != 5 || th[2] != 4 || th[3] != -1 || th[4] < 1 || th[4] > 30 {
		t.Errorf("CL.THROTTLE: %v, %v; want [0 5 4 -1 ~30]", th, err)
	}

	// Restart the proxy on the same address: rueidis reconnects by itself
	// and the limiter (on the backend) is still there.
	p.Close()
	cfg.Listen = addr
	if p, err = Start(t.Context(), cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("restart on %s: %v", addr, err)
	}
	err = eventually(10*time.Second, func() error {
		_, err := do("RL.AVAILABLE", "rue").AsInt64()
		return err
	})
	if err != nil {
		t.Fatalf("rueidis after the proxy restarted: %v", err)
	}
	if n, err := do("RL.SETRATE", "rue", "3", "10s").AsInt64(); err != nil || n != 0 {
		t.Errorf("RL.SETRATE after restart: %d, %v; want 0 (the limiter is kept)", n, err)
	}
	if s, err := do("PING").ToString(); err != nil || !strings.EqualFold(s, "PONG") {
		t.Errorf("PING: %q, %v", s, err)
	}
}
