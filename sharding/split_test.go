package sharding

import (
	"slices"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/limiter"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		total int64
		n     int
		want  []int64
	}{
		{10, 4, []int64{3, 3, 2, 2}},
		{10, 1, []int64{10}},
		{10, 10, []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{12, 4, []int64{3, 3, 3, 3}},
		{7, 3, []int64{3, 2, 2}},
		{2000, 8, []int64{250, 250, 250, 250, 250, 250, 250, 250}},
		{2001, 8, []int64{251, 250, 250, 250, 250, 250, 250, 250}},
		{3, 5, []int64{1, 1, 1, 0, 0}}, // rejected by RL.SETRATE, but still sums
		{0, 2, []int64{0, 0}},
	} {
		if got := Split(tc.total, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Split(%d, %d) = %v, want %v", tc.total, tc.n, got, tc.want)
		}
	}
}

// Split never hands out more (or less) than total, and its parts differ by
// at most one, larger parts first.
func TestSplitSumsExactly(t *testing.T) {
	totals := []int64{1, 2, 3, 7, 10, 99, 100, 1000, 1023, 1024, 1025, 2000, 65537, 999_999_937, limiter.MaxRate}
	ns := []int{1, 2, 3, 4, 7, 8, 16, 63, 64, 100, 1000, 1023, 1024}
	for _, total := range totals {
		for _, n := range append(ns, int(min(total, 1024))) { // n = total where allowed
			if int64(n) > total {
				continue
			}
			parts := Split(total, n)
			if len(parts) != n {
				t.Fatalf("Split(%d, %d) has %d parts", total, n, len(parts))
			}
			var sum int64
			for i, p := range parts {
				sum += p
				if p < 1 {
					t.Errorf("Split(%d, %d)[%d] = %d, want >= 1 when total >= n", total, n, i, p)
				}
				if i > 0 && (p > parts[i-1] || parts[0]-p > 1) {
					t.Errorf("Split(%d, %d) parts not even and descending at %d: %d after %d (first %d)", total, n, i, p, parts[i-1], parts[0])
				}
			}
			if sum != total {
				t.Errorf("Split(%d, %d) sums to %d", total, n, sum)
			}
		}
	}
}

func TestSubs(t *testing.T) {
	c := limiter.Config{Algo: limiter.TokenBucket, Rate: 10, Interval: time.Second, Burst: 7, Shards: 4, Mode: limiter.Overall}
	want := []limiter.Sub{
		{Shard: 0, Rate: 3, Burst: 2},
		{Shard: 1, Rate: 3, Burst: 2},
		{Shard: 2, Rate: 2, Burst: 2},
		{Shard: 3, Rate: 2, Burst: 1},
	}
	if got := Subs(c); !slices.Equal(got, want) {
		t.Errorf("Subs(10/s burst 7 over 4) = %v, want %v", got, want)
	}

	for _, c := range []limiter.Config{
		{Rate: 1, Burst: 1, Shards: 1},
		{Rate: 2000, Burst: 2000, Shards: 8},
		{Rate: 2000, Burst: 100, Shards: 16},
		{Rate: 1_000_003, Burst: 5000, Shards: 1024},
		{Rate: 1024, Burst: 4096, Shards: 1024},
		{Rate: 17, Burst: 29, Shards: 17},
	} {
		subs := Subs(c)
		if len(subs) != c.Shards {
			t.Fatalf("Subs(%+v): %d subs", c, len(subs))
		}
		var rate, burst int64
		for i, s := range subs {
			if s.Shard != i {
				t.Errorf("Subs(%+v)[%d].Shard = %d", c, i, s.Shard)
			}
			rate += s.Rate
			burst += s.Burst
		}
		if rate != c.Rate || burst != c.Burst {
			t.Errorf("Subs(rate %d, burst %d, shards %d): sub-rates sum to %d, sub-bursts to %d", c.Rate, c.Burst, c.Shards, rate, burst)
		}
	}
}
