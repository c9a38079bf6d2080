package limiter_test

// Tests of concurrency.lua (the semaphore with leases) against a real
// redis-server.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlproxy/rlproxy/internal/redistest"
	"github.com/rlproxy/rlproxy/limiter"
)

func concurrency(limit int64, leaseTTL time.Duration) limiter.Config {
	return limiter.Config{Algo: limiter.Concurrency, Rate: limit, Interval: leaseTTL, Burst: limit, Shards: 1, Mode: limiter.Overall}
}

// sem calls concurrency.lua on shard 0 of one limiter.
type sem struct{ *lim }

func (s sem) do(op limiter.Op, args []any) limiter.LeaseReply {
	s.t.Helper()
	v, err := s.r.scripts.Limiter(limiter.Concurrency).Run(s.t.Context(), s.r.rdb, s.keys(), args...).Result()
	if err != nil {
		s.t.Fatalf("%s: %v", op, err)
	}
	rep, err := limiter.DecodeLease(v, op)
	if err != nil {
		s.t.Fatalf("%s: %v", op, err)
	}
	if rep.Status != limiter.StatusOK {
		s.t.Fatalf("%s: status %d", op, rep.Status)
	}
	return rep
}

// lease asks for n permits for ttl (0: the limiter's), queueing as ticket
// when it is not "".
func (s sem) lease(n int64, ttl time.Duration, ticket string) (limiter.LeaseReply, string) {
	s.t.Helper()
	id := limiter.NewLeaseID(0, n)
	return s.do(limiter.OpLease, limiter.LeaseArgs(s.epoch, n, ttl, id, ticket, 10*time.Second)), id
}

func (s sem) give(id string) bool {
	s.t.Helper()
	return s.do(limiter.OpReturn, limiter.ReturnArgs(s.epoch, id)).Granted == 1
}

func (s sem) renew(id string, ttl time.Duration) bool {
	s.t.Helper()
	return s.do(limiter.OpRenew, limiter.RenewArgs(s.epoch, id, ttl)).Granted == 1
}

func (s sem) free() int64 {
	s.t.Helper()
	return s.do(limiter.OpPeek, limiter.Args(limiter.OpPeek, s.epoch)).Granted
}

func TestConcurrencyLeases(t *testing.T) {
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(5, 10*time.Second))}

	a, idA := s.lease(3, 0, "")
	if a.Granted != 1 || a.Free != 2 || a.RetryAfterUs != 0 {
		t.Fatalf("lease 3 of 5 = %+v, want granted with 2 free", a)
	}
	b, idB := s.lease(2, time.Second, "")
	if b.Granted != 1 || b.Free != 0 {
		t.Fatalf("lease 2 of 2 free = %+v", b)
	}
	c, _ := s.lease(1, 0, "")
	if c.Granted != 0 || c.Free != 0 || c.RetryAfterUs <= 900_000 || c.RetryAfterUs > time.Second.Microseconds() {
		t.Fatalf("lease of none free = %+v, want denied until the 1s lease expires", c)
	}
	if over, _ := s.lease(6, 0, ""); over.Granted != -1 {
		t.Fatalf("lease of 6 > limit 5 = %+v, want -1", over)
	}
	// A lease of N permits is given back as N, once.
	if !s.give(idA) || s.free() != 3 || s.give(idA) {
		t.Fatalf("return of the 3-permit lease: free %d", s.free())
	}
	// An id made up by counting or copying with other permits is not held.
	for _, fake := range []string{"0.2." + strings.Repeat("0", 32), strings.Replace(idB, ".2.", ".1.", 1), idB + "x", ""} {
		if s.give(fake) || s.renew(fake, time.Minute) {
			t.Fatalf("%q was taken for a held lease", fake)
		}
	}
	// Renew extends by the backend's clock; the lease outlives its first TTL.
	if !s.renew(idB, 3*time.Second) {
		t.Fatal("renew of a held lease = 0")
	}
	if ms := r.pttl(t, s.state()[0]); ms < 2500 || ms > 3000 {
		t.Fatalf("leases key PTTL %d ms after renew to 3s", ms)
	}
	time.Sleep(1200 * time.Millisecond)
	if s.free() != 3 {
		t.Fatalf("renewed lease expired at its first TTL: free %d, want 3", s.free())
	}
}

func TestConcurrencyExpiry(t *testing.T) {
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(1, 150*time.Millisecond))}
	_, id := s.lease(1, 0, "")
	if s.free() != 0 {
		t.Fatal("not held")
	}
	time.Sleep(200 * time.Millisecond)
	if s.free() != 1 {
		t.Fatal("a lease outlived its TTL")
	}
	if s.give(id) || s.renew(id, time.Second) {
		t.Fatal("an expired lease was returned or renewed")
	}
	// Nothing is left once nothing is held.
	for _, k := range s.state() {
		if n, _ := r.rdb.Exists(t.Context(), k).Result(); n != 0 {
			t.Errorf("key %s outlives its content", k)
		}
	}
}

