package proxy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// A master of a Redis Cluster (3 masters, 3 replicas) is killed under
// load from 20 connections spread over two proxies. Requests on its
// slots fail until its replica is promoted, then every proxy finds the
// new master at once: no error a second after the promotion, latency
// from 2s after it like a control limiter's (one shard, on another
// master: what the shared machine does to latency shows in both, a dead
// node only in fk; a denied fk call asks up to 3 shards, hence the 4×),
// and in no window of a second more grants than the limit allows.
// Not parallel: its load would slow the timing-sensitive tests beside it.
func TestClusterFailover(t *testing.T) {
	cluster := redistest.StartClusterWithReplicas(t, 3, 1)
	useCluster := func(c *config.Config) { c.Cluster = cluster.URLs() }
	proxies := []*harness{startProxy(t, nil, useCluster), startProxy(t, nil, useCluster)}
	const rate, shards = 100, 4

	// The victim is the master of fk's shard 0.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slot := redistest.KeySlot("{fk:0}")
	victimAddr, err := cluster.SlotMaster(ctx, 0, slot)
	if err != nil || victimAddr == "" {
		t.Fatalf("master of slot %d: %q, %v", slot, victimAddr, err)
	}
	victim, witness := -1, -1
	for i, n := range cluster.Nodes {
		if n.Addr() == victimAddr {
			victim = i
		} else if witness < 0 {
			witness = i
		}
	}
	ctl := failoverControl(ctx, t, cluster, witness, victimAddr)
	proxies[0].Do(t, "RL.SETRATE", "fk", rate, "1s", "SHARDS", shards).Equal(int64(1))
	proxies[0].Do(t, "RL.SETRATE", ctl, rate, "1s").Equal(int64(1))

	load := startFailoverLoad(t, proxies, []string{"fk", ctl}, 20, 40*time.Millisecond)
	time.Sleep(time.Second)
	killed := time.Now()
	cluster.Nodes[victim].Stop(t)
	var promoted time.Time
	for {
		addr, err := cluster.SlotMaster(ctx, witness, slot)
		if err == nil && addr != "" && addr != victimAddr {
			promoted = time.Now()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no replica took over slot %d from %s (last: %q, %v)", slot, victimAddr, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	calls := load.stop()

	t.Logf("killed %s; replica promoted %v later", victimAddr, promoted.Sub(killed).Round(10*time.Millisecond))
	var fk []failoverCall
	var before, settled [2][]time.Duration // fk, ctl
	var lastErr *failoverCall
	for i, c := range calls {
		if c.key == 0 {
			fk = append(fk, c)
		}
		switch {
		case c.sent.Before(killed):
			before[c.key] = append(before[c.key], c.latency)
		case c.sent.After(promoted.Add(2 * time.Second)):
			settled[c.key] = append(settled[c.key], c.latency)
		}
		if c.err != nil && (lastErr == nil || c.sent.After(lastErr.sent)) {
			lastErr = &calls[i]
		}
	}
	for _, line := range failoverTimeline(fk, killed, promoted) {
		t.Log(line)
	}
	if lastErr != nil {
		t.Logf("last error %v after the promotion: %v", lastErr.sent.Sub(promoted).Round(time.Millisecond), lastErr.err)
		if lastErr.sent.Sub(promoted) > time.Second {
			t.Errorf("an error %v after the promotion: %v", lastErr.sent.Sub(promoted).Round(time.Millisecond), lastErr.err)
		}
	}
	t.Logf("before the kill: fk p50 %v, p99 %v; control p50 %v, p99 %v",
		percentile(before[0], 50), percentile(before[0], 99), percentile(before[1], 50), percentile(before[1], 99))
	p50, p50ctl := percentile(settled[0], 50), percentile(settled[1], 50)
	t.Logf("from 2s after the promotion: fk p50 %v, p99 %v; control p50 %v, p99 %v",
		p50, percentile(settled[0], 99), p50ctl, percentile(settled[1], 99))
	if len(settled[0]) == 0 || p50 > 4*p50ctl+5*time.Millisecond {
		t.Errorf("latency from 2s after the promotion: p50 %v (%d calls), control's %v", p50, len(settled[0]), p50ctl)
	}
	failoverCheckWindows(t, fk, rate, rate, time.Second)
	// Every shard answers through both proxies (the issue: RL.AVAILABLE
	// still dialed the dead master a minute later).
	for _, h := range proxies {
		h.Do(t, "RL.AVAILABLE", "fk").Int()
	}
}

// failoverControl names a limiter of one shard whose slot is served by
// a master other than avoid, as the node at index asked sees the slots.
func failoverControl(ctx context.Context, t *testing.T, cluster *redistest.Cluster, asked int, avoid string) string {
	t.Helper()
	for i := range 100 {
		name := fmt.Sprintf("ctl%d", i)
		m, err := cluster.SlotMaster(ctx, asked, redistest.KeySlot("{"+name+":0}"))
		if err != nil {
			t.Fatal(err)
		}
		if m != avoid {
			return name
		}
	}
	t.Fatalf("no limiter name off %s", avoid)
	return ""
}

// failoverCall is one RL.ACQUIRE of a failover load.
type failoverCall struct {
	key     int // index in the keys called
	sent    time.Time
	latency time.Duration
	granted bool
	err     error
}

type failoverLoad struct {
	done  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	calls []failoverCall
}

// startFailoverLoad calls RL.ACQUIRE from clients connections (spread
// over the proxies), each once per every, on each of keys in turn, until
// stop.
func startFailoverLoad(t *testing.T, proxies []*harness, keys []string, clients int, every time.Duration) *failoverLoad {
	l := &failoverLoad{done: make(chan struct{})}
	for i := range clients {
		c := proxies[i%len(proxies)].client(t, func(o *redis.Options) { o.PoolSize = 1 })
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var mine []failoverCall
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-l.done:
					l.mu.Lock()
					l.calls = append(l.calls, mine...)
					l.mu.Unlock()
					return
				case <-tick.C:
				}
				key := len(mine) % len(keys)
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				sent := time.Now()
				v, err := c.Do(ctx, "RL.ACQUIRE", keys[key]).Slice()
				cancel()
				call := failoverCall{key: key, sent: sent, latency: time.Since(sent), err: err}
				if err == nil {
					if len(v) != 4 {
						call.err = fmt.Errorf("unexpected reply %#v", v)
					} else {
						call.granted = v[0] == int64(1)
					}
				}
				mine = append(mine, call)
			}
		}()
	}
	return l
}

