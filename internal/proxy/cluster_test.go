package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// On Redis Cluster every sub-limiter's keys share the hash tag
// {name:shard}: each script touches one slot (no CROSSSLOT), and the
// sub-limiters of one limiter spread over the masters.
func TestShardCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	h := startProxy(t, nil, func(c *config.Config) { c.Cluster = cluster.URLs() })
	cc := cluster.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const rate, shards = 1000, 8
	h.Do(t, "RL.SETRATE", "ck", rate, "1s", "SHARDS", shards).Equal(int64(1))
	masters := map[string][]int{}
	for shard := range shards {
		key := fmt.Sprintf("rlproxy:{ck:%d}:c", shard)
		if n, err := cc.Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s = %d, %v; want 1", key, n, err)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("MasterForKey(%s): %v", key, err)
		}
		addr := m.Options().Addr
		masters[addr] = append(masters[addr], shard)
	}
	if len(masters) < 2 {
		t.Fatalf("the 8 sub-limiters are all on %d master(s): %v", len(masters), masters)
	}
	t.Logf("master → shards: %v", masters)

	// The limit holds under concurrency, with no error at all (a
	// CROSSSLOT or MOVED reaching a client would show here).
	r := shardLoad(t, []*harness{h}, "ck", shardLoadOptions{clients: 16, duration: 1500 * time.Millisecond})
	if r.errors > 0 {
		t.Fatalf("%d errors, first: %v", r.errors, r.firstErr)
	}
	ratio := shardCheckBound(t, r, rate, rate, time.Second)
	t.Logf("cluster, SHARDS 8: %v; %.1f%% of the bound", r, 100*ratio)
	if r.denied == 0 {
		t.Errorf("no denials: the load did not reach the limit (%v)", r)
	}

	// The state keys carry the same tag as their config, so they sit in
	// the same slot.
	for shard := range shards {
		keys, err := shardClusterKeys(ctx, cc, fmt.Sprintf("rlproxy:{ck:%d}:*", shard))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, fmt.Sprintf("rlproxy:{ck:%d}:", shard)) {
				t.Errorf("key %s found by the pattern of shard %d", k, shard)
			}
		}
	}

	h.Do(t, "RL.AVAILABLE", "ck").Int()
	h.Do(t, "RL.RESET", "ck").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "ck").Equal(int64(rate))
	h.Do(t, "RL.SETRATE", "ck", rate, "1s", "SHARDS", 3).Equal(int64(1))
	for shard := range shards {
		n, err := cc.Exists(ctx, fmt.Sprintf("rlproxy:{ck:%d}:c", shard)).Result()
		if want := int64(0); shard < 3 {
			want = 1
			if n != want || err != nil {
				t.Errorf("shard %d config after SHARDS 3: exists %d, %v", shard, n, err)
			}
		} else if n != want || err != nil {
			t.Errorf("shard %d config after SHARDS 3: exists %d, %v; want it gone", shard, n, err)
		}
	}
	h.Do(t, "RL.DEL", "ck").Equal(int64(1))
	keys, err := shardClusterKeys(ctx, cc, "rlproxy:{ck:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("keys left after RL.DEL: %v", keys)
	}
}

// shardClusterKeys runs KEYS pattern on every master.
func shardClusterKeys(ctx context.Context, cc *redis.ClusterClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var all []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return err
	})
	return all, err
}
