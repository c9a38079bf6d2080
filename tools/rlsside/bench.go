package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// benchRules: limits high enough that every decision is a grant, so both
// services do the same work per decision.
const benchRules = `domain: bench
descriptors:
  - key: hot
    value: x
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
`

// load is one bench case: the descriptor a caller sends.
type load struct {
	name string
	desc func(r *rand.Rand) string
}

var loads = []load{
	{"hot descriptor", func(*rand.Rand) string { return "hot=x" }},
	{"10,000 values", func(r *rand.Rand) string { return "user=" + strconv.Itoa(r.IntN(10000)) }},
}

// round is one timed run of one service.
type round struct {
	perSec, redisUsPerDecision, p50, p99 float64 // p50, p99 in ms
	// From INFO commandstats, per decision: script calls (EVAL, EVALSHA)
	// and Redis's µs in them, other commands and their µs. Commandstats
	// counts the commands a script runs too (their µs are also in the
	// script's): rlproxy's other commands are nearly all inside its scripts.
	scriptCalls, scriptUs, otherCalls, otherUs float64
	// CPU µs per decision of the service's process and of this load tool.
	serverUs, toolUs float64
	errors           int64
	errorKinds       map[string]int64 // gRPC code and message: how many
}

// refTimeout is envoyproxy/ratelimit's REDIS_TIMEOUT default; rlproxy
// gets the same backend_timeout here (its own default, 500ms, fails a
// decision whose Redis stalls longer: a starved machine's Redis does).
const refTimeout = "10s"

// service is one gRPC server under test.
type service struct {
	name  string
	pid   int
	conns []pb.RateLimitServiceClient
}

func bench(refBin, rlpBin, beforeBin string, rounds, callers, redisCPUPercent int, length time.Duration) error {
	red, rc, err := startRedis()
	if err != nil {
		return err
	}
	uncap := func() {}
	defer func() { red.stop(); uncap() }() // the cgroup goes once Redis has
	capped := "uncapped"
	if redisCPUPercent > 0 {
		if uncap, err = capCPU(red.cmd.Process.Pid, redisCPUPercent); err != nil {
			uncap = func() {}
			return err
		}
		capped = fmt.Sprintf("capped at %d%% of a core", redisCPUPercent)
	}
	dir, err := os.MkdirTemp("", "rlsside")
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(file, []byte(benchRules), 0o644); err != nil {
		return err
	}
	ref, err := startRef(refBin, red.addr, []string{file})
	if err != nil {
		return err
	}
	defer ref.stop()
	type started struct {
		name string
		p    *proc
	}
	procs := []started{{"envoyproxy/ratelimit", ref}}
	for _, b := range []struct{ name, bin string }{{"rlproxy", rlpBin}, {"rlproxy (before)", beforeBin}} {
		if b.bin == "" {
			continue
		}
		p, err := startRlproxy(b.bin, red.addr, []string{file}, "--backend-timeout", refTimeout)
		if err != nil {
			return err
		}
		defer p.stop()
		procs = append(procs, started{b.name, p})
	}
	floor, err := startFloor()
	if err != nil {
		return err
	}
	defer floor.stop()
	procs = append(procs, started{"floor: gRPC answering OK, no Redis", floor})
	var services []service
	for _, p := range procs {
		s := service{name: p.name, pid: p.p.cmd.Process.Pid}
		for range 4 { // a few HTTP/2 connections, as Envoy's pool keeps
			c, cc, err := dial(p.p.addr)
			if err != nil {
				return err
			}
			defer cc.Close()
			s.conns = append(s.conns, c)
		}
		services = append(services, s)
	}
	fmt.Printf("%d callers, %s rounds, %d interleaved rounds per service (order rotating), one redis-server (%s)\n\n", callers, length, rounds, capped)
	fmt.Println("| load | service | decisions/s | Redis CPU µs/decision | script calls / µs per decision | other commands / µs per decision | service CPU µs/decision | load tool CPU µs/decision | p50 ms | p99 ms | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, l := range loads {
		got := make([][]round, len(services))
		for r := range rounds {
			for k := range services {
				i := (k + r) % len(services)
				got[i] = append(got[i], run(services[i], rc, l, callers, length))
			}
		}
		ms := make([]round, len(services))
		for i, s := range services {
			m := median(got[i])
			ms[i] = m
			fmt.Printf("| %s | %s | %.0f | %.2f | %.3f / %.2f | %.2f / %.2f | %.1f | %.1f | %.2f | %.2f | %d |\n", l.name, s.name,
				m.perSec, m.redisUsPerDecision, m.scriptCalls, m.scriptUs, m.otherCalls, m.otherUs, m.serverUs, m.toolUs, m.p50, m.p99, m.errors)
			for k, n := range m.errorKinds {
				fmt.Fprintf(os.Stderr, "%s, %s: %d errors %s\n", l.name, s.name, n, k)
			}
		}
		for i := 1; i < len(services); i++ {
			fmt.Printf("| %s | %s / ratelimit | %.2f× | %.2f× | | | | | | | |\n", l.name, services[i].name,
				ms[i].perSec/ms[0].perSec, ms[i].redisUsPerDecision/ms[0].redisUsPerDecision)
		}
		for i, s := range services {
			fmt.Fprintf(os.Stderr, "%s, %s rounds (decisions/s, Redis µs/decision):", l.name, s.name)
			for _, r := range got[i] {
				fmt.Fprintf(os.Stderr, " %.0f/%.2f", r.perSec, r.redisUsPerDecision)
			}
			fmt.Fprintln(os.Stderr)
		}
	}
	return nil
}

