package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// grantSpan is when one grant happened: between the call and its reply
// (rlproxy and its backends read the same clock as the test).
type grantSpan struct{ from, to time.Time }

// timedLoad calls RL.ACQUIRE key from clients goroutines spread over the
// proxies for d and returns the span of every grant, by start.
func timedLoad(t *testing.T, proxies []*harness, key string, clients int, d time.Duration) ([]grantSpan, int64) {
	t.Helper()
	spans, errs := timedLoadNames(t, proxies, []string{key}, clients, d)
	return spans[key], errs
}

// timedLoadNames is timedLoad over several names, each call for one of
// them at random; the spans are per name.
func timedLoadNames(t *testing.T, proxies []*harness, names []string, clients int, d time.Duration) (map[string][]grantSpan, int64) {
	t.Helper()
	conns := make([]*redis.Client, len(proxies))
	for i, h := range proxies {
		conns[i] = h.client(t, func(o *redis.Options) { o.PoolSize = clients; o.ReadTimeout = callTimeout })
	}
	var mu sync.Mutex
	spans := map[string][]grantSpan{}
	var errs int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for g := range clients {
		c := conns[g%len(conns)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				name := names[rand.IntN(len(names))]
				from := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				v, err := c.Do(ctx, "RL.ACQUIRE", name).Slice()
				cancel()
				to := time.Now()
				mu.Lock()
				switch {
				case err != nil || len(v) != 4:
					errs++
				case v[0] == int64(1):
					spans[name] = append(spans[name], grantSpan{from, to})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, s := range spans {
		sort.Slice(s, func(i, j int) bool { return s[i].from.Before(s[j].from) })
	}
	return spans, errs
}

// windowCheck is one limit's grants counted per window.
type windowCheck struct {
	windows, over int   // windows counted, and how many held more than allowed
	most, allowed int64 // the most grants one window held for certain, and the bound
}

func (w windowCheck) String() string {
	return fmt.Sprintf("%d windows, most %d of %d allowed, %d over", w.windows, w.most, w.allowed, w.over)
}

// alignedWindows counts the grants certainly inside each window
// [k*every, (k+1)*every) of Unix time.
func alignedWindows(spans []grantSpan, every time.Duration, allowed int64) windowCheck {
	counts := map[int64]int64{}
	for _, s := range spans {
		k := s.from.UnixMicro() / every.Microseconds()
		if s.to.UnixMicro()/every.Microseconds() == k {
			counts[k]++
		}
	}
	w := windowCheck{allowed: allowed, windows: len(counts)}
	for _, n := range counts {
		w.most = max(w.most, n)
		if n > allowed {
			w.over++
		}
	}
	return w
}

// slidingWindows counts, for every grant, the grants certainly inside
// [its start, its start + every): every window a grant can open.
func slidingWindows(spans []grantSpan, every time.Duration, allowed int64) windowCheck {
	w := windowCheck{allowed: allowed, windows: len(spans)}
	for i, s := range spans {
		end, n := s.from.Add(every), int64(0)
		for _, o := range spans[i:] {
			if !o.from.Before(end) {
				break
			}
			if o.to.Before(end) {
				n++
			}
		}
		w.most = max(w.most, n)
		if n > allowed {
			w.over++
		}
	}
	return w
}

// A multi-limit limiter never lets any single limit over-admit: 32
// clients through two proxies on two shards, every grant's time recorded,
// the grants counted per window of each limit.
func TestMultiLimitPerWindow(t *testing.T) {
	nodes := shardNodes(t, 2)
	a, b := shardProxy(t, nodes), shardProxy(t, nodes)
	type limit struct {
		rate  int64
		every time.Duration
	}
	limits := []limit{{30, 500 * time.Millisecond}, {70, 2 * time.Second}}
	for _, algo := range []string{"fixed-window", "sliding-window", "sliding-log", "token-bucket"} {
		t.Run(algo, func(t *testing.T) {
			key := "win-" + algo
			a.Do(t, "RL.SETRATE", key, 30, "500ms", "LIMIT", 70, "2s", "ALGO", algo, "SHARDS", 2).Equal(int64(1))
			spans, errs := timedLoad(t, []*harness{a, b}, key, 32, 3*time.Second)
			if errs > 0 {
				t.Fatalf("%d calls failed", errs)
			}
			if len(spans) < 70 {
				t.Fatalf("only %d grants: the limiter under-admits", len(spans))
			}
			for i, l := range limits {
				w := algoWindows(algo, spans, l.every, l.rate)
				t.Logf("%s, limit %d (%d per %v): %d grants; %v", algo, i+1, l.rate, l.every, len(spans), w)
				if w.over > 0 {
					t.Errorf("limit %d (%d per %v) over-admitted in %d windows (most %d)", i+1, l.rate, l.every, w.over, w.most)
				}
			}
		})
	}
}

// algoWindows counts grants per window as algo bounds them, for a limit
// of rate per every (burst = rate).
func algoWindows(algo string, spans []grantSpan, every time.Duration, rate int64) windowCheck {
	switch algo {
	case "fixed-window", "sliding-window":
		// Each aligned window holds at most rate (the sliding window's
		// estimate counts its own window in full).
		return alignedWindows(spans, every, rate)
	case "sliding-log":
		return slidingWindows(spans, every, rate)
	}
	// The buckets: a full bucket (burst = rate) and what refills or leaks
	// in less than one interval.
	return slidingWindows(spans, every, 2*rate)
}
