// Command rlviz draws docs/algorithms.svg: how each of rlproxy's five
// algorithms, and a limiter with two limits, answers the same bursty
// load. It starts a redis-server on a free loopback port (or, when
// redis-server is not on PATH, the embedded in-memory backend) and an
// rlproxy in this process, creates one limiter per row at 10 permits per
// second, sends every limiter the same requests at the same moments
// (about seven seconds of real time), records when each was granted or
// denied, and writes the SVG by hand, so drawing it needs nothing but Go.
//
// Regenerate the picture after a change to an algorithm or to waiting:
//
//	make chart-algorithms    # cd tools && go run ./rlviz -out ../docs/algorithms.svg
//
// The run uses real time and the backend's clock, so two runs differ in
// detail (a request that arrives just as a permit frees up may go either
// way), not in shape.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/proxy"
)

// rate is every limiter's rate: permits per second (the interval is 1s).
const rate = 10

// series is one row of the picture: a limiter and the answers it gave.
type series struct {
	label, note string // row title and a gist (lines split by \n)
	color       string
	setrate     []any  // RL.SETRATE arguments after key, rate and interval
	timeout     string // RL.ACQUIRE ... TIMEOUT this; "" decides at once
	events      []event
}

// event is one request: when it was sent (for a waiting request: when its
// held reply came) and whether it was granted.
type event struct {
	at      time.Duration
	granted bool
}

// rows are the picture's rows, top to bottom: a limiter each, all at the
// same rate.
func rows() []*series {
	return []*series{
		{label: "token-bucket", note: "BURST 10, refills 1 per 100 ms", color: "#1c7ed6", setrate: []any{"ALGO", "token-bucket", "BURST", rate}},
		{label: "sliding-log", note: "exact: ≤ 10 in any 1 s", color: "#7048e8", setrate: []any{"ALGO", "sliding-log"}},
		{label: "sliding-window", note: "weighted 2-window count", color: "#0ca678", setrate: []any{"ALGO", "sliding-window"}},
		{label: "fixed-window", note: "≤ 10 per clock second", color: "#e8590c", setrate: []any{"ALGO", "fixed-window"}},
		{label: "leaky-bucket", note: "no wait: 1 per 100 ms", color: "#c2255c", setrate: []any{"ALGO", "leaky-bucket", "BURST", rate}},
		{label: "leaky-bucket", note: "BURST 10, TIMEOUT 2s\n(drawn when answered)", color: "#862e9c", setrate: []any{"ALGO", "leaky-bucket", "BURST", rate}, timeout: "2s"},
		// Several limits in one limiter: the tighter one at each moment decides.
		{label: "two limits", note: "token-bucket 10/s\nLIMIT 20 5s", color: "#2b8a3e", setrate: []any{"ALGO", "token-bucket", "BURST", rate, "LIMIT", 20, "5s"}},
	}
}

// phase is one part of the load, named on the picture.
type phase struct {
	from, to time.Duration
	label    string
}

// load is the requests every limiter gets, in order (equal times are sent
// at once): 40 at once, then twice the rate for 2 s, then 40 within 0.4 s
// across the whole second at 5 s, where fixed windows turn over.
func load() ([]time.Duration, []phase) {
	var at []time.Duration
	add := func(n int, from, step time.Duration) {
		for i := range n {
			at = append(at, from+time.Duration(i)*step)
		}
	}
	ms := time.Millisecond
	add(40, 500*ms, 0)
	add(40, 2000*ms, 50*ms)
	add(40, 4800*ms, 10*ms)
	return at, []phase{
		{500 * ms, 500 * ms, "40 at once"},
		{2000 * ms, 4000 * ms, "20/s for 2 s"},
		{4800 * ms, 5200 * ms, "40 in 0.4 s"},
	}
}

func main() {
	out := flag.String("out", "docs/algorithms.svg", "SVG file to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "rlviz:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	backendName := "embedded in-memory backend"
	if bin, err := exec.LookPath("redis-server"); err == nil {
		url, _, kill, err := startRedis(ctx, bin)
		if err != nil {
			return err
		}
		defer kill()
		cfg.Backends, backendName = []string{url}, "redis-server"
	} // else no backend: proxy.Start uses the embedded one (backend.StartEmbedded)
	p, err := proxy.Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer p.Close()

	all := rows()
	times, phases := load()
	clients := make([]*redis.Client, len(all))
	for i, s := range all {
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: len(times)})
		defer c.Close()
		args := append([]any{"RL.SETRATE", key(i), rate, "1s"}, s.setrate...)
		if err := c.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("%s: %w", s.label, err)
		}
		if err := warm(ctx, c, 40); err != nil { // 40: the largest burst
			return err
		}
		clients[i] = c
	}

	// Start on a whole second, so fixed windows turn over on the picture's
	// whole seconds (the backend runs on this machine's clock).
	start := time.Now().Add(300 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, s := range all {
		wg.Go(func() { errs[i] = drive(ctx, clients[i], key(i), s, start, times) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	svg := render(all, phases, len(times), backendName)
	if err := os.WriteFile(out, []byte(svg), 0o644); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s)\n", out, backendName)
	return nil
}

func key(i int) string { return "rlviz:" + strconv.Itoa(i) }

// warm opens n connections, so a burst is not slowed by dialling.
func warm(ctx context.Context, c *redis.Client, n int) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = c.Ping(ctx).Err() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drive sends one request per time in times (relative to start), each on
// its own goroutine so a held reply never delays the next request, and
// records the answers in s.events.
func drive(ctx context.Context, c *redis.Client, key string, s *series, start time.Time, times []time.Duration) error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	args := []any{"RL.ACQUIRE", key}
	if s.timeout != "" {
		args = append(args, 1, "TIMEOUT", s.timeout)
	}
	for _, at := range times {
		t := time.NewTimer(time.Until(start.Add(at)))
		select {
		case <-ctx.Done():
			t.Stop()
			wg.Wait()
			return ctx.Err()
		case <-t.C:
		}
		wg.Go(func() {
			reply, err := c.Do(ctx, args...).Int64Slice()
			if err == nil && len(reply) != 4 {
				err = fmt.Errorf("RL.ACQUIRE replied %v, want 4 integers", reply)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", s.label, err)
				}
				return
			}
			// A waiting request's reply is held until its permit's time
			// (or until it is clear it cannot come in time): draw it then.
			// Anything else is drawn when it was sent.
			ev := event{at: at, granted: reply[0] == 1}
			if s.timeout != "" {
				ev.at = time.Since(start)
			}
			s.events = append(s.events, ev)
		})
	}
	wg.Wait()
	return firstErr
}

// startRedis starts a throwaway redis-server (no persistence) on a free
// loopback port and returns its URL, its process and a func that stops it.
func startRedis(ctx context.Context, bin string) (string, *exec.Cmd, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", os.TempDir())
	if err := cmd.Start(); err != nil {
		return "", nil, nil, err
	}
	kill := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := c.Ping(ctx).Err(); err == nil {
			return "redis://127.0.0.1:" + port, cmd, kill, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			kill()
			return "", nil, nil, fmt.Errorf("redis-server on port %s did not answer: %w", port, err)
		}
	}
}
