package proxy

// The change feed: a change through one proxy reaches the others by
// Pub/Sub within a round trip. These tests set change_backstop to a
// minute, so only the feed (or its resync after a reconnect) can pass
// them in time; the backstop's own test makes Pub/Sub unusable.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/config"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// feedBound is the generous bound a change must reach another proxy
// within; the backstop of these tests is far longer.
const feedBound = 5 * time.Second

func longBackstop(c *config.Config) { c.ChangeBackstop = time.Minute }

// feedUp waits until every proxy's change feed is subscribed.
func feedUp(t testing.TB, hs ...*harness) {
	t.Helper()
	for _, h := range hs {
		redistest.WaitFor(t, func() bool { up, n := h.proxy.limiters.Feed().Up(); return up == n })
	}
}

// follows waits until check passes on h, within d, and logs how long it took.
func follows(t *testing.T, what string, d time.Duration, check func() error) {
	t.Helper()
	start := time.Now()
	if err := eventually(d, check); err != nil {
		t.Fatalf("%s: %v (not within %v)", what, err, d)
	}
	t.Logf("%s after %v", what, time.Since(start).Round(100*time.Microsecond))
}

// governs checks RL.ACQUIRE of a fresh name under prefix on h is granted
// (a policy governs it), or with want false that it is no limiter.
func governs(t testing.TB, h *harness, prefix string, want bool) func() error {
	i := 0
	return func() error {
		i++
		name := fmt.Sprintf("%s%d", prefix, i)
		v, err := h.client(t, nil).Do(context.Background(), "RL.ACQUIRE", name).Slice()
		switch {
		case want && (err != nil || v[0] != int64(1)):
			return fmt.Errorf("RL.ACQUIRE %s = %v %v, want granted", name, v, err)
		case !want && (err == nil || err.Error() != fmt.Sprintf(noSuch, name)):
			return fmt.Errorf("RL.ACQUIRE %s = %v %v, want no such limiter", name, v, err)
		}
		return nil
	}
}

// A policy set through A governs on B at once; RL.POLICY DEL through A
// stops B's grants at once.
func TestFeedPolicyAcrossProxies(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, longBackstop)
	a, b := f.proxies[0], f.proxies[1]
	feedUp(t, a, b)
	b.Do(t, "RL.ACQUIRE", "fp:0").Err(fmt.Sprintf(noSuch, "fp:0"))
	a.Do(t, "RL.POLICY", "SET", "fp:*", 100, "1h").Equal(int64(1))
	follows(t, "RL.POLICY SET through A governs on B", feedBound, governs(t, b, "fp:a", true))
	a.Do(t, "RL.POLICY", "DEL", "fp:*").Equal(int64(1))
	follows(t, "RL.POLICY DEL through A stops grants on B", feedBound, governs(t, b, "fp:b", false))
}

// The same on a Redis Cluster: the policies' slot lives on one master, the
// proxies' subscribers on any; a PUBLISH reaches them all.
func TestFeedPolicyCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	on := func(c *config.Config) { c.Cluster = cluster.URLs(); c.ChangeBackstop = time.Minute }
	a, b := startProxy(t, nil, on), startProxy(t, nil, on)
	feedUp(t, a, b)
	a.Do(t, "RL.POLICY", "SET", "fc:*", 100, "1h").Equal(int64(1))
	follows(t, "cluster: RL.POLICY SET through A governs on B", feedBound, governs(t, b, "fc:a", true))
	a.Do(t, "RL.POLICY", "DEL", "fc:*").Equal(int64(1))
	follows(t, "cluster: RL.POLICY DEL through A stops grants on B", feedBound, governs(t, b, "fc:b", false))
	// An explicit limiter's change too (its shard 0 on whichever master).
	a.Do(t, "RL.SETRATE", "fc-k", 1, "1h").Equal(int64(1))
	b.Do(t, "RL.ACQUIRE", "fc-k").Granted(0)
	wait := goDo(b.waiter(t), "RL.ACQUIRE", "fc-k", 1, "BLOCK")
	waitWaiting(t, b.conn, 1)
	a.Do(t, "RL.SETRATE", "fc-k", 100, "1s").Equal(int64(1))
	if r := await(t, wait, feedBound); r.err != nil || r.val.([]any)[0] != int64(1) {
		t.Fatalf("cluster: the waiter on B after RL.SETRATE through A: %v %v, want granted", r.val, r.err)
	}
}

