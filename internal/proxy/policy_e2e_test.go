package proxy

// Policies (RL.POLICY) end to end: one rule over every name with a
// prefix, through real clients and real redis-servers.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

const noSuch = "ERR no such limiter '%s' (create it with RL.SETRATE or RL.POLICY SET)"

func TestPolicyCommands(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) { c.MaxPolicies = 3; c.MetricsListen = "127.0.0.1:0" })

	// Replies: 1 created or changed, 0 left as it was (NX: only create).
	h.Do(t, "RL.POLICY", "SET", "user:*", 2, "1h").Equal(int64(1))
	h.Do(t, "RL.POLICY", "SET", "user:*", 2, "1h").Equal(int64(0))
	h.Do(t, "RL.POLICY", "SET", "user:*", 5, "1h", "NX").Equal(int64(0))
	h.Do(t, "RL.POLICY", "GET", "user:*").Equal(getRate3(2, 3600000, "token-bucket", 2, "OVERALL", 0))
	h.Do(t, "RL.POLICY", "GET", "none:*").Nil()

	// A governed name is a limiter with the policy's config, each name its own.
	h.Do(t, "RL.ACQUIRE", "user:1").Granted(1)
	h.Do(t, "RL.ACQUIRE", "user:1").Granted(0)
	h.Do(t, "RL.ACQUIRE", "user:1").Denied(0)
	h.Do(t, "RL.ACQUIRE", "user:2").Granted(1)
	h.Do(t, "RL.AVAILABLE", "user:2").Equal(int64(1))
	h.Do(t, "RL.RELEASE", "user:1", 1).Equal(int64(1))
	h.Do(t, "RL.CHARGE", "user:3", 5).Equal([]any{int64(1), int64(-3), int64(0), int64(9000000)})
	h.Do(t, "RL.ACQUIRE", "user:1", 3).Err("ERR requested 3 permits but limiter 'user:1' holds at most 2 per request")
	want := getRate3(2, 3600000, "token-bucket", 2, "OVERALL", 0)
	want["policy"] = "user:*"
	h.Do(t, "RL.GETRATE", "user:1").Equal(want)
	h.Do(t, "RL.POLICY", "MATCH", "user:1").Equal("user:*")
	h.Do(t, "RL.POLICY", "MATCH", "other").Nil()
	h.Do(t, "RL.ACQUIRE", "other").Err(fmt.Sprintf(noSuch, "other"))
	h.Do(t, "RL.GETRATE", "other").Nil()

	// No key per name: its state is a field of one of the policy's
	// generation hashes, which have a TTL.
	ctx := context.Background()
	b := h.backend.Client(t)
	keys := limiter.Keys{Prefix: h.cfg.KeyPrefix}
	epoch := policyEpoch(t, h, "user:*")
	state := keys.Script(limiter.TokenBucket, "user:2", 0, epoch, "")[1]
	if n, _ := b.Exists(ctx, keys.Config("user:1", 0), state).Result(); n != 0 {
		t.Errorf("a governed name has a key of its own")
	}
	gens, _ := b.Keys(ctx, keys.PolicyState(epoch)+":*").Result()
	held := 0
	for _, g := range gens {
		if ok, _ := b.HExists(ctx, g, state).Result(); ok {
			held++
			if ttl, err := b.PTTL(ctx, g).Result(); err != nil || ttl <= 0 {
				t.Errorf("generation %s: PTTL %v %v, want a TTL", g, ttl, err)
			}
		}
	}
	if held != 1 {
		t.Errorf("state of user:2 (%s) is in %d of the generations %v, want 1", state, held, gens)
	}
	if v := stateOf(t, h, epoch, state); len(v) != 16 {
		t.Errorf("state of user:2 is %q, want 16 bytes (level and time, packed)", v)
	}

	// RL.RESET gives fresh state; RL.DEL clears it (1 if there was any).
	h.Do(t, "RL.RESET", "user:1").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "user:1").Equal(int64(2))
	h.Do(t, "RL.DEL", "user:2").Equal(int64(1))
	h.Do(t, "RL.DEL", "user:2").Equal(int64(0))
	h.Do(t, "RL.AVAILABLE", "user:2").Equal(int64(2))

	// The longest prefix wins; an explicit limiter wins over any policy.
	h.Do(t, "RL.POLICY", "SET", "user:vip:*", 10, "1s", "ALGO", "fixed-window").Equal(int64(1))
	h.Do(t, "RL.POLICY", "MATCH", "user:vip:1").Equal("user:vip:*")
	h.Do(t, "RL.ACQUIRE", "user:vip:1").Granted(9)
	h.Do(t, "RL.SETRATE", "user:9", 100, "1s").Equal(int64(1))
	h.Do(t, "RL.POLICY", "MATCH", "user:9").Nil()
	h.Do(t, "RL.ACQUIRE", "user:9").Granted(99)
	h.Do(t, "RL.GETRATE", "user:9").Equal(getRate3(100, 1000, "token-bucket", 100, "OVERALL", 0))
	h.Do(t, "RL.DEL", "user:9").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "user:9").Granted(1) // the policy again

	// A changed policy starts its names fresh; KEEPSTATE carries used permits.
	h.Do(t, "RL.ACQUIRE", "user:5").Granted(1)
	h.Do(t, "RL.POLICY", "SET", "user:*", 4, "1h", "KEEPSTATE").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "user:5").Equal(int64(3))
	h.Do(t, "RL.POLICY", "SET", "user:*", 4, "1h", "ALGO", "sliding-window").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "user:5").Equal(int64(4))

	h.Do(t, "RL.POLICY", "LIST").Equal([]any{"user:*", "user:vip:*"})

	// Bad input.
	for _, bad := range []string{"user", "user:**", "*user:*", "us*er:*", ""} {
		h.Do(t, "RL.POLICY", "SET", bad, 1, "1s").Err("ERR policy pattern must be a prefix followed by '*' (like user:*)")
	}
	h.Do(t, "RL.POLICY", "SET", "x:*", 1, "1s", "TTL", "1h").Err("ERR TTL does not apply to a policy: a name's state is kept only until it is full again")
	h.Do(t, "RL.POLICY", "SET", "x:*", 0, "1s").Err("ERR rate must be a positive integer, got '0'")
	h.Do(t, "RL.POLICY", "SET", "x:*", 1, "1s", "NX", "KEEPSTATE").Err("ERR syntax error: NX and KEEPSTATE cannot be combined")
	h.Do(t, "RL.POLICY", "SET", "x:*", 1).Err("ERR wrong number of arguments for 'rl.policy|set' command")
	h.Do(t, "RL.POLICY", "NOPE").Err("ERR unknown subcommand 'NOPE'. Try RL.POLICY HELP.")
	h.Do(t, "RL.POLICY", "SET", "*", 1, "1s").Equal(int64(1))
	h.Do(t, "RL.POLICY", "SET", "y:*", 1, "1s").Err("ERR too many policies (max_policies is 3)")
	h.Do(t, "RL.ACQUIRE", "anything").Granted(0) // "*" governs every name

	// INFO and /metrics count per policy.
	if got := shardInfo(t, h, "policies")["policies"]; got != "3" {
		t.Errorf("INFO policies:%s, want 3", got)
	}
	resp, err := http.Get("http://" + h.proxy.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{`rlproxy_policy_granted_total{policy="user:vip:*"} 1`, `rlproxy_policy_denied_total{policy="user:*"} 1`, "rlproxy_policies 3"} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("/metrics has no line %q", line)
		}
	}

	// DEL: its names are no limiters any more (unless another policy governs them).
	h.Do(t, "RL.POLICY", "DEL", "*").Equal(int64(1))
	h.Do(t, "RL.POLICY", "DEL", "*").Equal(int64(0))
	h.Do(t, "RL.ACQUIRE", "anything").Err(fmt.Sprintf(noSuch, "anything"))
	h.Do(t, "RL.POLICY", "DEL", "user:vip:*").Equal(int64(1))
	h.Do(t, "RL.POLICY", "MATCH", "user:vip:1").Equal("user:*")
}

