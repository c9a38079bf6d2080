package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/proxy"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

func TestHistogramBuckets(t *testing.T) {
	// Every value falls in the bucket whose range holds it, and buckets
	// are contiguous and no wider than 1/128 of their values.
	for _, v := range []uint64{0, 1, 255, 256, 257, 511, 512, 1000, 123456, 1 << 40, 1<<40 + 12345, math.MaxUint64 >> 1} {
		i := bucketOf(v)
		lo, hi := lowest(i), lowest(i+1)
		if v < lo || v >= hi {
			t.Errorf("value %d in bucket %d = [%d, %d)", v, i, lo, hi)
		}
		if v >= subCount && float64(hi-lo)/float64(lo) > 1.0/128+1e-12 {
			t.Errorf("bucket %d = [%d, %d) is too wide", i, lo, hi)
		}
	}
	for i := 1; i < histBuckets-1; i++ {
		if lowest(i) <= lowest(i-1) || bucketOf(lowest(i)) != i {
			t.Fatalf("bucket %d starts at %d, bucket %d at %d", i-1, lowest(i-1), i, lowest(i))
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h, a, b histogram
	for i := 1; i <= 10000; i++ {
		d := time.Duration(i) * time.Microsecond
		h.add(d)
		if i%2 == 0 {
			a.add(d)
		} else {
			b.add(d)
		}
	}
	a.merge(&b)
	for _, hist := range []*histogram{&h, &a} {
		for _, c := range []struct {
			q    float64
			want time.Duration
		}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {0.999, 9990 * time.Microsecond}, {1, 10000 * time.Microsecond}} {
			got := hist.quantile(c.q)
			if math.Abs(float64(got-c.want))/float64(c.want) > 0.01 {
				t.Errorf("quantile(%v) = %v, want %v within 1%%", c.q, got, c.want)
			}
		}
		if hist.n != 10000 || hist.max != 10*time.Millisecond || hist.mean() != 5000500*time.Nanosecond {
			t.Errorf("n %d max %v mean %v", hist.n, hist.max, hist.mean())
		}
	}
	var empty histogram
	if empty.quantile(0.5) != 0 || empty.mean() != 0 {
		t.Error("an empty histogram must report zeros")
	}
}

func reader(s string) *replyReader { return &replyReader{r: bufio.NewReader(strings.NewReader(s))} }

func TestDecision(t *testing.T) {
	rr := reader("*4\r\n:1\r\n:99\r\n:0\r\n:10\r\n" + // granted
		"*4\r\n:0\r\n:0\r\n:5\r\n:10\r\n" + // denied
		"-ERR no such limiter 'k'\r\n" + // error reply
		"*2\r\n$3\r\nabc\r\n*1\r\n:1\r\n" + // array not starting with an integer
		"*3\r\n:1\r\n*2\r\n$2\r\nhi\r\n:5\r\n%1\r\n+a\r\n:1\r\n" + // nested values after the flag
		":7\r\n" + // not an array
		"*4\r\n:2\r\n:0\r\n:0\r\n:0\r\n" + // flag neither 0 nor 1
		"+PONG\r\n" + // the --ping load's reply
		"+OK\r\n") // any other status
	want := []int{granted, denied, failed, failed, granted, failed, failed, granted, failed}
	for i, w := range want {
		got, err := rr.decision()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if got != w {
			t.Errorf("reply %d: outcome %d, want %d", i, got, w)
		}
	}
	if rr.lastError != "ERR no such limiter 'k'" {
		t.Errorf("lastError = %q", rr.lastError)
	}
	if _, err := rr.decision(); err != io.EOF {
		t.Errorf("at the end: %v, want EOF", err)
	}
	for _, bad := range []string{"*x\r\n", ":1\n", "*1\r\n:1a\r\n", "*2\r\n:1\r\n"} {
		if _, err := reader(bad).decision(); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestValue(t *testing.T) {
	rr := reader("+OK\r\n-ERR bad\r\n:-12\r\n$5\r\nab\r\nc\r\n$-1\r\n*2\r\n:1\r\n$0\r\n\r\n_\r\n")
	want := []any{"OK", errorReply("ERR bad"), int64(-12), "ab\r\nc", nil, []any{int64(1), ""}, nil}
	for i, w := range want {
		got, err := rr.value()
		if err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
		if s, ok := w.([]any); ok {
			g, _ := got.([]any)
			if len(g) != len(s) || g[0] != s[0] || g[1] != s[1] {
				t.Errorf("value %d = %#v, want %#v", i, got, w)
			}
		} else if got != w {
			t.Errorf("value %d = %#v, want %#v", i, got, w)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	line := "4242 (rl proxy) (x)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 12345 0 0\n"
	got, err := parseProcStat(line)
	if err != nil || got != 3.25 {
		t.Errorf("got %v, %v; want 3.25 s", got, err)
	}
	if _, err := parseProcStat("4242 (x) S 1 2"); err == nil {
		t.Error("a short line must be an error")
	}
	cpu, err := processCPU(os.Getpid())
	if err != nil || cpu < 0 {
		t.Errorf("own CPU: %v, %v", cpu, err)
	}
}

func TestParseInfo(t *testing.T) {
	info := parseInfo("# CPU\r\nused_cpu_sys:1.50\r\nused_cpu_user:2.25\r\n\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=1234,usec=5678,usec_per_call=4.60,rejected_calls=0,failed_calls=0\r\n")
	if info["used_cpu_sys"] != "1.50" || info["used_cpu_user"] != "2.25" {
		t.Errorf("info: %v", info)
	}
	if n := commandCalls(info, "evalsha"); n != 1234 {
		t.Errorf("evalsha calls %d, want 1234", n)
	}
	if n := commandCalls(info, "eval"); n != 0 {
		t.Errorf("eval calls %d, want 0", n)
	}
}

// result makes a Result of one run for the report tests.
func result(scenario, mode string, ops float64, f func(*Result)) Result {
	r := Result{Scenario: scenario, Mode: mode, Conns: 50, Pipeline: 16, Keys: 1, Rate: 1000, IntervalMs: 1000,
		CPUs: 2, Seconds: 1, OpsPerSec: ops, Requests: int64(ops), Granted: int64(ops)}
	if f != nil {
		f(&r)
	}
	return r
}

func TestSummarize(t *testing.T) {
	results := []Result{
		// Medians: direct 100k, rlproxy 350k (the 900k round is an outlier).
		result(scenHotPipelined, "direct", 100_000, nil),
		result(scenHotPipelined, "direct", 90_000, nil),
		result(scenHotPipelined, "direct", 110_000, nil),
		result(scenHotPipelined, "rlproxy", 350_000, func(r *Result) { r.RedisCPUPerGrantUs = 0.4; r.ProxyCPUPerRequestUs = 2.5 }),
		result(scenHotPipelined, "rlproxy", 300_000, func(r *Result) { r.RedisCPUPerGrantUs = 0.6; r.ProxyCPUPerRequestUs = 3.5 }),
		result(scenHotPipelined, "rlproxy", 900_000, func(r *Result) { r.RedisCPUPerGrantUs = 0.45; r.ProxyCPUPerRequestUs = 2 }),
		result(scenHotPlain, "direct", 80_000, func(r *Result) { r.RedisCPUPerRequestUs = 12 }),
		result(scenHotPlain, "rlproxy", 60_000, func(r *Result) { r.RedisCPUPerRequestUs = 3; r.ProxyCPUPerRequestUs = 14 }),
		result(scenPing, "direct", 90_000, nil),
		result(scenPing, "rlproxy", 70_000, func(r *Result) { r.ProxyCPUPerRequestUs = 12 }),
		result(scenLight, "direct", 10_000, func(r *Result) { r.LatencyUs.P50, r.LatencyUs.P99 = 50, 100 }),
		result(scenLight, "rlproxy", 8_000, func(r *Result) { r.LatencyUs.P50, r.LatencyUs.P99 = 120, 150 }),
		result(scenScaleKeys, "rlproxy", 100_000, func(r *Result) {
			r.Shards = 2
			r.Redis = []NodeResult{{Addr: "a", Calls: 480}, {Addr: "b", Calls: 520}}
		}),
		result(scenScaleHot, "rlproxy", 100_000, func(r *Result) {
			r.Shards = 2
			r.Redis = []NodeResult{{Addr: "a", Calls: 1000}, {Addr: "b", Calls: 0}}
		}),
		result(scenCappedPolicyP1, "direct", 4_000, nil),
		result(scenCappedPolicyP1, "rlproxy", 13_000, nil),
		result(scenCappedPolicyP16, "direct", 8_000, nil),
		result(scenCappedPolicyP16, "rlproxy", 12_000, nil),
		result(scenPolicyP1, "direct", 40_000, func(r *Result) { r.RedisCPUPerRequestUs = 15 }),
		result(scenPolicyP1, "rlproxy", 30_000, func(r *Result) { r.RedisCPUPerRequestUs = 3.5 }),
		result(scenPolicy1M, "direct", 90_000, func(r *Result) { r.RedisCPUPerRequestUs = 9 }),
		result(scenPolicy1M, "rlproxy", 60_000, func(r *Result) { r.RedisCPUPerRequestUs = 7 }),
		result("clients-100", "direct", 1, nil),
		result("clients-10", "direct", 1, nil),
	}
	sum := summarize(results)
	var names []string
	for _, s := range sum.Scenarios {
		names = append(names, s.Name+"/"+s.Mode)
	}
	wantOrder := "hot-p16/direct hot-p16/rlproxy hot-p1/direct hot-p1/rlproxy ping-p1/direct ping-p1/rlproxy light/direct light/rlproxy policy-p1/direct policy-p1/rlproxy policy-1m-p16/direct policy-1m-p16/rlproxy capped-policy-p1/direct capped-policy-p1/rlproxy capped-policy-p16/direct capped-policy-p16/rlproxy clients-10/direct clients-100/direct scale-hot/rlproxy scale-keys/rlproxy"
	if got := strings.Join(names, " "); got != wantOrder {
		t.Errorf("order:\n%s\nwant\n%s", got, wantOrder)
	}
	verdicts := map[string]string{}
	for _, tg := range sum.Targets {
		verdicts[tg.ID] = tg.Verdict
	}
	for id, want := range map[string]string{
		"1": "PASS", "2": "PASS", "4b": "PASS", // 3.5x; 0.45 us; 2.5 us
		"3a": "FAIL", "3b": "PASS", "4": "FAIL", "3c": "INFO", // 0.75x; 3 us vs 12; 14 us
		"5": "N/A",
		"6": "FAIL", "6b": "PASS", // 2.4x; 1.5x
		"7": "PASS", "7b": "FAIL", // 4% off; 100% off
		"10": "PASS", "10b": "FAIL", // 3.25x; 1.5x
		"10c": "PASS", "10d": "N/A", "10e": "FAIL", // 3.5 us; not run; 7 us
		"model": "INFO",
	} {
		if verdicts[id] != want {
			t.Errorf("target %s: %s, want %s (all: %v)", id, verdicts[id], want, verdicts)
		}
	}
	if s := sum.Scenarios[1]; s.OpsPerSec != 350_000 || s.RedisCPUPerGrantUs != 0.45 {
		t.Errorf("rlproxy medians: %+v", s)
	}

	var out strings.Builder
	printSummary(&out, sum)
	if !strings.Contains(out.String(), "targets: 8 PASS, 6 FAIL") ||
		!strings.Contains(out.String(), "0.88x (70000 vs 80000 req/s; Redis answering PING: 90000 req/s") {
		t.Errorf("report:\n%s", out.String())
	}
}

// near reports whether counts a server and rlbench took are about equal:
// the counters are read around the measured window, not at its exact
// edges, so a few milliseconds of requests may fall on either side.
func near(a, b int64) bool { return math.Abs(float64(a-b)) <= 0.1*float64(b)+20 }

// TestRunAgainstRedisAndProxy drives short loads through both modes on a
// real redis-server and an in-process rlproxy, and checks the counts
// against what Redis and rlproxy themselves counted.
func TestRunAgainstRedisAndProxy(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Backends = []string{srv.URL()}
	p, err := proxy.Start(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx := context.Background()

	load := loadConfig{Conns: 3, Pipeline: 4, Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond,
		Keys: 1, Rate: 1_000_000_000, Interval: time.Second, Setup: true}
	// measured runs c with the counters of the Redis server (and of the
	// proxy, when given) sampled around it.
	measured := func(t *testing.T, c loadConfig, proxyAddr string, pid int) Result {
		t.Helper()
		s, err := newSampler([]string{srv.Addr()}, proxyAddr, pid)
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		res, err := run(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, mode := range []string{"direct", "rlproxy"} {
		t.Run(mode+"/grants", func(t *testing.T) {
			c := load
			c.Mode, c.Addr, c.KeyPrefix = mode, srv.Addr(), "t:grant:"
			proxyAddr := ""
			if mode == "rlproxy" {
				c.Addr, proxyAddr = p.Addr(), p.Addr()
			}
			res := measured(t, c, proxyAddr, os.Getpid())
			if res.Requests == 0 || res.Granted != res.Requests || res.Errors != 0 || res.FirstError != "" {
				t.Fatalf("%+v", res)
			}
			if res.LatencyUs.P50 <= 0 || res.LatencyUs.P99 < res.LatencyUs.P50 || res.OpsPerSec <= 0 {
				t.Errorf("latency %+v, %v req/s", res.LatencyUs, res.OpsPerSec)
			}
			calls := res.Redis[0].Calls
			switch mode {
			case "direct":
				// Every request is one EVALSHA (the sampler's INFO calls are not).
				if !near(calls, res.Requests) {
					t.Errorf("%d EVALSHA calls for %d requests", calls, res.Requests)
				}
			case "rlproxy":
				if calls < 1 || calls > res.Requests+int64(c.Conns*c.Pipeline) {
					t.Errorf("%d backend calls for %d requests", calls, res.Requests)
				}
				if !near(res.ProxyGranted, res.Granted) {
					t.Errorf("rlproxy counted %d grants, rlbench %d", res.ProxyGranted, res.Granted)
				}
				if res.ProxyCPUSeconds <= 0 {
					t.Errorf("no rlproxy CPU measured: %+v", res)
				}
			}
		})
		t.Run(mode+"/denials", func(t *testing.T) {
			c := load
			c.Mode, c.Addr, c.KeyPrefix, c.Rate = mode, srv.Addr(), "t:deny:", 20
			if mode == "rlproxy" {
				c.Addr = p.Addr()
			}
			res, err := run(ctx, c, nil)
			if err != nil {
				t.Fatal(err)
			}
			// The burst of 20 goes in the warm-up; then 20/s for 0.3 s.
			if res.Denied == 0 || res.Granted > 20+8 || res.Errors != 0 {
				t.Errorf("rate 20/s: %d granted, %d denied, %d errors", res.Granted, res.Denied, res.Errors)
			}
		})
	}
	for _, mode := range []string{"direct", "rlproxy"} {
		t.Run(mode+"/ping", func(t *testing.T) {
			c := load
			c.Mode, c.Addr, c.Ping = mode, srv.Addr(), true
			if mode == "rlproxy" {
				c.Addr = p.Addr()
			}
			res := measured(t, c, "", 0)
			if res.Requests == 0 || res.Granted != res.Requests || res.Errors != 0 || !res.Ping {
				t.Fatalf("%+v", res)
			}
			// rlproxy answers PING itself: Redis sees none of them.
			pings := res.Redis[0].Commands
			if mode == "direct" && !near(pings, res.Requests) || mode == "rlproxy" && pings > 10 {
				t.Errorf("%s: Redis ran %d commands for %d PINGs", mode, pings, res.Requests)
			}
		})
	}
	t.Run("errors are counted", func(t *testing.T) {
		c := load
		c.Mode, c.Addr, c.KeyPrefix, c.Setup = "rlproxy", p.Addr(), "t:missing:", false
		res, err := run(ctx, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != res.Requests || res.Requests == 0 || !strings.Contains(res.FirstError, "no such limiter") {
			t.Errorf("%d errors of %d requests, first %q", res.Errors, res.Requests, res.FirstError)
		}
	})
}

// Direct mode on a Redis Cluster sends each request to its key's master:
// none answers MOVED, and every master takes its share.
func TestRunDirectOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c := loadConfig{Mode: "direct", Cluster: true, Addr: cluster.Addrs()[1], Conns: 3, Pipeline: 8,
		Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond,
		Keys: 300, KeyPrefix: "t:cluster:", Rate: 1_000_000_000, Interval: time.Second}
	s, err := newSampler(cluster.Addrs(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	res, err := run(context.Background(), c, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Granted != res.Requests || res.FirstError != "" {
		t.Fatalf("%d requests, %d granted, first error %q", res.Requests, res.Granted, res.FirstError)
	}
	var calls int64
	for _, n := range res.Redis {
		if n.Calls == 0 {
			t.Errorf("master %s ran no EVALSHA", n.Addr)
		}
		calls += n.Calls
	}
	if !near(calls, res.Requests) {
		t.Errorf("%d EVALSHA calls for %d requests", calls, res.Requests)
	}
}
