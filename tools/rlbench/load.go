package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rlproxy/rlproxy/internal/keyslot"
	"github.com/rlproxy/rlproxy/internal/resp"
)

// loadConfig is one run: where, how hard, and which limiter.
type loadConfig struct {
	Addr     string
	Mode     string // "rlproxy" (RL.ACQUIRE) or "direct" (EVALSHA of gcraScript)
	Conns    int
	Pipeline int
	Warmup   time.Duration // runs, but is not counted
	Duration time.Duration // the measured window
	// Keys is how many limiters the requests spread over, uniformly; 1 is
	// one hot limiter.
	Keys      int
	KeyPrefix string
	Rate      int64
	Interval  time.Duration
	Burst     int64 // 0: Rate
	Shards    int   // rlproxy: SHARDS of each limiter (0: the proxy's default)
	Setup     bool  // create the limiters (RL.SETRATE / SCRIPT LOAD) first
	// Cluster: Addr is a node of a Redis Cluster (direct mode); each
	// request goes to the master of its key's slot.
	Cluster bool
	// Ping sends PING instead of the limiter command: the throughput the
	// server's connection handling allows when a request costs no work.
	Ping     bool
	Scenario string
	Round    int
}

// Result is what one run measured. Latencies are per request: from the
// write of the pipeline batch holding it to the read of its reply.
type Result struct {
	Scenario   string  `json:"scenario,omitempty"`
	Round      int     `json:"round,omitempty"`
	Mode       string  `json:"mode"`
	Addr       string  `json:"addr"`
	Conns      int     `json:"conns"`
	Pipeline   int     `json:"pipeline"`
	Keys       int     `json:"keys"`
	Rate       int64   `json:"rate"`
	IntervalMs int64   `json:"interval_ms"`
	Burst      int64   `json:"burst"`
	Shards     int     `json:"shards,omitempty"`
	Ping       bool    `json:"ping,omitempty"`
	CPUs       int     `json:"cpus"`
	Seconds    float64 `json:"seconds"`

	Requests  int64   `json:"requests"`
	Granted   int64   `json:"granted"`
	Denied    int64   `json:"denied"`
	Errors    int64   `json:"errors"`
	OpsPerSec float64 `json:"ops_per_sec"`
	LatencyUs Latency `json:"latency_us"`

	Redis                []NodeResult `json:"redis,omitempty"`
	ProxyCPUSeconds      float64      `json:"proxy_cpu_seconds,omitempty"`
	ProxyGranted         int64        `json:"proxy_granted,omitempty"`
	ProxyDenied          int64        `json:"proxy_denied,omitempty"`
	ProxyDeniedFromCache int64        `json:"proxy_denied_from_cache,omitempty"`
	SelfCPUSeconds       float64      `json:"self_cpu_seconds"`

	// Derived from the above (0 when the inputs were not measured).
	RedisCPUPerRequestUs float64 `json:"redis_cpu_per_request_us,omitempty"`
	RedisCPUPerGrantUs   float64 `json:"redis_cpu_per_grant_us,omitempty"`
	ProxyCPUPerRequestUs float64 `json:"proxy_cpu_per_request_us,omitempty"`
	CallsPerRequest      float64 `json:"backend_calls_per_request,omitempty"`
	CallsPerDenied       float64 `json:"backend_calls_per_denied,omitempty"`

	FirstError string `json:"first_error,omitempty"`
}