// A policy stored by an earlier build (its epoch without the ".<ms>p" of
// packed generation hashes: decimals in hashes, or no generations) keeps
// its names' state in keys, in decimals, as on a Redis Cluster: nothing
// is misread; the policy set again unchanged (a config file applied at
// start) keeps its epoch and that state.
func TestPolicyMadeByOlderProxy(t *testing.T) {
	t.Parallel()
	// Written here straight into the backend, as an older proxy would,
	// without announcing it on the change feed: the backstop finds it.
	h := start(t, func(c *config.Config) { c.ChangeBackstop = 100 * time.Millisecond })
	ctx := context.Background()
	b := h.backend.Client(t)
	keys := limiter.Keys{Prefix: h.cfg.KeyPrefix}
	hash, version := keys.Policies()
	for pat, epoch := range map[string]string{"dec:*": "e0471843.3600001", "keyed:*": "e0471844"} {
		h.Do(t, "RL.POLICY", "SET", pat, 3, "1h").Equal(int64(1))
		v, err := b.HGet(ctx, hash, pat).Result()
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(v, "\n")
		b.HSet(ctx, hash, pat, epoch+"\n"+rest)
		b.Incr(ctx, version)
	}
	name := func(pat string) string { return strings.TrimSuffix(pat, "*") + "1" }
	if err := eventually(3*time.Second, func() error {
		h.Do(t, "RL.ACQUIRE", name("dec:*"))
		h.Do(t, "RL.ACQUIRE", name("keyed:*"))
		for pat, epoch := range map[string]string{"dec:*": "e0471843.3600001", "keyed:*": "e0471844"} {
			if v, _ := b.Get(ctx, keys.Script(limiter.TokenBucket, name(pat), 0, epoch, "")[1]).Result(); !regexp.MustCompile(`^[0-9.e+-]+:[0-9]+$`).MatchString(v) {
				return fmt.Errorf("state of %s is %q, want a key in decimals", name(pat), v)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	left := h.Do(t, "RL.AVAILABLE", name("dec:*")).Int()
	h.Do(t, "RL.POLICY", "SET", "dec:*", 3, "1h").Equal(int64(0))
	if e := policyEpoch(t, h, "dec:*"); e != "e0471843.3600001" {
		t.Errorf("policy set again unchanged: epoch %q", e)
	}
	if left > 2 {
		t.Errorf("dec:1 has %d of 3 permits after an acquire", left)
	}
	h.Do(t, "RL.AVAILABLE", name("dec:*")).Equal(left) // its state kept
}

// stateOf is a policy's name's state (its state key) in the policy's
// generation hashes at epoch, or "".
func stateOf(t *testing.T, h *harness, epoch, state string) string {
	t.Helper()
	b := h.backend.Client(t)
	gens, _ := b.Keys(context.Background(), limiter.Keys{Prefix: h.cfg.KeyPrefix}.PolicyState(epoch)+":*").Result()
	for _, g := range gens {
		if v, err := b.HGet(context.Background(), g, state).Result(); err == nil {
			return v
		}
	}
	return ""
}

// policyEpoch reads the epoch of a policy from the backend.
func policyEpoch(t *testing.T, h *harness, pattern string) string {
	t.Helper()
	hash, _ := limiter.Keys{Prefix: h.cfg.KeyPrefix}.Policies()
	v, err := h.backend.Client(t).HGet(context.Background(), hash, pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	epoch, _, _ := strings.Cut(v, "\n")
	return epoch
}

// Every command on governed names, for each algorithm: waiting, SHADOW,
// PER_CLIENT, leases.
func TestPolicyEveryCommand(t *testing.T) {
	t.Parallel()
	h := start(t)
	for _, algo := range []string{"token-bucket", "sliding-log", "sliding-window", "fixed-window", "leaky-bucket"} {
		pat := algo + ":*"
		h.Do(t, "RL.POLICY", "SET", pat, 1, "300ms", "ALGO", algo).Equal(int64(1))
		name := algo + ":a"
		h.Do(t, "RL.ACQUIRE", name).Granted(0)
		// TIMEOUT waits for the permit (booked ahead or queued in the proxy).
		g := h.Do(t, "RL.ACQUIRE", name, 1, "TIMEOUT", "5s").Acquire()
		if !g.Granted {
			t.Errorf("%s: RL.ACQUIRE %s 1 TIMEOUT 5s = %+v, want granted", algo, name, g)
		}
	}
	// SHADOW grants and reports the denial.
	h.Do(t, "RL.POLICY", "SET", "shadow:*", 1, "1h", "SHADOW").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "shadow:a").Granted(0)
	if g := h.Do(t, "RL.ACQUIRE", "shadow:a").Acquire(); !g.Granted || g.RetryAfter == 0 {
		t.Errorf("SHADOW policy: %+v, want granted with retry_after > 0", g)
	}
	// MODE PER_CLIENT: each connection name its own budget.
	h.Do(t, "RL.POLICY", "SET", "pc:*", 1, "1h", "MODE", "PER_CLIENT").Equal(int64(1))
	a, b := h.waiter(t), h.waiter(t)
	a.Do(t, "CLIENT", "SETNAME", "a").Equal("OK")
	b.Do(t, "CLIENT", "SETNAME", "b").Equal("OK")
	a.Do(t, "RL.ACQUIRE", "pc:x").Granted(0)
	a.Do(t, "RL.ACQUIRE", "pc:x").Denied(0)
	b.Do(t, "RL.ACQUIRE", "pc:x").Granted(0)
	// ALGO concurrency: leases.
	h.Do(t, "RL.POLICY", "SET", "db:*", 2, "10s", "ALGO", "concurrency").Equal(int64(1))
	lease := h.Do(t, "RL.LEASE", "db:1", 2).OK().([]any)
	if lease[0] != int64(1) {
		t.Fatalf("RL.LEASE db:1 2 = %v, want granted", lease)
	}
	h.Do(t, "RL.AVAILABLE", "db:1").Equal(int64(0))
	h.Do(t, "RL.AVAILABLE", "db:2").Equal(int64(2))
	h.Do(t, "RL.RENEW", "db:1", lease[3], "TTL", "20s").Equal(int64(1))
	h.Do(t, "RL.RETURN", "db:1", lease[3]).Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "db:1").Equal(int64(2))
	h.Do(t, "RL.ACQUIRE", "db:1").ErrContains("RL.LEASE")
	// A lease waiter hears of RL.POLICY DEL.
	h.Do(t, "RL.LEASE", "db:2", 2).OK()
	w := h.waiter(t)
	waiting := goDo(w, "RL.LEASE", "db:2", 1, "BLOCK")
	if err := eventually(3*time.Second, func() error {
		if n := shardInfo(t, h, "leases")["lease_waiting_clients"]; n != "1" {
			return fmt.Errorf("lease_waiting_clients:%s, want 1", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "RL.POLICY", "DEL", "db:*").Equal(int64(1))
	if r := await(t, waiting, 5*time.Second); r.err == nil || r.err.Error() != fmt.Sprintf(noSuch, "db:2") {
		t.Errorf("lease waiter after RL.POLICY DEL: %v %v, want no such limiter", r.val, r.err)
	}
	// Sharded policies: each name's shards sum to the rate.
	h.Do(t, "RL.POLICY", "SET", "sh:*", 8, "1h", "SHARDS", 4).Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "sh:1").Equal(int64(8))
	granted := 0
	for range 12 {
		if h.Do(t, "RL.ACQUIRE", "sh:1").Acquire().Granted {
			granted++
		}
	}
	if granted != 8 {
		t.Errorf("SHARDS 4 policy of 8/1h: %d of 12 granted, want 8", granted)
	}
}

// Several proxies on the same backends follow the same policies: a change
// through one applies on the others within a second; waiters on a
// deleted policy's names are told at once; explicit limiters win on
// every proxy.
func TestPolicyAcrossProxies(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3)
	a, b, c := f.proxies[0], f.proxies[1], f.proxies[2]
	a.Do(t, "RL.POLICY", "SET", "user:*", 1, "1h").Equal(int64(1))
	within := func(what string, d time.Duration, check func() error) {
		t.Helper()
		start := time.Now()
		if err := eventually(d, check); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
	}
	within("proxies B and C follow the new policy", 1500*time.Millisecond, func() error {
		for _, p := range []*harness{b, c} {
			if _, err := p.client(t, nil).Do(context.Background(), "RL.AVAILABLE", "user:1").Result(); err != nil {
				return err
			}
		}
		return nil
	})
	// One count per name, whichever proxy: no state lost or doubled.
	b.Do(t, "RL.ACQUIRE", "user:1").Granted(0)
	a.Do(t, "RL.ACQUIRE", "user:1").Denied(0)
	c.Do(t, "RL.AVAILABLE", "user:1").Equal(int64(0))

	// A change through A: B decides under it within a second.
	a.Do(t, "RL.POLICY", "SET", "user:*", 5, "1h").Equal(int64(1))
	within("proxy B follows the changed policy", 1500*time.Millisecond, func() error {
		r, err := b.client(t, nil).Do(context.Background(), "RL.AVAILABLE", "user:1").Result()
		if err != nil || r != int64(5) {
			return fmt.Errorf("RL.AVAILABLE user:1 on B = %v %v, want 5 (fresh under the new policy)", r, err)
		}
		return nil
	})

	// Explicit wins on every proxy, even one that never read it.
	b.Do(t, "RL.SETRATE", "user:x", 100, "1s").Equal(int64(1))
	c.Do(t, "RL.ACQUIRE", "user:x").Granted(99)
	a.Do(t, "RL.GETRATE", "user:x").Equal(getRate3(100, 1000, "token-bucket", 100, "OVERALL", 0))
	// ... and on one that has the name's policy denial cached (for 12 more
	// minutes by its retry_after): one raised user is served within a second.
	a.Do(t, "RL.ACQUIRE", "user:d", 5).Granted(0)
	a.Do(t, "RL.ACQUIRE", "user:d").Denied(0)
	b.Do(t, "RL.SETRATE", "user:d", 100, "1s").Equal(int64(1))
	within("proxy A serves the explicit limiter over its cached policy denial", 2500*time.Millisecond, func() error {
		v, err := a.client(t, nil).Do(context.Background(), "RL.ACQUIRE", "user:d").Slice()
		if err != nil || len(v) != 4 || v[0] != int64(1) {
			return fmt.Errorf("RL.ACQUIRE user:d on A = %v %v, want granted", v, err)
		}
		return nil
	})

	// Waiters on B and C on a governed name; RL.POLICY DEL through A.
	a.Do(t, "RL.POLICY", "SET", "user:*", 1, "1h").Equal(int64(1))
	within("proxies follow", 1500*time.Millisecond, func() error {
		for _, p := range []*harness{b, c} {
			if r, err := p.client(t, nil).Do(context.Background(), "RL.AVAILABLE", "user:w").Result(); err != nil || r != int64(1) {
				return fmt.Errorf("RL.AVAILABLE user:w = %v %v, want 1", r, err)
			}
		}
		return nil
	})
	cb, cc := b.waiter(t), c.waiter(t)
	cb.Do(t, "RL.ACQUIRE", "user:w").Granted(0)
	onB := goDo(cb, "RL.ACQUIRE", "user:w", 1, "BLOCK")
	onC := goDo(cc, "RL.ACQUIRE", "user:w", 1, "TIMEOUT", "3h") // booked behind B's: 2 h out
	for _, p := range []*harness{b, c} {
		if err := eventually(3*time.Second, func() error {
			if n := waitingClients(t, p.Conn(t, nil)); n != 1 {
				return fmt.Errorf("waiting_clients is %d, want 1", n)
			}
			return nil
		}); err != nil {
			select {
			case r := <-onB:
				t.Fatalf("%v; the waiter on B answered %v %v", err, r.val, r.err)
			case r := <-onC:
				t.Fatalf("%v; the waiter on C answered %v %v", err, r.val, r.err)
			default:
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	a.Do(t, "RL.POLICY", "DEL", "user:*").Equal(int64(1))
	for _, ch := range []<-chan timed{onB, onC} {
		r := await(t, ch, 3*time.Second)
		if r.err == nil || r.err.Error() != fmt.Sprintf(noSuch, "user:w") {
			t.Errorf("waiter after RL.POLICY DEL: %v %v, want no such limiter", r.val, r.err)
		}
	}
	t.Logf("waiters on two other proxies answered %v after RL.POLICY DEL", time.Since(start).Round(time.Millisecond))
	c.Do(t, "RL.GETRATE", "user:x").Equal(getRate3(100, 1000, "token-bucket", 100, "OVERALL", 0)) // the explicit limiter stays

	// RL.POLICY SET racing through every proxy converges: all decide under
	// the one stored last.
	var wg sync.WaitGroup
	for i, p := range f.proxies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.client(t, nil).Do(context.Background(), "RL.POLICY", "SET", "race:*", 10+i, "1h")
		}()
	}
	wg.Wait()
	rate := a.Do(t, "RL.POLICY", "GET", "race:*").OK().(map[any]any)["rate"]
	within("every proxy follows the policy stored last", 1500*time.Millisecond, func() error {
		for i, p := range f.proxies {
			if r, err := p.client(t, nil).Do(context.Background(), "RL.AVAILABLE", "race:1").Result(); err != nil || r != rate {
				return fmt.Errorf("proxy %d: RL.AVAILABLE race:1 = %v %v, want %v", i, r, err, rate)
			}
		}
		return nil
	})
}

// Policies in the config file: in force before the listener answers,
// applied again on reload (unchanged: a no-op; removed: kept).
func TestPolicyConfigFile(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) {
		c.Policies = []config.Policy{
			{Pattern: "api:*", Rate: 3, Interval: "1m"},
			{Pattern: "t:*", Rate: 10, Interval: "1s", Limits: []config.PolicyLimit{{Rate: 100, Interval: "1h"}}, Algo: "sliding-window", Shards: "2"},
		}
	})
	h.Do(t, "RL.ACQUIRE", "api:k").Granted(2)
	h.Do(t, "RL.POLICY", "LIST").Equal([]any{"api:*", "t:*"})
	want := getRate3(10, 1000, "sliding-window", 10, "OVERALL", 0)
	want["shards"], want["limits"] = int64(2), []any{[]any{int64(100), int64(3600000)}}
	h.Do(t, "RL.POLICY", "GET", "t:*").Equal(want)

	cfg := h.cfg
	cfg.Policies = []config.Policy{{Pattern: "api:*", Rate: 3, Interval: "1m"}}
	if _, err := h.proxy.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "RL.AVAILABLE", "api:k").Equal(int64(2)) // unchanged: state kept
	h.Do(t, "RL.POLICY", "LIST").Equal([]any{"api:*", "t:*"})
	cfg.Policies = []config.Policy{{Pattern: "api:*", Rate: 6, Interval: "1m"}}
	if _, err := h.proxy.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "RL.AVAILABLE", "api:k").Equal(int64(6))
	cfg.Policies = []config.Policy{{Pattern: "api:*", Rate: 6, Interval: "1m", Mode: "SIDEWAYS"}}
	if _, err := h.proxy.Reload(cfg); err == nil || !strings.Contains(err.Error(), "MODE must be OVERALL or PER_CLIENT") {
		t.Errorf("reload with a bad policy: %v, want the MODE error", err)
	}
}

// The backend restarts empty (no persistence): the config file's policies
// are in force again within a couple of seconds, with no reload; one made
// with RL.POLICY SET is gone, like an explicit limiter.
func TestPolicyConfigFileAfterBackendLoss(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) {
		c.Policies = []config.Policy{{Pattern: "api:*", Rate: 3, Interval: "1m"}}
	})
	h.Do(t, "RL.POLICY", "SET", "made:*", 1, "1m").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "api:k").Granted(2)
	h.backend.Restart(t)
	err := eventually(5*time.Second, func() error {
		v, err := h.client(t, nil).Do(context.Background(), "RL.POLICY", "LIST").Slice()
		if err != nil || len(v) != 1 || v[0] != "api:*" {
			return fmt.Errorf("RL.POLICY LIST = %v %v, want [api:*]", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	h.Do(t, "RL.ACQUIRE", "api:k").Granted(2) // fresh: its state went too
	h.Do(t, "RL.ACQUIRE", "made:k").Err(fmt.Sprintf(noSuch, "made:k"))
}

// A backend that lost its data counts policy versions afresh: a change
// made after it must not look, to proxies that read a version before,
// like the version they have (both proxies here last read the first).
func TestPolicyVersionAfterBackendLoss(t *testing.T) {
	t.Parallel()
	a := start(t)
	b := startProxy(t, a.backend, func(c *config.Config) { c.Backends = []string{a.backend.URL()} })
	a.Do(t, "RL.POLICY", "SET", "v:*", 5, "1h").Equal(int64(1))
	available := func(h *harness, want int64) error {
		r, err := h.client(t, nil).Do(context.Background(), "RL.AVAILABLE", "v:1").Result()
		if err != nil || r != want {
			return fmt.Errorf("RL.AVAILABLE v:1 = %v %v, want %d", r, err, want)
		}
		return nil
	}
	for _, h := range []*harness{a, b} {
		if err := eventually(3*time.Second, func() error { return available(h, 5) }); err != nil {
			t.Fatal(err)
		}
	}
	a.backend.Restart(t)
	a.Do(t, "RL.POLICY", "SET", "v:*", 7, "1h").Equal(int64(1))
	for i, h := range []*harness{a, b} {
		if err := eventually(3*time.Second, func() error { return available(h, 7) }); err != nil {
			t.Errorf("proxy %d after the backend restarted empty and the policy was set again: %v", i, err)
		}
	}
}

// Past maxmemory (noeviction) Redis refuses a script's first write that
// may grow memory: a policy's names are refused like explicit limiters,
// with Redis's OOM error, not written past the limit (an ended
// generation's UNLINK, written first, let every later write through).
func TestPolicyRespectsMaxmemory(t *testing.T) {
	t.Parallel()
	h := start(t)
	h.Do(t, "RL.SETRATE", "api", 5, "1s").Equal(int64(1))
	h.Do(t, "RL.POLICY", "SET", "u:*", 5, "1s").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "u:0").Granted(4)
	rdb := h.backend.Client(t)
	ctx := context.Background()
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	const oom = "OOM command not allowed when used memory > 'maxmemory'"
	for _, name := range []string{"api", "u:0", "u:1"} {
		h.Do(t, "RL.ACQUIRE", name).ErrContains(oom)
	}
	// Configs are refused too, before anything is written: a new one, a
	// changed one (which keeps its old config), a policy.
	h.Do(t, "RL.SETRATE", "new", 5, "1s").ErrContains(oom)
	h.Do(t, "RL.SETRATE", "api", 7, "1s", "TTL", "1h").ErrContains(oom)
	h.Do(t, "RL.POLICY", "SET", "v:*", 5, "1s").ErrContains(oom)
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	h.Do(t, "RL.ACQUIRE", "u:1").Granted(4)
	h.Do(t, "RL.GETRATE", "new").Nil()
	h.Do(t, "RL.GETRATE", "api").Equal(getRate3(5, 1000, "token-bucket", 5, "OVERALL", 0))
	h.Do(t, "RL.POLICY", "GET", "v:*").Nil()
}

// RL.POLICY is admin-only; a user's limiters patterns apply to governed
// names as to any other.
func TestPolicyUsers(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) {
		c.RequirePass = "root"
		c.Users = []config.User{{Name: "app", Password: "apppw", Commands: []string{"acquire"}, Limiters: []string{"api:*"}}}
	})
	h.Do(t, "RL.POLICY", "SET", "*", 1, "1m").Equal(int64(1))
	app := h.Conn(t, func(o *redis.Options) { o.Username, o.Password = "app", "apppw" })
	app.Do(t, "RL.ACQUIRE", "api:1").Granted(0)
	app.Do(t, "RL.ACQUIRE", "billing:1").Err("NOPERM No permissions to access the 'billing:1' limiter")
	app.Do(t, "RL.POLICY", "SET", "api:*", 100, "1s").Err("NOPERM User app has no permissions to run the 'rl.policy' command")
	app.Do(t, "RL.POLICY", "LIST").Err("NOPERM User app has no permissions to run the 'rl.policy' command")
	h.Do(t, "RL.ACQUIRE", strings.Repeat("x", 513)).Err("ERR limiter name is longer than 512 bytes")
	// A prefix as long as a name is a pattern; a longer one could match nothing.
	h.Do(t, "RL.POLICY", "SET", strings.Repeat("x", 512)+"*", 1, "1m").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", strings.Repeat("x", 512)).Granted(0)
	h.Do(t, "RL.POLICY", "SET", strings.Repeat("x", 513)+"*", 1, "1m").Err("ERR policy pattern is longer than 513 bytes: no name could match it (max_name_length is 512)")
	h.Do(t, "RL.POLICY", "LIST").Equal([]any{"*", strings.Repeat("x", 512) + "*"})
}

