package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// leaseReply is a decoded RL.LEASE reply.
type leaseReply struct {
	Granted    bool
	Remaining  int64
	RetryAfter time.Duration
	ID         string
}

// Lease decodes an RL.LEASE reply: [granted, remaining, retry_after_ms, lease_id].
func (r *reply) Lease() leaseReply {
	r.t.Helper()
	arr, ok := r.OK().([]any)
	if !ok || len(arr) != 4 {
		r.t.Fatalf("%s: want an array of 3 integers and a string", r)
	}
	var n [3]int64
	for i := range n {
		if n[i], ok = arr[i].(int64); !ok || n[i] < 0 {
			r.t.Fatalf("%s: element %d is %#v, want an integer >= 0", r, i, arr[i])
		}
	}
	id, ok := arr[3].(string)
	if !ok {
		r.t.Fatalf("%s: lease_id is %T, want a string", r, arr[3])
	}
	l := leaseReply{n[0] == 1, n[1], time.Duration(n[2]) * time.Millisecond, id}
	if l.Granted != (id != "") || (l.Granted && l.RetryAfter != 0) {
		r.t.Fatalf("%s: a grant has a lease id and no retry_after; a denial neither", r)
	}
	return l
}

func TestLeaseSession(t *testing.T) {
	h := start(t)
	h.Do(t, "RL.SETRATE", "db", 2, "10s", "ALGO", "concurrency").Equal(int64(1))
	h.Do(t, "RL.GETRATE", "db").Equal(map[any]any{"rate": int64(2), "interval_ms": int64(10000), "algo": "concurrency",
		"burst": int64(2), "shards": int64(1), "mode": "OVERALL", "ttl_ms": int64(0)})
	a := h.Do(t, "RL.LEASE", "db").Lease()
	if !a.Granted || a.Remaining != 1 {
		t.Fatalf("first lease: %+v", a)
	}
	b := h.Do(t, "RL.LEASE", "db", 1, "TTL", "1m").Lease()
	if !b.Granted || b.Remaining != 0 || b.ID == a.ID {
		t.Fatalf("second lease: %+v", b)
	}
	d := h.Do(t, "RL.LEASE", "db").Lease()
	if d.Granted || d.RetryAfter < 9*time.Second || d.RetryAfter > 10*time.Second {
		t.Fatalf("third lease: %+v, want denied until the first expires (10s)", d)
	}
	h.Do(t, "RL.AVAILABLE", "db").Equal(int64(0))
	h.Do(t, "RL.RENEW", "db", a.ID, "TTL", "30s").Equal(int64(1))
	h.Do(t, "RL.RETURN", "db", a.ID).Equal(int64(1))
	h.Do(t, "RL.RETURN", "db", a.ID).Equal(int64(0))
	h.Do(t, "RL.RENEW", "db", a.ID, "TTL", "30s").Equal(int64(0))
	h.Do(t, "RL.AVAILABLE", "db").Equal(int64(1))
	h.Do(t, "RL.ACQUIRE", "db").ErrContains("RL.LEASE")
	h.Do(t, "RL.ACQUIRE", "db", "TIMEOUT", "1s").ErrContains("RL.LEASE")
	h.Do(t, "RL.RELEASE", "db", 1).ErrContains("RL.RETURN")
	h.Do(t, "RL.CHARGE", "db", 1).ErrContains("RL.LEASE")
	h.Do(t, "RL.AVAILABLE", "db").Equal(int64(1)) // the charge took nothing
	h.Do(t, "RL.SETRATE", "db", 2, "10s", "ALGO", "concurrency", "SHADOW").ErrContains("SHADOW applies to the rate algorithms, not concurrency")
	h.Do(t, "RL.LEASE", "db", 3).ErrContains("more than the limit")
	h.Do(t, "RL.RESET", "db").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "db").Equal(int64(2))
	h.Do(t, "RL.RETURN", "db", b.ID).Equal(int64(0))
	h.Do(t, "RL.DEL", "db").Equal(int64(1))
	h.Do(t, "RL.LEASE", "db").Err("ERR no such limiter 'db' (create it with RL.SETRATE or RL.POLICY SET)")
}

