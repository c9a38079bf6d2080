// Command rlbench drives load at rlproxy (RL.ACQUIRE) or, for the
// baseline, straight at Redis (EVALSHA of a minimal GCRA script in the
// style of go-redis/redis_rate), and reports throughput, grants and
// denials, latency percentiles and — when told where to look — the CPU
// Redis and rlproxy spent and the backend calls they made.
//
// It speaks raw RESP over net.Conn, so its own overhead is small and a
// pipeline of N is exactly N commands written at once.
//
//	rlbench --mode direct  --addr 127.0.0.1:6379 --conns 50 --pipeline 16
//	rlbench --mode rlproxy --addr 127.0.0.1:6380 --conns 50 --pipeline 16 \
//	        --stats-redis 127.0.0.1:6379 --proxy-pid $(pidof rlproxy) --json
//	rlbench --mode rlproxy --addr 127.0.0.1:6380 --conns 50 --ping     # the front end's ceiling
//	rlbench report bench-results/20250101-120000   # the table of a suite run
//
// tools/bench/bench.sh (make bench) runs the whole suite: it starts its own
// redis-server(s) and rlproxy, alternates direct and rlproxy rounds, and
// calls rlbench report.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "report" {
		err = reportMain(os.Args[2:], os.Stdout)
	} else {
		err = loadMain(ctx, os.Args[1:], os.Stdout)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlbench:", err)
		os.Exit(1)
	}
}

func loadMain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("rlbench", flag.ContinueOnError)
	var cfg loadConfig
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:6380", "address of rlproxy, or of Redis in direct mode")
	fs.StringVar(&cfg.Mode, "mode", "rlproxy", "rlproxy (RL.ACQUIRE) or direct (EVALSHA of a minimal GCRA script)")
	fs.IntVar(&cfg.Conns, "conns", 50, "connections")
	fs.IntVar(&cfg.Pipeline, "pipeline", 1, "requests written at once on each connection")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured time")
	fs.DurationVar(&cfg.Warmup, "warmup", 500*time.Millisecond, "load before the measured time (not counted)")
	fs.IntVar(&cfg.Keys, "keys", 1, "limiters the requests spread over uniformly (1 = one hot limiter)")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", "bench:", "limiter names are this prefix and a number")
	fs.Int64Var(&cfg.Rate, "rate", 1_000_000_000, "permits per interval of each limiter")
	fs.DurationVar(&cfg.Interval, "interval", time.Second, "the limiter's interval (whole milliseconds)")
	fs.Int64Var(&cfg.Burst, "burst", 0, "bucket capacity (0 = rate)")
	fs.IntVar(&cfg.Shards, "shards", 0, "rlproxy: SHARDS of each limiter (0 = the proxy's default)")
	fs.BoolVar(&cfg.Setup, "setup", true, "rlproxy: create the limiters with RL.SETRATE first")
	fs.BoolVar(&cfg.Cluster, "cluster", false, "direct: --addr is a node of a Redis Cluster; each request goes to its key's master")
	fs.BoolVar(&cfg.Ping, "ping", false, "send PING instead of the limiter command: what the server's connection handling alone allows")
	fs.StringVar(&cfg.Scenario, "scenario", "", "label stored in the JSON result")
	fs.IntVar(&cfg.Round, "round", 0, "label stored in the JSON result")
	statsRedis := fs.String("stats-redis", "", "comma-separated Redis addresses to read INFO cpu/commandstats deltas from")
	statsProxy := fs.String("stats-proxy", "", "rlproxy address to read INFO limiters deltas from")
	pid := fs.Int("proxy-pid", 0, "rlproxy's process id, to read its CPU time from /proc")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	out := fs.String("out", "", "also write the JSON result to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case cfg.Conns < 1 || cfg.Pipeline < 1 || cfg.Keys < 1:
		return fmt.Errorf("--conns, --pipeline and --keys must be at least 1")
	case cfg.Duration <= 0 || cfg.Warmup < 0:
		return fmt.Errorf("--duration must be positive and --warmup not negative")
	case cfg.Rate < 1 || cfg.Interval < time.Millisecond || cfg.Burst < 0:
		return fmt.Errorf("--rate must be at least 1 and --interval at least 1ms")
	}

	var s *sampler
	if *statsRedis != "" || *statsProxy != "" || *pid > 0 {
		var addrs []string
		if *statsRedis != "" {
			addrs = strings.Split(*statsRedis, ",")
		}
		var err error
		if s, err = newSampler(addrs, *statsProxy, *pid); err != nil {
			return err
		}
		defer s.close()
	}
	res, err := run(ctx, cfg, s)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	printResult(stdout, res)
	return nil
}

// printResult writes one run's result for a person.
func printResult(w io.Writer, r Result) {
	what := fmt.Sprintf("%d key(s)", r.Keys)
	if r.Ping {
		what = "PING"
	}
	fmt.Fprintf(w, "%s %s: %d conns x pipeline %d, %s, %.1fs measured\n",
		r.Mode, r.Addr, r.Conns, r.Pipeline, what, r.Seconds)
	fmt.Fprintf(w, "  %.0f req/s: %d requests, %d granted, %d denied, %d errors\n",
		r.OpsPerSec, r.Requests, r.Granted, r.Denied, r.Errors)
	fmt.Fprintf(w, "  latency us: p50 %.1f  p99 %.1f  p999 %.1f  mean %.1f  max %.1f\n",
		r.LatencyUs.P50, r.LatencyUs.P99, r.LatencyUs.P999, r.LatencyUs.Mean, r.LatencyUs.Max)
	for _, n := range r.Redis {
		fmt.Fprintf(w, "  redis %s: %.2fs CPU, %d EVALSHA calls, %d commands\n", n.Addr, n.CPUSeconds, n.Calls, n.Commands)
	}
	if len(r.Redis) > 0 {
		fmt.Fprintf(w, "  redis CPU: %.2f us/request, %.2f us/grant; backend calls: %.4f/request, %.4f/denial\n",
			r.RedisCPUPerRequestUs, r.RedisCPUPerGrantUs, r.CallsPerRequest, r.CallsPerDenied)
	}
	if r.ProxyCPUSeconds > 0 {
		fmt.Fprintf(w, "  rlproxy CPU: %.2fs, %.2f us/request\n", r.ProxyCPUSeconds, r.ProxyCPUPerRequestUs)
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstError)
	}
}
