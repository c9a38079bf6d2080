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

// load is one bench case: its values (request v is for value v), each
// caller picking one at random per call.
type load struct {
	name   string
	values int
	desc   func(v int) string
}

var loads = []load{
	{"hot descriptor", 1, func(int) string { return "hot=x" }},
	{"10,000 values", 10000, valueName},
}

// callTimeout bounds one call (a stalled service is an error, not a hang).
const callTimeout = 5 * time.Second

// round is one timed run of one service.
type round struct {
	perSec, p50, p99 float64 // p50, p99 in ms
	// From INFO commandstats, per decision: script calls (EVAL, EVALSHA)
	// and Redis's µs in them, other commands and their µs. Commandstats
	// counts the commands a script runs too (their µs are also in the
	// script's): rlproxy's other commands are nearly all inside its scripts.
	scriptCalls, scriptUs, otherCalls, otherUs float64
	// CPU µs per decision (utime+stime from /proc) of this load tool, the
	// service's process and redis-server; others: the rest of the
	// machine's busy CPU (other people's work on a shared VM) per decision.
	toolUs, serverUs, redisUs, othersUs float64
	errors                              int64
	errorKinds                          map[string]int64 // gRPC code and message: how many
}

// ours is the CPU µs per decision of the three processes a decision uses.
func (r round) ours() float64 { return r.toolUs + r.serverUs + r.redisUs }

// refTimeout is envoyproxy/ratelimit's REDIS_TIMEOUT default; rlproxy
// gets the same backend_timeout here (its own default, 500ms, fails a
// decision whose Redis stalls longer: a starved machine's Redis does).
const refTimeout = "10s"

// service is one gRPC server under test.
type service struct {
	name  string
	p     *proc
	conns []*grpc.ClientConn
}

// benchOptions are bench's settings (see main's flags).
type benchOptions struct {
	ref, rlproxy, before string
	rounds, callers      int
	conns                int    // HTTP/2 connections per service
	client               string // clientStubs, clientReuse or clientRaw
	tuned                bool   // the load tool's bigger buffers and windows
	h2load               bool   // also the hot descriptor through h2load
	redisCPU             int    // percent of a core; 0: no cap
	length               time.Duration
}

func bench(o benchOptions) error {
	red, rc, err := startRedis()
	if err != nil {
		return err
	}
	uncap := func() {}
	defer func() { red.stop(); uncap() }() // the cgroup goes once Redis has
	capped := "uncapped"
	if o.redisCPU > 0 {
		if uncap, err = capCPU(red.cmd.Process.Pid, o.redisCPU); err != nil {
			uncap = func() {}
			return err
		}
		capped = fmt.Sprintf("capped at %d%% of a core", o.redisCPU)
	}
	dir, err := os.MkdirTemp("", "rlsside")
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "bench.yaml")
	if err := os.WriteFile(file, []byte(benchRules), 0o644); err != nil {
		return err
	}
	ref, err := startRef(o.ref, red.addr, []string{file})
	if err != nil {
		return err
	}
	defer ref.stop()
	type started struct {
		name string
		p    *proc
	}
	procs := []started{{"envoyproxy/ratelimit", ref}}
	for _, b := range []struct{ name, bin string }{{"rlproxy", o.rlproxy}, {"rlproxy (before)", o.before}} {
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
		s := service{name: p.name, p: p.p}
		for range o.conns { // a few HTTP/2 connections, as Envoy's pool keeps
			_, cc, err := dial(p.p.addr, transport(o.tuned)...)
			if err != nil {
				return err
			}
			defer cc.Close()
			s.conns = append(s.conns, cc)
		}
		services = append(services, s)
	}
	tuned := "default"
	if o.tuned {
		tuned = "tuned"
	}
	fmt.Printf("client %s (%s transport), %d callers over %d connections per service, %s rounds, %d interleaved rounds per service (order rotating), one redis-server (%s); load average at start %s\n\n",
		o.client, tuned, o.callers, o.conns, o.length, o.rounds, capped, loadAvg())
	fmt.Println("CPU µs per decision: tool = this load tool, service = the service's process, Redis = redis-server (each utime+stime from /proc), sum = the three, others = the rest of the machine's busy CPU (other people's work).")
	fmt.Println()
	fmt.Println("| load | service | decisions/s | p50 ms | p99 ms | tool | service | Redis | sum | others | script calls / µs per decision | other commands / µs per decision | errors |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, l := range loads {
		reqs := requests(l)
		raw, err := marshalAll(reqs)
		if err != nil {
			return err
		}
		callers := make([][]caller, len(services))
		for i, s := range services {
			for _, cc := range s.conns {
				c, err := newCaller(o.client, cc, l, reqs, raw)
				if err != nil {
					return err
				}
				callers[i] = append(callers[i], c)
			}
		}
		got := make([][]round, len(services))
		for r := range o.rounds {
			for k := range services {
				i := (k + r) % len(services)
				got[i] = append(got[i], run(services[i].p.cmd.Process.Pid, red.cmd.Process.Pid, rc, callers[i], l, o.callers, o.length))
			}
		}
		ms := make([]round, len(services))
		for i, s := range services {
			m := median(got[i])
			ms[i] = m
			fmt.Printf("| %s | %s | %.0f | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f / %.2f | %.2f / %.2f | %d |\n", l.name, s.name,
				m.perSec, m.p50, m.p99, m.toolUs, m.serverUs, m.redisUs, m.ours(), m.othersUs, m.scriptCalls, m.scriptUs, m.otherCalls, m.otherUs, m.errors)
			for k, n := range m.errorKinds {
				fmt.Fprintf(os.Stderr, "%s, %s: %d errors %s\n", l.name, s.name, n, k)
			}
		}
		for i := 1; i < len(services); i++ {
			fmt.Printf("| %s | %s / ratelimit | %.2f× | | %.2f× | | %.2f× | %.2f× | %.2f× | | | | |\n", l.name, services[i].name,
				ms[i].perSec/ms[0].perSec, ms[i].p99/ms[0].p99, ms[i].serverUs/ms[0].serverUs, ms[i].redisUs/ms[0].redisUs, ms[i].ours()/ms[0].ours())
		}
		for i, s := range services {
			fmt.Fprintf(os.Stderr, "%s, %s rounds (decisions/s, service µs, Redis µs, others µs per decision):", l.name, s.name)
			for _, r := range got[i] {
				fmt.Fprintf(os.Stderr, " %.0f/%.1f/%.1f/%.1f", r.perSec, r.serverUs, r.redisUs, r.othersUs)
			}
			fmt.Fprintln(os.Stderr)
		}
		fmt.Printf("\nload average after %s: %s\n\n", l.name, loadAvg())
	}
	if o.h2load {
		return benchH2load(services, rc, red.cmd.Process.Pid, o)
	}
	return nil
}

