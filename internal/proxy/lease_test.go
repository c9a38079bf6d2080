package proxy

import (
	"testing"
	"time"
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
	h.Do(t, "RL.LEASE", "db", 3).ErrContains("more than the limit")
	h.Do(t, "RL.RESET", "db").Equal(int64(1))
	h.Do(t, "RL.AVAILABLE", "db").Equal(int64(2))
	h.Do(t, "RL.RETURN", "db", b.ID).Equal(int64(0))
	h.Do(t, "RL.DEL", "db").Equal(int64(1))
	h.Do(t, "RL.LEASE", "db").Err("ERR no such limiter 'db' (create it with RL.SETRATE)")
}
