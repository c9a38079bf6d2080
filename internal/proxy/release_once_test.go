package proxy

import (
	"context"
	"testing"

	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/sharding"
)

// RL.RELEASE as the first call after a writer stopped part way: each
// follower is repaired when the walk reaches it, and every shard gets its
// share back once (the walk going back over the shards already given
// theirs would give them twice).
func TestReleaseOverStaleFollowersOnce(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	h := f.proxies[0]
	ctx := context.Background()
	var names []string
	for _, n := range h.proxy.pool.Nodes() {
		names = append(names, n.Name())
	}
	keys := limiter.Keys{Prefix: h.cfg.KeyPrefix}
	h.Do(t, "RL.SETRATE", "release-behind", 400, "1h", "SHARDS", 4).Equal(int64(1))
	h.Do(t, "RL.CHARGE", "release-behind", 400).Acquire()
	h.Do(t, "RL.AVAILABLE", "release-behind").Equal(int64(0))
	for shard := 1; shard < 4; shard++ {
		follower := f.backends[names[sharding.Placement("release-behind", 4, names)[shard]]]
		if err := follower.HSet(ctx, keys.Config("release-behind", shard), "epoch", "oldepoch", "gen", "1", "sub_rate", 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h.Do(t, "RL.RELEASE", "release-behind", 4).Equal(int64(4))
	h.Do(t, "RL.AVAILABLE", "release-behind").Equal(int64(4))
	if _, err := f.consistent("release-behind"); err != nil {
		t.Errorf("after RL.RELEASE: %v", err)
	}
}
