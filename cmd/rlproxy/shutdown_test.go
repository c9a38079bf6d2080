package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlproxy/rlproxy/internal/redistest"
)

// SIGTERM with 100 clients waiting (BLOCK) on a 1-per-hour token bucket:
// every waiter is answered "ERR rlproxy is shutting down", the process
// exits 0 within shutdown_timeout, and another proxy on the same Redis
// then sees only the one permit really granted — the 99 booked
// reservations were given back.
func TestBinarySIGTERMDrainsWaiters(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	port, otherPort := freePort(t), freePort(t)
	p := startBinary(t, nil, "--listen", "127.0.0.1:"+port, "--backend", srv.URL(), "--shutdown-timeout", "3s")
	// The other proxy has no deny cache: it asks Redis every time.
	other := startBinary(t, nil, "--listen", "127.0.0.1:"+otherPort, "--backend", srv.URL(), "--deny-cache=false")
	p.waitReady(t, "127.0.0.1:"+port)
	other.waitReady(t, "127.0.0.1:"+otherPort)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, PoolSize: 120, MaxRetries: -1, ReadTimeout: -1})
	defer c.Close()
	o := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + otherPort, MaxRetries: -1})
	defer o.Close()
	if err := c.Do(ctx, "RL.SETRATE", "drain", 1, "1h").Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Do(ctx, "RL.ACQUIRE", "drain").Slice(); err != nil || v[0] != int64(1) {
		t.Fatalf("first RL.ACQUIRE: %v %v, want granted", v, err)
	}
	const waiters = 100
	errs := make([]error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Do(ctx, "RL.ACQUIRE", "drain", "BLOCK").Result()
		}()
	}
	// Every waiter has booked: the bucket is 100 hours deep.
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := o.Do(ctx, "RL.ACQUIRE", "drain").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if v[2].(int64) > (waiters-1)*3600_000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiters did not book in 10s: %v; errors %v\n%s", v, errs, p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	code := p.stop(t)
	took := time.Since(start)
	wg.Wait()
	t.Logf("SIGTERM with %d waiters: exit %d after %v", waiters, code, took.Round(time.Millisecond))
	if code != 0 {
		t.Errorf("exit code %d, want 0\n%s", code, p.log())
	}
	if took > 3*time.Second+time.Second {
		t.Errorf("exit took %v, over shutdown_timeout 3s", took)
	}
	for i, err := range errs {
		if err == nil || err.Error() != "ERR rlproxy is shutting down" {
			t.Fatalf("waiter %d: %v, want ERR rlproxy is shutting down", i, err)
		}
	}
	v, err := o.Do(ctx, "RL.ACQUIRE", "drain").Slice()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the other proxy after the drain: %v", v)
	// One permit was really granted: the next comes within the hour, not
	// after the 100 hours the bookings had pushed it to.
	if v[0] != int64(0) || v[2].(int64) > 3600_000 {
		t.Errorf("other proxy after the drain: RL.ACQUIRE = %v, want a denial with retry_after <= 1h", v)
	}
	if !strings.Contains(p.log(), "shut down") {
		t.Errorf("no shutdown line in the log:\n%s", p.log())
	}
}
