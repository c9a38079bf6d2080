package proxy

// Many proxies, one truth: RL.SETRATE raced from several proxies over
// two real backends converges on one config (the last writer's), which
// every shard serves — checked on the backends themselves, before any
// acquire could repair a follower.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/sharding"
)

// fleet is n proxies in front of the same backends.
type fleet struct {
	proxies  []*harness
	backends map[string]*redis.Client // by node name
}

func startFleet(t testing.TB, n int, tweaks ...func(*config.Config)) *fleet {
	t.Helper()
	srvs := []*redistest.Server{redistest.StartServer(t), redistest.StartServer(t)}
	f := &fleet{backends: map[string]*redis.Client{}}
	for range n {
		f.proxies = append(f.proxies, startProxy(t, srvs[0], append([]func(*config.Config){func(c *config.Config) {
			c.Backends = []string{srvs[0].URL(), srvs[1].URL()}
		}}, tweaks...)...))
	}
	for i, node := range f.proxies[0].proxy.pool.Nodes() {
		c := redis.NewClient(&redis.Options{Addr: srvs[i].Addr()})
		t.Cleanup(func() { _ = c.Close() })
		f.backends[node.Name()] = c
	}
	return f
}

// consistent checks on the backends that every shard of limiter name
// holds shard 0's epoch and generation and its own share of the rate. It
// returns shard 0's config (nil when the limiter does not exist).
func (f *fleet) consistent(name string) (*limiter.Stored, error) {
	ctx := context.Background()
	var names []string
	for _, n := range f.proxies[0].proxy.pool.Nodes() {
		names = append(names, n.Name())
	}
	keys := limiter.Keys{Prefix: f.proxies[0].cfg.KeyPrefix}
	read := func(shard, shards int) (map[string]string, error) {
		node := names[sharding.Placement(name, shards, names)[shard]]
		return f.backends[node].HGetAll(ctx, keys.Config(name, shard)).Result()
	}
	h0, err := read(0, 1)
	if err != nil || len(h0) == 0 {
		return nil, err
	}
	st, err := limiter.ParseStored(h0)
	if err != nil {
		return nil, err
	}
	subs := sharding.Subs(st.Config)
	for shard := 1; shard < st.Shards; shard++ {
		h, err := read(shard, st.Shards)
		if err != nil {
			return nil, err
		}
		if h["epoch"] != st.Epoch || h["gen"] != st.Gen || h["sub_rate"] != fmt.Sprint(subs[shard].Rate) {
			return nil, fmt.Errorf("shard %d holds epoch %s gen %s sub_rate %s; shard 0: epoch %s gen %s (%d/%v, %d shards), want sub_rate %d",
				shard, h["epoch"], h["gen"], h["sub_rate"], st.Epoch, st.Gen, st.Rate, st.Interval, st.Shards, subs[shard].Rate)
		}
	}
	return &st, nil
}

