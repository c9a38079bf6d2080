package ratelimit

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
