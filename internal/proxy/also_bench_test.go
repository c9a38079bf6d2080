package proxy

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// BenchmarkAlsoRedisCost measures the CPU Redis spends per call (INFO
// cpu: used_cpu_user + used_cpu_sys, its network work included) on an
// RL.ACQUIRE of two names on one node (ALSO) against a lone RL.ACQUIRE of
// one, in 7 interleaved rounds of b.N calls each, one client (one script
// call each, no coalescing): explicit token buckets, and a policy's
// names. It reports the medians and their ratio (the contract: at most
// 1.6). INFO commandstats' usec_per_call is wall time inside Redis, which
// a busy machine inflates at random; CPU time is not.
//
//	go test ./internal/proxy -run '^$' -bench AlsoRedisCost -benchtime 2000x
func BenchmarkAlsoRedisCost(b *testing.B) {
	h := start(b)
	backend := h.backend.Client(b)
	h.Do(b, "RL.SETRATE", "c1", 1_000_000_000, "1h").Equal(int64(1))
	h.Do(b, "RL.SETRATE", "c2", 1_000_000_000, "1h").Equal(int64(1))
	h.Do(b, "RL.POLICY", "SET", "u:*", 1_000_000_000, "1h").Equal(int64(1))
	for _, kind := range []struct{ name, a, b string }{{"explicit", "c1", "c2"}, {"policy", "u:1", "u:2"}} {
		b.Run(kind.name, func(b *testing.B) {
			single := []any{"RL.ACQUIRE", kind.a}
			also := []any{"RL.ACQUIRE", kind.a, "ALSO", kind.b}
			h.Do(b, single...).OK() // scripts loaded
			h.Do(b, also...).OK()
			var one, two []float64
			for range 7 {
				one = append(one, usPerCall(b, h, backend, single, b.N))
				two = append(two, usPerCall(b, h, backend, also, b.N))
			}
			m1, m2 := median(one), median(two)
			b.ReportMetric(m1, "single-cpu-µs/call")
			b.ReportMetric(m2, "also2-cpu-µs/call")
			b.ReportMetric(m2/m1, "ratio")
		})
	}
}

// usPerCall runs args n times through h and returns the backend's CPU
// µs per call meanwhile.
func usPerCall(b *testing.B, h *harness, backend *redis.Client, args []any, n int) float64 {
	before := redisCPU(b, backend)
	for range n {
		if err := h.d.Do(context.Background(), args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	return (redisCPU(b, backend) - before) / float64(n) * 1e6
}

// redisCPU is the CPU seconds a redis-server has used (user + system).
func redisCPU(b *testing.B, backend *redis.Client) float64 {
	text, err := backend.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(text, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu %s: %v", line, err)
				}
				sum += x
			}
		}
	}
	return sum
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
