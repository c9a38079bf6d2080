package proxy

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// BenchmarkAlsoRedisCost measures what Redis spends per call on an
// RL.ACQUIRE of two names on one node (ALSO) against a lone RL.ACQUIRE of
// one, in 9 interleaved rounds of b.N calls each, one client (one script
// call each, no coalescing), for token buckets and fixed windows,
// explicit limiters and a policy's names. It reports the medians and
// their ratio (the contract: at most 1.6) of two measures: the script
// time (INFO commandstats usec of EVALSHA and EVAL, per call) and the
// CPU (INFO cpu: user + sys, Redis's network work included; less noisy
// on a busy machine, where usec is wall time inside Redis).
//
//	go test ./internal/proxy -run '^$' -bench AlsoRedisCost -benchtime 2000x
func BenchmarkAlsoRedisCost(b *testing.B) {
	h := start(b)
	backend := h.backend.Client(b)
	for _, algo := range []string{"token-bucket", "fixed-window"} {
		h.Do(b, "RL.SETRATE", algo+":c1", 1_000_000_000, "1h", "ALGO", algo).Equal(int64(1))
		h.Do(b, "RL.SETRATE", algo+":c2", 1_000_000_000, "1h", "ALGO", algo).Equal(int64(1))
		h.Do(b, "RL.POLICY", "SET", algo+":u:*", 1_000_000_000, "1h", "ALGO", algo).Equal(int64(1))
		for _, kind := range []struct{ name, a, b string }{
			{"explicit", algo + ":c1", algo + ":c2"}, {"policy", algo + ":u:1", algo + ":u:2"},
		} {
			b.Run(algo+"/"+kind.name, func(b *testing.B) {
				single := []any{"RL.ACQUIRE", kind.a}
				also := []any{"RL.ACQUIRE", kind.a, "ALSO", kind.b}
				h.Do(b, single...).OK() // scripts loaded
				h.Do(b, also...).OK()
				redistest.ReportAlsoCost(b, 9,
					func() (float64, float64) { return costPerCall(b, h, backend, single, b.N) },
					func() (float64, float64) { return costPerCall(b, h, backend, also, b.N) })
			})
		}
	}
}

// costPerCall runs args n times through h and returns the backend's CPU
// µs and script µs per call meanwhile.
func costPerCall(b *testing.B, h *harness, backend *redis.Client, args []any, n int) (cpu, script float64) {
	cpu0, script0 := redisCost(b, backend)
	for range n {
		if err := h.d.Do(context.Background(), args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	cpu1, script1 := redisCost(b, backend)
	return (cpu1 - cpu0) / float64(n) * 1e6, (script1 - script0) / float64(n)
}

// redisCost is the CPU seconds a redis-server has used (user + system)
// and the µs it has spent in EVALSHA and EVAL.
func redisCost(b *testing.B, backend *redis.Client) (cpu, scriptUs float64) {
	text, err := backend.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(text, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				cpu += parseStat(b, line, v)
			}
		}
		for _, f := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if stats, ok := strings.CutPrefix(line, f); ok {
				for _, kv := range strings.Split(stats, ",") {
					if v, ok := strings.CutPrefix(kv, "usec="); ok {
						scriptUs += parseStat(b, line, v)
					}
				}
			}
		}
	}
	return cpu, scriptUs
}

func parseStat(b *testing.B, line, v string) float64 {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		b.Fatalf("INFO %s: %v", line, err)
	}
	return x
}
