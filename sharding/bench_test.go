package sharding

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