// Requests for different names of one policy go to Redis together: a
// pipeline of 600 acquires over 50 names is decided in a few script calls
// (names.lua), each name exactly: 10 granted, 2 denied, in order.
func TestPolicyNamesShareScriptCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []any
		limit   int // grants per name (and client)
		clients int
	}{
		{"token-bucket", []any{"ALGO", "token-bucket"}, 10, 1},
		{"sliding-log", []any{"ALGO", "sliding-log"}, 10, 1},
		{"sliding-window", []any{"ALGO", "sliding-window"}, 10, 1},
		{"fixed-window", []any{"ALGO", "fixed-window"}, 10, 1},
		{"two limits", []any{"LIMIT", 4, "1m"}, 4, 1}, // 10 per hour and 4 per minute
		{"per client", []any{"MODE", "PER_CLIENT"}, 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, func(c *config.Config) { c.DenyCache = false })
			h.Do(t, append([]any{"RL.POLICY", "SET", "n:*", 10, "1h"}, tc.args...)...).Equal(int64(1))
			backend := redis.NewClient(&redis.Options{Addr: h.backend.Addr(), Protocol: 2})
			defer backend.Close()
			resetBackendStats(t, backend)
			// Each client pipelines 12 acquires of each of 50 names, the
			// clients at once (in PER_CLIENT mode each has its own budgets).
			cmds := make([][]*redis.Cmd, tc.clients)
			var wg sync.WaitGroup
			for c := range tc.clients {
				pipe := h.client(t, func(o *redis.Options) { o.ClientName = fmt.Sprintf("c%d", c) }).Pipeline()
				for range 12 {
					for n := range 50 {
						cmds[c] = append(cmds[c], pipe.Do(context.Background(), "RL.ACQUIRE", fmt.Sprintf("n:%d", n)))
					}
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _ = pipe.Exec(context.Background()) // each reply is checked below
				}()
			}
			wg.Wait()
			for c := range tc.clients {
				granted := map[string]int{}
				for i, cmd := range cmds[c] {
					v, err := cmd.Slice()
					if err != nil {
						t.Fatalf("client %d, acquire %d: %v", c, i, err)
					}
					name := fmt.Sprintf("n:%d", i%50)
					if v[0] == int64(1) {
						granted[name]++
						if want := int64(tc.limit - granted[name]); v[1] != want {
							t.Errorf("client %d, %s grant %d: remaining %v, want %d", c, name, granted[name], v[1], want)
						}
					} else if granted[name] != tc.limit {
						t.Errorf("client %d, %s denied after %d grants, want %d first", c, name, granted[name], tc.limit)
					}
				}
				for n := range 50 {
					if g := granted[fmt.Sprintf("n:%d", n)]; g != tc.limit {
						t.Errorf("client %d, n:%d: %d granted of 12, want %d", c, n, g, tc.limit)
					}
				}
			}
			calls := backendCalls(t, backend)
			scripts := calls["evalsha"] + calls["eval"]
			t.Logf("%s: %d acquires over 50 names: %d script calls", tc.name, 600*tc.clients, scripts)
			if scripts > 60*tc.clients {
				t.Errorf("%d script calls for %d acquires over 50 names: names are not decided together", scripts, 600*tc.clients)
			}
		})
	}
}

