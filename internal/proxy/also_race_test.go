package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

// RL.ACQUIRE ... ALSO under a race: 4 proxies, 32 clients, each call 2 or
// 3 names of several algorithms (explicit, a policy's, a sharded one)
// spread over two standalone backends, or over a Redis Cluster (each name
// a slot of its own): every call that spans nodes is decided node by
// node, with a give-back when a later node denies. No name ever grants
// more than its budget (long intervals: the budget is the rate); what the
// give-back could not return is the under-admission, reported.
func TestAlsoRace(t *testing.T) {
	t.Run("two backends", func(t *testing.T) {
		nodes := shardNodes(t, 2)
		var ps []*harness
		for range 4 {
			ps = append(ps, shardProxy(t, nodes, slowMachine))
		}
		onNode := func(name string) int {
			key := limiter.Keys{Prefix: ps[0].cfg.KeyPrefix}.Config(name, 0)
			if n, _ := nodes[0].Client(t).Exists(context.Background(), key).Result(); n == 1 {
				return 0
			}
			return 1
		}
		alsoRace(t, ps, onNode)
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := redistest.StartCluster(t, 3)
		var ps []*harness
		for range 4 {
			ps = append(ps, startProxy(t, nil, func(c *config.Config) { c.Cluster = cluster.URLs() }, slowMachine))
		}
		alsoRace(t, ps, nil)
	})
}

// slowMachine gives the backends time on a busy test machine: a
// timed-out call is an error here, not a decision.
func slowMachine(c *config.Config) { c.BackendTimeout = 5 * time.Second }

func alsoRace(t *testing.T, ps []*harness, onNode func(name string) int) {
	type name struct {
		key  string
		rate int64
		// fixed-window: windows of an hour; the run may cross into the next.
		window bool
		// token bucket: an hour's bucket refills during the run.
		bucket bool
	}
	a := ps[0]
	// The explicit limiters' nodes follow from their names and the
	// backends' addresses (free ports, so each run differs): names are
	// made again under another suffix until both nodes hold some.
	var names []name
	for try := 0; ; try++ {
		sfx := ""
		if try > 0 {
			sfx = fmt.Sprintf("-%d", try)
		}
		names = []name{
			{key: "r-tb" + sfx, rate: 60, bucket: true},
			{key: "r-log" + sfx, rate: 50},
			{key: "r-fw" + sfx, rate: 55, window: true},
			{key: "r-sharded" + sfx, rate: 64, bucket: true},
			{key: "rp:1", rate: 45},
			{key: "rp:2", rate: 45},
		}
		a.Do(t, "RL.SETRATE", names[0].key, 60, "1h").Equal(int64(1))
		a.Do(t, "RL.SETRATE", names[1].key, 50, "1h", "ALGO", "sliding-log").Equal(int64(1))
		a.Do(t, "RL.SETRATE", names[2].key, 55, "1h", "ALGO", "fixed-window").Equal(int64(1))
		a.Do(t, "RL.SETRATE", names[3].key, 64, "1h", "SHARDS", 2).Equal(int64(1))
		if onNode == nil {
			break
		}
		where := map[int]int{}
		for _, n := range names {
			where[onNode(n.key)]++
		}
		if len(where) == 2 {
			t.Logf("names per node: %v", where)
			break
		}
		if try == 20 {
			t.Fatalf("every name on one node (%v) in 20 tries: the test needs names on both", where)
		}
		for _, n := range names[:4] {
			a.Do(t, "RL.DEL", n.key).Equal(int64(1))
		}
	}
	a.Do(t, "RL.POLICY", "SET", "rp:*", 45, "1h", "ALGO", "sliding-window").Equal(int64(1))
	// A policy set through one proxy governs on the others within its
	// follow period: wait until each answers for rp:1.
	for _, p := range ps {
		if err := eventually(5*time.Second, func() error {
			return p.Do(t, "RL.POLICY", "MATCH", "rp:1").err
		}); err != nil {
			t.Fatal(err)
		}
	}

	granted := make([]atomic.Int64, len(names))
	var calls, grants, errs, lastGrant atomic.Int64
	var firstErr atomic.Value
	// Until the names run out (no grant in the last 300 calls), or 4 s.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for c := range 32 {
		p := ps[c%len(ps)]
		cl := p.client(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				pick := rand.Perm(len(names))[:2+rand.IntN(2)]
				args := []any{"RL.ACQUIRE"}
				for i, x := range pick {
					if i > 0 {
						args = append(args, "ALSO")
					}
					args = append(args, names[x].key, 1)
				}
				v, err := cl.Do(context.Background(), args...).Slice()
				n := calls.Add(1)
				if n-lastGrant.Load() > 300 {
					cancel()
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(args, err))
					continue
				}
				if v[0].(int64) == 1 {
					grants.Add(1)
					lastGrant.Store(n)
					for _, x := range pick {
						granted[x].Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if errs.Load() > 0 {
		t.Fatalf("%d errors, first %v", errs.Load(), firstErr.Load())
	}
	t.Logf("%d calls, %d granted", calls.Load(), grants.Load())
	for i, n := range names {
		g := granted[i].Load()
		left := a.Do(t, "RL.AVAILABLE", n.key).Int()
		bound := n.rate
		if n.window {
			bound = 2 * n.rate // at most two hour windows in the run
		}
		if n.bucket {
			bound++ // an hour's bucket refills one permit in a minute
		}
		// Taken but granted to nobody: given back only in part (a
		// bucket's drain during the window, a log entry no longer the
		// newest), or not at all (a window that ended).
		lost := n.rate - left - g
		t.Logf("%-9s granted %3d of %d (over-admission %d), left %3d, lost to rollback %d",
			n.key, g, n.rate, max(0, g-bound), left, lost)
		if g > bound {
			t.Errorf("%s granted %d, over its budget %d", n.key, g, bound)
		}
	}
}
