package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/proxy"
)

// This file is rlviz -dashboard: the README's picture of the Grafana
// dashboard (docs/grafana/rlproxy.json). Grafana is not needed: it runs
// a load through an rlproxy in this process, scrapes its /metrics every
// second, evaluates the dashboard's own queries over the scrapes
// (promql.go) and draws each panel where the dashboard puts it
// (plot.go).

// panel is what rlviz reads of a Grafana panel.
type panel struct {
	Type        string
	Title       string
	GridPos     struct{ X, Y, W, H int }
	FieldConfig struct {
		Defaults struct{ Unit string }
	}
	Targets []struct{ Expr, LegendFormat string }
}

// readDashboard returns the dashboard's title and panels.
func readDashboard(path string) (string, []panel, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	var d struct {
		Title  string
		Panels []panel
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return d.Title, d.Panels, nil
}

// Timeline of the load (from its start).
const (
	surgeFrom, surgeTo = 15 * time.Second, 25 * time.Second // twice the clients on the hot limiter
	pauseAt, resumeAt  = 32 * time.Second, 35 * time.Second // redis-server SIGSTOPped
	loadEnd            = 45 * time.Second
	rateWindow         = 5 // scrapes (seconds) a rate looks back over
)

func runDashboard(dashboardPath, out string) error {
	title, panels, err := readDashboard(dashboardPath)
	if err != nil {
		return err
	}
	queries := make([][]node, len(panels))
	for i, p := range panels {
		for _, t := range p.Targets {
			n, err := parse(t.Expr)
			if err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
			queries[i] = append(queries[i], n)
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cfg := config.Default()
	cfg.Listen, cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.BackendTimeout, cfg.BreakerCooldown = 200*time.Millisecond, time.Second
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("the dashboard's run needs redis-server (its load pauses it): %w", err)
	}
	url, redisCmd, kill, err := startRedis(ctx, bin)
	if err != nil {
		return err
	}
	defer kill()
	cfg.Backends = []string{url}
	p, err := proxy.Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer p.Close()

	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 200, MaxRetries: -1})
	defer c.Close()
	for _, args := range [][]any{
		{"RL.SETRATE", "api", 2000, "1s"},
		{"RL.SETRATE", "canary", 100, "1s", "SHADOW"},
		{"RL.SETRATE", "abuser", 50, "1s"},
		{"RL.SETRATE", "slow", 20, "1s"},
		{"RL.SETRATE", "pool", 4, "2s", "ALGO", "concurrency"},
	} {
		if err := c.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("%v: %w", args, err)
		}
	}

	start := time.Now()
	var wg sync.WaitGroup
	worker := func(from, to time.Duration, pace time.Duration, call func() error) {
		wg.Go(func() {
			time.Sleep(from)
			for time.Since(start) < to && ctx.Err() == nil {
				_ = call() // errors are part of the picture (the paused backend)
				time.Sleep(pace)
			}
		})
	}
	acquire := func(args ...any) func() error {
		return func() error { return c.Do(ctx, append([]any{"RL.ACQUIRE"}, args...)...).Err() }
	}
	for range 6 { // about 3000 req/s on a 2000/s limiter: some denials
		worker(0, loadEnd, 2*time.Millisecond, acquire("api"))
	}
	for range 6 { // the surge: twice the clients
		worker(surgeFrom, surgeTo, 2*time.Millisecond, acquire("api"))
	}
	for range 2 { // one client far over its limit: the deny cache answers it
		worker(surgeFrom, surgeTo, time.Millisecond, acquire("abuser"))
	}
	for range 2 { // a SHADOW limiter: denials counted, everything granted
		worker(0, loadEnd, 4*time.Millisecond, acquire("canary"))
	}
	for range 30 { // clients queueing on a slow limiter
		worker(0, loadEnd, 0, acquire("slow", "TIMEOUT", "2s"))
	}
	for range 8 { // a pool of 4 shared by 8 workers
		worker(0, loadEnd, 0, func() error {
			v, err := c.Do(ctx, "RL.LEASE", "pool", "TIMEOUT", "1s").Slice()
			if err != nil || v[0] != int64(1) {
				return err
			}
			time.Sleep(150 * time.Millisecond)
			return c.Do(ctx, "RL.RETURN", "pool", v[3]).Err()
		})
	}
	wg.Go(func() {
		time.Sleep(pauseAt)
		_ = redisCmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(resumeAt - pauseAt)
		_ = redisCmd.Process.Signal(syscall.SIGCONT)
	})

	var scrapes []scrape
	for next := start; time.Since(start) < loadEnd; next = next.Add(time.Second) {
		time.Sleep(time.Until(next))
		resp, err := http.Get("http://" + p.MetricsAddr() + "/metrics")
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		scrapes = append(scrapes, parseMetrics(string(body), time.Now()))
	}
	wg.Wait()

	var times []time.Duration
	for _, s := range scrapes[rateWindow:] {
		times = append(times, s.at.Sub(scrapes[rateWindow].at))
	}
	shift := scrapes[rateWindow].at.Sub(start)
	plots := make([]plotted, len(panels))
	for i, pn := range panels {
		plots[i].panel = pn
		for j, q := range queries[i] {
			plots[i].lines = append(plots[i].lines, evalLines(q, pn.Targets[j].LegendFormat, scrapes)...)
		}
	}
	img := drawDashboard(fmt.Sprintf("%s: %s plotted from a real run (rlviz -dashboard), %ds of load", title, filepath.Base(dashboardPath), int(times[len(times)-1].Seconds())),
		plots, times, []mark{
			{surgeFrom - shift, "surge: twice the clients, one far over its limit"},
			{surgeTo - shift, "surge ends"},
			{pauseAt - shift, "redis SIGSTOP"},
			{resumeAt - shift, "SIGCONT"},
		})
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", out)
	return nil
}

// evalLines evaluates q at every scrape after the first rate window and
// returns one line per label set, labelled by legend ("{{node}}" is the
// set's node label).
func evalLines(q node, legend string, scrapes []scrape) []line {
	byKey := map[string]*line{}
	var keys []string
	n := len(scrapes) - rateWindow
	for i := rateWindow; i < len(scrapes); i++ {
		v := q.eval(scrapes, i, rateWindow)
		for _, k := range sortedKeys(v) {
			l := byKey[k]
			if l == nil {
				l = &line{label: fill(legend, k), points: make([]float64, n)}
				for j := range l.points {
					l.points[j] = math.NaN()
				}
				byKey[k] = l
				keys = append(keys, k)
			}
			l.points[i-rateWindow] = v[k]
		}
	}
	out := make([]line, len(keys))
	for i, k := range keys {
		out[i] = *byKey[k]
	}
	return out
}

// fill replaces {{label}} in legend with the label's value in set.
func fill(legend, set string) string {
	for _, kv := range splitLabels(set) {
		name, value, _ := strings.Cut(kv, "=")
		legend = strings.ReplaceAll(legend, "{{"+name+"}}", strings.Trim(value, `"`))
	}
	return legend
}
