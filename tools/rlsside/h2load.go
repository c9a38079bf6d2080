package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// h2load (Debian nghttp2-client) is a second load tool, written in C: it
// POSTs one pre-encoded gRPC message (the hot descriptor's request) over
// HTTP/2 with content-type application/grpc and te: trailers. It cannot
// read gRPC's trailers, so a grpc-status it never sees; each round is
// checked instead by the services' own counts: envoyproxy/ratelimit's
// Redis counters (bench_hot_x_<window>) and rlproxy's
// rlproxy_rls_requests_total{domain="bench",code="ok"} must grow by at
// least the requests h2load saw answered (all of them OK decisions) and
// at most the requests it started (a round ends with up to connections ×
// streams requests in flight, sent but not waited for). The floor keeps
// no count.

// benchH2load loads the hot descriptor through h2load, the services in
// interleaved rounds, and prints a table as bench's.
func benchH2load(services []service, rc *redis.Client, redisPid int, o benchOptions) error {
	if _, err := exec.LookPath("h2load"); err != nil {
		return fmt.Errorf("-h2load: %w (apt-get install nghttp2-client)", err)
	}
	dir, err := os.MkdirTemp("", "rlsside-h2load")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	raw, err := marshalAll(requests(loads[0]))
	if err != nil {
		return err
	}
	frame := filepath.Join(dir, "request")
	if err := os.WriteFile(frame, grpcFrame(raw[0]), 0o644); err != nil {
		return err
	}
	streams := (o.callers + o.conns - 1) / o.conns
	fmt.Printf("h2load: the hot descriptor, %d connections × %d streams per service, %s rounds, %d interleaved rounds; load average at start %s\n\n",
		o.conns, streams, o.length, o.rounds, loadAvg())
	fmt.Println("| load | service | decisions/s | p50 ms | p99 ms | tool | service | Redis | sum | others | checked: answered ≤ counted ≤ started |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	got := make([][]round, len(services))
	checks := make([][]string, len(services))
	for r := range o.rounds {
		for k := range services {
			i := (k + r) % len(services)
			rd, check, err := runH2load(services[i], rc, redisPid, frame, filepath.Join(dir, "log"), o.conns, streams, o.length)
			if err != nil {
				return fmt.Errorf("%s: %w", services[i].name, err)
			}
			got[i], checks[i] = append(got[i], rd), append(checks[i], check)
		}
	}
	ms := make([]round, len(services))
	for i, s := range services {
		m := median(got[i])
		ms[i] = m
		fmt.Printf("| hot descriptor (h2load) | %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n", s.name,
			m.perSec, m.p50, m.p99, m.toolUs, m.serverUs, m.redisUs, m.ours(), m.othersUs, strings.Join(checks[i], ", "))
	}
	for i := 1; i < len(services); i++ {
		fmt.Printf("| hot descriptor (h2load) | %s / ratelimit | %.2f× | | %.2f× | | %.2f× | %.2f× | %.2f× | | |\n", services[i].name,
			ms[i].perSec/ms[0].perSec, ms[i].p99/ms[0].p99, ms[i].serverUs/ms[0].serverUs, ms[i].redisUs/ms[0].redisUs, ms[i].ours()/ms[0].ours())
	}
	for i, s := range services {
		fmt.Fprintf(os.Stderr, "h2load, %s rounds (decisions/s):", s.name)
		for _, r := range got[i] {
			fmt.Fprintf(os.Stderr, " %.0f", r.perSec)
		}
		fmt.Fprintln(os.Stderr)
	}
	fmt.Printf("\nload average after h2load: %s\n", loadAvg())
	for i := range services {
		for _, c := range checks[i] {
			if strings.Contains(c, "≠") {
				return fmt.Errorf("h2load: %s answered requests it did not count as OK decisions (%s)", services[i].name, c)
			}
		}
	}
	return nil
}

// grpcFrame is msg as one gRPC length-prefixed message (uncompressed).
func grpcFrame(msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// h2loadCounts is h2load's summary line of requests.
var h2loadCounts = regexp.MustCompile(`(\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored`)

// runH2load is one h2load round against s, and its check: "answered ≤
// counted ≤ started" by the service's own count (≠ when not), "unchecked"
// for the floor.
func runH2load(s service, rc *redis.Client, redisPid int, frame, log string, conns, streams int, length time.Duration) (round, string, error) {
	count0, counted := served(s, rc)
	cpu0 := cpuSince(s.p.cmd.Process.Pid, redisPid)
	cmd := exec.Command("h2load", "-c", strconv.Itoa(conns), "-m", strconv.Itoa(streams), "-t", "1",
		"-D", strconv.Itoa(int(length.Seconds())), "--log-file", log, "-d", frame,
		"-H", "content-type: application/grpc", "-H", "te: trailers",
		"http://"+s.p.addr+shouldRateLimit)
	out, err := cmd.Output()
	if err != nil {
		return round{}, "", fmt.Errorf("h2load: %w: %s", err, out)
	}
	m := h2loadCounts.FindSubmatch(out)
	if m == nil {
		return round{}, "", fmt.Errorf("h2load: no count of requests in its output: %s", out)
	}
	started, _ := strconv.ParseInt(string(m[1]), 10, 64)
	answered, _ := strconv.ParseInt(string(m[3]), 10, 64)
	if string(m[4]) != "0" || string(m[5]) != "0" {
		return round{}, "", fmt.Errorf("h2load: %s failed, %s errored", m[4], m[5])
	}
	n := float64(answered)
	lat, err := readH2loadLog(log)
	if err != nil || n == 0 {
		return round{}, "", fmt.Errorf("h2load: %d answered, its log: %v", int(n), err)
	}
	r := round{perSec: n / length.Seconds(), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99)}
	tool := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	cpu0.perDecision(&r, tool, n)
	check := "unchecked"
	if counted {
		count1, _ := served(s, rc)
		if got := count1 - count0; answered <= got && got <= started {
			check = fmt.Sprintf("%d ≤ %d ≤ %d", answered, got, started)
		} else {
			check = fmt.Sprintf("%d ≤ %d ≤ %d false ≠", answered, got, started)
		}
	}
	return r, check, nil
}

// readH2loadLog is the latencies of the requests answered 200 in
// h2load's --log-file (start µs, status, µs to the end of the answer).
func readH2loadLog(path string) ([]time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lat []time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[1] != "200" {
			continue
		}
		us, _ := strconv.ParseInt(f[2], 10, 64)
		lat = append(lat, time.Duration(us)*time.Microsecond)
	}
	if len(lat) == 0 {
		return nil, fmt.Errorf("no answered request in %s", path)
	}
	return lat, sc.Err()
}

// served is how many hot-descriptor decisions s has counted as OK so far,
// and whether it keeps such a count: rlproxy's metric, or the sum of
// envoyproxy/ratelimit's counters in Redis.
func served(s service, rc *redis.Client) (int64, bool) {
	switch {
	case s.p.metrics != "":
		return okMetric(s.p.metrics)
	case strings.HasPrefix(s.name, "envoyproxy"):
		var sum int64
		keys, _ := rc.Keys(context.Background(), "bench_hot_x_*").Result()
		for _, k := range keys {
			v, _ := rc.Get(context.Background(), k).Int64()
			sum += v
		}
		return sum, true
	}
	return 0, false
}

// okMetric reads rlproxy_rls_requests_total{code="ok",domain="bench"}.
func okMetric(addr string) (int64, bool) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "rlproxy_rls_requests_total{") && strings.Contains(line, `code="ok"`) && strings.Contains(line, `domain="bench"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			return int64(v), err == nil
		}
	}
	return 0, true // none yet
}
