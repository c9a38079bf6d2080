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
	errors                               int64
}

func bench(refBin, rlpBin string, rounds, callers int, length time.Duration) error {
	red, rc, err := startRedis()
	if err != nil {
		return err
	}
	defer red.stop()
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
	rlp, err := startRlproxy(rlpBin, red.addr, []string{file})
	if err != nil {
		return err
	}
	defer rlp.stop()
	services := []struct {
		name string
		addr string
	}{{"envoyproxy/ratelimit", ref.addr}, {"rlproxy", rlp.addr}}
	conns := map[string][]pb.RateLimitServiceClient{}
	for _, s := range services {
		for range 4 { // a few HTTP/2 connections, as Envoy's pool keeps
			c, cc, err := dial(s.addr)
			if err != nil {
				return err
			}
			defer cc.Close()
			conns[s.name] = append(conns[s.name], c)
		}
	}
	fmt.Printf("%d callers, %s rounds, %d interleaved rounds per service, one redis-server\n\n", callers, length, rounds)
	fmt.Println("| load | service | decisions/s | Redis µs/decision | p50 ms | p99 ms | errors |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, l := range loads {
		got := map[string][]round{}
		for range rounds {
			for _, s := range services {
				got[s.name] = append(got[s.name], run(conns[s.name], rc, l, callers, length))
			}
		}
		for _, s := range services {
			m := median(got[s.name])
			fmt.Printf("| %s | %s | %.0f | %.2f | %.2f | %.2f | %d |\n", l.name, s.name, m.perSec, m.redisUsPerDecision, m.p50, m.p99, m.errors)
		}
		a, b := median(got[services[0].name]), median(got[services[1].name])
		fmt.Printf("| %s | rlproxy / ratelimit | %.2f× | %.2f× | | | |\n", l.name, b.perSec/a.perSec, b.redisUsPerDecision/a.redisUsPerDecision)
	}
	return nil
}

// run loads one service for length with callers, each calling in a loop.
func run(conns []pb.RateLimitServiceClient, rc *redis.Client, l load, callers int, length time.Duration) round {
	cpu0 := redisCPU(rc)
	var mu sync.Mutex
	var lat []time.Duration
	var errs int64
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
	slices.Sort(lat)
	n := float64(len(lat))
	if n == 0 {
		return round{errors: errs}
	}
	at := func(q float64) float64 { return float64(lat[int(q*(n-1))].Microseconds()) / 1000 }
	return round{perSec: n / took.Seconds(), redisUsPerDecision: cpu * 1e6 / n, p50: at(0.5), p99: at(0.99), errors: errs}
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
	for _, r := range rs {
		errs += r.errors
	}
	return round{
		perSec:             pick(func(r round) float64 { return r.perSec }),
		redisUsPerDecision: pick(func(r round) float64 { return r.redisUsPerDecision }),
		p50:                pick(func(r round) float64 { return r.p50 }),
		p99:                pick(func(r round) float64 { return r.p99 }),
		errors:             errs,
	}
}
