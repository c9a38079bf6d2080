package limiter_test

// A property test of concurrency.lua against a real redis-server: random
// sequences of lease, return, renew, peek, a lost count and time passing
// (leases of tens of milliseconds expire along the way), with the
// semaphore's invariants checked after every step.

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/limiter"
)

// propLease is what the test knows of a lease it was granted: its
// permits and the bounds of its expiry on the server's clock.
type propLease struct {
	permits int64
	lo, hi  int64 // expiry, microseconds
}

// propStep is one script call and the state right after it, read in the
// same MULTI (so nothing expires in between): t0 and t1 are the server's
// clock before and after the call, which bound the script's `now`.
type propStep struct {
	rep      limiter.LeaseReply
	t0, t1   int64
	leases   map[string]int64 // id -> expiry, microseconds
	sum      int64            // permits of the leases
	count    int64
	hasCount bool
}

func (s sem) step(op limiter.Op, args []any) propStep {
	s.t.Helper()
	ctx, k := s.t.Context(), s.keys()
	var before, after *redis.TimeCmd
	var call *redis.Cmd
	var zr *redis.ZSliceCmd
	var get *redis.StringCmd
	_, err := s.r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		before = p.Time(ctx)
		call = s.r.scripts.Limiter(limiter.Concurrency).EvalSha(ctx, p, k, args...)
		after = p.Time(ctx)
		zr = p.ZRangeWithScores(ctx, k[1], 0, -1)
		get = p.Get(ctx, k[4])
		return nil
	})
	if err != nil && err != redis.Nil {
		s.t.Fatalf("%s: %v", op, err)
	}
	rep, err := limiter.DecodeLease(call.Val(), op)
	if err != nil || rep.Status != limiter.StatusOK {
		s.t.Fatalf("%s: %+v %v", op, rep, err)
	}
	st := propStep{rep: rep, t0: before.Val().UnixMicro(), t1: after.Val().UnixMicro(), leases: map[string]int64{}}
	for _, z := range zr.Val() {
		id := z.Member.(string)
		st.leases[id] = int64(z.Score)
		st.sum += permitsOf(s.t, id)
	}
	if v, err := get.Result(); err == nil {
		st.hasCount = true
		if st.count, err = strconv.ParseInt(v, 10, 64); err != nil {
			s.t.Fatalf("count %q: %v", v, err)
		}
	}
	return st
}

// permitsOf reads the permits out of a lease id ("<shard>.<permits>.<random>").
func permitsOf(t *testing.T, id string) int64 {
	parts := strings.Split(id, ".")
	n, err := strconv.ParseInt(parts[min(1, len(parts)-1)], 10, 64)
	if len(parts) != 3 || err != nil {
		t.Fatalf("lease id %q is not one rlproxy makes", id)
	}
	return n
}

