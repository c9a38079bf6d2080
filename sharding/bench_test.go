package sharding

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/coalesce"
	"github.com/rlproxy/rlproxy/limiter"
)

var shardCounts = []int{1, 8, 64, 1024}

func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("10.0.0.%d:6379", i+1)
	}
	return names
}

// BenchmarkPlacement places every shard of one limiter with bounded loads
// (one op = all N shards; one allocation, the result).
func BenchmarkPlacement(b *testing.B) {
	for _, nodes := range []int{1, 3, 10} {
		names := nodeNames(nodes)
		for _, shards := range shardCounts {
			b.Run(fmt.Sprintf("nodes=%d/shards=%d", nodes, shards), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if len(Placement("api:user:42", shards, names)) != shards {
						b.Fatal("wrong count")
					}
				}
			})
		}
	}
}

// BenchmarkProbe computes one request's probe order (max_probes 2, and
// every shard).
func BenchmarkProbe(b *testing.B) {
	for _, shards := range shardCounts {
		for _, probes := range []int{2, shards} {
			b.Run(fmt.Sprintf("shards=%d/probes=%d", shards, probes), func(b *testing.B) {
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					n += len(Probe(shards, probes, rand.Uint64()))
				}
				if n == 0 {
					b.Fatal("no shards")
				}
			})
		}
	}
}

func BenchmarkSubs(b *testing.B) {
	for _, shards := range shardCounts {
		c := limiter.Config{Rate: 1_000_000, Burst: 1_000_000, Shards: shards}
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if len(Subs(c)) != shards {
					b.Fatal("wrong count")
				}
			}
		})
	}
}

// BenchmarkCoalescer is the proxy-side cost of coalescing: 32 goroutines
// per CPU call Do on a few keys, with a RunFunc that does no I/O (rtt=0)
// or sleeps like a backend round trip. items/run reports how many calls
// one run carried on average.
func BenchmarkCoalescer(b *testing.B) {
	for _, rtt := range []time.Duration{0, 50 * time.Microsecond} {
		for _, keys := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("rtt=%v/keys=%d", rtt, keys), func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(32)
				var c coalesce.Coalescer[limiter.Ask, answer]
				var runs, items atomic.Int64
				run := func(_ context.Context, asks []limiter.Ask) ([]answer, error) {
					runs.Add(1)
					items.Add(int64(len(asks)))
					if rtt > 0 {
						time.Sleep(rtt)
					}
					out := make([]answer, len(asks))
					for i, a := range asks {
						out[i].Granted = a.Permits > 0
					}
					return out, nil
				}
				names := make([]string, keys)
				for i := range names {
					names[i] = fmt.Sprintf("node\x00rl:{k:%d}:e:s", i)
				}
				b.RunParallel(func(pb *testing.PB) {
					i := rand.IntN(keys)
					for pb.Next() {
						a, err := c.Do(context.Background(), names[i%keys], limiter.Ask{Permits: 1}, run)
						if err != nil || !a.Granted {
							b.Errorf("Do: %+v, %v", a, err)
							return
						}
						i++
					}
				})
				if r := runs.Load(); r > 0 {
					b.ReportMetric(float64(items.Load())/float64(r), "items/run")
				}
			})
		}
	}
}