// Asks of different sizes for names of one policy, pipelined so that they
// are decided together, each keep their size: every name's remaining
// after each ask is its own (a name asked twice in a call must not take
// another name's ask for its second).
func TestPolicyNamesKeepEachAsk(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) { c.DenyCache = false })
	h.Do(t, "RL.POLICY", "SET", "k:*", 12, "1h").Equal(int64(1))
	pipe := h.client(t, nil).Pipeline()
	type asked struct {
		name    string
		permits int64
		cmd     *redis.Cmd
	}
	var all []asked
	for round := range 3 {
		for n := range 30 {
			p := int64(1 + (n*n+2*round)%4) // no two names' sequences are shifts of each other
			name := fmt.Sprintf("k:%d", n)
			all = append(all, asked{name, p, pipe.Do(context.Background(), "RL.ACQUIRE", name, p)})
		}
	}
	_, _ = pipe.Exec(context.Background()) // each reply is checked below
	used := map[string]int64{}
	for _, a := range all {
		v, err := a.cmd.Slice()
		if err != nil {
			t.Fatalf("%s %d: %v", a.name, a.permits, err)
		}
		used[a.name] += a.permits
		if v[0] != int64(1) || v[1] != 12-used[a.name] {
			t.Errorf("%s, %d permits (%d used before): %v, want granted with %d left", a.name, a.permits, used[a.name]-a.permits, v, 12-used[a.name])
		}
	}
}