// heldScript sums the permits of the leases a sub-limiter holds now, by
// the backend's clock (what the semaphore's invariant is about).
var heldScript = redis.NewScript(`
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local sum = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', ARGV[1] .. ':' .. epoch .. ':z', '(' .. now, '+inf')) do
  sum = sum + tonumber(string.match(m, '^%d+%.(%d+)%.'))
end
return sum`)

// held samples the permits held on shard of limiter name, from the backend.
func held(t testing.TB, rdb *redis.Client, name string, shard int) int64 {
	tag := fmt.Sprintf("rlproxy:{%s:%d}", name, shard)
	n, err := heldScript.Run(context.Background(), rdb, []string{tag + ":c"}, tag).Int64()
	if err != nil {
		t.Errorf("sample held permits: %v", err)
	}
	return n
}

// queuedScript counts the tickets in a sub-limiter's queue of waiters.
var queuedScript = redis.NewScript(`
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then return 0 end
return redis.call('ZCARD', ARGV[1] .. ':' .. epoch .. ':q')`)

// waitQueued waits until n waiters are queued on the shards of limiter
// name, in the backend (through every proxy): each has asked, been
// denied and sleeps until woken (a wake-up sent from then on reaches it).
func waitQueued(t testing.TB, rdb redis.Scripter, name string, shards int, n int64) {
	t.Helper()
	var got int64
	if err := eventually(5*time.Second, func() error {
		got = 0
		for shard := range shards {
			tag := fmt.Sprintf("rlproxy:{%s:%d}", name, shard)
			c, err := queuedScript.Run(context.Background(), rdb, []string{tag + ":c"}, tag).Int64()
			if err != nil {
				return err
			}
			got += c
		}
		if got != n {
			return fmt.Errorf("%d waiters queued on '%s', want %d", got, name, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// waitLeaseWaiting waits until exactly n clients of c's proxy wait in
// RL.LEASE (INFO lease_waiting_clients).
func waitLeaseWaiting(t testing.TB, c conn, n int) {
	t.Helper()
	if err := eventually(3*time.Second, func() error {
		if got := infoInt(t, c, "lease_waiting_clients"); got != n {
			return fmt.Errorf("lease_waiting_clients is %d, want %d", got, n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// proxies starts n proxies over one redis-server.
func proxies(t testing.TB, n int) []*harness {
	srv := redistest.StartServer(t)
	hs := make([]*harness, n)
	for i := range hs {
		hs[i] = startProxy(t, srv, func(c *config.Config) { c.Backends = []string{srv.URL()} })
	}
	return hs
}

// timedLease runs RL.LEASE through c and returns its reply and how long it took.
func timedLease(t testing.TB, c conn, args ...any) (leaseReply, time.Duration) {
	start := time.Now()
	r := c.Do(t, append([]any{"RL.LEASE"}, args...)...).Lease()
	return r, time.Since(start)
}

// A return through one proxy wakes a waiter on another at once; so does
// an expiry; a waiter waits out its whole TIMEOUT even when the earliest
// expiry is later.
func TestLeaseWaitersWake(t *testing.T) {
	hs := proxies(t, 2)
	a, b := hs[0], hs[1]
	rdb := a.backend.Client(t)
	a.Do(t, "RL.SETRATE", "w", 1, "10s", "ALGO", "concurrency").Equal(int64(1))

	var lags []time.Duration
	for range 5 {
		l := a.Do(t, "RL.LEASE", "w").Lease()
		done := make(chan time.Time, 1)
		var got leaseReply
		go func() {
			got, _ = timedLease(t, b.conn, "w", "TIMEOUT", "3s")
			done <- time.Now()
		}()
		waitQueued(t, rdb, "w", 1, 1)
		a.Do(t, "RL.RETURN", "w", l.ID).Equal(int64(1))
		returned := time.Now()
		woke := <-done
		if !got.Granted {
			t.Fatalf("the waiter was not granted after the return: %+v", got)
		}
		lags = append(lags, woke.Sub(returned))
		b.Do(t, "RL.RETURN", "w", got.ID).Equal(int64(1))
	}
	slices.Sort(lags)
	t.Logf("return through another proxy -> waiter granted: %v (median %v)", lags, lags[2])
	if lags[2] > 50*time.Millisecond {
		t.Errorf("median wake-up after a return %v, want within 50ms", lags[2])
	}

	// An expiry: nobody returns anything.
	a.Do(t, "RL.LEASE", "w", "TTL", "300ms").Lease()
	got, took := timedLease(t, b.conn, "w", "TIMEOUT", "3s")
	t.Logf("lease of 300ms expiring -> waiter granted after %v", took)
	if !got.Granted || took < 250*time.Millisecond || took > 300*time.Millisecond+100*time.Millisecond {
		t.Errorf("waiter behind a 300ms lease: %+v after %v, want granted after 300ms (+50ms)", got, took)
	}
	b.Do(t, "RL.RETURN", "w", got.ID).Equal(int64(1))

	// The holder keeps its lease for 10s; the waiter's whole 400ms go by.
	a.Do(t, "RL.LEASE", "w").Lease()
	got, took = timedLease(t, b.conn, "w", "TIMEOUT", "400ms")
	if got.Granted || took < 400*time.Millisecond || got.RetryAfter < 9*time.Second {
		t.Errorf("waiter with TIMEOUT 400ms behind a 10s lease: %+v after %v, want denied after 400ms", got, took)
	}
}

// A client that disconnects while waiting gives nothing away: it takes no
// permit and holds no one up; a holder that vanishes loses its lease at
// its TTL by the backend's clock.
func TestLeaseCrashSafety(t *testing.T) {
	h := start(t)
	rdb := h.backend.Client(t)
	h.Do(t, "RL.SETRATE", "c", 1, "10s", "ALGO", "concurrency").Equal(int64(1))
	l := h.Do(t, "RL.LEASE", "c").Lease()
	var gone []*raw
	for i := range 3 {
		w := h.raw(t)
		w.Send("RL.LEASE", "c", "BLOCK")
		waitQueued(t, rdb, "c", 1, int64(i+1))
		gone = append(gone, w)
	}
	for _, w := range gone {
		_ = w.c.Close()
	}
	// Once the proxy has seen them go, no ticket of theirs is left.
	waitLeaseWaiting(t, h.conn, 0)
	waitQueued(t, rdb, "c", 1, 0)
	h.Do(t, "RL.RETURN", "c", l.ID).Equal(int64(1))
	if n := held(t, rdb, "c", 0); n != 0 {
		t.Fatalf("%d permits held after the waiters left and the holder returned", n)
	}
	// No ticket of theirs is left to hold up a call that does not wait.
	if got := h.Do(t, "RL.LEASE", "c", "TTL", "200ms").Lease(); !got.Granted {
		t.Fatalf("gone waiters still hold up the queue: %+v", got)
	}

	// The holder vanishes (its connection closes, nothing returns it).
	holder := h.raw(t)
	h.Do(t, "RL.SETRATE", "v", 1, "200ms", "ALGO", "concurrency").Equal(int64(1))
	if line := holder.Call("RL.LEASE", "v"); line != "*4" {
		t.Fatalf("RL.LEASE reply %q", line)
	}
	_ = holder.c.Close()
	if got := h.Do(t, "RL.LEASE", "v").Lease(); got.Granted {
		t.Fatal("granted while the vanished holder's lease runs")
	}
	got, took := timedLease(t, h.conn, "v", "TIMEOUT", "2s")
	// Granted when the lease ends (200ms), not at the backstop or the
	// TIMEOUT: the bound leaves room for a busy machine.
	if !got.Granted || took > time.Second {
		t.Fatalf("after the vanished holder's 200ms: %+v after %v", got, took)
	}
}

func TestLeaseOptions(t *testing.T) {
	h := start(t)
	// SHARDS: each shard holds an exact share (3 + 2); a lease probes them all.
	h.Do(t, "RL.SETRATE", "s", 5, "10s", "ALGO", "concurrency", "SHARDS", 2).Equal(int64(1))
	var ids []string
	for i := range 5 {
		l := h.Do(t, "RL.LEASE", "s").Lease()
		if !l.Granted {
			t.Fatalf("lease %d of 5 over two shards denied", i+1)
		}
		ids = append(ids, l.ID)
	}
	if l := h.Do(t, "RL.LEASE", "s").Lease(); l.Granted {
		t.Fatal("a sixth lease of 5 granted")
	}
	h.Do(t, "RL.AVAILABLE", "s").Equal(int64(0))
	h.Do(t, "RL.LEASE", "s", 3).ErrContains("more than the limit")
	for _, id := range ids {
		h.Do(t, "RL.RETURN", "s", id).Equal(int64(1))
	}
	h.Do(t, "RL.AVAILABLE", "s").Equal(int64(5))

	// NX never changes it; KEEPSTATE keeps the leases held under a new limit.
	h.Do(t, "RL.SETRATE", "k", 3, "1m", "ALGO", "concurrency").Equal(int64(1))
	h.Do(t, "RL.SETRATE", "k", 9, "1m", "ALGO", "concurrency", "NX").Equal(int64(0))
	a := h.Do(t, "RL.LEASE", "k", 2).Lease()
	h.Do(t, "RL.SETRATE", "k", 1, "1m", "ALGO", "concurrency", "KEEPSTATE").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "k").Equal(int64(0))
	h.Do(t, "RL.SETRATE", "k", 4, "1m", "ALGO", "concurrency", "KEEPSTATE").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "k").Equal(int64(2))
	h.Do(t, "RL.RETURN", "k", a.ID).Equal(int64(1))
	// KEEPSTATE cannot carry leases over a change of SHARDS or MODE (they
	// are held per sub-limiter and per client): refused, nothing changed.
	b := h.Do(t, "RL.LEASE", "k", 1).Lease()
	for _, change := range [][]any{{"SHARDS", 2}, {"MODE", "PER_CLIENT"}} {
		args := append([]any{"RL.SETRATE", "k", 4, "1m", "ALGO", "concurrency", "KEEPSTATE"}, change...)
		h.Do(t, args...).Err("ERR KEEPSTATE cannot carry the leases held on 'k' over a change of SHARDS or MODE: set it without KEEPSTATE (the leases held are forgotten) or keep SHARDS and MODE")
		h.Do(t, "RL.AVAILABLE", "k").Equal(int64(3))
	}
	h.Do(t, "RL.GETRATE", "k").Equal(map[any]any{"rate": int64(4), "interval_ms": int64(60000), "algo": "concurrency", "burst": int64(4), "shards": int64(1), "mode": "OVERALL", "ttl_ms": int64(0)})
	h.Do(t, "RL.RETURN", "k", b.ID).Equal(int64(1))
	// Without KEEPSTATE a new limit starts afresh.
	h.Do(t, "RL.LEASE", "k", 4).Lease()
	h.Do(t, "RL.SETRATE", "k", 2, "1m", "ALGO", "concurrency").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "k").Equal(int64(2))

	// MODE PER_CLIENT: each connection name has its own limit.
	h.Do(t, "RL.SETRATE", "p", 1, "1m", "ALGO", "concurrency", "MODE", "PER_CLIENT", "TTL", "1h").Equal(int64(1))
	c1, c2 := h.Conn(t, nil), h.Conn(t, nil)
	c1.Do(t, "CLIENT", "SETNAME", "w1").OK()
	c2.Do(t, "CLIENT", "SETNAME", "w2").OK()
	l1 := c1.Do(t, "RL.LEASE", "p").Lease()
	if !l1.Granted || !c2.Do(t, "RL.LEASE", "p").Lease().Granted || c1.Do(t, "RL.LEASE", "p").Lease().Granted {
		t.Fatal("PER_CLIENT: want one lease per client name")
	}
	c1.Do(t, "RL.RETURN", "p", l1.ID).Equal(int64(1))

	// Errors name what to do.
	h.Do(t, "RL.SETRATE", "tb", 5, "1s").Equal(int64(1))
	h.Do(t, "RL.LEASE", "tb").ErrContains("not a concurrency limiter")
	h.Do(t, "RL.RETURN", "tb", "x").ErrContains("not a concurrency limiter")
	h.Do(t, "RL.RENEW", "k", "x", "TTL", "0").ErrContains("TTL")
	h.Do(t, "RL.RENEW", "k", "x", "FOR", "1s").ErrContains("syntax error")
	h.Do(t, "RL.RETURN", "k").ErrContains("wrong number of arguments")
	h.Do(t, "RL.RETURN", "nope", "x").Err("ERR no such limiter 'nope' (create it with RL.SETRATE or RL.POLICY SET)")
	// A waiter follows the limiter: RL.DEL answers it at once.
	h.Do(t, "RL.SETRATE", "d", 1, "1m", "ALGO", "concurrency").Equal(int64(1))
	h.Do(t, "RL.LEASE", "d").Lease()
	errc := make(chan error, 1)
	w := h.client(t, nil)
	go func() { errc <- w.Do(context.Background(), "RL.LEASE", "d", "TIMEOUT", "5s").Err() }()
	waitQueued(t, h.backend.Client(t), "d", 1, 1)
	h.Do(t, "RL.DEL", "d").Equal(int64(1))
	begin := time.Now()
	select {
	case err := <-errc:
		if err == nil || err.Error() != "ERR no such limiter 'd' (create it with RL.SETRATE or RL.POLICY SET)" {
			t.Fatalf("waiter after RL.DEL: %v", err)
		}
		if took := time.Since(begin); took > 500*time.Millisecond {
			t.Errorf("waiter answered %v after RL.DEL, want at once", took)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not answered after RL.DEL")
	}
}

// maxHeld samples the permits held on a limiter's shard 0 from the
// backend every 2ms until stop is closed, and returns the most seen.
func maxHeld(t testing.TB, rdb *redis.Client, name string, stop <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		var most int64
		for {
			select {
			case <-stop:
				out <- most
				return
			case <-time.After(2 * time.Millisecond):
			}
			most = max(most, held(t, rdb, name, 0))
		}
	}()
	return out
}

// Never more than the limit held at once: 32 clients through two proxies
// lease, renew, return or abandon their leases at random.
func TestLeaseExactUnderLoad(t *testing.T) {
	const limit, clients = 5, 32
	hs := proxies(t, 2)
	rdb := hs[0].backend.Client(t)
	hs[0].Do(t, "RL.SETRATE", "x", limit, "200ms", "ALGO", "concurrency").Equal(int64(1))
	stop := make(chan struct{})
	most := maxHeld(t, rdb, "x", stop)
	var grants atomic.Int64
	var wg sync.WaitGroup
	end := time.Now().Add(2 * time.Second)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			c := hs[i%2].client(t, func(o *redis.Options) { o.ReadTimeout = 5 * time.Second })
			ctx := context.Background()
			for time.Now().Before(end) {
				args := []any{"RL.LEASE", "x", 1 + rng.IntN(2), "TTL", 20 + rng.IntN(200)}
				if rng.IntN(2) == 0 {
					args = append(args, "TIMEOUT", rng.IntN(200)+1)
				}
				v, err := c.Do(ctx, args...).Slice()
				if err != nil || len(v) != 4 {
					t.Errorf("%v: %v %v", args, v, err)
					return
				}
				if v[0] != int64(1) {
					continue
				}
				grants.Add(1)
				id := v[3].(string)
				time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
				switch rng.IntN(4) {
				case 0: // abandoned: it expires
				case 1:
					c.Do(ctx, "RL.RENEW", "x", id, "TTL", 10+rng.IntN(100))
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
					fallthrough
				default:
					c.Do(ctx, "RL.RETURN", "x", id)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	m := <-most
	t.Logf("%d grants; most held at once (sampled from the backend): %d of %d", grants.Load(), m, limit)
	if m > limit {
		t.Errorf("%d permits held at once, limit %d", m, limit)
	}
	if grants.Load() < 30 || m < limit-1 {
		t.Errorf("the load never filled the limiter (%d grants, most held %d): the test proves nothing", grants.Load(), m)
	}
}

// Across a backend restart (no persistence): the limiter is gone with its
// leases, RL.LEASE says so, and once re-created it grants no more than its
// limit; the leases of before are not held (RL.RETURN gives 0).
func TestLeaseBackendRestart(t *testing.T) {
	h := start(t)
	h.Do(t, "RL.SETRATE", "r", 2, "1m", "ALGO", "concurrency").Equal(int64(1))
	a, b := h.Do(t, "RL.LEASE", "r").Lease(), h.Do(t, "RL.LEASE", "r").Lease()
	h.backend.Restart(t)
	err := eventually(5*time.Second, func() error {
		r := h.Do(t, "RL.LEASE", "r")
		if r.err == nil || r.err.Error() != "ERR no such limiter 'r' (create it with RL.SETRATE or RL.POLICY SET)" {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	h.Do(t, "RL.SETRATE", "r", 2, "1m", "ALGO", "concurrency").Equal(int64(1))
	for _, id := range []string{a.ID, b.ID} {
		h.Do(t, "RL.RETURN", "r", id).Equal(int64(0))
	}
	n := 0
	for range 4 {
		if h.Do(t, "RL.LEASE", "r").Lease().Granted {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d leases granted of a limit of 2 after the restart", n)
	}
}

// The lease session of a worker, through go-redis' typed API, RESP2 and RESP3.
func TestGoRedisLeaseSession(t *testing.T) {
	h := start(t)
	for _, protocol := range []int{2, 3} {
		c := h.client(t, func(o *redis.Options) { o.Protocol = protocol })
		ctx := t.Context()
		key := fmt.Sprintf("jobs-%d", protocol)
		if n, err := c.Do(ctx, "RL.SETRATE", key, 1, "2s", "ALGO", "concurrency").Int(); n != 1 || err != nil {
			t.Fatalf("RL.SETRATE: %d %v", n, err)
		}
		v, err := c.Do(ctx, "RL.LEASE", key).Slice()
		if err != nil || len(v) != 4 || v[0] != int64(1) {
			t.Fatalf("RESP%d RL.LEASE: %v %v", protocol, v, err)
		}
		id, ok := v[3].(string)
		if !ok || id == "" {
			t.Fatalf("RESP%d lease_id %#v, want a string", protocol, v[3])
		}
		if n, err := c.Do(ctx, "RL.RENEW", key, id, "TTL", "5s").Int(); n != 1 || err != nil {
			t.Fatalf("RL.RENEW: %d %v", n, err)
		}
		v, _ = c.Do(ctx, "RL.LEASE", key).Slice()
		if v[0] != int64(0) || v[3] != "" || v[2].(int64) <= 4000 {
			t.Fatalf("RESP%d RL.LEASE while held: %v, want denied until the renewed lease expires", protocol, v)
		}
		if n, err := c.Do(ctx, "RL.RETURN", key, id).Int(); n != 1 || err != nil {
			t.Fatalf("RL.RETURN: %d %v", n, err)
		}
	}
}

// The embedded backend (the zero-setup default) runs leases too, waking
// a waiter on a return.
func TestLeaseEmbedded(t *testing.T) {
	h := startProxy(t, nil)
	h.Do(t, "RL.SETRATE", "e", 1, "10s", "ALGO", "concurrency").Equal(int64(1))
	l := h.Do(t, "RL.LEASE", "e").Lease()
	done := make(chan leaseReply, 1)
	w := h.Conn(t, nil)
	go func() { r, _ := timedLease(t, w, "e", "TIMEOUT", "3s"); done <- r }()
	waitQueued(t, h.proxy.pool.Nodes()[0].Client(), "e", 1, 1)
	h.Do(t, "RL.RETURN", "e", l.ID).Equal(int64(1))
	select {
	case r := <-done:
		if !r.Granted {
			t.Fatalf("waiter: %+v", r)
		}
	case <-time.After(500 * time.Millisecond):
		t.Fatal("the waiter was not woken by the return")
	}
	h.Do(t, "RL.AVAILABLE", "e").Equal(int64(0))
}

// On Redis Cluster: a sharded concurrency limiter spreads over the masters,
// and a return through one proxy wakes a waiter on another (the script's
// PUBLISH reaches every node's subscribers).
func TestLeaseCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	a := startProxy(t, nil, func(c *config.Config) { c.Cluster = cluster.URLs() })
	b := startProxy(t, nil, func(c *config.Config) { c.Cluster = cluster.URLs() })
	a.Do(t, "RL.SETRATE", "cl", 4, "10s", "ALGO", "concurrency", "SHARDS", 4).Equal(int64(1))
	var ids []string
	for range 4 {
		ids = append(ids, a.Do(t, "RL.LEASE", "cl").Lease().ID)
	}
	if a.Do(t, "RL.LEASE", "cl").Lease().Granted {
		t.Fatal("a fifth lease of 4 granted")
	}
	// The waiter queues on one of the 4 shards: returning every lease frees it.
	done := make(chan leaseReply, 1)
	w := b.Conn(t, nil)
	go func() { r, _ := timedLease(t, w, "cl", "TIMEOUT", "5s"); done <- r }()
	waitQueued(t, cluster.Client(t), "cl", 4, 1)
	for _, id := range ids {
		a.Do(t, "RL.RETURN", "cl", id).Equal(int64(1))
	}
	returned := time.Now()
	select {
	case r := <-done:
		if !r.Granted {
			t.Fatalf("waiter: %+v", r)
		}
		t.Logf("waiter granted %v after the returns", time.Since(returned))
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	if took := time.Since(returned); took > 500*time.Millisecond {
		t.Errorf("waiter woken %v after the return, want at once", took)
	}
}

// Waiting does not poll: 16 waiters through two proxies behind a lease
// held for 10s cost the backend a handful of script calls each over 1.5s
// (first try, a refresh a second, the final try, leaving the queue); a
// return wakes one of them, not all.
func TestLeaseNoPollingStorm(t *testing.T) {
	hs := proxies(t, 2)
	rdb := hs[0].backend.Client(t)
	hs[0].Do(t, "RL.SETRATE", "q", 1, "10s", "ALGO", "concurrency").Equal(int64(1))
	held := hs[0].Do(t, "RL.LEASE", "q").Lease()
	for _, h := range hs { // warm: configs cached, channels subscribed
		h.Do(t, "RL.LEASE", "q", "TIMEOUT", "1ms").Lease()
	}
	const waiters = 16
	resetBackendStats(t, rdb)
	var wg sync.WaitGroup
	var granted atomic.Int64
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := hs[i%2].client(t, func(o *redis.Options) { o.ReadTimeout = 5 * time.Second })
			v, err := c.Do(context.Background(), "RL.LEASE", "q", "TIMEOUT", "1500ms").Slice()
			if err != nil {
				t.Error(err)
				return
			}
			if v[0] == int64(1) {
				granted.Add(1)
				c.Do(context.Background(), "RL.RENEW", "q", v[3], "TTL", "1m") // held to the end
			}
		}()
	}
	waitQueued(t, rdb, "q", 1, waiters) // all asleep: the return can wake all or one
	hs[1].Do(t, "RL.RETURN", "q", held.ID).Equal(int64(1))
	wg.Wait()
	calls := backendCalls(t, rdb)
	scripts := calls["evalsha"] + calls["eval"]
	t.Logf("%d waiters over 1.5s, one return: %d script calls, %d granted", waiters, scripts, granted.Load())
	if granted.Load() != 1 {
		t.Errorf("%d waiters granted after one return of a limit of 1", granted.Load())
	}
	if scripts > 6*waiters {
		t.Errorf("%d script calls for %d waiters: waiters poll", scripts, waiters)
	}
}

// Waiters follow the limiter: a higher limit set through another proxy
// (KEEPSTATE keeps the lease held) grants a waiter at once.
func TestLeaseWaitersFollowTheLimit(t *testing.T) {
	hs := proxies(t, 2)
	a, b := hs[0], hs[1]
	a.Do(t, "RL.SETRATE", "up", 1, "10s", "ALGO", "concurrency").Equal(int64(1))
	a.Do(t, "RL.LEASE", "up").Lease()
	done := make(chan leaseReply, 1)
	w := b.Conn(t, nil)
	go func() { r, _ := timedLease(t, w, "up", "TIMEOUT", "5s"); done <- r }()
	waitQueued(t, a.backend.Client(t), "up", 1, 1)
	a.Do(t, "RL.SETRATE", "up", 2, "10s", "ALGO", "concurrency", "KEEPSTATE").Equal(int64(1))
	changed := time.Now()
	select {
	case r := <-done:
		if !r.Granted || r.Remaining != 0 {
			t.Fatalf("waiter after the limit went up: %+v", r)
		}
		if took := time.Since(changed); took > 500*time.Millisecond {
			t.Errorf("waiter granted %v after the new limit, want at once", took)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiter not granted after the limit went up")
	}
}
