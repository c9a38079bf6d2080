package lease

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/backend"
	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
	"github.com/rlproxy/rlproxy/ratelimit"
)

// rig is a lease Service over a real redis-server, with a long Refresh
// so that only wake-ups, the head's expiry timer and the final try at the
// deadline make a waiter ask again.
type rig struct {
	svc  *Service
	lim  *ratelimit.Limiters
	srv  *redistest.Server
	keys limiter.Keys
}

func newRig(t *testing.T) *rig {
	srv := redistest.StartServer(t)
	scripts := limiter.NewScripts()
	pool, err := backend.Open(context.Background(), backend.Options{Backends: []string{srv.URL()}, Scripts: scripts.All()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close() })
	lim := ratelimit.New(pool, scripts, ratelimit.Options{KeyPrefix: "t:"})
	svc := New(lim, scripts, Options{KeyPrefix: "t:", Refresh: time.Hour})
	t.Cleanup(svc.Close)
	return &rig{svc: svc, lim: lim, srv: srv, keys: limiter.Keys{Prefix: "t:"}}
}

// state returns the KEYS of shard 0 of name's script, under its epoch now.
func (r *rig) state(t *testing.T, name string) []string {
	epoch := r.srv.Client(t).HGet(t.Context(), r.keys.Config(name, 0), "epoch").Val()
	return r.keys.Script(limiter.Concurrency, name, 0, epoch, "")
}

// waitQueued waits until n waiters are queued on shard 0 of name: each
// has asked, been denied and sleeps until woken.
func (r *rig) waitQueued(t *testing.T, name string, n int64) {
	t.Helper()
	queue := r.state(t, name)[2]
	redistest.WaitFor(t, func() bool { return r.srv.Client(t).ZCard(t.Context(), queue).Val() == n })
}

func (r *rig) create(t *testing.T, name string, limit int64, ttl time.Duration) {
	c := limiter.Config{Algo: limiter.Concurrency, Rate: limit, Interval: ttl, Burst: limit, Shards: 1, Mode: limiter.Overall}
	if _, err := r.lim.SetRate(t.Context(), name, c, ratelimit.SetRateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A waiter whose wake-up never comes (here: the lease vanishes from the
// backend behind the script's back, so nothing is published) still tries once
// more at its deadline, and its own place in the queue does not count
// against it.
func TestFinalTryAtDeadline(t *testing.T) {
	r := newRig(t)
	r.create(t, "db", 1, 10*time.Second)
	held, err := r.svc.Lease(t.Context(), Request{Name: "db"})
	if err != nil || !held.Granted {
		t.Fatalf("lease: %+v %v", held, err)
	}
	type answer struct {
		res Result
		err error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		res, err := r.svc.Lease(t.Context(), Request{Name: "db", MaxWait: 300 * time.Millisecond})
		done <- answer{res, err}
	}()
	// Once the waiter sleeps in the queue, the lease vanishes.
	r.waitQueued(t, "db", 1)
	rdb, keys := r.srv.Client(t), r.state(t, "db")
	rdb.ZRem(t.Context(), keys[1], held.ID)
	rdb.Del(t.Context(), keys[4]) // the count of permits held is rebuilt from the leases
	a := <-done
	got, err := a.res, a.err
	if err != nil || !got.Granted {
		t.Fatalf("waiter at its deadline: %+v %v, want granted by the final try", got, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("granted after %v: woken by something other than its deadline", took)
	}
}

// A waiter that gives up leaves the queue: a later call is not held up.
func TestWaiterLeavesQueue(t *testing.T) {
	r := newRig(t)
	r.create(t, "db", 1, 10*time.Second)
	held, _ := r.svc.Lease(t.Context(), Request{Name: "db"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := r.svc.Lease(ctx, Request{Name: "db", Block: true})
		errc <- err
	}()
	r.waitQueued(t, "db", 1)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a blocked waiter whose context ended got no error")
	}
	r.waitQueued(t, "db", 0)
	if ok, err := r.svc.Return(t.Context(), "db", "", held.ID); !ok || err != nil {
		t.Fatalf("return: %v %v", ok, err)
	}
	if got, err := r.svc.Lease(t.Context(), Request{Name: "db"}); err != nil || !got.Granted {
		t.Fatalf("after the waiter left: %+v %v, want granted", got, err)
	}
	if n := r.svc.Waiting(); n != 0 {
		t.Fatalf("%d waiters counted after all left", n)
	}
}

// At most MaxWaiters wait at once; one more is told so at once.
func TestMaxWaiters(t *testing.T) {
	r := newRig(t)
	r.svc.SetMaxWaiters(1)
	r.create(t, "db", 1, 10*time.Second)
	if _, err := r.svc.Lease(t.Context(), Request{Name: "db"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _, _ = r.svc.Lease(ctx, Request{Name: "db", Block: true}) }()
	for r.svc.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	_, err := r.svc.Lease(t.Context(), Request{Name: "db", MaxWait: time.Second})
	if err == nil || err.Error() != "too many waiting clients (max_waiters is 1); try again later" {
		t.Fatalf("a second waiter of max 1: %v", err)
	}
	// A lease that does not wait is not a waiter.
	if got, err := r.svc.Lease(t.Context(), Request{Name: "db"}); err != nil || got.Granted {
		t.Fatalf("no-wait lease: %+v %v, want denied", got, err)
	}
}
