package proxy

// A backend node stalls (SIGSTOP) or dies: the calls that need it fail
// fast with an error naming it, the other shards keep serving, INFO
// shows the node down, and service resumes once it is back, without
// restarting rlproxy.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/sharding"
)

const (
	shardTimeout  = 300 * time.Millisecond // backend_timeout
	shardCooldown = 500 * time.Millisecond // breaker_cooldown
	// shardSlack is what a call may take beyond backend_timeout: scheduling
	// on a busy machine with -race, not another timeout.
	shardSlack = 250 * time.Millisecond
)

func shardFailProxy(t testing.TB, nodes []*redistest.Server, tweaks ...func(*config.Config)) *harness {
	t.Helper()
	return shardProxy(t, nodes, append([]func(*config.Config){func(c *config.Config) {
		c.BackendTimeout = shardTimeout
		c.BreakerCooldown = shardCooldown
		c.BreakerFailures = 1 // the first call that finds the node stalled opens it
	}}, tweaks...)...)
}

// shardLimiterOn finds a limiter name (prefix0, prefix1, ...) of shards
// sub-limiters that has some on node victim, and its shard 0 there
// (zeroThere) or elsewhere.
func shardLimiterOn(t testing.TB, nodes []*redistest.Server, prefix string, shards, victim int, zeroThere bool) (name string, onVictim []int) {
	t.Helper()
	addrs := shardAddrs(nodes)
	for i := range 1000 {
		name = fmt.Sprintf("%s%d", prefix, i)
		onVictim = nil
		for shard, n := range sharding.Placement(name, shards, addrs) {
			if n == victim {
				onVictim = append(onVictim, shard)
			}
		}
		if len(onVictim) > 0 && len(onVictim) < shards && (onVictim[0] == 0) == zeroThere {
			return name, onVictim
		}
	}
	t.Fatalf("no limiter name with shards on node %d", victim)
	return "", nil
}

// shardNodeState returns the state INFO reports for the backend at addr.
func shardNodeState(t testing.TB, h *harness, addr string) string {
	t.Helper()
	info, ok := h.Do(t, "INFO", "backends").OK().(string)
	if !ok {
		t.Fatalf("INFO backends is not a string")
	}
	for _, line := range strings.Split(info, "\r\n") {
		if strings.Contains(line, "addr="+addr+",") {
			for _, f := range strings.Split(line, ",") {
				if v, ok := strings.CutPrefix(f, "state="); ok {
					return v
				}
			}
		}
	}
	t.Fatalf("INFO backends has no line for %s:\n%s", addr, info)
	return ""
}

// shardPinger checks, until stopped, that the proxy answers PING within
// 1s; worst is the slowest PING so far: how late this machine runs the
// proxy now, which no RL.ACQUIRE can beat either.
func shardPinger(t testing.TB, h *harness) (worst func() time.Duration, stop func() time.Duration) {
	t.Helper()
	c := h.client(t, nil)
	done := make(chan struct{})
	var slowest atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			at := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			err := c.Ping(ctx).Err()
			cancel()
			took := time.Since(at)
			if err != nil || took > time.Second {
				t.Errorf("PING: %v after %v, want PONG within 1s", err, took)
			}
			if int64(took) > slowest.Load() {
				slowest.Store(int64(took))
			}
		}
	}()
	worst = func() time.Duration { return time.Duration(slowest.Load()) }
	var once sync.Once
	stop = func() time.Duration {
		once.Do(func() { close(done); wg.Wait() })
		return worst()
	}
	t.Cleanup(func() { stop() }) // no t.Errorf after the test, even if it fails early
	return worst, stop
}

// shardLoneOn finds a limiter name whose single shard is on node victim.
func shardLoneOn(t testing.TB, nodes []*redistest.Server, prefix string, victim int) string {
	t.Helper()
	for i := range 1000 {
		if name := fmt.Sprintf("%s%d", prefix, i); sharding.Placement(name, 1, shardAddrs(nodes))[0] == victim {
			return name
		}
	}
	t.Fatalf("no limiter name on node %d", victim)
	return ""
}