// cpuStart is the CPU counters a round starts from: the service's,
// redis-server's and the whole machine's.
type cpuStart struct {
	serverPid, redisPid    int
	server, redis, machine float64
}

func cpuSince(serverPid, redisPid int) cpuStart {
	return cpuStart{serverPid, redisPid, procCPU(serverPid), procCPU(redisPid), machineCPU()}
}

// perDecision fills r's CPU figures from the counters since c, with the
// load tool's tool seconds, over n decisions.
func (c cpuStart) perDecision(r *round, tool, n float64) {
	server, red := procCPU(c.serverPid)-c.server, procCPU(c.redisPid)-c.redis
	r.toolUs, r.serverUs, r.redisUs = tool*1e6/n, server*1e6/n, red*1e6/n
	r.othersUs = max(0, machineCPU()-c.machine-tool-server-red) * 1e6 / n
}

// run loads one service for length with callers, each calling in a loop
// through its connection's caller.
func run(serverPid, redisPid int, rc *redis.Client, conns []caller, l load, callers int, length time.Duration) round {
	cpu0, tool0, cmds0 := cpuSince(serverPid, redisPid), procCPU(os.Getpid()), redisCommands(rc)
	var mu sync.Mutex
	var lat []time.Duration
	var errs int64
	kinds := map[string]int64{}
	var wg sync.WaitGroup
	end := time.Now().Add(length)
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(callTimeout))
	defer cancel()
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
				t := time.Now()
				if err := c.call(ctx, r.IntN(l.values)); err != nil {
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
	n := float64(len(lat))
	if n == 0 {
		return round{errors: errs, errorKinds: kinds}
	}
	out := round{perSec: n / took.Seconds(), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), errors: errs, errorKinds: kinds}
	cpu0.perDecision(&out, procCPU(os.Getpid())-tool0, n)
	cmds := redisCommands(rc)
	out.scriptCalls, out.scriptUs = (cmds.scripts.calls-cmds0.scripts.calls)/n, (cmds.scripts.usec-cmds0.scripts.usec)/n
	out.otherCalls, out.otherUs = (cmds.other.calls-cmds0.other.calls)/n, (cmds.other.usec-cmds0.other.usec)/n
	return out
}

// quantile is the q-quantile of lat in ms (lat is sorted here).
func quantile(lat []time.Duration, q float64) float64 {
	slices.Sort(lat)
	return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000
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

// machineCPU is the seconds of CPU the whole machine has been busy
// (every state of /proc/stat's cpu line but idle and iowait).
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy float64
	for i, f := range strings.Fields(line)[1:] {
		x, _ := strconv.ParseFloat(f, 64)
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest time is in user already
			busy += x
		}
	}
	return busy / 100 // USER_HZ
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
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
		perSec:      pick(func(r round) float64 { return r.perSec }),
		p50:         pick(func(r round) float64 { return r.p50 }),
		p99:         pick(func(r round) float64 { return r.p99 }),
		scriptCalls: pick(func(r round) float64 { return r.scriptCalls }),
		scriptUs:    pick(func(r round) float64 { return r.scriptUs }),
		otherCalls:  pick(func(r round) float64 { return r.otherCalls }),
		otherUs:     pick(func(r round) float64 { return r.otherUs }),
		toolUs:      pick(func(r round) float64 { return r.toolUs }),
		serverUs:    pick(func(r round) float64 { return r.serverUs }),
		redisUs:     pick(func(r round) float64 { return r.redisUs }),
		othersUs:    pick(func(r round) float64 { return r.othersUs }),
		errors:      errs,
		errorKinds:  kinds,
	}
}