// stop ends the load and returns its calls in the order they were sent.
func (l *failoverLoad) stop() []failoverCall {
	close(l.done)
	l.wg.Wait()
	slices.SortFunc(l.calls, func(a, b failoverCall) int { return a.sent.Compare(b.sent) })
	return l.calls
}

// failoverTimeline summarises the calls per half second around the kill.
func failoverTimeline(calls []failoverCall, killed, promoted time.Time) []string {
	const step = 500 * time.Millisecond
	type bucket struct {
		n, granted, errs int
		lat              []time.Duration
	}
	buckets := map[int]*bucket{}
	var keys []int
	for _, c := range calls {
		k := int(c.sent.Sub(killed).Truncate(step) / step)
		if c.sent.Before(killed) {
			k--
		}
		b := buckets[k]
		if b == nil {
			b = &bucket{}
			buckets[k] = b
			keys = append(keys, k)
		}
		b.n++
		if c.granted {
			b.granted++
		}
		if c.err != nil {
			b.errs++
		}
		b.lat = append(b.lat, c.latency)
	}
	slices.Sort(keys)
	lines := []string{fmt.Sprintf("since kill  calls  granted  errors  p50      max   (promotion at %v)", promoted.Sub(killed).Round(10*time.Millisecond))}
	for _, k := range keys {
		b := buckets[k]
		lines = append(lines, fmt.Sprintf("%+6.1fs  %6d  %7d  %6d  %-7v  %v", (time.Duration(k)*step).Seconds(), b.n, b.granted, b.errs,
			percentile(b.lat, 50).Round(100*time.Microsecond), slices.Max(b.lat).Round(time.Millisecond)))
	}
	return lines
}

// failoverCheckWindows fails the test if, in any window of length w, more
// requests were granted than burst + rate·w. Only the grants sent and
// answered inside a window are counted: they were surely decided there.
func failoverCheckWindows(t *testing.T, calls []failoverCall, rate, burst int64, w time.Duration) {
	t.Helper()
	var grants []failoverCall
	for _, c := range calls {
		if c.granted {
			grants = append(grants, c)
		}
	}
	bound := float64(burst) + float64(rate)*w.Seconds()
	most := 0
	for i, start := range grants {
		n := 0
		for _, g := range grants[i:] {
			if g.sent.Sub(start.sent) > w {
				break
			}
			if g.sent.Add(g.latency).Sub(start.sent) <= w {
				n++
			}
		}
		most = max(most, n)
		if float64(n) > bound {
			t.Errorf("OVER-ADMITTED: %d grants in the %v from %v, bound %.0f", n, w, start.sent.Format("15:04:05.000"), bound)
			return
		}
	}
	t.Logf("most grants in any %v: %d (bound %.0f)", w, most, bound)
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