// Waiting acquires (TIMEOUT) of many names of a policy share script calls
// too, and wait as alone: a bucket books each name's permits ahead, in
// order, and the reply comes at the booking's time.
func TestPolicyWaitersShareScriptCalls(t *testing.T) {
	t.Parallel()
	h := start(t)
	h.Do(t, "RL.POLICY", "SET", "w:*", 4, "1s").Equal(int64(1)) // one permit every 250 ms, burst 4
	backend := redis.NewClient(&redis.Options{Addr: h.backend.Addr(), Protocol: 2})
	defer backend.Close()
	resetBackendStats(t, backend)
	// 50 names, each asked 6 times at once by its own 6 clients, all
	// waiting up to 2 s: 4 at once, then one at about 250 and 500 ms.
	const names, each = 50, 6
	rdb := h.client(t, func(o *redis.Options) { o.PoolSize = names * each })
	begin := time.Now()
	late := make([][]time.Duration, names)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for n := range names {
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v, err := rdb.Do(context.Background(), "RL.ACQUIRE", fmt.Sprintf("w:%d", n), "TIMEOUT", 2000).Slice()
				took := time.Since(begin)
				if err != nil || v[0] != int64(1) {
					t.Errorf("w:%d: %v %v, want a grant", n, v, err)
					return
				}
				mu.Lock()
				late[n] = append(late[n], took)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	for n, took := range late {
		slices.Sort(took)
		// The 6th permit of a name cannot come before two refills (500 ms).
		if len(took) == each && took[each-1] < 450*time.Millisecond {
			t.Errorf("w:%d: the 6th grant came after %v, before its permit refilled", n, took[each-1])
		}
	}
	calls := backendCalls(t, backend)
	scripts := calls["evalsha"] + calls["eval"]
	t.Logf("%d waiting acquires over %d names: %d script calls", names*each, names, scripts)
	// Fewer calls than names (5–17 here; 150 when each name's asks were
	// decided apart). That each ask is booked by its first call, not
	// denied and asked again, TestNamesDecideEachNameAsAlone checks.
	if scripts >= names {
		t.Errorf("%d script calls for %d waiting acquires over %d names: names are not decided together", scripts, names*each, names)
	}
}

// On a Redis Cluster: policies live in one slot; the names a policy
// governs are decided together, one script call per master (each name
// read in its own slot), an explicit limiter among them still wins, and a
// name whose slot moved behind the proxy's back is decided once, by its
// new master, with the state MIGRATE took along; sharded policies too.
func TestPolicyCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	h := startProxy(t, nil, func(c *config.Config) { c.Cluster = cluster.URLs() })
	ctx := context.Background()
	nodes, ids := reshardNodes(t, ctx, cluster)
	scriptCalls := func() int {
		n := 0
		for _, c := range nodes {
			calls := backendCalls(t, c)
			n += calls["evalsha"] + calls["eval"]
		}
		return n
	}
	h.Do(t, "RL.POLICY", "SET", "user:*", 3, "1h").Equal(int64(1))
	h.Do(t, "RL.POLICY", "SET", "big:*", 8, "1h", "SHARDS", 4).Equal(int64(1))
	h.Do(t, "RL.SETRATE", "user:7", 5, "1h").Equal(int64(1)) // explicit: wins
	// acquire sends each of 30 names' acquires (times each) in one
	// pipeline, and checks how many of each name's are granted. (Not
	// which: a name that goes the full path, as an explicit or a moved
	// one does, may be decided after the same name's next acquire.)
	acquire := func(times int, want func(i int) int) {
		t.Helper()
		pipe := h.client(t, nil).Pipeline()
		var cmds []*redis.Cmd
		for i := range 30 {
			for range times {
				cmds = append(cmds, pipe.Do(ctx, "RL.ACQUIRE", fmt.Sprintf("user:%d", i)))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		granted := make([]int, 30)
		for k, c := range cmds {
			v, err := c.Slice()
			if err != nil {
				t.Fatalf("user:%d, acquire %d: %v", k/times, k%times, err)
			}
			if v[0] == int64(1) {
				granted[k/times]++
			}
		}
		for i, g := range granted {
			if g != want(i) {
				t.Errorf("user:%d: %d of %d granted, want %d", i, g, times, want(i))
			}
		}
	}
	before := scriptCalls()
	acquire(4, func(i int) int {
		if i == 7 {
			return 4 // of its own 5
		}
		return 3
	})
	if n := scriptCalls() - before; n >= 30 {
		t.Errorf("%d script calls for 120 acquires over 30 names: names are not decided together (a call per name at least)", n)
	} else {
		t.Logf("120 acquires over 30 names on 3 masters: %d script calls", n)
	}

	// user:29's slot moves to another master; the proxy's slot map still
	// has the old one. Last in the pipeline, it is likely to be in a call
	// of its old master's names. RL.RESET makes room for one more acquire
	// per name.
	name := "user:29"
	slot := redistest.KeySlot("rlproxy:{" + name + ":0}:c")
	src := reshardOwner(t, ctx, nodes[0], cluster.Addrs(), slot)
	for i := range 30 {
		h.Do(t, "RL.RESET", fmt.Sprintf("user:%d", i)).OK()
	}
	acquire(2, func(int) int { return 2 }) // 1 of 3 left for each
	_, err := reshardMoveSlot(ctx, reshardMove{
		nodes: nodes, ids: ids, addrs: cluster.Addrs(), slot: slot, src: src, dst: (src + 1) % len(nodes),
		mark: func(string) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	acquire(2, func(i int) int {
		if i == 7 {
			return 2 // 3 of its 5 used by now
		}
		return 1
	})

	h.Do(t, "RL.AVAILABLE", "big:1").Equal(int64(8))
	h.Do(t, "RL.CHARGE", "big:1", 8).OK()
	h.Do(t, "RL.AVAILABLE", "big:1").Equal(int64(0))
	h.Do(t, "RL.DEL", "big:1").Equal(int64(1))
	h.Do(t, "RL.POLICY", "LIST").Equal([]any{"big:*", "user:*"})
	h.Do(t, "RL.POLICY", "DEL", "user:*").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "user:1").Err(fmt.Sprintf(noSuch, "user:1"))
}

// Per name, a policy never over-admits: 32 clients through 4 proxies,
// each call for one of 8 names, every grant's time recorded and counted
// per window of each name, for every algorithm; on standalone backends
// (state in generation hashes) and on a Redis Cluster (names decided by
// master, each read in its own slot).
func TestPolicyPerNameWindows(t *testing.T) {
	t.Parallel()
	backends := map[string]func() []*harness{
		"standalone": func() []*harness { return startFleet(t, 4).proxies },
		"cluster": func() []*harness {
			cluster := redistest.StartCluster(t, 3)
			var hs []*harness
			for range 4 {
				hs = append(hs, startProxy(t, nil, func(c *config.Config) { c.Cluster = cluster.URLs() }))
			}
			return hs
		},
	}
	for kind, start := range backends {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			proxies := start()
			for _, algo := range []string{"token-bucket", "leaky-bucket", "fixed-window", "sliding-window", "sliding-log"} {
				const rate, every = 10, 500 * time.Millisecond
				proxies[0].Do(t, "RL.POLICY", "SET", algo+":*", rate, "500ms", "ALGO", algo).Equal(int64(1))
				var names []string
				for i := range 8 {
					names = append(names, fmt.Sprintf("%s:%d", algo, i))
				}
				if err := eventually(2*time.Second, func() error { // every proxy knows the policy
					for _, p := range proxies {
						if _, err := p.client(t, nil).Do(context.Background(), "RL.AVAILABLE", names[0]).Result(); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				spans, errs := timedLoadNames(t, proxies, names, 32, 1200*time.Millisecond)
				if errs > 0 {
					t.Fatalf("%s: %d calls failed", algo, errs)
				}
				total := 0
				for _, name := range names {
					w := algoWindows(algo, spans[name], every, rate)
					total += len(spans[name])
					if w.over > 0 {
						t.Errorf("%s over-admitted in %d windows (most %d of %d)", name, w.over, w.most, w.allowed)
					}
					if len(spans[name]) < rate {
						t.Errorf("%s: %d grants in 1.2 s at %d per %v: the policy under-admits", name, len(spans[name]), rate, every)
					}
				}
				t.Logf("%s: %d grants over %d names", algo, total, len(names))
			}
		})
	}
}

// KEEPSTATE keeps a policy's epoch, so its generations keep their length:
// a rate change that makes states outlast them carries the permits used
// over all the same, the states becoming keys of their own.
func TestPolicyKeepStateOutgrowsGenerations(t *testing.T) {
	t.Parallel()
	h := start(t)
	h.Do(t, "RL.POLICY", "SET", "k:*", 10, "1s").Equal(int64(1)) // generations of 1001 ms
	h.Do(t, "RL.ACQUIRE", "k:1", 5).Granted(5)
	h.Do(t, "RL.POLICY", "SET", "k:*", 10, "1h", "KEEPSTATE").Equal(int64(1))
	// The 5 permits are carried over (less what refilled meanwhile at 10 per second).
	n := h.Do(t, "RL.AVAILABLE", "k:1").Int()
	if n < 5 || n > 10 {
		t.Fatalf("available after KEEPSTATE: %d, want 5 or a little more", n)
	}
	h.Do(t, "RL.ACQUIRE", "k:1", n).Granted(0) // at 10 per hour, nothing refills meanwhile
	h.Do(t, "RL.ACQUIRE", "k:1").Denied(0)
	// 10 permits at 10 per hour last an hour, past both generations: a key.
	b := h.backend.Client(t)
	epoch := policyEpoch(t, h, "k:*")
	state := limiter.Keys{Prefix: h.cfg.KeyPrefix}.Script(limiter.TokenBucket, "k:1", 0, epoch, "")[1]
	if ttl, err := b.PTTL(context.Background(), state).Result(); err != nil || ttl < 50*time.Minute {
		t.Errorf("state of k:1 (%s): PTTL %v %v, want about an hour", state, ttl, err)
	}
	h.Do(t, "RL.DEL", "k:1").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "k:1").Equal(int64(10))
}

// A reload whose policies, with those in the backends already, would be
// more than max_policies writes none of them and is refused as a whole.
func TestReloadPoliciesOverMaxWritesNothing(t *testing.T) {
	t.Parallel()
	h := start(t, func(c *config.Config) { c.MaxPolicies = 5 })
	h.Do(t, "RL.POLICY", "SET", "a:*", 1, "1s").Equal(int64(1))
	h.Do(t, "RL.POLICY", "SET", "b:*", 1, "1s").Equal(int64(1))

	cfg := h.cfg
	for _, pat := range []string{"b:*", "c:*", "d:*", "e:*", "f:*"} {
		cfg.Policies = append(cfg.Policies, config.Policy{Pattern: pat, Rate: 2, Interval: "1s"})
	}
	_, err := h.proxy.Reload(cfg)
	if err == nil || !strings.Contains(err.Error(), "2 in the backends and 4 new in the file make 6, more than max_policies (5): nothing written") {
		t.Fatalf("reload past max_policies: %v, want it refused before writing", err)
	}
	h.Do(t, "RL.POLICY", "LIST").Equal([]any{"a:*", "b:*"})
	h.Do(t, "RL.POLICY", "GET", "b:*").OK()
	if r := h.Do(t, "RL.POLICY", "GET", "b:*").OK().(map[any]any); r["rate"] != int64(1) {
		t.Errorf("b:* after the refused reload: rate %v, want 1 (unchanged)", r["rate"])
	}
	if info := h.Do(t, "INFO", "reload").OK().(string); !strings.Contains(info, "reloads:0\r\nreload_failures:1\r\n") {
		t.Errorf("INFO after a refused reload: %q, want reloads:0 reload_failures:1", info)
	}

	cfg.Policies = cfg.Policies[:4] // b c d e: 5 in all
	if _, err := h.proxy.Reload(cfg); err != nil {
		t.Fatalf("reload to exactly max_policies: %v", err)
	}
	h.Do(t, "RL.POLICY", "LIST").Equal([]any{"a:*", "b:*", "c:*", "d:*", "e:*"})
}
