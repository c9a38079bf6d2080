package limiter_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// BenchmarkAlsoScriptCost measures what Redis spends on also.lua deciding
// two names of one algorithm (explicit limiters on one node) against the
// algorithm's own script deciding one, straight to a redis-server of its
// own (no proxy): b.N calls per round in pipelines of 50 (so that the
// network's share per call is small), 15 interleaved rounds, medians of
// the CPU (INFO cpu: user + sys) and the script time (commandstats usec
// of EVALSHA) per call, and their ratio (the contract: at most 1.6).
//
//	go test ./limiter -run '^$' -bench AlsoScriptCost -benchtime 2000x
func BenchmarkAlsoScriptCost(b *testing.B) {
	ctx := context.Background()
	rdb := redistest.StartServer(b).Client(b)
	scripts := limiter.NewScripts()
	keys := limiter.Keys{Prefix: "b:"}
	for _, c := range []limiter.Config{tokenBucket(1e9, time.Hour, 1e9), fixedWindow(1e9, time.Hour)} {
		b.Run(string(c.Algo), func(b *testing.B) {
			var names []limiter.AlsoName
			for _, name := range []string{"x", "y"} {
				sub := shard0(c)
				if err := scripts.SetConf.Run(ctx, rdb, []string{keys.Config(name, 0)}, limiter.SetConfArgs(c, sub, limiter.SetConfOptions{Epoch: "e1"})...).Err(); err != nil {
					b.Fatal(err)
				}
				names = append(names, limiter.AlsoName{Algo: c.Algo, Conf: "e1", Keys: keys.Script(c.Algo, name, 0, "e1", "")})
			}
			single := pipelined(b, rdb, scripts.Limiter(c.Algo), names[0].Keys, limiter.AcquireArgs("e1", []limiter.Ask{{Permits: 1}}))
			ak, aa := limiter.AlsoArgs(names, [][]limiter.AlsoMember{{{Name: 0, Permits: 1}, {Name: 1, Permits: 1}}})
			also := pipelined(b, rdb, scripts.Also(), ak, aa)
			redistest.ReportAlsoCost(b, 15,
				func() (float64, float64) { return scriptCost(b, rdb, single, b.N) },
				func() (float64, float64) { return scriptCost(b, rdb, also, b.N) })
		})
	}
}

// pipelined returns a function that runs sc with keys and args n times
// in pipelines of 50, checking each reply is not an error.
func pipelined(b *testing.B, rdb *redis.Client, sc *redis.Script, keys []string, args []any) func(n int) {
	ctx := context.Background()
	if err := sc.Run(ctx, rdb, keys, args...).Err(); err != nil { // loaded
		b.Fatal(err)
	}
	return func(n int) {
		for n > 0 {
			p := rdb.Pipeline()
			for range min(n, 50) {
				sc.EvalSha(ctx, p, keys, args...)
			}
			n -= 50
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// scriptCost runs f(n) and returns Redis's CPU µs and EVALSHA µs per call.
func scriptCost(b *testing.B, rdb *redis.Client, f func(int), n int) (cpu, script float64) {
	cpu0, script0 := redisCost(b, rdb)
	f(n)
	cpu1, script1 := redisCost(b, rdb)
	return (cpu1 - cpu0) / float64(n), (script1 - script0) / float64(n)
}

// redisCost reads Redis's CPU µs (user + sys) and EVALSHA µs so far.
func redisCost(b *testing.B, rdb *redis.Client) (cpuUs, scriptUs float64) {
	text, err := rdb.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	field := func(line, prefix, key string) float64 {
		rest, _ := strings.CutPrefix(line, prefix)
		if key != "" {
			_, rest, _ = strings.Cut(rest, key)
			rest, _, _ = strings.Cut(rest, ",")
		}
		x, err := strconv.ParseFloat(rest, 64)
		if err != nil {
			b.Fatalf("INFO %q: %v", line, err)
		}
		return x
	}
	for _, line := range strings.Split(text, "\r\n") {
		switch {
		case strings.HasPrefix(line, "used_cpu_sys:"):
			cpuUs += 1e6 * field(line, "used_cpu_sys:", "")
		case strings.HasPrefix(line, "used_cpu_user:"):
			cpuUs += 1e6 * field(line, "used_cpu_user:", "")
		case strings.HasPrefix(line, "cmdstat_evalsha:"):
			scriptUs = field(line, "cmdstat_evalsha:", "usec=")
		}
	}
	return cpuUs, scriptUs
}