// A stalled node (SIGSTOP): calls that need it fail within
// backend_timeout with an error naming it, INFO says it is down, PING
// stays instant. A sharded limiter keeps granting from its other shards
// and its clients see no error at all — with or without max_probes, an
// acquire walks past dead shards — while a limiter whose only shard is
// on the node fails fast. After SIGCONT every shard serves again.
func TestShardNodeStall(t *testing.T) {
	t.Parallel()
	nodes := shardNodes(t, 3)
	direct := shardFailProxy(t, nodes, func(c *config.Config) { c.MaxProbes = 0 })
	probing := shardFailProxy(t, nodes, func(c *config.Config) { c.MaxProbes = 2 })
	const victim, shards, rate = 2, 6, 3000
	name, onVictim := shardLimiterOn(t, nodes, "stall", shards, victim, false)
	lone := shardLoneOn(t, nodes, "lone", victim)
	victimAddr := nodes[victim].Addr()
	t.Logf("limiter %s: shards %v on the stalled node %s", name, onVictim, victimAddr)
	direct.Do(t, "RL.SETRATE", name, rate, "1s", "SHARDS", shards).Equal(int64(1))
	direct.Do(t, "RL.SETRATE", lone, rate, "1s").Equal(int64(1))
	for _, h := range []*harness{direct, probing} {
		h.Do(t, "RL.ACQUIRE", name).Acquire()
		if s := shardNodeState(t, h, victimAddr); s != "up" {
			t.Fatalf("state=%s before the stall", s)
		}
	}
	direct.Do(t, "RL.ACQUIRE", lone).Acquire()

	worstPing, stopPing := shardPinger(t, direct)
	var badErrs atomic.Int64
	var badErr atomic.Value
	checkErr := func(err error) {
		if msg := err.Error(); !strings.HasPrefix(msg, "ERR backend "+victimAddr+" unavailable: ") {
			badErrs.Add(1)
			badErr.Store(msg)
		}
	}
	nodes[victim].Pause(t)
	resumed := false
	defer func() {
		if !resumed {
			nodes[victim].Resume(t)
		}
	}()
	loads := []struct {
		desc string
		h    *harness
		key  string
		r    shardResult
	}{
		{"6 shards, max_probes 0", direct, name, shardResult{}},
		{"6 shards, max_probes 2", probing, name, shardResult{}},
		{"1 shard on the node", direct, lone, shardResult{}},
	}
	var wg sync.WaitGroup
	defer wg.Wait() // also when the test stops early: loads use t
	for i := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := &loads[i]
			l.r = shardLoad(t, []*harness{l.h}, l.key, shardLoadOptions{clients: 4, duration: 2 * time.Second, onError: checkErr})
		}()
	}
	time.Sleep(time.Second)
	for _, h := range []*harness{direct, probing} {
		if s := shardNodeState(t, h, victimAddr); s != "down" {
			t.Errorf("INFO says state=%s for the stalled node, want down", s)
		}
		for i, n := range nodes {
			if s := shardNodeState(t, h, n.Addr()); i != victim && s != "up" {
				t.Errorf("INFO says state=%s for a healthy node", s)
			}
		}
	}
	wg.Wait()
	var maxLatency time.Duration
	for _, l := range loads {
		t.Logf("while %s was stalled, %s: %v; first error: %v", victimAddr, l.desc, l.r, l.r.firstErr)
		maxLatency = max(maxLatency, l.r.maxLatency)
	}
	for _, l := range loads[:2] {
		if l.r.granted == 0 || l.r.errors > 0 {
			t.Errorf("%s: %v; want grants from the other shards and no errors", l.desc, l.r)
		}
	}
	if r := loads[2].r; r.errors == 0 || r.granted > 0 {
		t.Errorf("limiter on the stalled node only: %v; want errors only", r)
	}
	if n := badErrs.Load(); n > 0 {
		t.Errorf("%d errors do not say 'ERR backend %s unavailable: ...', e.g. %q", n, victimAddr, badErr.Load())
	}
	// A loaded machine delays every reply alike: the slowest PING to the
	// proxy meanwhile (no stalled node on its way) is added to the bound.
	if limit := shardTimeout + shardSlack + worstPing(); maxLatency > limit {
		t.Errorf("an RL.ACQUIRE took %v while a node was stalled, want at most backend_timeout + slack + the slowest PING = %v", maxLatency, limit)
	}
	if lim := shardInfo(t, direct, "limiters"); lim["errors"] != fmt.Sprint(loads[0].r.errors+loads[2].r.errors) {
		t.Errorf("INFO limiters errors:%s, want the %d errors clients saw", lim["errors"], loads[0].r.errors+loads[2].r.errors)
	}
	if line := shardInfo(t, probing, "backends")[fmt.Sprintf("node%d", victim)]; strings.Contains(line, ",errors=0,") {
		t.Errorf("INFO backends node%d:%s: no errors counted for the stalled node", victim, line)
	}

	nodes[victim].Resume(t)
	resumed = true
	// After the breaker's cooldown the next call that needs the node
	// probes it and finds it back.
	for _, l := range []struct {
		h   *harness
		key string
	}{{direct, lone}, {probing, name}} {
		err := eventually(shardCooldown+3*time.Second, func() error {
			r := shardLoad(t, []*harness{l.h}, l.key, shardLoadOptions{clients: 2, duration: 50 * time.Millisecond})
			if s := shardNodeState(t, l.h, victimAddr); s != "up" || r.errors > 0 {
				return fmt.Errorf("state=%s, %v, first error %v", s, r, r.firstErr)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after SIGCONT: %v", err)
		}
	}
	// All shards serve again: RL.AVAILABLE reads every one.
	direct.Do(t, "RL.AVAILABLE", name).Int()
	probing.Do(t, "RL.AVAILABLE", lone).Int()
	t.Logf("worst PING during the test: %v", stopPing())
}

// A node dies and comes back empty (no data, no scripts), without
// restarting rlproxy:
//
//   - while it is down, the limiter's shards elsewhere keep serving
//     (acquires walk past the dead shards, which fail at once);
//   - once it is back, a sub-limiter that lost its config there (not
//     shard 0) is repaired from shard 0's config on first use, starting
//     full: service resumes with no RL.SETRATE;
//   - a limiter whose shard 0 was there is gone ("no such limiter",
//     RL.GETRATE nil) until RL.SETRATE creates it again; then all its
//     shards, including those that kept an old config elsewhere, start
//     fresh under the new config.
func TestShardNodeRestartEmpty(t *testing.T) {
	t.Parallel()
	nodes := shardNodes(t, 3)
	h := shardFailProxy(t, nodes)
	const victim, shards, rate = 1, 6, 600
	other, otherLost := shardLimiterOn(t, nodes, "other", shards, victim, false)
	zero, zeroLost := shardLimiterOn(t, nodes, "zero", shards, victim, true)
	victimAddr := nodes[victim].Addr()
	t.Logf("node %s holds shards %v of %s and %v of %s", victimAddr, otherLost, other, zeroLost, zero)
	for _, name := range []string{other, zero} {
		h.Do(t, "RL.SETRATE", name, rate, "1s", "SHARDS", shards).Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", name).Acquire()
	}

	nodes[victim].Stop(t)
	// While it is down: the shards elsewhere serve (the config is cached),
	// nothing waits, and any error names the node.
	r := shardLoad(t, []*harness{h}, other, shardLoadOptions{clients: 4, duration: 300 * time.Millisecond, onError: func(err error) {
		if !strings.Contains(err.Error(), "backend "+victimAddr+" unavailable") {
			t.Errorf("error while the node was down: %v", err)
		}
	}})
	t.Logf("node %s down: %v", victimAddr, r)
	if r.granted == 0 {
		t.Error("no grants from the live shards")
	}
	if r.maxLatency > shardTimeout+shardSlack {
		t.Errorf("a call took %v while a node was down, want at most backend_timeout + slack", r.maxLatency)
	}
	if s := shardNodeState(t, h, victimAddr); s != "down" {
		t.Errorf("state=%s for a dead node, want down", s)
	}

	nodes[victim].Restart(t)
	// Once the node answers again (after the breaker's cooldown), the
	// lost sub-limiters of other are repaired on first use.
	err := eventually(3*time.Second, func() error {
		r := shardLoad(t, []*harness{h}, other, shardLoadOptions{clients: 2, duration: 50 * time.Millisecond})
		if s := shardNodeState(t, h, victimAddr); s != "up" || r.errors > 0 {
			return fmt.Errorf("state=%s, %v, first error %v", s, r, r.firstErr)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("restarted node not used again: %v", err)
	}
	r = shardLoad(t, []*harness{h}, other, shardLoadOptions{clients: 4, duration: 300 * time.Millisecond})
	t.Logf("%s restarted empty, no RL.SETRATE: %v", victimAddr, r)
	if r.errors > 0 || r.granted == 0 {
		t.Errorf("%s after its node restarted: %v; first error %v", other, r, r.firstErr)
	}
	// Each lost shard is repaired when an acquire first walks to it; on a
	// slow machine that load may not have reached every shard yet.
	err = eventually(5*time.Second, func() error {
		for shard, on := range shardConfigHolders(t, nodes, other, shards) {
			if len(on) > 1 {
				t.Fatalf("%s: shard %d's config on %d nodes after repair, want 1", other, shard, len(on))
			}
			if len(on) == 0 {
				shardLoad(t, []*harness{h}, other, shardLoadOptions{clients: 4, duration: 100 * time.Millisecond})
				return fmt.Errorf("%s: shard %d's config is on no node: not repaired", other, shard)
			}
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	h.Do(t, "RL.GETRATE", zero).Nil()
	h.Do(t, "RL.ACQUIRE", zero).Err(fmt.Sprintf("ERR no such limiter '%s' (create it with RL.SETRATE or RL.POLICY SET)", zero))

	for _, name := range []string{other, zero} {
		h.Do(t, "RL.SETRATE", name, rate, "1s", "SHARDS", shards).OK()
		r = shardLoad(t, []*harness{h}, name, shardLoadOptions{clients: 4, duration: 400 * time.Millisecond})
		if r.errors > 0 || r.granted == 0 {
			t.Errorf("%s after RL.SETRATE: %v; first error: %v", name, r, r.firstErr)
		}
		shardCheckBound(t, r, rate, rate, time.Second)
		for shard, on := range shardConfigHolders(t, nodes, name, shards) {
			if len(on) != 1 {
				t.Errorf("%s: shard %d's config on %d nodes after RL.SETRATE", name, shard, len(on))
			}
		}
		h.Do(t, "RL.RESET", name).Equal(int64(1))
		h.Do(t, "RL.AVAILABLE", name).Equal(int64(rate))
	}
	if s := shardNodeState(t, h, victimAddr); s != "up" {
		t.Errorf("state=%s after the node came back, want up", s)
	}
}

// on_backend_error allow / deny answer for a limiter whose node is down.
func TestShardOnBackendError(t *testing.T) {
	t.Parallel()
	nodes := shardNodes(t, 1)
	for _, tc := range []struct {
		policy string
		want   []any
	}{
		{"allow", []any{int64(1), int64(0), int64(0), int64(0)}},
		{"deny", []any{int64(0), int64(0), int64(1000), int64(1000)}},
	} {
		h := shardFailProxy(t, nodes, func(c *config.Config) { c.OnBackendError = config.BackendErrorPolicy(tc.policy) })
		h.Do(t, "RL.SETRATE", "p-"+tc.policy, 10, "1s", "SHARDS", 2).Equal(int64(1))
		h.Do(t, "RL.ACQUIRE", "p-"+tc.policy).Granted(4)
		t.Run(tc.policy, func(t *testing.T) {
			nodes[0].Pause(t)
			defer nodes[0].Resume(t)
			for range 3 {
				began := time.Now()
				h.Do(t, "RL.ACQUIRE", "p-"+tc.policy).Equal(tc.want)
				if took := time.Since(began); took > shardTimeout+shardSlack {
					t.Errorf("answered after %v, want within backend_timeout + slack", took)
				}
			}
			// Only acquires have a policy; the others report the failure.
			h.Do(t, "RL.AVAILABLE", "p-"+tc.policy).ErrContains("unavailable", nodes[0].Addr())
		})
	}
}