// Waiters on B wake when RL.SETRATE through A makes room: a rate-limit
// waiter (booked an hour out) and a lease waiter.
func TestFeedWakesWaiters(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, longBackstop)
	a, b := f.proxies[0], f.proxies[1]
	feedUp(t, a, b)
	a.Do(t, "RL.SETRATE", "fw", 1, "1h").Equal(int64(1))
	a.Do(t, "RL.ACQUIRE", "fw").Granted(0)
	a.Do(t, "RL.SETRATE", "fl", 1, "1m", "ALGO", "concurrency").Equal(int64(1))
	a.Do(t, "RL.LEASE", "fl").OK()
	rate := goDo(b.waiter(t), "RL.ACQUIRE", "fw", 1, "BLOCK")
	lease := goDo(b.waiter(t), "RL.LEASE", "fl", 1, "BLOCK")
	waitWaiting(t, b.conn, 1)
	redistest.WaitFor(t, func() bool { return b.proxy.leases.Waiting() == 1 })
	start := time.Now()
	a.Do(t, "RL.SETRATE", "fw", 100, "1s").Equal(int64(1))
	a.Do(t, "RL.SETRATE", "fl", 2, "1m", "ALGO", "concurrency").Equal(int64(1))
	if r := await(t, rate, feedBound); r.err != nil || r.val.([]any)[0] != int64(1) {
		t.Errorf("rate-limit waiter on B: %v %v, want granted", r.val, r.err)
	}
	if r := await(t, lease, feedBound); r.err != nil || r.val.([]any)[0] != int64(1) {
		t.Errorf("lease waiter on B: %v %v, want granted", r.val, r.err)
	}
	t.Logf("both waiters on B granted %v after the changes through A", time.Since(start).Round(100*time.Microsecond))
}

// aclFleet is two proxies that reach their redis-server as ACL user rl,
// whose right to SUBSCRIBE a test can take away (PUBLISH stays allowed).
func aclFleet(t *testing.T, backstop time.Duration, subscribe bool) (a, b *harness, admin conn) {
	t.Helper()
	srv := redistest.StartServer(t)
	admin = conn{srv.Client(t)}
	admin.Do(t, "ACL", "SETUSER", "rl", "on", ">pw", "~*", "&*", "+@all").Equal("OK")
	if !subscribe {
		admin.Do(t, "ACL", "SETUSER", "rl", "-subscribe").Equal("OK")
	}
	on := func(c *config.Config) {
		c.Backends = []string{"redis://rl:pw@" + srv.Addr()}
		c.ChangeBackstop = backstop
	}
	return startProxy(t, srv, on), startProxy(t, srv, on), admin
}

// Pub/Sub down for good (SUBSCRIBE refused): changes are still followed,
// by the backstop.
func TestFeedBackstop(t *testing.T) {
	t.Parallel()
	a, b, _ := aclFleet(t, 300*time.Millisecond, false)
	if up, _ := b.proxy.limiters.Feed().Up(); up != 0 {
		t.Fatal("the feed is up though SUBSCRIBE is refused")
	}
	a.Do(t, "RL.POLICY", "SET", "fb:*", 100, "1h").Equal(int64(1))
	follows(t, "backstop: RL.POLICY SET through A governs on B", feedBound, governs(t, b, "fb:a", true))
	a.Do(t, "RL.POLICY", "DEL", "fb:*").Equal(int64(1))
	follows(t, "backstop: RL.POLICY DEL through A stops grants on B", feedBound, governs(t, b, "fb:b", false))
}

// The subscribers killed (CLIENT KILL TYPE pubsub): they reconnect and
// the feed works again; a change made while they could not resubscribe
// is caught up by the resync after they could.
func TestFeedReconnects(t *testing.T) {
	t.Parallel()
	a, b, admin := aclFleet(t, time.Minute, true)
	feedUp(t, a, b)
	if n := admin.Do(t, "CLIENT", "KILL", "TYPE", "pubsub").Int(); n != 2 {
		t.Fatalf("CLIENT KILL TYPE pubsub killed %d, want the 2 subscribers", n)
	}
	feedUp(t, a, b) // reconnected
	a.Do(t, "RL.POLICY", "SET", "fr:*", 100, "1h").Equal(int64(1))
	follows(t, "after a reconnect, RL.POLICY SET through A governs on B", feedBound, governs(t, b, "fr:a", true))

	// Killed again, and kept from resubscribing: the change is lost...
	admin.Do(t, "ACL", "SETUSER", "rl", "-subscribe").Equal("OK")
	admin.Do(t, "CLIENT", "KILL", "TYPE", "pubsub").Int()
	redistest.WaitFor(t, func() bool { up, _ := b.proxy.limiters.Feed().Up(); return up == 0 })
	a.Do(t, "RL.POLICY", "DEL", "fr:*").Equal(int64(1))
	if err := governs(t, b, "fr:b", true)(); err != nil {
		t.Fatalf("B followed RL.POLICY DEL with its feed down and a minute's backstop: %v", err)
	}
	// ... until the subscriber is back: the resync reads it.
	admin.Do(t, "ACL", "SETUSER", "rl", "+subscribe").Equal("OK")
	follows(t, "once resubscribed, B follows the RL.POLICY DEL made while it was down", feedBound, governs(t, b, "fr:c", false))
}