// sameEverywhere waits up to 1s for every proxy's RL.GETRATE to show the
// same config as shard 0 holds.
func (f *fleet) sameEverywhere(t *testing.T, name string, st *limiter.Stored) {
	t.Helper()
	err := eventually(time.Second, func() error {
		for i, h := range f.proxies {
			v, err := h.d.Do(context.Background(), "RL.GETRATE", name).Result()
			if st == nil {
				if err != redis.Nil {
					return fmt.Errorf("proxy %d: RL.GETRATE = %v, %v; want nil", i, v, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("proxy %d: %v", i, err)
			}
			got := fmt.Sprint(v)
			if !strings.Contains(got, fmt.Sprintf("rate:%d", st.Rate)) || !strings.Contains(got, fmt.Sprintf("shards:%d", st.Shards)) {
				return fmt.Errorf("proxy %d: RL.GETRATE = %s; shard 0 holds rate %d shards %d", i, got, st.Rate, st.Shards)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// 4 proxies × 50 rounds: each round every proxy sets another rate and
// shard count at the same instant. Afterwards the backends hold one
// config on every shard (no acquire has repaired anything yet), every
// proxy reports it, and every proxy serves it without an error.
func TestRacingSetRateConverges(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 4)
	shardCounts := []int{1, 2, 4, 8}
	for round := range 50 {
		name := fmt.Sprintf("race%d", round%5) // limiters that already exist, too
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, h := range f.proxies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rate := 100*(i+1) + round
				shards := shardCounts[(i+round)%len(shardCounts)]
				if err := h.d.Do(context.Background(), "RL.SETRATE", name, rate, "1s", "SHARDS", shards).Err(); err != nil {
					t.Errorf("round %d proxy %d: RL.SETRATE: %v", round, i, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		st, err := f.consistent(name)
		if err != nil || st == nil {
			t.Fatalf("round %d: backends: %v (config %v)", round, err, st)
		}
		f.sameEverywhere(t, name, st)
		for i, h := range f.proxies {
			if n := h.Do(t, "RL.AVAILABLE", name).Int(); n <= 0 || n > st.Rate {
				t.Fatalf("round %d proxy %d: RL.AVAILABLE = %d, rate %d", round, i, n, st.Rate)
			}
			h.Do(t, "RL.ACQUIRE", name).Acquire()
		}
	}
}

// RL.SETRATE raced against RL.DEL and RL.ACQUIRE: the only error is "no
// such limiter" (after a DEL), and afterwards the limiter either exists
// consistently on every shard or nowhere.
func TestRacingSetRateAndDel(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 4)
	for round := range 50 {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, h := range f.proxies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ctx := context.Background()
				var err error
				switch i {
				case 0:
					err = h.d.Do(ctx, "RL.DEL", "d").Err()
				default:
					err = h.d.Do(ctx, "RL.SETRATE", "d", 100*i, "1s", "SHARDS", 1<<i).Err()
				}
				for range 5 {
					if err == nil {
						err = h.d.Do(ctx, "RL.ACQUIRE", "d").Err()
					}
					if err != nil && strings.Contains(err.Error(), "no such limiter") {
						err = nil
					}
				}
				if err != nil {
					t.Errorf("round %d proxy %d: %v", round, i, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		st, err := f.consistent("d")
		if err != nil {
			t.Fatalf("round %d: backends: %v", round, err)
		}
		f.sameEverywhere(t, "d", st)
	}
}

// Two proxies flip a 1-per-hour limiter between shard counts while two
// others acquire: no error, and no more grants than the configs put in
// force allow (each change starts a fresh budget of 20).
func TestRacingSetRateAndAcquire(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 4)
	const rate = 20
	f.proxies[0].Do(t, "RL.SETRATE", "a", rate, "1h", "SHARDS", 2).Equal(int64(1))
	var changes, grants atomic.Int64
	changes.Add(1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, h := range f.proxies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				if i < 2 {
					v, err := h.d.Do(ctx, "RL.SETRATE", "a", rate, "1h", "SHARDS", 2+2*((n+i)%2)).Int64()
					if err != nil && ctx.Err() == nil {
						t.Errorf("proxy %d: RL.SETRATE: %v", i, err)
					}
					changes.Add(v)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				v, err := h.d.Do(ctx, "RL.ACQUIRE", "a").Slice()
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("proxy %d: RL.ACQUIRE: %v", i, err)
					}
					continue
				}
				if v[0] == int64(1) {
					grants.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d config changes, %d grants", changes.Load(), grants.Load())
	if changes.Load() < 10 {
		t.Fatalf("only %d config changes: the race was not run", changes.Load())
	}
	if g, most := grants.Load(), changes.Load()*rate; g > most {
		t.Fatalf("%d grants, more than %d (%d configs × %d)", g, most, changes.Load(), rate)
	}
	if _, err := f.consistent("a"); err != nil {
		t.Fatal(err)
	}
}

// A writer that stops part way leaves a follower behind (simulated: its
// config is rolled back on the backend), or shard 0's node loses its data
// (a follower then holds a newer generation than shard 0): the first
// calls repair the follower from shard 0, without an error.
func TestStaleFollowerRepaired(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2)
	h := f.proxies[0]
	ctx := context.Background()
	var names []string
	for _, n := range h.proxy.pool.Nodes() {
		names = append(names, n.Name())
	}
	keys := limiter.Keys{Prefix: h.cfg.KeyPrefix}
	follower := func(name string, shard, shards int) *redis.Client {
		return f.backends[names[sharding.Placement(name, shards, names)[shard]]]
	}
	for _, tc := range []struct{ name, epoch, gen string }{
		{"behind", "oldepoch", "1"},               // a writer stopped part way
		{"ahead", "newepoch", "9999999999999999"}, // shard 0 went back in time
	} {
		h.Do(t, "RL.SETRATE", tc.name, 400, "1s", "SHARDS", 4).Equal(int64(1))
		for shard := 1; shard < 4; shard++ {
			key := keys.Config(tc.name, shard)
			if err := follower(tc.name, shard, 4).HSet(ctx, key, "epoch", tc.epoch, "gen", tc.gen, "sub_rate", 1).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.consistent(tc.name); err == nil {
			t.Fatalf("%s: the followers were not broken", tc.name)
		}
		for _, p := range f.proxies {
			if n := p.Do(t, "RL.AVAILABLE", tc.name).Int(); n < 380 || n > 400 {
				t.Errorf("%s: RL.AVAILABLE = %d, want about 400 (every shard serving its 100)", tc.name, n)
			}
			for range 8 {
				p.Do(t, "RL.ACQUIRE", tc.name).Acquire()
			}
		}
		if _, err := f.consistent(tc.name); err != nil {
			t.Errorf("%s: after the calls: %v", tc.name, err)
		}
	}

	// RL.CHARGE as the first call after a writer stopped part way: each
	// follower is repaired and charged once, shard 0 not twice.
	h.Do(t, "RL.SETRATE", "charge-behind", 400, "1h", "SHARDS", 4).Equal(int64(1))
	for shard := 1; shard < 4; shard++ {
		key := keys.Config("charge-behind", shard)
		if err := follower("charge-behind", shard, 4).HSet(ctx, key, "epoch", "oldepoch", "gen", "1", "sub_rate", 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if res := h.Do(t, "RL.CHARGE", "charge-behind", 400).Acquire(); !res.Granted || res.Remaining != 0 {
		t.Errorf("RL.CHARGE 400 of 400 over stale followers: %+v, want granted, 0 remaining", res)
	}
	h.Do(t, "RL.AVAILABLE", "charge-behind").Equal(int64(0))
	if _, err := f.consistent("charge-behind"); err != nil {
		t.Errorf("charge-behind: after RL.CHARGE: %v", err)
	}
}