// Permits of expired leases come back while other leases live, however
// the expiry is noticed: by a peek, a denied lease or the return of an
// unknown id (issue 23: the purge was not written back).
func TestConcurrencyExpiryWhileHeld(t *testing.T) {
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(2, time.Hour))}
	s.lease(1, 0, "")
	notice := map[string]func(){
		"peek":           func() { s.free() },
		"denied lease":   func() { s.lease(2, 0, "") },
		"unknown return": func() { s.give(limiter.NewLeaseID(0, 1)) },
	}
	for _, how := range []string{"peek", "denied lease", "unknown return", "peek"} {
		for range 2 {
			s.lease(1, 20*time.Millisecond, "")
			time.Sleep(30 * time.Millisecond)
			notice[how]()
			if f := s.free(); f != 1 {
				t.Fatalf("after an expiry noticed by a %s: free %d, want 1", how, f)
			}
		}
	}
}

func TestConcurrencyQueue(t *testing.T) {
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(3, 10*time.Second))}
	sub := r.rdb.Subscribe(t.Context(), r.keys.Config("db", 0)+":w")
	defer sub.Close()
	if _, err := sub.Receive(t.Context()); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	_, id1 := s.lease(2, 0, "")
	_, id2 := s.lease(1, 0, "")
	// Waiters queue in arrival order: first wants 2, second 1.
	if w, _ := s.lease(2, 0, "first"); w.Granted != 0 {
		t.Fatal("granted with nothing free")
	}
	if w, _ := s.lease(1, 0, "second"); w.Granted != 0 {
		t.Fatal("granted with nothing free")
	}
	// The queue lives as long as its tickets (10s here).
	for _, k := range s.state()[1:] {
		if ms := r.pttl(t, k); ms < 9000 || ms > 10000 {
			t.Fatalf("queue key %s PTTL %d ms, want the tickets' 10s", k, ms)
		}
	}
	// One permit comes free: it fits "second", but "first" is ahead.
	s.give(id2)
	if w, _ := s.lease(1, 0, "second"); w.Granted != 0 {
		t.Fatal("a later waiter went ahead of an earlier one")
	}
	if w, _ := s.lease(1, 0, ""); w.Granted != 0 {
		t.Fatal("a call that does not wait went ahead of the queue")
	}
	// Two more come free: both waiters fit, in order, and are named.
	s.give(id1)
	msg, err := sub.ReceiveMessage(t.Context())
	if err != nil || msg.Payload != "first second" {
		t.Fatalf("published %v %v, want the two tickets in order", msg, err)
	}
	if w, _ := s.lease(2, 0, "first"); w.Granted != 1 || w.Free != 1 {
		t.Fatalf("the head of the queue = %+v, want granted", w)
	}
	// Its grant moves the queue: the next one fits and is named.
	msg, err = sub.ReceiveMessage(t.Context())
	if err != nil || msg.Payload != "second" {
		t.Fatalf("published %v %v, want the next ticket", msg, err)
	}
	// A waiter that gives up leaves the queue.
	if w, _ := s.lease(3, 0, "third"); w.Granted != 0 {
		t.Fatal("granted with 1 free")
	}
	s.do(limiter.OpCancel, limiter.CancelArgs(s.epoch, "second", 1))
	s.do(limiter.OpCancel, limiter.CancelArgs(s.epoch, "third", 3))
	if n, _ := r.rdb.ZCard(t.Context(), s.state()[1]).Result(); n != 0 {
		t.Fatalf("%d tickets left in the queue after cancels", n)
	}
}

func TestConcurrencyTicketLapses(t *testing.T) {
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(1, 10*time.Second))}
	_, id := s.lease(1, 0, "")
	// A waiter whose proxy vanished: its ticket lapses after its TTL.
	rep := s.do(limiter.OpLease, limiter.LeaseArgs(s.epoch, 1, 0, limiter.NewLeaseID(0, 1), "gone", 100*time.Millisecond))
	if rep.Granted != 0 {
		t.Fatal("granted")
	}
	s.give(id)
	if w, _ := s.lease(1, 0, ""); w.Granted != 0 {
		t.Fatal("went ahead of a live ticket")
	}
	time.Sleep(150 * time.Millisecond)
	if w, _ := s.lease(1, 0, ""); w.Granted != 1 {
		t.Fatal("a lapsed ticket still holds up the queue")
	}
}

func TestConcurrencyIsNotARateLimiter(t *testing.T) {
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(1, time.Second))}
	for _, op := range []limiter.Op{limiter.OpAcquire, limiter.OpRelease} {
		_, err := s.r.scripts.Limiter(limiter.Concurrency).Run(t.Context(), r.rdb, s.keys(), string(op), s.epoch, 1, 0, 1).Result()
		if err == nil || !strings.Contains(err.Error(), "RL.LEASE") {
			t.Errorf("%s on a concurrency limiter: %v, want an error naming RL.LEASE", op, err)
		}
	}
}

