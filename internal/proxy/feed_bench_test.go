package proxy

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkFeedPolicyPropagation measures how long a policy set through
// proxy A takes to govern on proxy B, and an RL.POLICY DEL through A to
// stop B's grants: from sending the command to A until B answers under
// it (B asked back to back). Five tries of each per iteration; it
// reports the median and the worst in ms. Not part of make test:
//
//	go test ./internal/proxy -run '^$' -bench FeedPolicyPropagation -benchtime 1x
func BenchmarkFeedPolicyPropagation(b *testing.B) {
	f := startFleet(b, 2) // the default backstop (5s)
	a, bb := f.proxies[0], f.proxies[1]
	feedUp(b, a, bb)
	var set, del []time.Duration
	for i := range b.N * 5 {
		prefix := fmt.Sprintf("bench%d:", i)
		set = append(set, propagation(b, func() error {
			return a.client(b, nil).Do(b.Context(), "RL.POLICY", "SET", prefix+"*", 100, "1h").Err()
		}, governs(b, bb, prefix+"s", true)))
		del = append(del, propagation(b, func() error {
			return a.client(b, nil).Do(b.Context(), "RL.POLICY", "DEL", prefix+"*").Err()
		}, governs(b, bb, prefix+"d", false)))
	}
	report := func(what string, ds []time.Duration) {
		slices.Sort(ds)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(ds[len(ds)/2]), what+"-median-ms")
		b.ReportMetric(ms(ds[len(ds)-1]), what+"-worst-ms")
		b.Logf("%s: %v", what, ds)
	}
	report("set", set)
	report("del", del)
}

// propagation times one change until check passes (asked back to back).
func propagation(b *testing.B, change func() error, check func() error) time.Duration {
	start := time.Now()
	if err := change(); err != nil {
		b.Fatal(err)
	}
	for check() != nil {
		if time.Since(start) > 30*time.Second {
			b.Fatal("not propagated within 30s")
		}
	}
	return time.Since(start)
}
