package proxy

// Resharding a Redis Cluster under load: the hash slot of one
// sub-limiter moves to another master by the protocol redis-cli uses
// (SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE), slowly enough
// that requests meet every stage of it, ASK redirections included.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// While 8 clients acquire from a 4-shard limiter, the slot of shard 1
// moves to another master, 300ms per stage. The clients see no error, the
// limit holds (the state moves with MIGRATE, so nothing refills), every
// stage grants, and the keys end up on the new master.
//
// What Redis does at each stage, for a script whose KEYS are the
// sub-limiter's config and state keys (one slot):
//   - importing (destination only): nothing changes for clients.
//   - migrating, keys still on the source: the source runs the script
//     when it has all its keys, answers ASK when it has none, and TRYAGAIN
//     when it has some (config but no state).
//   - keys migrated: the source answers ASK; go-redis sends ASKING + the
//     script to the destination, which runs it when it has all the keys
//     and answers TRYAGAIN when it has some.
//   - moved (SETSLOT NODE everywhere): the source answers MOVED and
//     go-redis reloads the slot map.
//
// A busy sub-limiter has its state key (its bucket is not full), so it
// never meets TRYAGAIN. The rate is low enough that 8 clients keep every
// shard's bucket empty even on a slow, shared machine: a shard whose
// load fell below its rate would refill within milliseconds of a grant,
// its state key expiring with it. An idle one (config, no state: a full token
// bucket keeps none) does, for as long as its slot is between MIGRATING
// and NODE: go-redis retries TRYAGAIN 3 times (30..170ms in all), the
// proxy tries twice (fast path, then full path), then the client gets
// "TRYAGAIN Multiple keys request during rehashing of slot (backend
// cluster <seed>)" — the code first, so clients that retry TRYAGAIN do
// (go-redis does). A slot moved at redis-cli's pace (about 10ms) is
// covered by those retries; this test's 300ms stages are not, and it
// checks that such errors say TRYAGAIN and end with the move.
func TestReshardMovesSubLimiterUnderLoad(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	h := startProxy(t, nil, func(c *config.Config) { c.Cluster = cluster.URLs() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const rate, shards, shard = 400, 4, 1
	h.Do(t, "RL.SETRATE", "k", rate, "1s", "SHARDS", shards).Equal(int64(1))
	cfgKey := fmt.Sprintf("rlproxy:{k:%d}:c", shard)
	cc := cluster.Client(t)
	slot64, err := cc.ClusterKeySlot(ctx, cfgKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	slot := int(slot64)
	nodes, ids := reshardNodes(t, ctx, cluster)
	src := reshardOwner(t, ctx, nodes[0], cluster.Addrs(), slot)
	dst := (src + 1) % len(nodes)
	conf, err := nodes[src].HGetAll(ctx, cfgKey).Result()
	if err != nil || len(conf) == 0 {
		t.Fatalf("HGETALL %s on its owner %s: %v, %v", cfgKey, cluster.Nodes[src].Addr(), conf, err)
	}
	// An idle limiter whose keys share the slot.
	idle := reshardNameInSlot(slot)
	if got, err := cc.ClusterKeySlot(ctx, "rlproxy:{"+idle+":0}:c").Result(); err != nil || got != slot64 {
		t.Fatalf("limiter %s is in slot %d (%v), want %d", idle, got, err, slot)
	}
	h.Do(t, "RL.SETRATE", idle, 1000, "1s").Equal(int64(1))

	// At each stage: the proxy's counters, and one acquire of the idle
	// limiter (its one permit refills in 1ms, so it is idle again).
	probe := h.client(t, nil)
	var stages []reshardStage
	mark := func(name string) error {
		s := reshardStage{name: name}
		var err error
		if s.counters, err = reshardCounters(ctx, probe); err != nil {
			return err
		}
		v, err := probe.Do(ctx, "RL.ACQUIRE", idle).Slice()
		s.idleGranted = err == nil && len(v) == 4 && v[0] == int64(1)
		if s.idle = fmt.Sprint(v); err != nil {
			s.idle, s.idleErr = err.Error(), err
		}
		stages = append(stages, s)
		return nil
	}

	var mu sync.Mutex
	kinds := map[string]int{}
	var moveErr error
	var movedKeys []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(400 * time.Millisecond)
		movedKeys, moveErr = reshardMoveSlot(ctx, reshardMove{
			nodes: nodes, ids: ids, addrs: cluster.Addrs(), slot: slot, src: src, dst: dst,
			pause: 300 * time.Millisecond, mark: mark,
		})
	}()
	r := shardLoad(t, []*harness{h}, "k", shardLoadOptions{
		clients: 8, duration: 3 * time.Second,
		onError: func(err error) {
			mu.Lock()
			kinds[err.Error()]++
			mu.Unlock()
		},
	})
	<-done
	if moveErr != nil {
		t.Fatalf("moving slot %d from %s to %s: %v", slot, cluster.Nodes[src].Addr(), cluster.Nodes[dst].Addr(), moveErr)
	}
	end, err := reshardCounters(ctx, probe)
	if err != nil {
		t.Fatal(err)
	}
	stages = append(stages, reshardStage{name: "end", counters: end})

	t.Logf("slot %d (limiter k shard %d, limiter %s) from %s to %s, keys migrated: %v",
		slot, shard, idle, cluster.Nodes[src].Addr(), cluster.Nodes[dst].Addr(), movedKeys)
	for i, s := range stages[:len(stages)-1] {
		d := stages[i+1].counters.minus(s.counters)
		t.Logf("%-9s granted %5d denied %6d errors %2d; idle acquire: %s", s.name, d.granted, d.denied, d.errors, s.idle)
	}
	srcStats, dstStats := reshardStats(t, ctx, nodes[src]), reshardStats(t, ctx, nodes[dst])
	t.Logf("source %s: ASK %d, MOVED %d, TRYAGAIN %d; destination %s: ASKING %d, TRYAGAIN %d",
		cluster.Nodes[src].Addr(), srcStats["errorstat_ASK"], srcStats["errorstat_MOVED"], srcStats["errorstat_TRYAGAIN"],
		cluster.Nodes[dst].Addr(), dstStats["cmdstat_asking"], dstStats["errorstat_TRYAGAIN"])
	t.Logf("load: %v", r)

	// The clients of the busy limiter saw no error, and it did not
	// over-admit.
	if r.errors > 0 {
		t.Errorf("%d errors during the move, by kind: %v", r.errors, kinds)
	}
	ratio := shardCheckBound(t, r, rate, rate, time.Second)
	t.Logf("%.1f%% of the bound", 100*ratio)

	// Every stage granted (besides the idle limiter's one acquire).
	for i, s := range stages[:len(stages)-1] {
		d := stages[i+1].counters.minus(s.counters)
		if s.idleGranted {
			d.granted--
		}
		if d.granted <= 0 {
			t.Errorf("stage %s: %d granted, want the limiter to keep granting", s.name, d.granted)
		}
	}
	// The ASK path was taken (and the MOVED one, unless go-redis reloaded
	// the slot map before a request reached the source again).
	if srcStats["errorstat_ASK"] == 0 || dstStats["cmdstat_asking"] == 0 {
		t.Errorf("no ASK redirection seen: source %v, destination %v", srcStats, dstStats)
	}

	// The idle limiter: granted before and after the move; in between, a
	// TRYAGAIN error, if any.
	for _, s := range stages[:len(stages)-1] {
		inMove := s.name == "migrating" || s.name == "ask"
		switch {
		case s.idleGranted:
		case !inMove:
			t.Errorf("stage %s: idle limiter's acquire: %s, want granted", s.name, s.idle)
		case s.idleErr == nil || !strings.Contains(s.idle, "TRYAGAIN Multiple keys request during rehashing of slot"):
			t.Errorf("stage %s: idle limiter's acquire: %s, want granted or TRYAGAIN", s.name, s.idle)
		}
	}
	h.Do(t, "RL.ACQUIRE", idle).Granted(999)

	// The keys live on the new master, the config as it was.
	if n, err := nodes[src].ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 0 {
		t.Errorf("COUNTKEYSINSLOT %d on the source: %d, %v; want 0", slot, n, err)
	}
	if !slices.Contains(movedKeys, cfgKey) || len(movedKeys) < 3 {
		t.Errorf("keys migrated: %v, want %s, its state key and the idle limiter's config", movedKeys, cfgKey)
	}
	for _, k := range movedKeys {
		if n, err := nodes[dst].Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Errorf("EXISTS %s on the destination: %d, %v; want 1", k, n, err)
		}
	}
	if got := nodes[dst].HGetAll(ctx, cfgKey).Val(); !maps.Equal(got, conf) {
		t.Errorf("config on the destination %v, was %v", got, conf)
	}
	for i := range nodes {
		if owner := reshardOwner(t, ctx, nodes[i], cluster.Addrs(), slot); owner != dst {
			t.Errorf("%s says slot %d is on %s, want %s", cluster.Addrs()[i], slot, cluster.Addrs()[owner], cluster.Addrs()[dst])
		}
	}
}

// reshardStage is what one stage of a move saw.
type reshardStage struct {
	name        string
	counters    reshardCounts // at its start
	idle        string        // the idle limiter's acquire: reply or error
	idleErr     error
	idleGranted bool
}

type reshardCounts struct{ granted, denied, errors int64 }

func (c reshardCounts) minus(o reshardCounts) reshardCounts {
	return reshardCounts{c.granted - o.granted, c.denied - o.denied, c.errors - o.errors}
}

// reshardCounters reads the proxy's INFO limiters counters.
func reshardCounters(ctx context.Context, c *redis.Client) (reshardCounts, error) {
	text, err := c.Info(ctx, "limiters").Result()
	if err != nil {
		return reshardCounts{}, err
	}
	var n reshardCounts
	fields := map[string]*int64{"granted": &n.granted, "denied": &n.denied, "errors": &n.errors}
	for _, line := range strings.Split(text, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if p := fields[k]; p != nil {
			if _, err := fmt.Sscan(v, p); err != nil {
				return n, fmt.Errorf("INFO limiters %s: %w", line, err)
			}
			delete(fields, k)
		}
	}
	if len(fields) > 0 {
		return n, fmt.Errorf("INFO limiters lacks %v:\n%s", fields, text)
	}
	return n, nil
}

// reshardStats returns a node's error counts by code (errorstat_MOVED,
// ...) and command calls (cmdstat_asking, ...).
func reshardStats(t testing.TB, ctx context.Context, c *redis.Client) map[string]int64 {
	t.Helper()
	text, err := c.Info(ctx, "errorstats", "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]int64{}
	for _, line := range strings.Split(text, "\r\n") {
		// errorstat_ASK:count=3, cmdstat_asking:calls=3,usec=...
		name, v, _ := strings.Cut(line, ":")
		for _, f := range strings.Split(v, ",") {
			if k, n, _ := strings.Cut(f, "="); k == "count" || k == "calls" {
				var x int64
				if _, err := fmt.Sscan(n, &x); err != nil {
					t.Fatalf("INFO: %s: %v", line, err)
				}
				stats[name] = x
			}
		}
	}
	return stats
}

// reshardNodes returns a client of each master of the cluster and its
// node ID, in cluster.Nodes order.
func reshardNodes(t testing.TB, ctx context.Context, cluster *redistest.Cluster) ([]*redis.Client, []string) {
	t.Helper()
	nodes := make([]*redis.Client, len(cluster.Nodes))
	ids := make([]string, len(cluster.Nodes))
	for i, n := range cluster.Nodes {
		nodes[i] = n.Client(t)
		var err error
		if ids[i], err = nodes[i].ClusterMyID(ctx).Result(); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, ids
}

// reshardOwner returns the index (in addrs) of the master serving slot,
// as node c sees it.
func reshardOwner(t testing.TB, ctx context.Context, c *redis.Client, addrs []string, slot int) int {
	t.Helper()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			if i := slices.Index(addrs, s.Nodes[0].Addr); i >= 0 {
				return i
			}
			t.Fatalf("slot %d is served by %s, not one of %v", slot, s.Nodes[0].Addr, addrs)
		}
	}
	t.Fatalf("slot %d is served by no node: %v", slot, slots)
	return -1
}

// reshardMove describes moving one slot between two masters.
type reshardMove struct {
	nodes    []*redis.Client // every master, directly
	ids      []string        // their node IDs
	addrs    []string
	slot     int
	src, dst int           // indexes in nodes
	pause    time.Duration // the length of each stage
	// mark is called as each stage starts: before, importing, migrating,
	// ask (keys migrated), moved.
	mark func(stage string) error
}

// reshardMoveSlot moves a slot as `redis-cli --cluster reshard` does,
// one stage per m.pause, and returns the keys it migrated.
func reshardMoveSlot(ctx context.Context, m reshardMove) ([]string, error) {
	src, dst := m.nodes[m.src], m.nodes[m.dst]
	host, port, _ := net.SplitHostPort(m.addrs[m.dst])
	var keys []string
	stages := []struct {
		name string
		do   func() error
	}{
		{"before", func() error { return nil }},
		{"importing", func() error {
			return dst.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "IMPORTING", m.ids[m.src]).Err()
		}},
		{"migrating", func() error {
			return src.Do(ctx, "CLUSTER", "SETSLOT", m.slot, "MIGRATING", m.ids[m.dst]).Err()
		}},
		{"ask", func() error {
			for {
				batch, err := src.ClusterGetKeysInSlot(ctx, m.slot, 10).Result()
				if err != nil || len(batch) == 0 {
					return err
				}
				args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
				for _, k := range batch {
					args = append(args, k)
				}
				if err := src.Do(ctx, args...).Err(); err != nil {
					return err
				}
				keys = append(keys, batch...)
			}
		}},
		{"moved", func() error {
			// The destination first: were the source first, it would
			// send MOVED to a destination still importing, which sends
			// MOVED back.
			for _, i := range append([]int{m.dst, m.src}, reshardOthers(len(m.nodes), m.src, m.dst)...) {
				if err := m.nodes[i].Do(ctx, "CLUSTER", "SETSLOT", m.slot, "NODE", m.ids[m.dst]).Err(); err != nil {
					return fmt.Errorf("on %s: %w", m.addrs[i], err)
				}
			}
			return nil
		}},
	}
	for _, s := range stages {
		if err := s.do(); err != nil {
			return keys, fmt.Errorf("%s: %w", s.name, err)
		}
		if err := m.mark(s.name); err != nil {
			return keys, err
		}
		time.Sleep(m.pause)
	}
	return keys, nil
}

// reshardOthers lists 0..n-1 but not.
func reshardOthers(n int, not ...int) []int {
	var out []int
	for i := range n {
		if !slices.Contains(not, i) {
			out = append(out, i)
		}
	}
	return out
}

// reshardNameInSlot returns a limiter name whose only sub-limiter's keys
// hash to slot.
func reshardNameInSlot(slot int) string {
	for i := 0; ; i++ {
		name := fmt.Sprintf("idle%d", i)
		if redistest.KeySlot("rlproxy:{"+name+":0}:c") == slot {
			return name
		}
	}
}
