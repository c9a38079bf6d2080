package ratelimit

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/limiter"
)

func TestConfigCache(t *testing.T) {
	var c configCache
	if c.get("a") != nil {
		t.Fatal("empty cache returned an entry")
	}
	e := &entry{name: "a"}
	c.put("a", e, 1)
	if c.get("a") != e {
		t.Error("put entry not returned")
	}
	t0 := time.Unix(1000, 0)
	if !c.due("a", t0, time.Second) {
		t.Error("first keepAlive not due")
	}
	if c.due("a", t0.Add(999*time.Millisecond), time.Second) {
		t.Error("keepAlive due again before its period")
	}
	if !c.due("a", t0.Add(time.Second), time.Second) {
		t.Error("keepAlive not due after its period")
	}
	c.drop("a")
	if c.get("a") != nil {
		t.Error("dropped entry still returned")
	}
	if !c.due("a", t0.Add(time.Second), time.Second) {
		t.Error("a dropped limiter's keepAlive is not due at once")
	}
}

func TestConfigCacheBound(t *testing.T) {
	var c configCache
	for i := range maxCached + 10 {
		c.put(strconv.Itoa(i), &entry{}, 1)
	}
	if n := c.len(); n != maxCached {
		t.Errorf("%d entries, want the bound %d", n, maxCached)
	}
	for i := range 10 {
		if c.get(strconv.Itoa(i)) != nil {
			t.Errorf("entry %d, among the oldest, was kept", i)
		}
	}
}

// The least recently used entry goes first, a read counting as a use;
// the byte bound evicts the same way.
func TestConfigCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := configCache{maxSize: 30}
	for _, n := range []string{"a", "b", "c"} {
		c.put(n, &entry{name: n}, 10)
	}
	c.get("a") // b is now the least recently used
	c.put("d", &entry{name: "d"}, 10)
	if c.get("b") != nil {
		t.Error("b, the least recently used, was kept")
	}
	for _, n := range []string{"a", "c", "d"} {
		if c.get(n) == nil {
			t.Errorf("%s was dropped instead of b", n)
		}
	}
	// Use order is now a, c, d (oldest first); a big entry evicts two.
	c.put("e", &entry{name: "e"}, 20)
	if c.get("a") != nil || c.get("c") != nil || c.get("d") == nil || c.get("e") == nil {
		t.Errorf("a 20-byte entry did not evict exactly the two oldest (a, c): %v", c.names())
	}
	// Replacing an entry keeps one copy and its bytes right.
	c.put("e", &entry{name: "e"}, 5)
	if c.len() != 2 || c.bytes != 15 {
		t.Errorf("after replacing e: %d entries of %d bytes, want 2 of 15", c.len(), c.bytes)
	}
	c.drop("d")
	c.drop("e")
	if c.len() != 0 || c.bytes != 0 || c.newest != nil || c.oldest != nil {
		t.Errorf("emptied cache holds %d entries, %d bytes", c.len(), c.bytes)
	}
}

// names lists the cache from newest to oldest.
func (c *configCache) names() []string {
	var out []string
	for n := c.newest; n != nil; n = n.older {
		out = append(out, n.name)
	}
	return out
}

// An entry's memory does not grow with its shard count: routes are made
// on use and at most routeSlots kept, so past that a limiter of 1024
// shards holds what one of 8 does, but for 2 bytes of placement a shard.
// (Before, every shard's route was built up front: about 20 MB for the
// limiter below.)
func TestEntrySizeIndependentOfShards(t *testing.T) {
	pool, err := backend.Open(context.Background(), backend.Options{
		Backends: []string{"redis://127.0.0.1:1", "redis://127.0.0.1:2"}, // never dialled here
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l := New(pool, limiter.NewScripts(), Options{KeyPrefix: "rl:"})
	defer l.Close()
	name := strings.Repeat("n", 512)
	heavy := func(shards int) limiter.Config {
		c := limiter.Config{Algo: limiter.SlidingLog, Rate: 1 << 20, Interval: time.Second, Burst: 1 << 20, Shards: shards, Mode: limiter.Overall}
		for i := range c.Limits {
			c.Limits[i] = limiter.Limit{Rate: 1 << 20, Interval: time.Duration(i+2) * time.Second}
		}
		return c
	}
	retained := func(shards int) float64 {
		c := heavy(shards)
		const n = 20
		es := make([]*entry, n)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range es {
			es[i] = l.newEntry(name+strconv.Itoa(i), &limiter.Stored{Config: c, Epoch: "e"}, nil)
			for shard := range shards {
				l.route(es[i], shard, "") // every shard used
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(es)
		return float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	small, big := retained(8), retained(1024)
	t.Logf("bytes per entry: %.0f at 8 shards, %.0f at 1024", small, big)
	if big > small+2*1024+4096 {
		t.Errorf("an entry of 1024 shards holds %.0f bytes, one of 8 %.0f: it grows with shards", big, small)
	}
	if est := l.size(l.newEntry(name, &limiter.Stored{Config: heavy(1024), Epoch: "e"}, nil)); float64(est) < big {
		t.Errorf("the cache's size estimate (%d bytes) is below what the entry holds (%.0f)", est, big)
	}
}

// len returns the number of configs held.
func (c *configCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byName)
}