// run loads one service for length with callers, each calling in a loop.
func run(s service, rc *redis.Client, l load, callers int, length time.Duration) round {
	conns := s.conns
	server0, tool0 := procCPU(s.pid), procCPU(os.Getpid())
	cpu0, cmds0 := redisCPU(rc), redisCommands(rc)
	var mu sync.Mutex
	var lat []time.Duration
	var errs int64
	kinds := map[string]int64{}
	var wg sync.WaitGroup
	end := time.Now().Add(length)
	start := time.Now()
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			c := conns[i%len(conns)]
			var mine []time.Duration
			var bad int64
			for time.Now().Before(end) {
				req := &pb.RateLimitRequest{Domain: "bench", Descriptors: descs(l.desc(r))}
				t := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := c.ShouldRateLimit(ctx, req, grpc.WaitForReady(true))
				cancel()
				if err != nil {
					bad++
					mu.Lock()
					kinds[errorKind(err)]++
					mu.Unlock()
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat, errs = append(lat, mine...), errs+bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	cpu := redisCPU(rc) - cpu0
	cmds := redisCommands(rc)
	server, tool := procCPU(s.pid)-server0, procCPU(os.Getpid())-tool0
	slices.Sort(lat)
	n := float64(len(lat))
	if n == 0 {
		return round{errors: errs, errorKinds: kinds}
	}
	at := func(q float64) float64 { return float64(lat[int(q*(n-1))].Microseconds()) / 1000 }
	return round{perSec: n / took.Seconds(), redisUsPerDecision: cpu * 1e6 / n, p50: at(0.5), p99: at(0.99), errors: errs, errorKinds: kinds,
		scriptCalls: (cmds.scripts.calls - cmds0.scripts.calls) / n, scriptUs: (cmds.scripts.usec - cmds0.scripts.usec) / n,
		otherCalls: (cmds.other.calls - cmds0.other.calls) / n, otherUs: (cmds.other.usec - cmds0.other.usec) / n,
		serverUs: server * 1e6 / n, toolUs: tool * 1e6 / n}
}

// capCPU puts a process in a cgroup (v1 cpu controller, or v2 cpu.max)
// that gives it percent of one core, as tools/bench/lib.sh's cap_cpu
// does; the returned func removes the cgroup once the process is gone.
func capCPU(pid, percent int) (func(), error) {
	quota := strconv.Itoa(percent * 100) // of a 10 ms period
	var dir string
	var files [][2]string
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		dir = fmt.Sprintf("/sys/fs/cgroup/cpu/rlsside-%d", os.Getpid())
		files = [][2]string{{"cpu.cfs_period_us", "10000"}, {"cpu.cfs_quota_us", quota}, {"tasks", strconv.Itoa(pid)}}
	} else {
		dir = fmt.Sprintf("/sys/fs/cgroup/rlsside-%d", os.Getpid())
		files = [][2]string{{"cpu.max", quota + " 10000"}, {"cgroup.procs", strconv.Itoa(pid)}}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("capping Redis's CPU needs a writable cgroup cpu controller (root): %w", err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			os.Remove(dir) //nolint:errcheck // best effort
			return nil, err
		}
	}
	return func() { os.Remove(dir) }, nil //nolint:errcheck // best effort: gone with its last process
}

// procCPU is the seconds of CPU a process has used (user + system), from
// /proc (0 where there is none).
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's ")": state is the 3rd field, utime the 14th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // clock ticks (USER_HZ, 100 on Linux)
}

// commandStats are Redis's totals since its start, scripts (EVAL,
// EVALSHA) and other commands (INFO left out) apart.
type commandStats struct{ scripts, other struct{ calls, usec float64 } }

// redisCommands sums INFO commandstats (cmdstat_x:calls=N,usec=U,...);
// zero when Redis does not answer.
func redisCommands(rc *redis.Client) commandStats {
	info, _ := rc.Info(context.Background(), "commandstats").Result()
	var st commandStats
	for _, line := range strings.Split(info, "\r\n") {
		name, fields, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || name == "info" {
			continue
		}
		sum := &st.other
		if name == "eval" || name == "evalsha" {
			sum = &st.scripts
		}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				sum.calls += x
			case "usec":
				sum.usec += x
			}
		}
	}
	return st
}

// errorKind is an error's gRPC code and message (numbers dropped, so
// alike errors count together).
func errorKind(err error) string {
	s := status.Convert(err)
	msg := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, s.Message())
	return s.Code().String() + ": " + msg
}

// redisCPU is the seconds of CPU redis-server has used (user + system).
func redisCPU(rc *redis.Client) float64 {
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// median is each figure's median over the rounds.
func median(rs []round) round {
	pick := func(f func(round) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var errs int64
	kinds := map[string]int64{}
	for _, r := range rs {
		errs += r.errors
		for k, n := range r.errorKinds {
			kinds[k] += n
		}
	}
	return round{
		perSec:             pick(func(r round) float64 { return r.perSec }),
		redisUsPerDecision: pick(func(r round) float64 { return r.redisUsPerDecision }),
		p50:                pick(func(r round) float64 { return r.p50 }),
		p99:                pick(func(r round) float64 { return r.p99 }),
		scriptCalls:        pick(func(r round) float64 { return r.scriptCalls }),
		scriptUs:           pick(func(r round) float64 { return r.scriptUs }),
		otherCalls:         pick(func(r round) float64 { return r.otherCalls }),
		otherUs:            pick(func(r round) float64 { return r.otherUs }),
		serverUs:           pick(func(r round) float64 { return r.serverUs }),
		toolUs:             pick(func(r round) float64 { return r.toolUs }),
		errors:             errs,
		errorKinds:         kinds,
	}
}