func TestConcurrencyKeepState(t *testing.T) {
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(3, time.Minute))}
	s.lease(2, 0, "")
	// A lower limit keeps the leases held: none free until they go.
	_, epoch, _ := r.setConf(t, "db", concurrency(1, time.Minute), limiter.SetConfOptions{KeepState: true, Epoch: "e2"})
	if epoch != "e1" {
		t.Fatalf("KEEPSTATE moved to epoch %s", epoch)
	}
	if f := s.free(); f != 0 {
		t.Fatalf("free %d under a limit of 1 with 2 held, want 0", f)
	}
	_, epoch, _ = r.setConf(t, "db", concurrency(4, time.Minute), limiter.SetConfOptions{KeepState: true, Epoch: "e3"})
	if f := s.free(); epoch != "e1" || f != 2 {
		t.Fatalf("free %d under a limit of 4 with 2 held, want 2", f)
	}
	// Another shard count or mode would forget the leases: refused, and
	// nothing is written.
	sharded, perClient := concurrency(4, time.Minute), concurrency(4, time.Minute)
	sharded.Shards, perClient.Mode = 2, limiter.PerClient
	for _, c := range []limiter.Config{sharded, perClient} {
		v, err := r.scripts.SetConf.Run(t.Context(), r.rdb, []string{r.keys.Config("db", 0)}, limiter.SetConfArgs(c, shard0(c), limiter.SetConfOptions{KeepState: true, Epoch: "e4"})...).Result()
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := limiter.DecodeSetConfReply(v); !errors.Is(err, limiter.ErrKeepLeases) || rep.Epoch != "e1" || rep.OldShards != 1 {
			t.Fatalf("KEEPSTATE to %d shards, mode %s: %+v %v, want refused", c.Shards, c.Mode, rep, err)
		}
		if f := s.free(); f != 2 {
			t.Fatalf("free %d after a refused KEEPSTATE, want 2", f)
		}
	}
	// Without KEEPSTATE the new shape starts with none held.
	if _, epoch, _ = r.setConf(t, "db", sharded, limiter.SetConfOptions{Epoch: "e5"}); epoch != "e5" {
		t.Fatalf("a new shard count without KEEPSTATE: epoch %s, want e5", epoch)
	}
}

func TestLeaseIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := limiter.NewLeaseID(7, 3)
		if seen[id] {
			t.Fatalf("lease id %s made twice", id)
		}
		seen[id] = true
		if shard, ok := limiter.LeaseShard(id); !ok || shard != 7 {
			t.Fatalf("LeaseShard(%q) = %d, %v", id, shard, ok)
		}
	}
	for _, bad := range []string{"", "x", "1", "1.2", "1.2.abc", "-1.1." + strings.Repeat("a", 32), "1.x." + strings.Repeat("a", 32), "99999.1." + strings.Repeat("a", 32)} {
		if _, ok := limiter.LeaseShard(bad); ok {
			t.Errorf("LeaseShard(%q) accepted", bad)
		}
	}
}

// BenchmarkConcurrencyScript: one lease and its return on a real
// redis-server (two script calls a cycle), with held leases already in the
// set (the script sums the permits held on every call: O(leases)).
func BenchmarkConcurrencyScript(b *testing.B) {
	srv := redistest.StartServer(b)
	rdb := srv.Client(b)
	scripts := limiter.NewScripts()
	keys := limiter.Keys{Prefix: "b:"}
	script := scripts.Limiter(limiter.Concurrency)
	for _, heldBefore := range []int{0, 64, 1024} {
		b.Run(fmt.Sprintf("held=%d", heldBefore), func(b *testing.B) {
			name := fmt.Sprintf("sem%d", heldBefore)
			c := concurrency(int64(heldBefore+1), time.Hour)
			ctx := context.Background()
			if _, err := scripts.SetConf.Run(ctx, rdb, []string{keys.Config(name, 0)}, limiter.SetConfArgs(c, shard0(c), limiter.SetConfOptions{Epoch: "e1"})...).Result(); err != nil {
				b.Fatal(err)
			}
			k := keys.Script(limiter.Concurrency, name, 0, "e1", "")
			for range heldBefore {
				if _, err := script.Run(ctx, rdb, k, limiter.LeaseArgs("e1", 1, 0, limiter.NewLeaseID(0, 1), "", 0)...).Result(); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				id := limiter.NewLeaseID(0, 1)
				v, err := script.Run(ctx, rdb, k, limiter.LeaseArgs("e1", 1, 0, id, "", 0)...).Result()
				if rep, derr := limiter.DecodeLease(v, limiter.OpLease); err != nil || derr != nil || rep.Granted != 1 {
					b.Fatalf("lease: %v %v %v", v, err, derr)
				}
				if err := script.Run(ctx, rdb, k, limiter.ReturnArgs("e1", id)...).Err(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
