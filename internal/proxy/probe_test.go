package proxy

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
)

// A denied acquire on SHARDS 4 with max_probes 2 asks at most 1 + 2
// sub-limiters: probing goes on from the shard the first try asked, it
// does not start again from another. Counted on the backend (INFO
// commandstats), for lone calls and for a pipeline, deny cache off.
func TestDeniedShardedAcquireCallsAtMostOnePlusMaxProbes(t *testing.T) {
	const probes, n = 2, 100
	h := start(t, func(c *config.Config) { c.MaxProbes = probes; c.DenyCache = false })
	h.Do(t, "RL.SETRATE", "p", 4, "1h", "SHARDS", 4).Equal(int64(1))
	for range 40 { // every shard's one permit goes
		h.Do(t, "RL.ACQUIRE", "p")
	}
	backend := redis.NewClient(&redis.Options{Addr: h.backend.Addr(), Protocol: 2})
	defer backend.Close()
	scriptCalls := func() int {
		c := backendCalls(t, backend)
		return c["evalsha"] + c["eval"]
	}

	resetBackendStats(t, backend)
	for range n {
		h.Do(t, "RL.ACQUIRE", "p").Denied(0)
	}
	lone := scriptCalls()

	resetBackendStats(t, backend)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	pipe := h.client(t, nil).Pipeline()
	cmds := make([]*redis.Cmd, n)
	for i := range cmds {
		cmds[i] = pipe.Do(ctx, "RL.ACQUIRE", "p")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != 4 || v[0] != 0 {
			t.Fatalf("pipelined acquire %d: %v %v, want a denial", i, v, err)
		}
	}
	pipelined := scriptCalls()

	t.Logf("script calls per denied acquire: %.2f lone, %.2f pipelined (bound %d)",
		float64(lone)/n, float64(pipelined)/n, 1+probes)
	for what, calls := range map[string]int{"lone": lone, "pipelined": pipelined} {
		if calls > n*(1+probes) {
			t.Errorf("%d %s denied acquires made %d script calls, want at most %d (1 + max_probes each)", n, what, calls, n*(1+probes))
		}
	}
	// Every denial did probe (all shards are empty): not fewer either.
	if lone < n*(1+probes) {
		t.Errorf("%d lone denied acquires made %d script calls, want %d: each probes 1 + max_probes shards", n, lone, n*(1+probes))
	}
}