func TestConcurrencyProperties(t *testing.T) {
	const (
		limit    = 6
		steps    = 1500
		leaseTTL = 60 * time.Millisecond // the limiter's default
		maxTTL   = 70 * time.Millisecond
	)
	r := newRig(t)
	s := sem{r.create(t, "db", concurrency(limit, leaseTTL))}
	if err := r.scripts.Limiter(limiter.Concurrency).Load(t.Context(), r.rdb).Err(); err != nil {
		t.Fatal(err) // (step calls it by its SHA)
	}
	rng := rand.New(rand.NewPCG(23, 1))
	held := map[string]*propLease{} // granted, not returned; may have expired
	ttlUs := func(d time.Duration) int64 {
		if d == 0 {
			d = leaseTTL
		}
		return d.Microseconds()
	}
	randomTTL := func(min int) time.Duration { // 0 is the limiter's lease TTL
		return time.Duration(min+rng.IntN(8-min)) * 10 * time.Millisecond
	}
	pick := func() (string, *propLease) { // mostly a lease the test was granted
		ids := slices.Sorted(maps.Keys(held)) // (map order is not seeded)
		if len(ids) == 0 || rng.IntN(10) == 0 {
			return limiter.NewLeaseID(0, 1+rng.Int64N(3)), nil
		}
		id := ids[rng.IntN(len(ids))]
		return id, held[id]
	}
	peek := func() propStep { return s.step(limiter.OpPeek, limiter.Args(limiter.OpPeek, s.epoch)) }
	start := time.Now()
	counts := map[string]int{}
	for i := range steps {
		var op string
		var st propStep
		switch x := rng.IntN(100); {
		case x < 40:
			op = "lease"
			n, ttl := 1+rng.Int64N(3), randomTTL(0)
			id := limiter.NewLeaseID(0, n)
			st = s.step(limiter.OpLease, limiter.LeaseArgs(s.epoch, n, ttl, id, "", 0))
			_, in := st.leases[id]
			if in != (st.rep.Granted == 1) {
				t.Fatalf("step %d: lease granted %d, in the set %v", i, st.rep.Granted, in)
			}
			// A lease is granted exactly when the permits held when the
			// script decided leave room for it.
			before := st.sum
			if in {
				before -= n
				held[id] = &propLease{permits: n, lo: st.t0 + ttlUs(ttl), hi: st.t1 + ttlUs(ttl)}
			}
			if fits := before+n <= limit; fits != in {
				t.Fatalf("step %d: lease of %d with %d of %d held: granted %d", i, n, before, limit, st.rep.Granted)
			}
			if st.rep.Free != limit-st.sum {
				t.Fatalf("step %d: lease: free %d, want %d", i, st.rep.Free, limit-st.sum)
			}
			if !in {
				op = "lease denied"
			}
			if !in && (st.rep.RetryAfterUs < 1 || st.rep.RetryAfterUs > maxTTL.Microseconds()) {
				t.Fatalf("step %d: denied lease: retry after %d us", i, st.rep.RetryAfterUs)
			}
		case x < 58:
			op = "return"
			id, l := pick()
			st = s.step(limiter.OpReturn, limiter.ReturnArgs(s.epoch, id))
			checkHeld(t, "return", l, st)
			delete(held, id)
		case x < 72:
			op = "renew"
			id, l := pick()
			ttl := randomTTL(1)
			st = s.step(limiter.OpRenew, limiter.RenewArgs(s.epoch, id, ttl))
			checkHeld(t, "renew", l, st)
			if st.rep.Granted == 1 {
				l.lo, l.hi = st.t0+ttlUs(ttl), st.t1+ttlUs(ttl)
			}
		case x < 88:
			op = "available"
			if st = peek(); st.rep.Granted != limit-st.sum {
				t.Fatalf("step %d: available %d with %d of %d held", i, st.rep.Granted, st.sum, limit)
			}
		case x < 90:
			// The count goes missing (evicted): the next call rebuilds it.
			op = "lose count"
			if err := r.rdb.Del(t.Context(), s.state()[3]).Err(); err != nil {
				t.Fatal(err)
			}
			st = peek()
		default:
			op = "time passes"
			time.Sleep(time.Duration(2+rng.IntN(24)) * time.Millisecond)
			st = peek() // the script purges what expired meanwhile
		}
		counts[op]++
		// The count of permits held is the sum over the live leases.
		if st.hasCount != (st.sum > 0) || st.count != st.sum {
			t.Fatalf("step %d (%s): count %d (stored %v), leases hold %d: %v", i, op, st.count, st.hasCount, st.sum, st.leases)
		}
		// The set holds exactly the leases granted, not returned and not
		// expired when the script ran (between t0 and t1).
		for id, exp := range st.leases {
			l := held[id]
			if l == nil {
				t.Fatalf("step %d (%s): lease %s in the set was never granted or was returned", i, op, id)
			}
			if exp <= st.t0 || exp < l.lo || exp > l.hi {
				t.Fatalf("step %d (%s): lease %s expires at %d, want in [%d, %d] and after %d", i, op, id, exp, l.lo, l.hi, st.t0)
			}
		}
		for id, l := range held {
			if _, in := st.leases[id]; !in {
				if l.lo > st.t1 {
					t.Fatalf("step %d (%s): lease %s left the set before its expiry", i, op, id)
				}
				delete(held, id) // expired
			}
		}
	}
	t.Logf("%d steps in %v: %v", steps, time.Since(start).Round(time.Millisecond), counts)
}

// checkHeld checks a return's or renew's answer for a lease the test may
// hold (l nil: never granted, or returned): a lease surely live when the
// script ran is held, one surely expired is not.
func checkHeld(t *testing.T, op string, l *propLease, st propStep) {
	t.Helper()
	ok := st.rep.Granted == 1
	switch {
	case l == nil && ok:
		t.Fatalf("%s of a lease not held: 1", op)
	case l != nil && l.lo > st.t1 && !ok:
		t.Fatalf("%s of a live lease: 0", op)
	case l != nil && l.hi <= st.t0 && ok:
		t.Fatalf("%s of an expired lease: 1", op)
	}
}