// Latency percentiles in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// NodeResult is one Redis node's share of the work during the window.
type NodeResult struct {
	Addr       string  `json:"addr"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Calls      int64   `json:"evalsha_calls"`
	Commands   int64   `json:"commands"`
}

// worker is one connection's tally.
type worker struct {
	requests, granted, denied, errors int64
	lat                               histogram
	last                              time.Time // when its last counted reply arrived
	err                               error
	firstErr                          string
}

// run creates the limiters, opens the connections, drives the load and
// samples the counters at the start and the end of the measured window.
func run(ctx context.Context, cfg loadConfig, s *sampler) (Result, error) {
	if cfg.Burst == 0 {
		cfg.Burst = cfg.Rate
	}
	t, err := prepare(cfg)
	if err != nil {
		return Result{}, err
	}
	conns := make([][]net.Conn, cfg.Conns) // per worker, one per server
	defer func() {
		for _, cs := range conns {
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
		}
	}()
	for i := range conns {
		conns[i] = make([]net.Conn, len(t.addrs))
		for n, addr := range t.addrs {
			if conns[i][n], err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
				return Result{}, fmt.Errorf("connection %d to %s: %w", i+1, addr, err)
			}
		}
	}

	start := time.Now()
	from, until := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.Duration)
	workers := make([]worker, cfg.Conns)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			workers[i].drive(ctx, conns[i], t, cfg.Pipeline, uint64(i), from, until)
		}()
	}
	var before, after snapshot
	var sampleErr error
	if s != nil {
		sleepUntil(ctx, from)
		before, sampleErr = s.sample()
		sleepUntil(ctx, until)
		if sampleErr == nil {
			after, sampleErr = s.sample()
		}
	}
	wg.Wait()
	if sampleErr != nil {
		return Result{}, sampleErr
	}

	res := Result{
		Scenario: cfg.Scenario, Round: cfg.Round, Mode: cfg.Mode, Addr: cfg.Addr,
		Conns: cfg.Conns, Pipeline: cfg.Pipeline, Keys: cfg.Keys,
		Rate: cfg.Rate, IntervalMs: cfg.Interval.Milliseconds(), Burst: cfg.Burst, Shards: cfg.Shards, Ping: cfg.Ping,
		CPUs: runtime.NumCPU(),
	}
	var lat histogram
	last := until
	for i := range workers {
		w := &workers[i]
		res.Requests += w.requests
		res.Granted += w.granted
		res.Denied += w.denied
		res.Errors += w.errors
		lat.merge(&w.lat)
		if w.last.After(last) {
			last = w.last
		}
		if res.FirstError == "" {
			res.FirstError = w.firstErr
		}
		if w.err != nil && ctx.Err() == nil {
			return Result{}, fmt.Errorf("connection %d: %w", i+1, w.err)
		}
	}
	res.Seconds = last.Sub(from).Seconds()
	if res.Seconds > 0 {
		res.OpsPerSec = float64(res.Requests) / res.Seconds
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	res.LatencyUs = Latency{
		P50: us(lat.quantile(0.50)), P99: us(lat.quantile(0.99)), P999: us(lat.quantile(0.999)),
		Mean: us(lat.mean()), Max: us(lat.max),
	}
	if s != nil {
		res.addCounters(s.redisAddr, before, after)
	}
	return res, nil
}

// addCounters fills in the counter deltas and what derives from them.
func (r *Result) addCounters(addrs []string, before, after snapshot) {
	var cpu float64
	var calls int64
	for i := range after.redis {
		n := NodeResult{
			Addr:       addrs[i],
			CPUSeconds: after.redis[i].cpu - before.redis[i].cpu,
			Calls:      after.redis[i].evalsha - before.redis[i].evalsha,
			Commands:   after.redis[i].commands - before.redis[i].commands,
		}
		r.Redis = append(r.Redis, n)
		cpu += n.CPUSeconds
		calls += n.Calls
	}
	r.ProxyCPUSeconds = after.proxy.cpu - before.proxy.cpu
	r.ProxyGranted = after.proxy.granted - before.proxy.granted
	r.ProxyDenied = after.proxy.denied - before.proxy.denied
	r.ProxyDeniedFromCache = after.proxy.deniedFromCache - before.proxy.deniedFromCache
	r.SelfCPUSeconds = after.self - before.self

	per := func(x float64, n int64) float64 {
		if n <= 0 {
			return 0
		}
		return x / float64(n)
	}
	if len(r.Redis) > 0 {
		r.RedisCPUPerRequestUs = per(cpu*1e6, r.Requests)
		r.RedisCPUPerGrantUs = per(cpu*1e6, r.Granted)
		r.CallsPerRequest = per(float64(calls), r.Requests)
		r.CallsPerDenied = per(float64(calls), r.Denied)
	}
	r.ProxyCPUPerRequestUs = per(r.ProxyCPUSeconds*1e6, r.Requests)
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-time.After(time.Until(t)):
	case <-ctx.Done():
	}
}

// drive sends batches of pipeline requests on one connection per server
// until until, counting the batches that start at or after from. On a
// cluster a batch's requests are split by server, each part written at
// once; a request's latency runs from the batch's first write.
func (w *worker) drive(ctx context.Context, conns []net.Conn, t target, pipeline int, seed uint64, from, until time.Time) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	rrs := make([]replyReader, len(conns))
	for n, c := range conns {
		rrs[n] = replyReader{r: bufio.NewReaderSize(c, 64<<10)}
	}
	bufs := make([][]byte, len(conns))
	counts := make([]int, len(conns))
	for ctx.Err() == nil {
		sent := time.Now()
		if !sent.Before(until) {
			return
		}
		counted := !sent.Before(from)
		for n := range bufs {
			bufs[n], counts[n] = bufs[n][:0], 0
		}
		for range pipeline {
			i := 0
			if len(t.cmds) > 1 {
				i = rng.IntN(len(t.cmds))
			}
			n := t.server(i)
			bufs[n] = append(bufs[n], t.cmds[i]...)
			counts[n]++
		}
		for n, c := range conns {
			if counts[n] == 0 {
				continue
			}
			if err := c.SetDeadline(sent.Add(30 * time.Second)); err != nil {
				w.err = err
				return
			}
			if _, err := c.Write(bufs[n]); err != nil {
				w.err = err
				return
			}
		}
		for n := range conns {
			for range counts[n] {
				if !w.read(&rrs[n], counted, sent) {
					return
				}
			}
		}
	}
}

// read reads one reply and counts it when counted; false on a broken
// connection (w.err says why).
func (w *worker) read(rr *replyReader, counted bool, sent time.Time) bool {
	outcome, err := rr.decision()
	if err != nil {
		w.err = err
		return false
	}
	if !counted {
		return true
	}
	now := time.Now()
	w.lat.add(now.Sub(sent))
	w.last = now
	w.requests++
	switch outcome {
	case granted:
		w.granted++
	case denied:
		w.denied++
	default:
		w.errors++
		if w.firstErr == "" {
			w.firstErr = rr.lastError
			if w.firstErr == "" {
				w.firstErr = "unexpected reply (send one request with redis-cli to see it)"
			}
		}
	}
	return true
}

// target is where a run's requests go: the encoded request for each key,
// and the servers (one, or a cluster's masters) with the one of each key.
type target struct {
	cmds   [][]byte
	addrs  []string
	nodeOf []int // per key, its server in addrs (nil: addrs[0])
}

func (t target) server(i int) int {
	if t.nodeOf == nil {
		return 0
	}
	return t.nodeOf[i]
}

// prepare creates the limiters on the server(s) and returns the target.
func prepare(cfg loadConfig) (target, error) {
	t := target{addrs: []string{cfg.Addr}}
	if cfg.Ping {
		t.cmds = [][]byte{resp.AppendCommand(nil, "PING")}
		return t, nil
	}
	c, err := dialStat(cfg.Addr)
	if err != nil {
		return t, fmt.Errorf("connect to %s: %w", cfg.Addr, err)
	}
	defer c.c.Close()
	if err := c.c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		return t, err
	}
	key := func(i int) string { return cfg.KeyPrefix + strconv.Itoa(i) }
	t.cmds = make([][]byte, cfg.Keys)
	switch cfg.Mode {
	case "direct":
		var bySlot []int
		if cfg.Cluster {
			if t.addrs, bySlot, err = clusterSlots(c); err != nil {
				return t, err
			}
		}
		var sha string
		for _, addr := range t.addrs {
			if sha, err = loadScript(addr, gcraScript); err != nil {
				return t, err
			}
		}
		burst, rate := strconv.FormatInt(cfg.Burst, 10), strconv.FormatInt(cfg.Rate, 10)
		period := strconv.FormatInt(cfg.Interval.Milliseconds(), 10)
		for i := range t.cmds {
			t.cmds[i] = resp.AppendCommand(nil, "EVALSHA", sha, "1", key(i), burst, rate, period, "1")
			if bySlot != nil {
				t.nodeOf = append(t.nodeOf, bySlot[keyslot.Of(key(i))])
			}
		}
	case "rlproxy":
		if cfg.Cluster {
			return t, fmt.Errorf("--cluster is for direct mode: rlproxy routes by slot itself")
		}
		setrate := func(i int) []string {
			args := []string{"RL.SETRATE", key(i), strconv.FormatInt(cfg.Rate, 10),
				strconv.FormatInt(cfg.Interval.Milliseconds(), 10)}
			if cfg.Burst != cfg.Rate {
				args = append(args, "BURST", strconv.FormatInt(cfg.Burst, 10))
			}
			if cfg.Shards > 0 {
				args = append(args, "SHARDS", strconv.Itoa(cfg.Shards))
			}
			return args
		}
		if cfg.Setup {
			if err := pipelined(c, cfg.Keys, setrate); err != nil {
				return t, err
			}
		}
		for i := range t.cmds {
			t.cmds[i] = resp.AppendCommand(nil, "RL.ACQUIRE", key(i))
		}
	default:
		return t, fmt.Errorf("unknown mode %q (want rlproxy or direct)", cfg.Mode)
	}
	return t, nil
}

// loadScript loads a script on the server at addr and returns its SHA.
func loadScript(addr, script string) (string, error) {
	c, err := dialStat(addr)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", addr, err)
	}
	defer c.c.Close()
	if err := c.c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	v, err := call(c, "SCRIPT", "LOAD", script)
	if err != nil {
		return "", fmt.Errorf("SCRIPT LOAD on %s: %w", addr, err)
	}
	sha, _ := v.(string)
	return sha, nil
}

// clusterSlots reads a cluster's masters (CLUSTER SLOTS) and the one
// serving each slot (an index in masters).
func clusterSlots(c *statConn) (masters []string, bySlot []int, err error) {
	v, err := call(c, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	ranges, _ := v.([]any)
	bySlot = make([]int, 16384)
	for i := range bySlot {
		bySlot[i] = -1
	}
	for _, r := range ranges {
		f, _ := r.([]any)
		if len(f) < 3 {
			return nil, nil, fmt.Errorf("CLUSTER SLOTS: unexpected entry %v", r)
		}
		start, _ := f[0].(int64)
		end, _ := f[1].(int64)
		node, _ := f[2].([]any)
		if len(node) < 2 || start < 0 || end >= 16384 {
			return nil, nil, fmt.Errorf("CLUSTER SLOTS: unexpected entry %v", r)
		}
		host, _ := node[0].(string)
		port, _ := node[1].(int64)
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		n := slices.Index(masters, addr)
		if n < 0 {
			n, masters = len(masters), append(masters, addr)
		}
		for s := start; s <= end; s++ {
			bySlot[s] = n
		}
	}
	if slices.Contains(bySlot, -1) {
		return nil, nil, fmt.Errorf("CLUSTER SLOTS: not every slot is served")
	}
	return masters, bySlot, nil
}

// call runs one command and returns its reply; an error reply is an error.
func call(c *statConn, args ...string) (any, error) {
	if _, err := c.c.Write(resp.AppendCommand(nil, args...)); err != nil {
		return nil, err
	}
	v, err := c.rr.value()
	if err == nil {
		if e, ok := v.(errorReply); ok {
			return nil, e
		}
	}
	return v, err
}

// pipelined sends n commands in batches of up to 1000 and fails on the
// first error reply.
func pipelined(c *statConn, n int, args func(i int) []string) error {
	const batch = 1000
	for lo := 0; lo < n; lo += batch {
		hi := min(n, lo+batch)
		var buf []byte
		for i := lo; i < hi; i++ {
			buf = resp.AppendCommand(buf, args(i)...)
		}
		if _, err := c.c.Write(buf); err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			v, err := c.rr.value()
			if err != nil {
				return err
			}
			if e, ok := v.(errorReply); ok {
				return fmt.Errorf("%s: %w", args(i)[0], errors.New(string(e)))
			}
		}
	}
	return nil
}
